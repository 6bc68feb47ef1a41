"""StatefulSets and DaemonSets in ``vplane apiserver`` with its controller manager and scheduler, driven by
kubectl (current and 1.32) as a user would: ordered creation with stable names, claims and labels,
reverse-ordered scale-down, partitioned rolling updates, ``kubectl rollout status|history|undo|restart``,
OnDelete, Parallel pod management with the claim retention policy, and DaemonSets placing one pod on every
eligible node (node selectors, taints, the tolerations upstream adds, nodes joining and leaving), rolling
them without and with surge.

Most tests run no kubelet: Node objects are created by the tests, the scheduler binds pods to them, and the
test plays the kubelet by setting pod status through ``pods/status`` (``mark_ready``, :class:`Kubelet`). The
last test runs both kinds on ``vplane cluster start``, whose node runtime runs the pods as processes.
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from test_runtime import Cluster

from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration

MERGE = {"Content-Type": "application/merge-patch+json"}
JSON = {"Content-Type": "application/json"}


# -- helpers ------------------------------------------------------------------------------------------------


def wait_for(check: Callable[[], Any], what: str, within: float = 40.0) -> Any:
    """Poll state another process owns until ``check`` returns something truthy (bounded, never timed)."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        time.sleep(0.1)


def api(
    server: APIServerProcess, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> Any:
    data = orjson.dumps(body) if body is not None else None
    code, _, raw = server.request(method, path, data, headers or (JSON if data else None))
    assert code < 300, (method, path, code, raw[:500])
    return orjson.loads(raw) if raw else None


def get(server: APIServerProcess, path: str) -> Any:
    code, _, raw = server.request("GET", path)
    return orjson.loads(raw) if code == 200 else None


def pods(server: APIServerProcess, namespace: str, selector: str = "") -> dict[str, dict[str, Any]]:
    query = f"?labelSelector={selector}" if selector else ""
    items = api(server, "GET", f"/api/v1/namespaces/{namespace}/pods{query}")["items"]
    return {p["metadata"]["name"]: p for p in items}


def sts(server: APIServerProcess, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = api(server, "GET", f"/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}")
    return found


def ds(server: APIServerProcess, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = api(server, "GET", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")
    return found


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def mark_ready(server: APIServerProcess, namespace: str, name: str) -> None:
    """What a kubelet reports once the containers run and pass readiness."""
    status = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now()}],
    }
    code, _, raw = server.request(
        "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", orjson.dumps({"status": status}), MERGE
    )
    assert code in (200, 404), raw[:300]  # deleted meanwhile is fine


class Kubelet:
    """Marks every pod of a namespace Running and Ready soon after it appears, from a thread."""

    def __init__(self, server: APIServerProcess, namespace: str) -> None:
        self.server, self.namespace = server, namespace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for name, pod in pods(self.server, self.namespace).items():
                    if not pod["metadata"].get("deletionTimestamp") and not is_ready(pod):
                        mark_ready(self.server, self.namespace, name)
                self._stop.wait(0.2)
        except BaseException as exc:  # surfaced by __exit__
            self.error = exc


def events(server: APIServerProcess, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the events about ``name``, oldest first (event names carry their time)."""
    items = api(
        server, "GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3D{name}"
    )["items"]
    items.sort(key=lambda e: (len(e["metadata"]["name"]), e["metadata"]["name"]))
    return [(e["type"], e["reason"], e["message"]) for e in items]


def messages(server: APIServerProcess, namespace: str, name: str) -> list[str]:
    return [m for _, _, m in events(server, namespace, name)]


def statefulset_yaml(name: str, replicas: int, image: str = "nginx:1.27", **spec: Any) -> str:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"clusterIP": "None", "selector": {"app": name}, "ports": [{"port": 80}]},
    }
    container: dict[str, Any] = {"name": "web", "image": image, "ports": [{"containerPort": 80}]}
    mounts = [
        {"name": c["metadata"]["name"], "mountPath": "/data"} for c in spec.get("volumeClaimTemplates", [])
    ]
    if mounts:  # a mount of a claim template, which is not a volume of the template (validation allows it)
        container["volumeMounts"] = mounts
    body = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [container]},
            },
            **spec,
        },
    }
    return yaml.safe_dump_all([service, body])


CLAIMS = [
    {
        "metadata": {"name": "www"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
]


def add_node(k: Kubectl, name: str, labels: dict[str, str], **spec: Any) -> None:
    allocatable = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": spec,
        "status": {"capacity": allocatable, "allocatable": allocatable},
    }
    k.apply(yaml.safe_dump(node))


def daemonset_yaml(name: str, pool: str, image: str = "busybox:1.36", **spec: Any) -> str:
    body = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"pool": pool},
                    "containers": [{"name": "agent", "image": image, "command": ["sleep", "3600"]}],
                },
            },
            **spec,
        },
    }
    return yaml.safe_dump(body)


# -- fixtures ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    """This module's server, with the controller manager and the scheduler on."""
    proc = APIServerProcess(
        tmp_path_factory.mktemp("apps") / "apiserver", {"controller_manager": True, "scheduler": True}
    )
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def kubectl(server: APIServerProcess, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, server.kubeconfig, tmp_path / "kubecache")


@pytest.fixture(params=["kubectl", "kubectl132"])
def k(request: pytest.FixtureRequest, server: APIServerProcess, tmp_path: Path) -> Kubectl:
    """The rollout tests run with the current kubectl and with 1.32."""
    binary: str = request.getfixturevalue(f"{request.param}_path")
    return Kubectl(binary, server.kubeconfig, tmp_path / f"cache-{request.param}")


@pytest.fixture
def ns(kubectl: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:44].strip("-")
    name += "-" + str(time.monotonic_ns() % 10_000)
    kubectl.run("create", "namespace", name)
    yield name
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def pool(kubectl: Kubectl, ns: str) -> Iterator[str]:
    """A node label of the test's own, so its DaemonSets count only its nodes; the nodes go afterwards."""
    yield ns
    kubectl.run("delete", "nodes", "-l", f"pool in ({ns},{ns}-x)", "--wait=false", check=False)


# -- StatefulSets -------------------------------------------------------------------------------------------------


def test_ordered_ready_creates_stable_names_claims_and_labels(
    server: APIServerProcess, kubectl: Kubectl, ns: str
) -> None:
    kubectl.apply(statefulset_yaml("web", 3, volumeClaimTemplates=CLAIMS), "-n", ns)
    wait_for(lambda: "web-0" in pods(server, ns), "web-0")
    # web-0 is not ready: the set is seen (status written) but web-1 is not created
    wait_for(lambda: sts(server, ns, "web").get("status", {}).get("replicas") == 1, "status of one replica")
    assert list(pods(server, ns)) == ["web-0"]
    for i in range(3):
        wait_for(lambda i=i: f"web-{i}" in pods(server, ns), f"web-{i}")
        assert len(pods(server, ns)) == i + 1  # its successor waits for it
        mark_ready(server, ns, f"web-{i}")
    status = wait_for(
        lambda: (s := sts(server, ns, "web")["status"]).get("readyReplicas") == 3 and s, "3 ready"
    )
    revision = status["updateRevision"]
    assert revision.startswith("web-")
    assert status == {
        "observedGeneration": 1,
        "replicas": 3,
        "readyReplicas": 3,
        "currentReplicas": 3,
        "updatedReplicas": 3,
        "currentRevision": revision,
        "updateRevision": revision,
        "collisionCount": 0,
        "availableReplicas": 3,
    }
    web1 = pods(server, ns)["web-1"]
    assert web1["metadata"]["labels"] == {
        "app": "web",
        "apps.kubernetes.io/pod-index": "1",
        "controller-revision-hash": revision,
        "statefulset.kubernetes.io/pod-name": "web-1",
    }
    assert web1["metadata"]["generateName"] == "web-"
    assert (web1["spec"]["hostname"], web1["spec"]["subdomain"]) == ("web-1", "web")
    assert {"name": "www", "persistentVolumeClaim": {"claimName": "www-web-1"}} in web1["spec"]["volumes"]
    claims = json.loads(kubectl.run("get", "pvc", "-n", ns, "-o", "json").out)["items"]
    assert sorted(c["metadata"]["name"] for c in claims) == ["www-web-0", "www-web-1", "www-web-2"]
    assert all(c["metadata"]["labels"] == {"app": "web"} for c in claims)
    assert all(not c["metadata"].get("ownerReferences") for c in claims)  # Retain: nobody owns them
    (revision_obj,) = json.loads(kubectl.run("get", "controllerrevisions", "-n", ns, "-o", "json").out)[
        "items"
    ]
    assert revision_obj["metadata"]["name"] == revision
    assert revision_obj["revision"] == 1
    assert revision_obj["data"]["spec"]["template"]["$patch"] == "replace"
    assert messages(server, ns, "web")[:2] == [
        "create Claim www-web-0 Pod web-0 in StatefulSet web success",
        "create Pod web-0 in StatefulSet web successful",
    ]
    assert ("Normal", "SuccessfulCreate", "create Pod web-2 in StatefulSet web successful") in events(
        server, ns, "web"
    )
    assert kubectl.run("get", "sts", "web", "-n", ns, "--no-headers").out.split()[:2] == ["web", "3/3"]
    out = kubectl.run("rollout", "status", "sts/web", "-n", ns, "--timeout=20s").out
    assert out.strip().endswith("partitioned roll out complete: 3 new pods have been updated...")
    described = kubectl.run("describe", "sts", "web", "-n", ns).out
    assert "create Pod web-2 in StatefulSet web successful" in described


def test_scale_down_goes_in_reverse_order_and_keeps_claims(
    server: APIServerProcess, kubectl: Kubectl, ns: str
) -> None:
    kubectl.apply(statefulset_yaml("web", 3, volumeClaimTemplates=CLAIMS), "-n", ns)
    with Kubelet(server, ns):
        wait_for(lambda: sts(server, ns, "web").get("status", {}).get("readyReplicas") == 3, "3 ready")
        claim_uid = api(server, "GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/www-web-2")[
            "metadata"
        ]["uid"]
        assert kubectl.run("scale", "sts", "web", "-n", ns, "--replicas=1").out.strip() == (
            "statefulset.apps/web scaled"
        )
        wait_for(lambda: list(pods(server, ns)) == ["web-0"], "only web-0 left")

        def deletes() -> list[str]:
            return [m for m in messages(server, ns, "web") if m.startswith("delete")]

        # The event of a deletion is written after the pod is gone (the recorder sends it on its own).
        wait_for(lambda: len(deletes()) >= 2, "both deletions recorded")
        assert deletes() == [
            "delete Pod web-2 in StatefulSet web successful",
            "delete Pod web-1 in StatefulSet web successful",
        ]
        wait_for(lambda: sts(server, ns, "web")["status"].get("replicas") == 1, "status 1")
        claims = json.loads(kubectl.run("get", "pvc", "-n", ns, "-o", "json").out)["items"]
        assert len(claims) == 3  # Retain on scale-down
        kubectl.run("scale", "sts", "web", "-n", ns, "--replicas=3")
        wait_for(lambda: sts(server, ns, "web")["status"].get("readyReplicas") == 3, "3 ready again")
    again = api(server, "GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/www-web-2")
    assert again["metadata"]["uid"] == claim_uid  # web-2 came back to its own claim
    creates = [m for m in messages(server, ns, "web") if m.startswith("create Claim")]
    assert len(creates) == 3


def test_partitioned_rolling_update_history_and_undo(server: APIServerProcess, k: Kubectl, ns: str) -> None:
    k.apply(statefulset_yaml("web", 3), "-n", ns)
    with Kubelet(server, ns):
        wait_for(lambda: sts(server, ns, "web").get("status", {}).get("readyReplicas") == 3, "3 ready")
        first = sts(server, ns, "web")["status"]["currentRevision"]
        k.run(
            "patch", "sts", "web", "-n", ns, "--type=merge",
            "-p", '{"spec":{"updateStrategy":{"rollingUpdate":{"partition":2}}}}',
        )  # fmt: skip
        k.run("set", "image", "sts/web", "web=nginx:1.28", "-n", ns)
        out = k.run("rollout", "status", "sts/web", "-n", ns, "--timeout=40s").out
        assert out.strip().endswith("partitioned roll out complete: 1 new pods have been updated...")
        status = sts(server, ns, "web")["status"]
        second = status["updateRevision"]
        assert second != first and status["currentRevision"] == first
        assert (status["updatedReplicas"], status["currentReplicas"]) == (1, 2)
        images = {n: p["spec"]["containers"][0]["image"] for n, p in pods(server, ns).items()}
        assert images == {"web-0": "nginx:1.27", "web-1": "nginx:1.27", "web-2": "nginx:1.28"}

        k.run(
            "patch", "sts", "web", "-n", ns, "--type=merge",
            "-p", '{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}',
        )  # fmt: skip
        wait_for(
            lambda: (
                (s := sts(server, ns, "web")["status"]).get("currentRevision") == second
                and s.get("readyReplicas") == 3
            ),
            "rolled to the second revision",
        )
        deletes = [m for m in messages(server, ns, "web") if m.startswith("delete")]
        assert deletes == [f"delete Pod web-{i} in StatefulSet web successful" for i in (2, 1, 0)]

        history = k.run("rollout", "history", "sts/web", "-n", ns).out
        assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"]
        detail = k.run("rollout", "history", "sts/web", "-n", ns, "--revision=1").out
        assert "nginx:1.27" in detail and "nginx:1.28" not in detail

        assert k.run("rollout", "undo", "sts/web", "-n", ns).out.strip() == "statefulset.apps/web rolled back"
        wait_for(
            lambda: (
                (s := sts(server, ns, "web")["status"]).get("currentRevision") == first
                and s.get("updatedReplicas") == 3
                and s.get("readyReplicas") == 3
            ),
            "back at the first revision",
        )
        images = {p["spec"]["containers"][0]["image"] for p in pods(server, ns).values()}
        assert images == {"nginx:1.27"}
        history = k.run("rollout", "history", "sts/web", "-n", ns).out
        assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["2", "3"]


def test_rollout_restart_and_on_delete(server: APIServerProcess, k: Kubectl, ns: str) -> None:
    k.apply(statefulset_yaml("web", 2), "-n", ns)
    with Kubelet(server, ns):
        wait_for(lambda: sts(server, ns, "web").get("status", {}).get("readyReplicas") == 2, "2 ready")
        before = {n: p["metadata"]["uid"] for n, p in pods(server, ns).items()}
        assert (
            k.run("rollout", "restart", "sts/web", "-n", ns).out.strip() == "statefulset.apps/web restarted"
        )
        wait_for(
            lambda: (
                (s := sts(server, ns, "web")["status"]).get("observedGeneration") == 2
                and s.get("currentRevision") == s.get("updateRevision")
                and s.get("readyReplicas") == 2
            ),
            "restarted",
        )
        after = pods(server, ns)
        assert all(after[n]["metadata"]["uid"] != uid for n, uid in before.items())
        assert all(
            "kubectl.kubernetes.io/restartedAt" in p["metadata"].get("annotations", {})
            for p in after.values()
        )

        k.run(
            "patch", "sts", "web", "-n", ns, "--type=merge",
            "-p", '{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}',
        )  # fmt: skip
        k.run("set", "image", "sts/web", "web=nginx:1.28", "-n", ns)
        status = wait_for(
            lambda: (s := sts(server, ns, "web")["status"]).get("observedGeneration") == 4 and s, "observed"
        )
        assert status["updateRevision"] != status["currentRevision"]
        assert status.get("updatedReplicas", 0) == 0
        unchanged = pods(server, ns)
        assert {n: p["metadata"]["uid"] for n, p in unchanged.items()} == {
            n: p["metadata"]["uid"] for n, p in after.items()
        }
        out = k.run("rollout", "status", "sts/web", "-n", ns, check=False)
        assert (
            out.code != 0 and "rollout status is only available for RollingUpdate strategy type" in out.stderr
        )
        k.run("delete", "pod", "web-1", "-n", ns)
        wait_for(
            lambda: (
                (p := pods(server, ns).get("web-1")) is not None
                and p["metadata"]["uid"] != after["web-1"]["metadata"]["uid"]
            ),
            "web-1 recreated",
        )
        web1 = pods(server, ns)["web-1"]
        assert web1["spec"]["containers"][0]["image"] == "nginx:1.28"
        assert web1["metadata"]["labels"]["controller-revision-hash"] == status["updateRevision"]
        wait_for(lambda: sts(server, ns, "web")["status"].get("updatedReplicas") == 1, "one updated")


def test_parallel_pods_and_the_claim_retention_policy(
    server: APIServerProcess, kubectl: Kubectl, ns: str
) -> None:
    policy = {"whenDeleted": "Delete", "whenScaled": "Delete"}
    kubectl.apply(
        statefulset_yaml(
            "db",
            3,
            podManagementPolicy="Parallel",
            volumeClaimTemplates=CLAIMS,
            persistentVolumeClaimRetentionPolicy=policy,
        ),
        "-n",
        ns,
    )
    # Parallel: all three at once, none of them ready
    wait_for(lambda: len(pods(server, ns)) == 3, "3 pods at once")
    uid = sts(server, ns, "db")["metadata"]["uid"]

    def claims() -> dict[str, dict[str, Any]]:
        items = api(server, "GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims")["items"]
        return {c["metadata"]["name"]: c for c in items}

    def owners(claim: dict[str, Any]) -> list[tuple[str, str]]:
        return [(r["kind"], r["name"]) for r in claim["metadata"].get("ownerReferences", [])]

    # whenDeleted: Delete -> each claim is controlled by the set
    wait_for(
        lambda: len(c := claims()) == 3 and all(owners(x) == [("StatefulSet", "db")] for x in c.values()),
        "claims owned by the set",
    )
    assert all(r["uid"] == uid for c in claims().values() for r in c["metadata"]["ownerReferences"])
    kubectl.run("scale", "sts", "db", "-n", ns, "--replicas=1")
    # whenScaled: Delete -> the condemned pods own their claims, and the garbage collector removes them
    wait_for(lambda: list(claims()) == ["www-db-0"], "scaled-down claims removed")
    assert list(pods(server, ns)) == ["db-0"]
    kubectl.run("delete", "sts", "db", "-n", ns)
    wait_for(lambda: not claims() and not pods(server, ns), "claims go with the set")


# -- DaemonSets ---------------------------------------------------------------------------------------------------


def node_of(pod: dict[str, Any]) -> str:
    return str(pod["spec"].get("nodeName") or "")


def test_one_pod_per_eligible_node(server: APIServerProcess, kubectl: Kubectl, ns: str, pool: str) -> None:
    add_node(kubectl, f"{pool}-a", {"pool": pool})
    add_node(kubectl, f"{pool}-b", {"pool": pool})
    add_node(
        kubectl,
        f"{pool}-tainted",
        {"pool": pool},
        taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}],
    )
    add_node(
        kubectl,
        f"{pool}-cordoned",
        {"pool": pool},
        unschedulable=True,
        taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
    )
    add_node(kubectl, f"{pool}-other", {"pool": f"{pool}-x"})
    kubectl.apply(daemonset_yaml("agent", pool), "-n", ns)
    eligible = {f"{pool}-a", f"{pool}-b", f"{pool}-cordoned"}
    wait_for(
        lambda: {node_of(p) for p in pods(server, ns).values()} == eligible,
        "a pod bound on each eligible node",
    )
    assert len(pods(server, ns)) == 3
    pod = next(iter(pods(server, ns).values()))
    assert pod["metadata"]["generateName"] == "agent-"
    assert pod["metadata"]["labels"]["controller-revision-hash"]
    assert pod["metadata"]["labels"]["pod-template-generation"] == "1"
    annotations = ds(server, ns, "agent")["metadata"]["annotations"]
    assert annotations["deprecated.daemonset.template.generation"] == "1"
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_of(pod)]}]}
        ]
    }
    assert [(t["key"], t["effect"]) for t in pod["spec"]["tolerations"]] == [
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ]
    for name in pods(server, ns):
        mark_ready(server, ns, name)
    status = wait_for(
        lambda: (s := ds(server, ns, "agent")["status"]).get("numberAvailable") == 3 and s, "ready"
    )
    assert status == {
        "observedGeneration": 1,
        "desiredNumberScheduled": 3,
        "currentNumberScheduled": 3,
        "numberMisscheduled": 0,
        "numberReady": 3,
        "updatedNumberScheduled": 3,
        "numberAvailable": 3,
    }
    out = kubectl.run("rollout", "status", "ds/agent", "-n", ns, "--timeout=20s").out
    assert out.strip() == 'daemon set "agent" successfully rolled out'
    row = kubectl.run("get", "ds", "agent", "-n", ns, "--no-headers").out.split()
    assert row[:6] == ["agent", "3", "3", "3", "3", "3"]
    created = [m for _, r, m in events(server, ns, "agent") if r == "SuccessfulCreate"]
    assert len(created) == 3 and all(m.startswith("Created pod: agent-") for m in created)

    add_node(kubectl, f"{pool}-late", {"pool": pool})
    wait_for(
        lambda: f"{pool}-late" in {node_of(p) for p in pods(server, ns).values()}, "a pod on the new node"
    )
    kubectl.run("label", "node", f"{pool}-a", f"pool={pool}-x", "--overwrite")
    kubectl.run("taint", "node", f"{pool}-b", "evict=now:NoExecute")
    wait_for(
        lambda: {node_of(p) for p in pods(server, ns).values()} == {f"{pool}-cordoned", f"{pool}-late"},
        "pods off the relabelled and the NoExecute-tainted node",
    )
    wait_for(lambda: ds(server, ns, "agent")["status"]["desiredNumberScheduled"] == 2, "desired 2")
    deleted = [m for _, r, m in events(server, ns, "agent") if r == "SuccessfulDelete"]
    assert len(deleted) == 2


def test_daemonset_rolling_update_history_and_undo(
    server: APIServerProcess, k: Kubectl, ns: str, pool: str
) -> None:
    for suffix in ("a", "b", "c"):
        add_node(k, f"{pool}-{suffix}", {"pool": pool})
    k.apply(daemonset_yaml("agent", pool), "-n", ns)
    with Kubelet(server, ns):
        wait_for(lambda: ds(server, ns, "agent").get("status", {}).get("numberAvailable") == 3, "3 available")
        old = set(pods(server, ns))
        k.run("set", "image", "ds/agent", "agent=busybox:1.37", "-n", ns)
        out = k.run("rollout", "status", "ds/agent", "-n", ns, "--timeout=60s").out
        assert out.strip().splitlines()[-1] == 'daemon set "agent" successfully rolled out'
        assert 'Waiting for daemon set "agent" rollout to finish:' in out
        current = pods(server, ns)
        assert not old & set(current)
        assert {p["spec"]["containers"][0]["image"] for p in current.values()} == {"busybox:1.37"}
        assert {p["metadata"]["labels"]["pod-template-generation"] for p in current.values()} == {"2"}
        history = k.run("rollout", "history", "ds/agent", "-n", ns).out
        assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"]
        assert (
            k.run("rollout", "undo", "ds/agent", "-n", ns).out.strip() == "daemonset.apps/agent rolled back"
        )
        wait_for(
            lambda: (
                {p["spec"]["containers"][0]["image"] for p in pods(server, ns).values()} == {"busybox:1.36"}
                and ds(server, ns, "agent")["status"].get("numberAvailable") == 3
                and len(pods(server, ns)) == 3
            ),
            "rolled back",
        )
        history = k.run("rollout", "history", "ds/agent", "-n", ns).out
        assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["2", "3"]


def test_daemonset_surge_and_on_delete(
    server: APIServerProcess, kubectl: Kubectl, ns: str, pool: str
) -> None:
    for suffix in ("a", "b"):
        add_node(kubectl, f"{pool}-{suffix}", {"pool": pool})
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    kubectl.apply(daemonset_yaml("agent", pool, updateStrategy=strategy), "-n", ns)
    with Kubelet(server, ns):
        wait_for(lambda: ds(server, ns, "agent").get("status", {}).get("numberAvailable") == 2, "2 available")
        kubectl.run("set", "image", "ds/agent", "agent=busybox:1.37", "-n", ns)
        kubectl.run("rollout", "status", "ds/agent", "-n", ns, "--timeout=60s")
        wait_for(lambda: len(pods(server, ns)) == 2, "the old pods gone")
        rolled = [r for _, r, _ in events(server, ns, "agent")][2:]
        # surge: a new pod starts before any old one goes
        assert rolled[0] == "SuccessfulCreate"
        assert sorted(rolled) == ["SuccessfulCreate"] * 2 + ["SuccessfulDelete"] * 2

        kubectl.run(
            "patch", "ds", "agent", "-n", ns, "--type=merge",
            "-p", '{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}',
        )  # fmt: skip
        kubectl.run("set", "image", "ds/agent", "agent=busybox:1.38", "-n", ns)
        wait_for(lambda: ds(server, ns, "agent")["status"].get("observedGeneration") == 4, "observed")
        assert ds(server, ns, "agent")["status"].get("updatedNumberScheduled", 0) == 0
        assert {p["spec"]["containers"][0]["image"] for p in pods(server, ns).values()} == {"busybox:1.37"}
        victim = sorted(pods(server, ns))[0]
        kubectl.run("delete", "pod", victim, "-n", ns)
        wait_for(
            lambda: (
                sorted(p["spec"]["containers"][0]["image"] for p in pods(server, ns).values())
                == ["busybox:1.37", "busybox:1.38"]
            ),
            "the deleted pod replaced at the new template",
        )
        wait_for(lambda: ds(server, ns, "agent")["status"].get("updatedNumberScheduled") == 1, "one updated")


# -- on the node runtime ---------------------------------------------------------------------------------------


def test_statefulset_and_daemonset_on_the_node_runtime(kubectl_path: str, tmp_path: Path) -> None:
    """``vplane cluster start``: the pods run as processes, become Ready on their own, and the rollouts
    complete as kubectl waits for them; claims are directories the pods write to."""
    cluster = Cluster(tmp_path / "cluster").start()
    try:
        k = Kubectl(kubectl_path, cluster.kubeconfig, tmp_path / "cache")
        k.run("create", "namespace", "apps")
        # no container engine: a mountPath is a link under $VPLANE_ROOT; HOSTNAME is the pod's hostname
        writer = 'echo "$HOSTNAME" > "$VPLANE_ROOT/www/id" && exec sleep 3600'
        body = yaml.safe_load(
            statefulset_yaml("web", 2, image="busybox", volumeClaimTemplates=CLAIMS).split("---")[1]
        )
        container = body["spec"]["template"]["spec"]["containers"][0]
        container.update(
            command=["sh", "-c", writer],
            volumeMounts=[{"name": "www", "mountPath": "/www"}],
            readinessProbe={
                "exec": {"command": ["sh", "-c", 'test -s "$VPLANE_ROOT/www/id"']},
                "periodSeconds": 1,
            },
        )
        container.pop("ports")
        k.apply(yaml.safe_dump(body), "-n", "apps")
        k.apply(
            yaml.safe_dump(
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "metadata": {"name": "agent"},
                    "spec": {
                        "selector": {"matchLabels": {"app": "agent"}},
                        "template": {
                            "metadata": {"labels": {"app": "agent"}},
                            "spec": {
                                "containers": [
                                    {"name": "agent", "image": "busybox", "command": ["sleep", "3600"]}
                                ]
                            },
                        },
                    },
                }
            ),
            "-n",
            "apps",
        )
        out = k.run("rollout", "status", "sts/web", "-n", "apps", "--timeout=60s", timeout=90).out
        assert out.strip().endswith("partitioned roll out complete: 2 new pods have been updated...")
        out = k.run("rollout", "status", "ds/agent", "-n", "apps", "--timeout=60s", timeout=90).out
        assert out.strip().endswith('daemon set "agent" successfully rolled out')
        listed = json.loads(k.run("get", "pods", "-n", "apps", "-o", "json").out)["items"]
        assert sorted(
            (p["metadata"]["name"].split("-")[0], p["spec"]["nodeName"], p["status"]["phase"]) for p in listed
        ) == [
            ("agent", "node-a", "Running"),
            ("web", "node-a", "Running"),
            ("web", "node-a", "Running"),
        ]
        for ordinal in (0, 1):  # each pod wrote its stable name into its own claim
            claim = cluster.node_dir / "claims" / "apps" / f"www-web-{ordinal}" / "id"
            assert claim.read_text().strip() == f"web-{ordinal}"
        k.run("scale", "sts", "web", "-n", "apps", "--replicas=0")
        wait_for(
            lambda: (
                not json.loads(k.run("get", "pods", "-n", "apps", "-l", "app=web", "-o", "json").out)["items"]
            ),
            "web pods stopped and gone",
            within=60,
        )
    finally:
        cluster.stop()
        cluster.assert_no_leftovers()

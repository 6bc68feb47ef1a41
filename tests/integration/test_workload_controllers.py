"""The controller manager inside ``vplane apiserver``, driven by kubectl (current and 1.32) as a user would:
Deployments make ReplicaSets make pods, ``kubectl rollout status|history|undo|restart|pause|resume``,
scaling by patching ``spec.replicas``, Endpoints following the readiness set on pods, FailedCreate events
with the API's refusal, the default ServiceAccount and ``kube-root-ca.crt`` in new namespaces, and
``vplane controller-manager`` as a process of its own.

No node runtime exists yet: a pod is an object. :class:`Kubelet` plays the node and sets pod status
through the API (``pods/status``), which is what drives readiness.
"""

from __future__ import annotations

import base64
import datetime
import itertools
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration

MERGE = {"Content-Type": "application/merge-patch+json"}
JSON = {"Content-Type": "application/json"}
_ips = itertools.count(1)


def wait_for(check: Callable[[], Any], what: str, within: float = 30.0) -> Any:
    """Poll state another process owns until ``check`` returns something truthy (bounded, never asserted
    on timing)."""
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


def items(server: APIServerProcess, path: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = api(server, "GET", path)["items"]
    return result


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_pod_status(
    server: APIServerProcess, namespace: str, pod: dict[str, Any], *, ready: bool, ip: str | None = None
) -> None:
    """What a kubelet reports: phase, IPs, the Ready condition and container statuses."""
    address = (
        ip or (pod.get("status") or {}).get("podIP") or f"10.244.{next(_ips) % 250}.{next(_ips) % 250 + 1}"
    )
    containers = pod["spec"]["containers"]
    status = {
        "phase": "Running",
        "podIP": address,
        "podIPs": [{"ip": address}],
        "conditions": [
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now()}
        ],
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "ready": ready,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": now()}},
            }
            for c in containers
        ],
    }
    name = pod["metadata"]["name"]
    code, _, raw = server.request(
        "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", orjson.dumps({"status": status}), MERGE
    )
    assert code in (200, 404), raw[:300]  # a pod deleted meanwhile is fine


def is_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


class Kubelet:
    """Marks every pod of a namespace Ready soon after it appears, from a thread, until stopped."""

    def __init__(self, server: APIServerProcess, namespace: str) -> None:
        self.server = server
        self.namespace = namespace
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
                for pod in items(self.server, f"/api/v1/namespaces/{self.namespace}/pods"):
                    if not pod["metadata"].get("deletionTimestamp") and not is_ready(pod):
                        set_pod_status(self.server, self.namespace, pod, ready=True)
                self._stop.wait(0.2)
        except BaseException as exc:  # surfaced by __exit__
            self.error = exc


def get_json(k: Kubectl, *args: str) -> Any:
    return json.loads(k.run("get", *args, "-o", "json").out)


def pods_of(server: APIServerProcess, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    query = f"?labelSelector={selector}" if selector else ""
    return items(server, f"/api/v1/namespaces/{namespace}/pods{query}")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def events_for(server: APIServerProcess, namespace: str, name: str) -> list[dict[str, Any]]:
    return items(server, f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3D{name}")


@pytest.fixture(scope="module")
def shared_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    """This module's server, with the controller manager on (the suite's shared server runs without it)."""
    server = APIServerProcess(
        tmp_path_factory.mktemp("workloads") / "apiserver", {"controller_manager": True}
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
def kubectl(shared_apiserver: APIServerProcess, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, shared_apiserver.kubeconfig, tmp_path / "kubecache")


@pytest.fixture
def kubectl132(shared_apiserver: APIServerProcess, kubectl132_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl132_path, shared_apiserver.kubeconfig, tmp_path / "kubecache132")


@pytest.fixture(params=["kubectl", "kubectl132"])
def k(request: pytest.FixtureRequest) -> Kubectl:
    """Each rollout test runs with the current kubectl and with 1.32."""
    kubectl: Kubectl = request.getfixturevalue(request.param)
    return kubectl


# -- Deployments, ReplicaSets, pods ------------------------------------------------------------------------


def test_deployment_makes_a_replicaset_that_makes_pods(
    shared_apiserver: APIServerProcess, k: Kubectl, namespace: str
) -> None:
    k.run("create", "deployment", "web", "-n", namespace, "--image=nginx:1.27", "--replicas=3", "--port=80")
    pods = wait_for(lambda: len(p := pods_of(shared_apiserver, namespace)) == 3 and p, "three pods")
    deployment = get_json(k, "deployment", "web", "-n", namespace)
    (rs,) = get_json(k, "replicasets", "-n", namespace)["items"]
    template_hash = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"web-{template_hash}"
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": template_hash}
    assert rs["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "web",
            "uid": deployment["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] == "3"
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/max-replicas"] == "4"
    for pod in pods:
        assert pod["metadata"]["name"].startswith(f"web-{template_hash}-")
        assert len(pod["metadata"]["name"]) == len(f"web-{template_hash}-") + 5
        assert pod["metadata"]["labels"] == {"app": "web", "pod-template-hash": template_hash}
        (ref,) = pod["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
            "ReplicaSet",
            rs["metadata"]["name"],
            rs["metadata"]["uid"],
            True,
        )
        assert pod["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    wait_for(
        lambda: (
            get_json(k, "deployment", "web", "-n", namespace)
            .get("metadata", {})
            .get("annotations", {})
            .get("deployment.kubernetes.io/revision")
            == "1"
        ),
        "the revision on the Deployment",
    )
    events = wait_for(lambda: events_for(shared_apiserver, namespace, "web"), "the Deployment's event")
    assert events[0]["reason"] == "ScalingReplicaSet"
    assert events[0]["message"] == f"Scaled up replica set web-{template_hash} to 3"
    assert events[0]["source"] == {"component": "deployment-controller"}
    created = wait_for(
        lambda: [
            e
            for e in events_for(shared_apiserver, namespace, rs["metadata"]["name"])
            if e["reason"] == "SuccessfulCreate"
        ],
        "SuccessfulCreate",
    )
    assert created[0]["message"].startswith(f"Created pod: web-{template_hash}-")
    described = k.run("describe", "deployment", "web", "-n", namespace).out
    assert f"NewReplicaSet:   web-{template_hash} (3/3 replicas created)" in described


def test_scale_by_patching_replicas_and_readiness_in_status(
    shared_apiserver: APIServerProcess, k: Kubectl, namespace: str
) -> None:
    k.run("create", "deployment", "web", "-n", namespace, "--image=nginx:1.27", "--replicas=1")
    wait_for(lambda: len(pods_of(shared_apiserver, namespace)) == 1, "one pod")
    k.run("patch", "deployment", "web", "-n", namespace, "--type=merge", "-p", '{"spec":{"replicas":5}}')
    wait_for(lambda: len(pods_of(shared_apiserver, namespace)) == 5, "five pods")
    with Kubelet(shared_apiserver, namespace):
        status = wait_for(
            lambda: (
                (s := get_json(k, "deployment", "web", "-n", namespace)["status"]).get("availableReplicas")
                == 5
                and s
            ),
            "five available",
        )
    assert status["readyReplicas"] == 5 and status["updatedReplicas"] == 5 and status["replicas"] == 5
    assert status["observedGeneration"] == 2
    assert condition({"status": status}, "Available")["reason"] == "MinimumReplicasAvailable"  # type: ignore[index]
    k.run("patch", "deployment", "web", "-n", namespace, "--type=merge", "-p", '{"spec":{"replicas":2}}')
    wait_for(lambda: len(pods_of(shared_apiserver, namespace)) == 2, "two pods")
    rs_name = get_json(k, "replicasets", "-n", namespace)["items"][0]["metadata"]["name"]
    deleted = wait_for(
        lambda: [
            e for e in events_for(shared_apiserver, namespace, rs_name) if e["reason"] == "SuccessfulDelete"
        ],
        "deletions",
    )
    assert deleted[0]["message"].startswith(f"Deleted pod: {rs_name}-")
    scaled = [e["message"] for e in events_for(shared_apiserver, namespace, "web")]
    assert f"Scaled down replica set {rs_name} to 2 from 5" in scaled
    table = k.run("get", "deployment", "web", "-n", namespace).out.splitlines()
    assert table[1].split()[:4] == ["web", "2/2", "2", "2"]


def test_rollout_status_history_undo(shared_apiserver: APIServerProcess, k: Kubectl, namespace: str) -> None:
    k.run("create", "deployment", "web", "-n", namespace, "--image=nginx:1.27", "--replicas=3")
    with Kubelet(shared_apiserver, namespace):
        out = k.run("rollout", "status", "deployment/web", "-n", namespace, "--timeout=60s").out
        assert out.endswith('deployment "web" successfully rolled out\n')
        k.run("set", "image", "deployment/web", "nginx=nginx:1.28", "-n", namespace)
        k.run("annotate", "deployment/web", "-n", namespace, "kubernetes.io/change-cause=image 1.28")
        out = k.run("rollout", "status", "deployment/web", "-n", namespace, "--timeout=60s").out
        assert out.endswith('deployment "web" successfully rolled out\n')
        history = wait_for(
            lambda: (
                "image 1.28" in (h := k.run("rollout", "history", "deployment/web", "-n", namespace).out)
                and h
            ),
            "the change cause on revision 2",
        )
        assert history.splitlines()[1:4] == [
            "REVISION  CHANGE-CAUSE",
            "1         <none>",
            "2         image 1.28",
        ]
        revision = k.run("rollout", "history", "deployment/web", "-n", namespace, "--revision=1").out
        assert (
            "Image:\tnginx:1.27" in revision
            or "Image:      nginx:1.27" in revision
            or "nginx:1.27" in revision
        )

        assert (
            k.run("rollout", "undo", "deployment/web", "-n", namespace).out
            == "deployment.apps/web rolled back\n"
        )
        out = k.run("rollout", "status", "deployment/web", "-n", namespace, "--timeout=60s").out
        assert out.endswith('deployment "web" successfully rolled out\n')
    image = get_json(k, "deployment", "web", "-n", namespace)["spec"]["template"]["spec"]["containers"][0][
        "image"
    ]
    assert image == "nginx:1.27"
    history = k.run("rollout", "history", "deployment/web", "-n", namespace).out
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["2", "3"]
    sets = get_json(k, "replicasets", "-n", namespace)["items"]
    by_revision = {rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: rs for rs in sets}
    assert by_revision["3"]["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"] == "1"
    assert by_revision["3"]["spec"]["replicas"] == 3 and by_revision["2"]["spec"]["replicas"] == 0
    assert len(pods_of(shared_apiserver, namespace)) == 3


def test_rollout_pause_resume_restart(shared_apiserver: APIServerProcess, k: Kubectl, namespace: str) -> None:
    k.run("create", "deployment", "web", "-n", namespace, "--image=nginx:1.27", "--replicas=2")
    with Kubelet(shared_apiserver, namespace):
        k.run("rollout", "status", "deployment/web", "-n", namespace, "--timeout=60s")
        assert (
            k.run("rollout", "pause", "deployment/web", "-n", namespace).out == "deployment.apps/web paused\n"
        )
        paused = wait_for(
            lambda: (
                (c := condition(get_json(k, "deployment", "web", "-n", namespace), "Progressing"))
                and c["reason"] == "DeploymentPaused"
                and c
            ),
            "the paused condition",
        )
        assert (paused["status"], paused["message"]) == ("Unknown", "Deployment is paused")
        refused = k.fails("rollout", "restart", "deployment/web", "-n", namespace)
        assert "can't restart paused deployment (run rollout resume first)" in refused.stderr
        k.run("set", "image", "deployment/web", "nginx=nginx:1.28", "-n", namespace)
        time.sleep(0.5)  # a paused Deployment must not roll: nothing to wait for, so look once after a moment
        assert len(get_json(k, "replicasets", "-n", namespace)["items"]) == 1
        assert (
            k.run("rollout", "resume", "deployment/web", "-n", namespace).out
            == "deployment.apps/web resumed\n"
        )
        k.run("rollout", "status", "deployment/web", "-n", namespace, "--timeout=60s")
        assert len(get_json(k, "replicasets", "-n", namespace)["items"]) == 2
        k.run("rollout", "pause", "deployment/web", "-n", namespace)
        refused = k.fails("rollout", "undo", "deployment/web", "-n", namespace)
        assert (
            "you cannot rollback a paused deployment; resume it first with 'kubectl rollout resume' and try again"
            in refused.stderr
        )
        k.run("rollout", "resume", "deployment/web", "-n", namespace)
        assert (
            k.run("rollout", "restart", "deployment/web", "-n", namespace).out
            == "deployment.apps/web restarted\n"
        )
        out = k.run("rollout", "status", "deployment/web", "-n", namespace, "--timeout=60s").out
        assert out.endswith('deployment "web" successfully rolled out\n')
    deployment = get_json(k, "deployment", "web", "-n", namespace)
    assert "kubectl.kubernetes.io/restartedAt" in deployment["spec"]["template"]["metadata"]["annotations"]
    sets = get_json(k, "replicasets", "-n", namespace)["items"]
    assert len(sets) == 3
    assert sorted(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] for rs in sets) == [
        "1",
        "2",
        "3",
    ]
    progressing = condition(deployment, "Progressing")
    assert progressing is not None and progressing["reason"] == "NewReplicaSetAvailable"
    pods = pods_of(shared_apiserver, namespace)
    assert pods
    for pod in pods:
        assert "kubectl.kubernetes.io/restartedAt" in pod["metadata"]["annotations"]


def test_rollout_status_reports_an_exceeded_progress_deadline(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl.run("create", "deployment", "slow", "-n", namespace, "--image=nginx:1.27")
    kubectl.run(
        "patch",
        "deployment",
        "slow",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"progressDeadlineSeconds":2}}',
    )
    # no Kubelet: the pod never becomes Ready, so progress stops and the 2 s deadline passes
    result = kubectl.run(
        "rollout", "status", "deployment/slow", "-n", namespace, "--timeout=60s", check=False
    )
    assert result.code == 1
    assert 'error: deployment "slow" exceeded its progress deadline' in result.stderr
    cond = condition(get_json(kubectl, "deployment", "slow", "-n", namespace), "Progressing")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "ProgressDeadlineExceeded")
    assert cond["message"].endswith('" has timed out progressing.')


def test_failed_create_carries_the_api_refusal(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """A pod the API refuses (here an admission policy; a quota once quota exists) shows up as upstream shows
    it: a FailedCreate event and ReplicaFailure conditions with the server's own words."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"no-pods-{namespace}"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "validations": [{"expression": "false", "message": "no pods here"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": f"no-pods-{namespace}"},
        "spec": {
            "policyName": f"no-pods-{namespace}",
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    kubectl.apply(yaml.safe_dump_all([policy, binding]))
    try:
        kubectl.run("create", "deployment", "web", "-n", namespace, "--image=nginx:1.27", "--replicas=2")
        rs = wait_for(lambda: get_json(kubectl, "replicasets", "-n", namespace)["items"], "the ReplicaSet")[0]
        rs_name = rs["metadata"]["name"]
        failed = wait_for(
            lambda: [
                e for e in events_for(shared_apiserver, namespace, rs_name) if e["reason"] == "FailedCreate"
            ],
            "FailedCreate",
        )
        assert failed[0]["type"] == "Warning"
        assert failed[0]["message"].startswith("Error creating: pods ")
        assert "is forbidden: ValidatingAdmissionPolicy" in failed[0]["message"]
        assert failed[0]["message"].endswith("denied request: no pods here")
        cond = wait_for(
            lambda: condition(get_json(kubectl, "replicaset", rs_name, "-n", namespace), "ReplicaFailure"),
            "RS condition",
        )
        assert (cond["status"], cond["reason"]) == ("True", "FailedCreate")
        refusal = (
            rf'pods "{rs_name}-[a-z0-9]{{5}}" is forbidden: ValidatingAdmissionPolicy '
            rf"'no-pods-{namespace}' with binding 'no-pods-{namespace}' denied request: no pods here"
        )
        assert re.fullmatch(refusal, cond["message"]), cond["message"]
        assert re.fullmatch("Error creating: " + refusal, failed[0]["message"]), failed[0]["message"]
        dep_cond = wait_for(
            lambda: condition(get_json(kubectl, "deployment", "web", "-n", namespace), "ReplicaFailure"),
            "Deployment condition",
        )
        assert dep_cond["reason"] == "FailedCreate"
        assert re.fullmatch(refusal, dep_cond["message"]), dep_cond["message"]  # the set's failure, copied
        assert pods_of(shared_apiserver, namespace) == []
    finally:
        kubectl.run("delete", "validatingadmissionpolicybinding", f"no-pods-{namespace}", check=False)
        kubectl.run("delete", "validatingadmissionpolicy", f"no-pods-{namespace}", check=False)
    # the refusal lifted, the back-off brings the pods and clears the failure
    wait_for(
        lambda: len(pods_of(shared_apiserver, namespace)) == 2, "pods after the policy is gone", within=60
    )
    wait_for(
        lambda: (
            condition(get_json(kubectl, "replicaset", rs_name, "-n", namespace), "ReplicaFailure") is None
        ),
        "cleared",
    )


# -- Endpoints -------------------------------------------------------------------------------------------------


def test_endpoints_follow_pod_readiness(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    container = {"name": "nginx", "image": "nginx:1.27", "ports": [{"name": "http", "containerPort": 8080}]}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container]}},
        },
    }
    kubectl.apply(yaml.safe_dump(deployment))
    kubectl.apply(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": namespace, "labels": {"team": "a"}},
                "spec": {
                    "selector": {"app": "web"},
                    "ports": [{"name": "web", "port": 80, "targetPort": "http"}],
                },
            }
        )
    )
    pods = wait_for(
        lambda: (
            len(
                p := [
                    x for x in pods_of(shared_apiserver, namespace) if x["spec"]["containers"][0].get("ports")
                ]
            )
            == 3
            and p
        ),
        "pods of the new template",
    )
    for n, pod in enumerate(pods):
        set_pod_status(shared_apiserver, namespace, pod, ready=n != 0, ip=f"10.9.0.{n + 1}")

    def subsets() -> list[dict[str, Any]]:
        return get_json(kubectl, "endpoints", "web", "-n", namespace).get("subsets") or []

    def addresses(kind: str) -> list[str]:
        return sorted(a["ip"] for s in subsets() for a in s.get(kind) or [])

    wait_for(
        lambda: (
            addresses("addresses") == ["10.9.0.2", "10.9.0.3"]
            and addresses("notReadyAddresses") == ["10.9.0.1"]
        ),
        "ready and not ready",
    )
    endpoints = get_json(kubectl, "endpoints", "web", "-n", namespace)
    assert subsets()[0]["ports"] == [{"name": "web", "port": 8080, "protocol": "TCP"}]
    assert endpoints["metadata"]["labels"]["team"] == "a"
    trigger = endpoints["metadata"]["annotations"]["endpoints.kubernetes.io/last-change-trigger-time"]
    assert trigger.endswith("Z")
    address = next(a for s in subsets() for a in s["addresses"] if a["ip"] == "10.9.0.2")
    assert (
        address["targetRef"]["kind"] == "Pod" and address["targetRef"]["name"] == pods[1]["metadata"]["name"]
    )

    set_pod_status(shared_apiserver, namespace, pods[0], ready=True, ip="10.9.0.1")
    set_pod_status(shared_apiserver, namespace, pods[2], ready=False, ip="10.9.0.3")
    wait_for(
        lambda: (
            addresses("addresses") == ["10.9.0.1", "10.9.0.2"]
            and addresses("notReadyAddresses") == ["10.9.0.3"]
        ),
        "readiness flipped",
    )
    kubectl.run(
        "patch",
        "service",
        "web",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"publishNotReadyAddresses":true}}',
    )
    wait_for(
        lambda: addresses("addresses") == ["10.9.0.1", "10.9.0.2", "10.9.0.3"],
        "not-ready addresses published",
    )
    kubectl.run("delete", "service", "web", "-n", namespace)
    wait_for(
        lambda: kubectl.run("get", "endpoints", "web", "-n", namespace, check=False).code != 0,
        "Endpoints removed with the Service",
    )


# -- per-namespace defaults ----------------------------------------------------------------------------------


def test_new_namespaces_get_default_account_and_root_ca(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    account = wait_for(
        lambda: kubectl.run("get", "serviceaccount", "default", "-n", namespace, check=False).code == 0,
        "default account",
    )
    assert account
    cm = wait_for(
        lambda: (
            (
                r := kubectl.run(
                    "get", "configmap", "kube-root-ca.crt", "-n", namespace, "-o", "json", check=False
                )
            ).code
            == 0
            and json.loads(r.out)
        ),
        "root CA",
    )
    ca = base64.b64decode(
        shared_apiserver.config()["clusters"][0]["cluster"]["certificate-authority-data"]
    ).decode()
    assert cm["data"] == {"ca.crt": ca}
    assert cm["metadata"]["annotations"]["kubernetes.io/description"].startswith(
        "Contains a CA bundle that can be used to verify the kube-apiserver"
    )
    kubectl.run("delete", "serviceaccount", "default", "-n", namespace)
    kubectl.run("delete", "configmap", "kube-root-ca.crt", "-n", namespace)
    wait_for(
        lambda: kubectl.run("get", "serviceaccount", "default", "-n", namespace, check=False).code == 0,
        "account back",
    )
    wait_for(
        lambda: kubectl.run("get", "configmap", "kube-root-ca.crt", "-n", namespace, check=False).code == 0,
        "CA back",
    )


# -- vplane controller-manager as its own process -----------------------------------------------------------


def test_controller_manager_command(apiserver: APIServerProcess, kubectl_path: str, tmp_path: Path) -> None:
    apiserver.start()  # the suite's default: no controller manager inside the API server
    k = Kubectl(kubectl_path, apiserver.kubeconfig, tmp_path / "cache")
    k.run("create", "namespace", "cm")
    k.run("create", "deployment", "web", "-n", "cm", "--image=nginx:1.27", "--replicas=2")
    time.sleep(0.5)  # nothing runs controllers: look once that nothing happened
    assert get_json(k, "replicasets", "-n", "cm")["items"] == []
    assert k.run("get", "serviceaccount", "default", "-n", "cm", check=False).code != 0

    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "vplane.cli.main",
            "controller-manager",
            "--kubeconfig",
            str(apiserver.kubeconfig),
            "--controllers",
            "deployment,nope",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert "unknown controllers: nope" in bad.stderr

    ready = tmp_path / "kcm.ready"
    log = (tmp_path / "kcm.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vplane.cli.main",
            "controller-manager",
            "--kubeconfig",
            str(apiserver.kubeconfig),
            "--controllers",
            "*,-serviceaccount",
            "--ready-file",
            str(ready),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(ready.exists, "the controller manager ready", within=30)
        wait_for(lambda: len(pods_of(apiserver, "cm")) == 2, "pods from the separate controller manager")
        wait_for(
            lambda: k.run("get", "configmap", "kube-root-ca.crt", "-n", "cm", check=False).code == 0,
            "root CA",
        )
        assert k.run("get", "serviceaccount", "default", "-n", "cm", check=False).code != 0  # turned off
        events = events_for(apiserver, "cm", "web")
        assert events and events[0]["source"]["component"] == "deployment-controller"
        managers = {
            m["manager"]
            for m in api(apiserver, "GET", "/apis/apps/v1/namespaces/cm/replicasets")["items"][0]["metadata"][
                "managedFields"
            ]
        }
        assert "kube-controller-manager" in managers
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()
    assert proc.returncode == 0, (tmp_path / "kcm.log").read_text()[-3000:]

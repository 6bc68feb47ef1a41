"""The StatefulSet and DaemonSet controllers inside the controller manager, against the in-memory API of
``test_kcm_controllers`` (no server, no sockets) holding hundreds of objects, with fake time (looptime):
ordered creation and reverse-ordered rolling updates, Parallel sets of 200 pods with their claims,
rollbacks that renumber a revision, DaemonSets on 150 nodes rolled within their unavailability budget,
surge, and nodes that come and go."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import test_kcm_controllers as base
from test_kcm_controllers import ROOT_CA, Cluster, FakeKube, kubelet, loop_clock, plain_tracebacks  # noqa: F401

from vplane.controllers.client import Resource
from vplane.controllers.kcm import daemonsetutil as dsu
from vplane.controllers.kcm import statefulsetutil as ssu
from vplane.controllers.kcm.history import CONTROLLERREVISIONS
from vplane.controllers.kcm.manager import ControllerManager
from vplane.controllers.kcm.resources import NAMESPACES, PODS
from vplane.controllers.kcm.settings import ControllerManagerSettings
from vplane.kube.objects import Obj

STATEFULSETS, DAEMONSETS, NODES = ssu.STATEFULSETS, dsu.DAEMONSETS, dsu.NODES
PVCS = ssu.PERSISTENTVOLUMECLAIMS

# The fake API bumps generations and keeps status out of main-resource writes for the kinds it is told of.
base.GENERATION_KINDS.update({"StatefulSet", "DaemonSet"})
base.STATUS_KINDS.update({"StatefulSet", "DaemonSet", "PersistentVolumeClaim", "Node"})


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    clock = loop_clock()
    kube = FakeKube(clock)
    await kube.create(NAMESPACES, {"metadata": {"name": "ns"}})
    settings = ControllerManagerSettings(controllers=["statefulset", "daemonset"])
    manager = ControllerManager(kube, settings, root_ca=ROOT_CA, clock=clock)
    task = asyncio.create_task(manager.run())
    async with asyncio.timeout(10):
        await manager.ready.wait()
    yield Cluster(kube, manager)
    if task.done():
        task.result()
        raise AssertionError("the controller manager stopped")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def sts_body(name: str, replicas: int, image: str = "i:1", **spec: Any) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "OrderedReady",
            "revisionHistoryLimit": 10,
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
            **spec,
        },
    }


def ds_body(name: str, image: str = "i:1", **spec: Any) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "revisionHistoryLimit": 10,
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
            **spec,
        },
    }


async def set_image(kube: FakeKube, resource: Resource, name: str, image: str) -> None:
    obj = await kube.get(resource, name, namespace="ns")
    obj["spec"]["template"]["spec"]["containers"][0]["image"] = image
    await kube.replace(resource, obj, namespace="ns")


def watch_writes(kube: FakeKube, on: Callable[[str, Resource, Obj], None]) -> None:
    kube.write_hook = on


def is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions", [])
    )


def status(cluster: Cluster, resource: Resource, name: str) -> Obj:
    found: Obj = cluster.obj(resource, name).get("status", {})
    return found


# -- StatefulSets ---------------------------------------------------------------------------------------------


@pytest.mark.looptime
async def test_ordered_ready_creates_in_order_and_updates_in_reverse(cluster: Cluster) -> None:
    kube = cluster.kube
    order: list[tuple[str, str, bool]] = []

    def record(event: str, resource: Resource, obj: Obj) -> None:
        if resource is PODS and event in ("ADDED", "DELETED"):
            name = obj["metadata"]["name"]
            ordinal = ssu.ordinal(obj)
            before = kube.peek(PODS, "ns", f"web-{ordinal - 1}")
            order.append((event, name, before is not None and is_ready(before)))

    watch_writes(kube, record)
    stop = asyncio.Event()
    node = asyncio.create_task(kubelet(kube, stop=stop))
    await kube.create(STATEFULSETS, sts_body("web", 5), namespace="ns")
    await cluster.eventually(
        lambda: status(cluster, STATEFULSETS, "web").get("readyReplicas") == 5, "5 ready"
    )
    assert [name for event, name, _ in order] == [f"web-{i}" for i in range(5)]
    # each pod was created only once its predecessor was Running and Ready
    assert all(pred_ready for _, name, pred_ready in order if name != "web-0")
    first = status(cluster, STATEFULSETS, "web")
    assert first["currentRevision"] == first["updateRevision"]
    assert kube.calls["create pods"] == 5  # expectations: never a create the cache had not caught up with

    order.clear()
    await set_image(kube, STATEFULSETS, "web", "i:2")
    await cluster.eventually(
        lambda: (
            (s := status(cluster, STATEFULSETS, "web")).get("currentRevision") == s.get("updateRevision")
            and s.get("updatedReplicas") == 5
            and s.get("readyReplicas") == 5
            and s.get("observedGeneration") == 2
        ),
        "rolled",
    )
    assert [name for event, name, _ in order if event == "DELETED"] == [f"web-{i}" for i in (4, 3, 2, 1, 0)]
    final = status(cluster, STATEFULSETS, "web")
    assert final["currentRevision"] != first["currentRevision"]
    pods = cluster.pods()
    assert {p["metadata"]["labels"][ssu.REVISION_LABEL] for p in pods} == {final["updateRevision"]}
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {"i:2"}
    revisions = kube.objects(CONTROLLERREVISIONS, "ns")
    assert sorted(r["revision"] for r in revisions) == [1, 2]
    deleted = [e["message"] for e in cluster.events("SuccessfulDelete")]
    assert "delete Pod web-4 in StatefulSet web successful" in deleted
    stop.set()
    await node


@pytest.mark.looptime
async def test_parallel_set_of_200_pods_with_claims(cluster: Cluster) -> None:
    kube = cluster.kube
    body = sts_body(
        "db",
        200,
        podManagementPolicy="Parallel",
        volumeClaimTemplates=[{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}],
    )
    await kube.create(STATEFULSETS, body, namespace="ns")
    await cluster.eventually(lambda: len(cluster.pods()) == 200, "200 pods")
    assert kube.calls["create pods"] == 200
    claims = kube.objects(PVCS, "ns")
    assert sorted(c["metadata"]["name"] for c in claims) == sorted(f"data-db-{i}" for i in range(200))
    assert all(c["metadata"]["labels"] == {"app": "db"} for c in claims)
    await cluster.eventually(lambda: status(cluster, STATEFULSETS, "db").get("replicas") == 200, "status")
    # Parallel does not wait for readiness; now scale to 0: every pod goes at once, the claims stay
    sts = cluster.obj(STATEFULSETS, "db")
    sts["spec"]["replicas"] = 0
    await kube.replace(STATEFULSETS, sts, namespace="ns")
    await cluster.eventually(lambda: not cluster.pods(), "no pods")
    assert len(kube.objects(PVCS, "ns")) == 200
    await cluster.eventually(lambda: status(cluster, STATEFULSETS, "db").get("replicas") == 0, "status 0")


@pytest.mark.looptime
async def test_rollback_renumbers_the_earlier_revision(cluster: Cluster) -> None:
    kube = cluster.kube
    stop = asyncio.Event()
    node = asyncio.create_task(kubelet(kube, stop=stop))
    await kube.create(STATEFULSETS, sts_body("web", 2), namespace="ns")
    await cluster.eventually(lambda: status(cluster, STATEFULSETS, "web").get("readyReplicas") == 2, "ready")
    first = status(cluster, STATEFULSETS, "web")["updateRevision"]
    for image in ("i:2", "i:1"):
        await set_image(kube, STATEFULSETS, "web", image)
        await cluster.eventually(
            lambda image=image: (
                {p["spec"]["containers"][0]["image"] for p in cluster.pods()} == {image}
                and all(is_ready(p) for p in cluster.pods())
                and len(cluster.pods()) == 2
            ),
            f"pods at {image}",
        )
    await cluster.eventually(
        lambda: status(cluster, STATEFULSETS, "web").get("currentRevision") == first, "back at the first"
    )
    numbers = {r["metadata"]["name"]: r["revision"] for r in kube.objects(CONTROLLERREVISIONS, "ns")}
    assert len(numbers) == 2
    assert numbers[first] == 3  # the first template's revision, reused as the newest
    stop.set()
    await node


@pytest.mark.looptime
async def test_orphaned_pods_are_adopted_and_given_their_identity(cluster: Cluster) -> None:
    kube = cluster.kube
    body = sts_body("web", 1)
    await kube.create(
        PODS,
        {
            "metadata": {"name": "web-0", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "i:1"}]},
        },
        namespace="ns",
    )
    await kube.create(STATEFULSETS, body, namespace="ns")
    await cluster.eventually(
        lambda: bool(cluster.pods()[0]["metadata"].get("ownerReferences")), "web-0 adopted"
    )
    pod = cluster.pods()[0]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
    # the adopted pod lacks the identity labels; under OrderedReady they are fixed once it runs and is ready
    assert ssu.POD_NAME_LABEL not in pod["metadata"]["labels"]
    await kube.mark_ready("ns", "web-0")
    await cluster.eventually(
        lambda: cluster.pods()[0]["metadata"]["labels"].get(ssu.POD_NAME_LABEL) == "web-0", "identity"
    )


# -- DaemonSets ------------------------------------------------------------------------------------------------


async def add_nodes(kube: FakeKube, count: int, labels: dict[str, str] | None = None) -> None:
    for i in range(count):
        await kube.create(
            NODES,
            {"metadata": {"name": f"node-{i:03d}", "labels": {"pool": "a", **(labels or {})}}, "spec": {}},
        )


def unavailable_nodes(kube: FakeKube, nodes: list[str]) -> int:
    on_node: dict[str, list[Obj]] = {}
    for pod in kube.store.get("pods", {}).values():  # read in place: this runs on every write
        target = dsu.target_node(pod)
        if target is not None:
            on_node.setdefault(target, []).append(pod)
    return sum(1 for n in nodes if not any(is_ready(p) for p in on_node.get(n, [])))


@pytest.mark.looptime
async def test_daemonset_on_150_nodes_rolls_within_its_budget(cluster: Cluster) -> None:
    kube = cluster.kube
    await add_nodes(kube, 150)
    stop = asyncio.Event()
    node = asyncio.create_task(kubelet(kube, stop=stop))
    body = ds_body(
        "agent",
        updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0}},
    )
    await kube.create(DAEMONSETS, body, namespace="ns")
    await cluster.eventually(
        lambda: status(cluster, DAEMONSETS, "agent").get("numberReady") == 150, "150 ready"
    )
    assert kube.calls["create pods"] == 150
    names = [n["metadata"]["name"] for n in kube.objects(NODES)]
    assert sorted(dsu.target_node(p) or "" for p in cluster.pods()) == sorted(names)
    worst = [0]

    def budget(event: str, resource: Resource, obj: Obj) -> None:
        if resource is PODS and event == "DELETED":
            worst[0] = max(worst[0], unavailable_nodes(kube, names))

    watch_writes(kube, budget)
    await set_image(kube, DAEMONSETS, "agent", "i:2")
    await cluster.eventually(
        lambda: (
            (s := status(cluster, DAEMONSETS, "agent")).get("updatedNumberScheduled") == 150
            and s.get("numberAvailable") == 150
            and s.get("observedGeneration") == 2
        ),
        "rolled",
        within=600,
    )
    assert 0 < worst[0] <= 15  # 10% of 150
    assert {p["spec"]["containers"][0]["image"] for p in cluster.pods()} == {"i:2"}
    assert len(cluster.pods()) == 150
    assert len(kube.objects(CONTROLLERREVISIONS, "ns")) == 2
    stop.set()
    await node


@pytest.mark.looptime
async def test_daemonset_surge_starts_the_new_pod_before_the_old_one_goes(cluster: Cluster) -> None:
    kube = cluster.kube
    await add_nodes(kube, 4)
    stop = asyncio.Event()
    node = asyncio.create_task(kubelet(kube, stop=stop))
    body = ds_body(
        "agent",
        updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
    )
    await kube.create(DAEMONSETS, body, namespace="ns")
    await cluster.eventually(lambda: status(cluster, DAEMONSETS, "agent").get("numberReady") == 4, "4 ready")
    most = [0]
    names = [n["metadata"]["name"] for n in kube.objects(NODES)]
    least_available = [4]

    def surge(event: str, resource: Resource, obj: Obj) -> None:
        if resource is PODS:
            most[0] = max(most[0], len(kube.store.get("pods", {})))
            least_available[0] = min(least_available[0], 4 - unavailable_nodes(kube, names))

    watch_writes(kube, surge)
    await set_image(kube, DAEMONSETS, "agent", "i:2")
    await cluster.eventually(
        lambda: (
            (s := status(cluster, DAEMONSETS, "agent")).get("updatedNumberScheduled") == 4
            and s.get("observedGeneration") == 2
            and s.get("numberAvailable") == 4
            and len(cluster.pods()) == 4
            and {p["spec"]["containers"][0]["image"] for p in cluster.pods()} == {"i:2"}
        ),
        "rolled",
    )
    assert most[0] == 5  # one extra pod at a time
    assert least_available[0] == 4  # never a node without an available pod
    stop.set()
    await node


@pytest.mark.looptime
async def test_nodes_joining_leaving_and_relabelled(cluster: Cluster) -> None:
    kube = cluster.kube
    await add_nodes(kube, 3)
    body = ds_body("agent")
    body["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    await kube.create(DAEMONSETS, body, namespace="ns")
    await cluster.eventually(lambda: len(cluster.pods()) == 3, "3 pods")
    await kube.create(NODES, {"metadata": {"name": "late", "labels": {"pool": "a"}}, "spec": {}})
    await cluster.eventually(lambda: len(cluster.pods()) == 4, "a pod for the new node")
    late = copy.deepcopy(kube.peek(NODES, None, "late"))
    assert late is not None
    late["metadata"]["labels"] = {"pool": "b"}
    await kube.replace(NODES, late)
    await cluster.eventually(lambda: len(cluster.pods()) == 3, "its pod removed")
    tainted = copy.deepcopy(kube.peek(NODES, None, "node-000"))
    assert tainted is not None
    tainted["spec"]["taints"] = [{"key": "maintenance", "effect": "NoExecute"}]
    await kube.replace(NODES, tainted)
    await cluster.eventually(lambda: len(cluster.pods()) == 2, "evicted by NoExecute")
    await cluster.eventually(
        lambda: status(cluster, DAEMONSETS, "agent").get("desiredNumberScheduled") == 2, "desired 2"
    )
    deleted = [e["message"] for e in cluster.events("SuccessfulDelete")]
    assert len(deleted) == 2 and all(m.startswith("Deleted pod: agent-") for m in deleted)

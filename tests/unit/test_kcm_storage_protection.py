"""The ``kubernetes.io/pvc-protection`` and ``pv-protection`` finalizers: which pods hold a claim (pure), the
admission that adds them, and the two controllers on the fake API of ``test_kcm_batch_controllers`` (which
keeps objects with finalizers until they are removed): a claim in use stays until its pod goes, a volume
until it is no longer Bound."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_kcm_batch_controllers import BatchKube
from test_kcm_controllers import Cluster, loop_clock, plain_tracebacks  # noqa: F401

from vplane.apiserver.admission import AdmissionRequest
from vplane.apiserver.kinds.admission import StorageObjectInUseProtectionAdmission
from vplane.controllers.kcm import storageprotection as sp
from vplane.controllers.kcm.manager import ControllerManager
from vplane.controllers.kcm.persistentvolume import PVCS, PVS
from vplane.controllers.kcm.resources import NAMESPACES, PODS
from vplane.controllers.kcm.settings import ControllerManagerSettings
from vplane.kube.objects import Obj


def pod(name: str, *volumes: Obj, node: str | None = "n1", **meta: Any) -> Obj:
    spec: Obj = {"volumes": list(volumes), "containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", **meta}, "spec": spec}


def uses(claim: str) -> Obj:
    return {"name": "v", "persistentVolumeClaim": {"claimName": claim}}


def claim(name: str, **meta: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", **meta}, "spec": {}}


def test_which_pods_hold_a_claim() -> None:
    data = claim("data")
    assert sp.pod_uses_claim(pod("p", uses("data")), data)
    assert not sp.pod_uses_claim(pod("p", uses("other")), data)
    assert not sp.pod_uses_claim(pod("p", uses("data"), node=None), data)  # not scheduled: cannot start
    shut = pod("p", uses("data"), deletionTimestamp="2024-01-01T00:00:00Z", deletionGracePeriodSeconds=0)
    assert not sp.pod_uses_claim(shut, data)
    stopping = pod("p", uses("data"), deletionTimestamp="2024-01-01T00:00:00Z", deletionGracePeriodSeconds=30)
    assert sp.pod_uses_claim(stopping, data)  # still shutting down
    ephemeral = pod("web", {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    assert sp.claim_names(ephemeral) == ["web-scratch"]
    owned = claim("web-scratch", ownerReferences=[{"kind": "Pod", "uid": "uid-web", "controller": True}])
    assert sp.pod_uses_claim(ephemeral, owned)
    assert not sp.pod_uses_claim(ephemeral, claim("web-scratch"))  # a claim the pod does not own
    assert sp.finalizer_patch(sp.PVC_PROTECTION, add=False) == {
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["kubernetes.io/pvc-protection"]}
    }


class _Type:
    def __init__(self, group: str, resource: str) -> None:
        self.group, self.resource = group, resource


async def test_admission_adds_the_finalizer_on_create_only() -> None:
    plugin = StorageObjectInUseProtectionAdmission()

    async def admitted(resource: str, operation: str, obj: Obj, group: str = "") -> Obj:
        request = AdmissionRequest.__new__(AdmissionRequest)
        request.rtype, request.operation, request.obj = _Type(group, resource), operation, obj  # type: ignore[assignment]
        await plugin.admit(request)
        return obj

    made = await admitted("persistentvolumeclaims", "CREATE", {"metadata": {"finalizers": ["a/b"]}})
    assert made["metadata"]["finalizers"] == ["a/b", "kubernetes.io/pvc-protection"]
    assert (await admitted("persistentvolumes", "CREATE", {}))["metadata"]["finalizers"] == [
        "kubernetes.io/pv-protection"
    ]
    assert (await admitted("persistentvolumeclaims", "UPDATE", {"metadata": {}}))["metadata"] == {}
    assert (await admitted("persistentvolumes", "CREATE", {"metadata": {}}, group="x.io"))["metadata"] == {}


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    clock = loop_clock()
    kube = BatchKube(clock)
    await kube.create(NAMESPACES, {"metadata": {"name": "ns"}})
    settings = ControllerManagerSettings(controllers=["pvc-protection", "pv-protection"])
    manager = ControllerManager(kube, settings, clock=clock)
    task = asyncio.create_task(manager.run())
    async with asyncio.timeout(10):
        await manager.ready.wait()
    yield Cluster(kube, manager)
    if task.done():
        task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def finalizers(kube: BatchKube, resource: Any, name: str, namespace: str | None = "ns") -> list[str] | None:
    found = kube.peek(resource, namespace, name)
    return None if found is None else list(found["metadata"].get("finalizers") or [])


@pytest.mark.looptime
async def test_claim_in_use_stays_until_its_pod_goes(cluster: Cluster) -> None:
    kube = cluster.kube
    # made without admission: the controller adds the finalizer
    await kube.create(PVCS, claim("data"), namespace="ns")
    await cluster.eventually(lambda: finalizers(kube, PVCS, "data") == [sp.PVC_PROTECTION], "finalizer added")
    await kube.create(PODS, pod("user", uses("data")), namespace="ns")
    await kube.create(PODS, pod("pending", uses("data"), node=None), namespace="ns")
    await kube.delete(PVCS, "data", namespace="ns")
    await asyncio.sleep(1)
    assert finalizers(kube, PVCS, "data") == [sp.PVC_PROTECTION]  # Terminating while the pod runs
    await kube.delete(PODS, "user", namespace="ns")
    await cluster.eventually(lambda: finalizers(kube, PVCS, "data") is None, "claim gone with its pod")


@pytest.mark.looptime
async def test_volume_protected_while_bound(cluster: Cluster) -> None:
    kube = cluster.kube
    await kube.create(PVS, {"metadata": {"name": "pv1"}, "spec": {}}, namespace=None)
    await cluster.eventually(lambda: finalizers(kube, PVS, "pv1", None) == [sp.PV_PROTECTION], "finalizer")
    volume = kube.peek(PVS, None, "pv1")
    assert volume is not None
    await kube.replace_status(PVS, {**volume, "status": {"phase": "Bound"}})
    await kube.delete(PVS, "pv1")
    await asyncio.sleep(1)
    assert finalizers(kube, PVS, "pv1", None) == [sp.PV_PROTECTION]
    volume = kube.peek(PVS, None, "pv1")
    assert volume is not None
    await kube.replace_status(PVS, {**volume, "status": {"phase": "Released"}})
    await cluster.eventually(lambda: finalizers(kube, PVS, "pv1", None) is None, "volume gone once released")

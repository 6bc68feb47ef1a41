"""PersistentVolume binding and a local-path provisioner (upstream ``pkg/controller/volume/persistentvolume``,
the ``persistentvolume-binder`` controller, plus what an external provisioner does for its class).

Claims:

- a claim that names no volume is bound to the smallest ``Available`` volume that fits (same class, its
  access modes, enough capacity, the claim's selector and volume mode); the volume's ``claimRef`` is set
  first, then the claim's ``volumeName`` and the ``pv.kubernetes.io/bind-completed`` /
  ``bound-by-controller`` annotations, then both phases become ``Bound`` (the claim's status gets the
  volume's capacity and access modes);
- otherwise, if its class has a provisioner, the claim is annotated
  ``volume.kubernetes.io/storage-provisioner``; a ``WaitForFirstConsumer`` class waits (event
  ``WaitForFirstConsumer``) for ``volume.kubernetes.io/selected-node``, which this controller sets itself
  from the first pod using the claim that has a node (the scheduler would; vplane's does not place volumes);
- for the local class (``vplane.io/local-path``, when ``local_path_root`` is set) the volume is made here:
  a directory ``<root>/pvc-<uid>_<namespace>_<name>`` and a ``hostPath`` PersistentVolume ``pvc-<uid>``
  bound in advance to the claim (node affinity to the selected node), with the events an external
  provisioner writes (``Provisioning``, ``ProvisioningSucceeded``); other provisioners get
  ``ExternalProvisioning``.

Volumes: an unbound volume is ``Available``; one whose claim is gone is ``Released`` and then reclaimed:
``Delete`` removes a volume this provisioner made (directory and object), ``Retain`` keeps it. The
protection finalizers (``kubernetes.io/pvc-protection``, ``pv-protection``) are the ``storageprotection``
controllers' business.
"""

from __future__ import annotations

import asyncio
import copy
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vplane.controllers.client import Resource
from vplane.controllers.informer import Informer, object_key
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.events import NORMAL, WARNING
from vplane.controllers.kcm.informers import Index
from vplane.controllers.kcm.replicaset import error_text
from vplane.controllers.kcm.resources import PODS
from vplane.controllers.reconciler import Controller
from vplane.kube import labels as labelsel
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj
from vplane.kube.quantity import Quantity

PVS = Resource("v1", "PersistentVolume", "persistentvolumes", namespaced=False)
PVCS = Resource("v1", "PersistentVolumeClaim", "persistentvolumeclaims", namespaced=True)
STORAGECLASSES = Resource("storage.k8s.io/v1", "StorageClass", "storageclasses", namespaced=False)

LOCAL_PROVISIONER = "vplane.io/local-path"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
HOSTNAME_LABEL = "kubernetes.io/hostname"
CONFLICT_RETRY_SECONDS = 0.05
"""Claims and volumes are written by two workers (and users): a conflict is looked at again shortly."""


# -- pure decisions -------------------------------------------------------------------------------------------


def claim_class(obj: Obj) -> str:
    """``GetPersistentVolumeClaimClass`` / ``GetPersistentVolumeClass``: the beta annotation first."""
    beta = podutil.annotations_of(obj).get(BETA_CLASS)
    if beta is not None:
        return str(beta)
    return str(podutil.spec(obj).get("storageClassName") or "")


def _storage(obj: Obj, *path: str) -> Quantity | None:
    value: Any = obj
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return Quantity.parse(value)


def claim_request(pvc: Obj) -> Quantity | None:
    return _storage(pvc, "spec", "resources", "requests", "storage")


def volume_capacity(pv: Obj) -> Quantity | None:
    return _storage(pv, "spec", "capacity", "storage")


def fits(pv: Obj, pvc: Obj) -> bool:
    """Whether an unclaimed volume can serve the claim (``findMatchingVolume``'s checks)."""
    spec, claim_spec = podutil.spec(pv), podutil.spec(pvc)
    if podutil.is_deleting(pv) or podutil.status(pv).get("phase") not in (None, "", "Pending", "Available"):
        return False
    ref = spec.get("claimRef")
    if isinstance(ref, dict) and ref.get("name"):
        if ref.get("namespace") != podutil.namespace_of(pvc) or ref.get("name") != podutil.name_of(pvc):
            return False
        if ref.get("uid") and ref.get("uid") != podutil.uid_of(pvc):
            return False
    if claim_class(pv) != claim_class(pvc):
        return False
    if (spec.get("volumeMode") or "Filesystem") != (claim_spec.get("volumeMode") or "Filesystem"):
        return False
    if not set(claim_spec.get("accessModes") or []) <= set(spec.get("accessModes") or []):
        return False
    request, capacity = claim_request(pvc), volume_capacity(pv)
    if request is None or capacity is None or capacity.value < request.value:
        return False
    selector = claim_spec.get("selector")
    if selector is not None:
        try:
            if not labelsel.from_label_selector(selector).matches(podutil.labels_of(pv)):
                return False
        except StatusError:
            return False
    return True


def best_match(volumes: Iterable[Obj], pvc: Obj) -> Obj | None:
    """The smallest fitting volume; one already pre-bound to this claim wins."""
    candidates = [pv for pv in volumes if fits(pv, pvc)]
    for pv in candidates:
        if (podutil.spec(pv).get("claimRef") or {}).get("name") == podutil.name_of(pvc):
            return pv
    if not candidates:
        return None
    return min(candidates, key=lambda pv: (volume_capacity(pv).value, podutil.name_of(pv)))  # type: ignore[union-attr]


def claim_ref(pvc: Obj) -> Obj:
    return {
        "kind": "PersistentVolumeClaim",
        "namespace": podutil.namespace_of(pvc),
        "name": podutil.name_of(pvc),
        "uid": podutil.uid_of(pvc),
        "apiVersion": "v1",
        "resourceVersion": str(podutil.meta(pvc).get("resourceVersion") or ""),
    }


def volume_name(pvc: Obj) -> str:
    return f"pvc-{podutil.uid_of(pvc)}"


def local_path(root: Path, pvc: Obj) -> Path:
    """Where the local-path provisioner keeps a claim's data (the local-path-provisioner's layout)."""
    return root / f"{volume_name(pvc)}_{podutil.namespace_of(pvc)}_{podutil.name_of(pvc)}"


def provisioned_volume(pvc: Obj, storage_class: Obj, path: Path, node: str | None) -> Obj:
    spec = podutil.spec(pvc)
    pv_spec: Obj = {
        "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
        "capacity": {"storage": str(claim_request(pvc) or "0")},
        "claimRef": {k: v for k, v in claim_ref(pvc).items() if k != "resourceVersion"},
        "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
        "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy") or "Delete",
        "storageClassName": claim_class(pvc),
        "volumeMode": spec.get("volumeMode") or "Filesystem",
    }
    if node:
        pv_spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}]}
                ]
            }
        }
    if storage_class.get("mountOptions"):
        pv_spec["mountOptions"] = list(storage_class["mountOptions"])
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name(pvc), "annotations": {PROVISIONED_BY: LOCAL_PROVISIONER}},
        "spec": pv_spec,
    }


def claims_of(pod: Obj) -> list[str]:
    """``namespace/claim`` of every claim the pod's volumes use."""
    namespace = podutil.namespace_of(pod)
    out = []
    for volume in podutil.spec(pod).get("volumes") or []:
        source = volume.get("persistentVolumeClaim") if isinstance(volume, dict) else None
        if isinstance(source, dict) and source.get("claimName"):
            out.append(f"{namespace}/{source['claimName']}")
    return out


def volume_phase_for(pv: Obj, claim: Obj | None) -> str:
    """What an existing volume's phase should be: unclaimed volumes are Available, those whose claim
    exists (same uid) Bound, those whose claim went Released (Failed stays)."""
    phase = str(podutil.status(pv).get("phase") or "")
    ref = podutil.spec(pv).get("claimRef")
    if not isinstance(ref, dict) or not ref.get("name"):
        return "Available"
    if claim is None or (ref.get("uid") and ref.get("uid") != podutil.uid_of(claim)):
        if not ref.get("uid"):
            return phase if phase not in ("", "Pending") else "Available"  # pre-bound, claim not there yet
        return "Failed" if phase == "Failed" else "Released"
    if podutil.spec(claim).get("volumeName") == podutil.name_of(pv):
        return "Bound"
    return phase if phase not in ("", "Pending") else "Available"


# -- the controller ---------------------------------------------------------------------------------------------


class PersistentVolumeBinderController(ManagedController):
    name = "persistentvolume-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        informers = ctx.informers
        self.claims = informers.informer(PVCS)
        self.volumes: Informer = informers.informer(PVS)
        self.classes = informers.informer(STORAGECLASSES)
        self.pods = informers.informer(PODS)
        self.pods_by_claim: Index = informers.index(PODS, "claims", claims_of)
        super().__init__(ctx, self.claims, [self.volumes, self.classes, self.pods], 1)
        self.provisioner_events = ctx.events.recorder(LOCAL_PROVISIONER)
        """Events the provisioner writes under its own name, as an external provisioner's are."""
        root = ctx.settings.local_path_root
        self.root = Path(root) if root else None
        self.volume_controller = Controller(
            "persistentvolume-controller-volumes",
            self.volumes,
            self.reconcile_volume,
            workers=1,
            queue_settings=ctx.settings.queue,
            run_informer=False,
        )
        self.volumes.add_handlers(
            on_add=self._volume_changed,
            on_update=lambda old, new: self._volume_changed(new),
            on_delete=self._volume_changed,
        )
        self.claims.add_handlers(on_delete=self._claim_deleted)
        self.pods.add_handlers(on_add=self._pod_changed, on_update=lambda old, new: self._pod_changed(new))
        self.classes.add_handlers(on_add=lambda sc: self._requeue_pending())

    async def run(self) -> None:
        for informer in self.informers:
            await informer.wait_for_sync()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.controller.run())
            tasks.create_task(self.volume_controller.run())

    # -- events -> keys -------------------------------------------------------------------------------

    def _volume_changed(self, pv: Obj) -> None:
        ref = podutil.spec(pv).get("claimRef")
        if isinstance(ref, dict) and ref.get("name"):
            self.enqueue(f"{ref.get('namespace')}/{ref.get('name')}")
        else:
            self._requeue_pending()

    def _claim_deleted(self, pvc: Obj) -> None:
        name = podutil.spec(pvc).get("volumeName")
        if name:
            self.volume_controller.enqueue(str(name))
        for pv in self.volumes.objects():
            if (podutil.spec(pv).get("claimRef") or {}).get("uid") == podutil.uid_of(pvc):
                self.volume_controller.enqueue(podutil.name_of(pv))

    def _pod_changed(self, pod: Obj) -> None:
        if podutil.spec(pod).get("nodeName"):
            for key in claims_of(pod):
                self.enqueue(key)

    def _requeue_pending(self) -> None:
        for pvc in self.claims.objects():
            if podutil.status(pvc).get("phase") != "Bound":
                self.enqueue(object_key(pvc))

    # -- claims ---------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        try:
            return await self._sync_claim(key)
        except StatusError as exc:
            if exc.code == 409:
                return CONFLICT_RETRY_SECONDS  # the other worker or a user wrote first: look again
            raise

    async def _sync_claim(self, key: str) -> float | None:
        pvc = self.claims.get(key)
        if pvc is None or podutil.is_deleting(pvc):
            return None
        bound_to = podutil.spec(pvc).get("volumeName")
        if bound_to:
            pv = self.volumes.get(str(bound_to))
            if pv is None:
                await self._claim_phase(pvc, "Lost")
                if podutil.status(pvc).get("phase") != "Lost":
                    self.recorder.event(
                        pvc,
                        WARNING,
                        "ClaimLost",
                        "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
                    )
                return None
            await self._complete_binding(pvc, pv)
            return None
        match = best_match(self.volumes.objects(), pvc)
        if match is not None:
            await self._bind(pvc, match)
            return None
        class_name = claim_class(pvc)
        if not class_name:
            self.recorder.event(
                pvc,
                NORMAL,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set",
            )
            return None
        storage_class = self.classes.get(class_name)
        if storage_class is None:
            self.recorder.event(
                pvc, WARNING, "ProvisioningFailed", f'storageclass.storage.k8s.io "{class_name}" not found'
            )
            return None
        return await self._provision(pvc, storage_class)

    async def _provision(self, pvc: Obj, storage_class: Obj) -> float | None:
        provisioner = str(storage_class.get("provisioner") or "")
        annotations = podutil.annotations_of(pvc)
        node = annotations.get(SELECTED_NODE)
        if storage_class.get("volumeBindingMode") == "WaitForFirstConsumer" and not node:
            consumer = next(
                (p for p in self.pods_by_claim.get(object_key(pvc)) if podutil.spec(p).get("nodeName")), None
            )
            if consumer is None:
                self.recorder.event(
                    pvc,
                    NORMAL,
                    "WaitForFirstConsumer",
                    "waiting for first consumer to be created before binding",
                )
                return None
            node = str(podutil.spec(consumer)["nodeName"])
        wanted = {STORAGE_PROVISIONER: provisioner, BETA_STORAGE_PROVISIONER: provisioner}
        if node:
            wanted[SELECTED_NODE] = node
        if any(annotations.get(k) != v for k, v in wanted.items()):
            await self.client.patch(
                PVCS,
                podutil.name_of(pvc),
                {"metadata": {"annotations": wanted}},
                namespace=podutil.namespace_of(pvc),
            )
            return None  # the claim's update brings it back
        if provisioner != LOCAL_PROVISIONER or self.root is None:
            self.recorder.event(
                pvc,
                NORMAL,
                "ExternalProvisioning",
                f"Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually "
                "by the system administrator. If volume creation is delayed, please verify that the provisioner is "
                "running and correctly registered.",
            )
            return None
        if self.volumes.get(volume_name(pvc)) is not None:
            return None  # made already; binding follows when the cache shows it
        namespace, name = podutil.namespace_of(pvc), podutil.name_of(pvc)
        self.provisioner_events.event(
            pvc,
            NORMAL,
            "Provisioning",
            f'External provisioner is provisioning volume for claim "{namespace}/{name}"',
        )
        path = local_path(self.root, pvc)
        try:
            await asyncio.to_thread(_make_directory, path)
            await self.client.create(PVS, provisioned_volume(pvc, storage_class, path, node))
        except (OSError, StatusError) as exc:
            if isinstance(exc, StatusError) and exc.code == 409:
                return None
            message = error_text(exc) if isinstance(exc, StatusError) else str(exc)
            self.provisioner_events.event(
                pvc,
                WARNING,
                "ProvisioningFailed",
                f'failed to provision volume with StorageClass "{podutil.name_of(storage_class)}": {message}',
            )
            raise
        self.provisioner_events.event(
            pvc, NORMAL, "ProvisioningSucceeded", f"Successfully provisioned volume {volume_name(pvc)}"
        )
        return None

    async def _bind(self, pvc: Obj, pv: Obj) -> None:
        """``bind``: the volume's claim reference first, then the claim, then both statuses."""
        ref = podutil.spec(pv).get("claimRef") or {}
        if ref.get("uid") != podutil.uid_of(pvc):
            updated = copy.deepcopy(pv)
            updated["spec"]["claimRef"] = claim_ref(pvc)
            meta = updated.setdefault("metadata", {})
            if not ref.get("name"):
                meta["annotations"] = {**podutil.annotations_of(pv), BOUND_BY_CONTROLLER: "yes"}
            pv = await self.client.replace(PVS, updated)
        await self._complete_binding(pvc, pv)

    async def _complete_binding(self, pvc: Obj, pv: Obj) -> None:
        ref = podutil.spec(pv).get("claimRef") or {}
        if ref.get("uid") not in (None, "", podutil.uid_of(pvc)):
            return  # the volume belongs to another claim of that name; the claim stays pending
        namespace = podutil.namespace_of(pvc)
        annotations = podutil.annotations_of(pvc)
        if (
            podutil.spec(pvc).get("volumeName") != podutil.name_of(pv)
            or annotations.get(BIND_COMPLETED) != "yes"
        ):
            updated = copy.deepcopy(pvc)
            updated["spec"]["volumeName"] = podutil.name_of(pv)
            extra = {BIND_COMPLETED: "yes"}
            if not podutil.spec(pvc).get("volumeName"):
                extra[BOUND_BY_CONTROLLER] = "yes"
            updated.setdefault("metadata", {})["annotations"] = {**annotations, **extra}
            pvc = await self.client.replace(PVCS, updated, namespace=namespace)
        if podutil.status(pv).get("phase") != "Bound":
            await self.client.replace_status(PVS, {**pv, "status": {**podutil.status(pv), "phase": "Bound"}})
        status = dict(podutil.status(pvc))
        wanted = {
            **status,
            "phase": "Bound",
            "accessModes": list(podutil.spec(pv).get("accessModes") or []),
            "capacity": dict(podutil.spec(pv).get("capacity") or {}),
        }
        if wanted != status:
            await self.client.replace_status(PVCS, {**pvc, "status": wanted}, namespace=namespace)

    async def _claim_phase(self, pvc: Obj, phase: str) -> None:
        if podutil.status(pvc).get("phase") != phase:
            await self.client.replace_status(
                PVCS,
                {**pvc, "status": {**podutil.status(pvc), "phase": phase}},
                namespace=podutil.namespace_of(pvc),
            )

    # -- volumes --------------------------------------------------------------------------------------

    async def reconcile_volume(self, name: str) -> float | None:
        try:
            return await self._sync_volume(name)
        except StatusError as exc:
            if exc.code == 409:
                return CONFLICT_RETRY_SECONDS
            raise

    async def _sync_volume(self, name: str) -> float | None:
        pv = self.volumes.get(name)
        if pv is None or podutil.is_deleting(pv):
            return None
        ref = podutil.spec(pv).get("claimRef") or {}
        claim = self.claims.get(f"{ref.get('namespace')}/{ref.get('name')}") if ref.get("name") else None
        phase = volume_phase_for(pv, claim)
        if phase != podutil.status(pv).get("phase"):
            pv = await self.client.replace_status(
                PVS, {**pv, "status": {**podutil.status(pv), "phase": phase}}
            )
        if phase == "Released" and podutil.spec(pv).get("persistentVolumeReclaimPolicy") == "Delete":
            await self._reclaim(pv)
        return None

    async def _reclaim(self, pv: Obj) -> None:
        """The Delete policy: a volume this provisioner made goes with its directory; others are left for
        their provisioner (event ``VolumeFailedDelete`` otherwise, as upstream for an unknown plugin)."""
        if podutil.annotations_of(pv).get(PROVISIONED_BY) != LOCAL_PROVISIONER or self.root is None:
            return
        path = Path(str((podutil.spec(pv).get("hostPath") or {}).get("path") or ""))
        if path.parent == self.root and path.name.startswith(podutil.name_of(pv)):
            await asyncio.to_thread(shutil.rmtree, path, True)
        try:
            await self.client.delete(PVS, podutil.name_of(pv))
        except StatusError as exc:
            if exc.code != 404:
                raise


def _make_directory(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)

"""The storage-object-in-use protection controllers (upstream ``pkg/controller/volume/pvcprotection`` and
``pvprotection``, ``--controllers`` names ``pvc-protection`` and ``pv-protection``).

The API server's admission gives every new claim the ``kubernetes.io/pvc-protection`` finalizer and every
new volume ``kubernetes.io/pv-protection``; these controllers add them to objects that lack them (made
before, or with admission off) and remove them from objects being deleted once nothing uses them: a claim
when no scheduled pod that is not shut down mounts it (checked in the cache, then confirmed with a live
list, as upstream does, so a pod the cache has not seen yet still counts), a volume when it is no longer
``Bound``. So deleting a claim a pod uses leaves it ``Terminating`` until the pod is gone.
"""

from __future__ import annotations

from vplane.controllers.informer import object_key
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.informers import Index
from vplane.controllers.kcm.persistentvolume import PVCS, PVS
from vplane.controllers.kcm.resources import PODS
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"


# -- pure decisions ------------------------------------------------------------------------------------------


def has_finalizer(obj: Obj, finalizer: str) -> bool:
    return finalizer in (podutil.meta(obj).get("finalizers") or ())


def pod_is_shut_down(pod: Obj) -> bool:
    """``podIsShutDown``: deleted with a zero grace period (the kubelet is done with it, or it was
    force-deleted); it only waits for its own finalizers, so it holds no claim."""
    meta = podutil.meta(pod)
    return bool(meta.get("deletionTimestamp")) and meta.get("deletionGracePeriodSeconds") == 0


def claim_names(pod: Obj) -> list[str]:
    """The claims the pod's volumes name: ``persistentVolumeClaim.claimName``, and ``<pod>-<volume>`` for
    generic ephemeral volumes."""
    names: list[str] = []
    for volume in podutil.spec(pod).get("volumes") or ():
        if not isinstance(volume, dict):
            continue
        source = volume.get("persistentVolumeClaim")
        if isinstance(source, dict) and source.get("claimName"):
            names.append(str(source["claimName"]))
        elif isinstance(volume.get("ephemeral"), dict):
            names.append(f"{podutil.name_of(pod)}-{volume.get('name')}")
    return names


def pod_uses_claim(pod: Obj, claim: Obj) -> bool:
    """``podUsesPVC``: only scheduled pods count (the kubelet will not start a pod on a claim being
    deleted); a shut-down pod does not; an ephemeral claim counts only for the pod that owns it."""
    if not podutil.spec(pod).get("nodeName") or pod_is_shut_down(pod):
        return False
    name = podutil.name_of(claim)
    for volume in podutil.spec(pod).get("volumes") or ():
        if not isinstance(volume, dict):
            continue
        source = volume.get("persistentVolumeClaim")
        if isinstance(source, dict) and source.get("claimName") == name:
            return True
        if (
            isinstance(volume.get("ephemeral"), dict)
            and f"{podutil.name_of(pod)}-{volume.get('name')}" == name
        ):
            ref = podutil.controller_ref(claim)
            if ref is not None and ref.get("uid") == podutil.uid_of(pod):
                return True
    return False


def finalizer_patch(finalizer: str, *, add: bool) -> Obj:
    """A strategic merge patch adding or dropping one finalizer (``metadata.finalizers`` merges)."""
    if add:
        return {"metadata": {"finalizers": [finalizer]}}
    return {"metadata": {"$deleteFromPrimitiveList/finalizers": [finalizer]}}


def claims_index(pod: Obj) -> list[str]:
    namespace = podutil.namespace_of(pod)
    return [f"{namespace}/{name}" for name in claim_names(pod)]


# -- the controllers -----------------------------------------------------------------------------------------


class PVCProtectionController(ManagedController):
    name = "pvc-protection"

    def __init__(self, ctx: ControllerContext) -> None:
        informers = ctx.informers
        self.claims = informers.informer(PVCS)
        self.pods = informers.informer(PODS)
        self.pods_by_claim: Index = informers.index(PODS, "protected-claims", claims_index)
        super().__init__(ctx, self.claims, [self.pods], ctx.settings.concurrent_pvc_protection_syncs)
        self.pods.add_handlers(
            on_add=self._pod_changed,
            on_update=lambda old, new: self._pod_changed(new),
            on_delete=self._pod_changed,
        )

    def _pod_changed(self, pod: Obj) -> None:
        """A pod's claims that are being deleted may be free now (the pod went, shut down or moved)."""
        for key in claims_index(pod):
            claim = self.claims.get(key)
            if claim is not None and podutil.is_deleting(claim):
                self.enqueue(key)

    async def reconcile(self, key: str) -> float | None:
        claim = self.claims.get(key)
        if claim is None:
            return None
        deleting = podutil.is_deleting(claim)
        protected = has_finalizer(claim, PVC_PROTECTION)
        if not deleting and not protected:
            await self._patch(claim, add=True)
        elif deleting and protected and not await self._in_use(claim, key):
            await self._patch(claim, add=False)
        return None

    async def _in_use(self, claim: Obj, key: str) -> bool:
        """``isBeingUsed``: the cache first; if it sees no user, a live list of the namespace's pods."""
        if any(pod_uses_claim(p, claim) for p in self.pods_by_claim.get(key)):
            return True
        listed = await self.client.list(PODS, namespace=podutil.namespace_of(claim))
        return any(pod_uses_claim(p, claim) for p in listed.items)

    async def _patch(self, claim: Obj, *, add: bool) -> None:
        try:
            await self.client.patch(
                PVCS,
                podutil.name_of(claim),
                finalizer_patch(PVC_PROTECTION, add=add),
                namespace=podutil.namespace_of(claim),
                patch_type="strategic",
            )
        except StatusError as exc:
            if exc.code != 404:
                raise
        self.log.debug("claim protection", claim=object_key(claim), added=add)


class PVProtectionController(ManagedController):
    name = "pv-protection"

    def __init__(self, ctx: ControllerContext) -> None:
        self.volumes = ctx.informers.informer(PVS)
        super().__init__(ctx, self.volumes, [], ctx.settings.concurrent_pv_protection_syncs)

    async def reconcile(self, key: str) -> float | None:
        volume = self.volumes.get(key)
        if volume is None:
            return None
        deleting = podutil.is_deleting(volume)
        protected = has_finalizer(volume, PV_PROTECTION)
        add: bool | None = None
        if not deleting and not protected:
            add = True
        elif deleting and protected and podutil.status(volume).get("phase") != "Bound":
            add = False  # ``isBeingUsed``: a volume is in use while Bound
        if add is None:
            return None
        try:
            await self.client.patch(
                PVS, podutil.name_of(volume), finalizer_patch(PV_PROTECTION, add=add), patch_type="strategic"
            )
        except StatusError as exc:
            if exc.code != 404:
                raise
        return None

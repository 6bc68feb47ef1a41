"""Built-in admission for the kinds declared here (upstream's Priority, DefaultStorageClass and
StorageObjectInUseProtection plug-ins).

They run after validation, before a write is stored, and read other objects from the server's cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vplane.apiserver.admission import AdmissionRequest
from vplane.apiserver.kinds.common import d
from vplane.apiserver.kinds.storage import DEFAULT_CLASS_ANNOTATION
from vplane.kube import errors
from vplane.kube.objects import Obj

if TYPE_CHECKING:
    from vplane.apiserver.objects import ObjectStore
    from vplane.apiserver.registry import Registry


class PriorityAdmission:
    """Pods get ``spec.priority`` from their PriorityClass (or the global default); only one class may be
    the global default."""

    def __init__(self, registry: Registry, objects: ObjectStore) -> None:
        self.registry = registry
        self.objects = objects

    def _classes(self) -> list[Obj]:
        rtype = self.registry.get("scheduling.k8s.io", "v1", "priorityclasses")
        return self.objects.list(rtype) if rtype is not None else []

    async def admit(self, request: AdmissionRequest) -> None:
        rtype = request.rtype
        obj = request.obj
        if obj is None or request.operation not in ("CREATE", "UPDATE"):
            return
        if rtype.group == "scheduling.k8s.io" and rtype.resource == "priorityclasses":
            if obj.get("globalDefault"):
                name = d(obj.get("metadata")).get("name")
                for other in self._classes():
                    other_name = d(other.get("metadata")).get("name")
                    if other.get("globalDefault") and other_name != name:
                        raise errors.forbidden(
                            rtype.resource,
                            rtype.group,
                            str(name),
                            f"PriorityClass {other_name} is already marked as default. Only one default can exist",
                        )
            return
        if rtype.group or rtype.resource != "pods" or request.operation != "CREATE" or request.subresource:
            return
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        class_name = spec.get("priorityClassName")
        chosen: Obj | None = None
        if class_name:
            chosen = next(
                (c for c in self._classes() if d(c.get("metadata")).get("name") == class_name), None
            )
            if chosen is None:
                raise errors.forbidden(
                    "pods", "", request.name, f"no PriorityClass with name {class_name} was found"
                )
        else:
            chosen = next((c for c in self._classes() if c.get("globalDefault")), None)
            if chosen is not None:
                spec["priorityClassName"] = d(chosen.get("metadata")).get("name")
        value = int(chosen.get("value", 0)) if chosen is not None else 0
        given = spec.get("priority")
        if given is not None and given != value:
            raise errors.forbidden(
                "pods",
                "",
                request.name,
                f"the integer value of priority ({given}) must not be provided in pod spec; priority admission "
                f"controller computed {value} from the given PriorityClass name",
            )
        spec["priority"] = value
        if chosen is not None and chosen.get("preemptionPolicy"):
            spec.setdefault("preemptionPolicy", chosen["preemptionPolicy"])
        elif chosen is None:
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


class DefaultStorageClassAdmission:
    """A claim that names no storage class gets the default one (``storageclass.kubernetes.io/is-default-class``)."""

    def __init__(self, registry: Registry, objects: ObjectStore) -> None:
        self.registry = registry
        self.objects = objects

    async def admit(self, request: AdmissionRequest) -> None:
        rtype = request.rtype
        if (
            request.operation != "CREATE"
            or rtype.group
            or rtype.resource != "persistentvolumeclaims"
            or request.obj is None
        ):
            return
        spec = request.obj.get("spec")
        if not isinstance(spec, dict) or spec.get("storageClassName") is not None:
            return
        classes = self.registry.get("storage.k8s.io", "v1", "storageclasses")
        if classes is None:
            return
        defaults = [
            c
            for c in self.objects.list(classes)
            if d(d(c.get("metadata")).get("annotations")).get(DEFAULT_CLASS_ANNOTATION) == "true"
        ]
        if defaults:
            # Upstream picks the newest default when there are several.
            newest = max(
                defaults,
                key=lambda c: (
                    str(d(c.get("metadata")).get("creationTimestamp", "")),
                    str(d(c.get("metadata")).get("name", "")),
                ),
            )
            spec["storageClassName"] = d(newest.get("metadata")).get("name")


PROTECTION_FINALIZERS = {
    "persistentvolumeclaims": "kubernetes.io/pvc-protection",
    "persistentvolumes": "kubernetes.io/pv-protection",
}


class StorageObjectInUseProtectionAdmission:
    """New claims and volumes get their protection finalizer, which the ``pvc-protection`` and
    ``pv-protection`` controllers remove once nothing uses the object."""

    async def admit(self, request: AdmissionRequest) -> None:
        rtype = request.rtype
        finalizer = PROTECTION_FINALIZERS.get(rtype.resource) if not rtype.group else None
        if finalizer is None or request.operation != "CREATE" or request.obj is None:
            return
        meta = request.obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            return
        finalizers = meta.get("finalizers")
        if not isinstance(finalizers, list):
            finalizers = []
        if finalizer not in finalizers:
            meta["finalizers"] = [*finalizers, finalizer]

"""storage.k8s.io/v1: StorageClasses, CSIDrivers, CSINodes, CSIStorageCapacities, VolumeAttachments and
VolumeAttributesClasses."""

from __future__ import annotations

from vplane.apiserver.kinds.common import GenerationStrategy, d, immutable, lst, rt
from vplane.apiserver.registry import ResourceType, Strategy
from vplane.kube import errors, quantity, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

RECLAIM_POLICIES = ["Delete", "Retain"]
BINDING_MODES = ["Immediate", "WaitForFirstConsumer"]
LIFECYCLE_MODES = ["Ephemeral", "Persistent"]
FS_GROUP_POLICIES = ["File", "None", "ReadWriteOnceWithFSType"]
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def csi_driver_name(name: str) -> list[str]:
    """Upstream ``ValidateCSIDriverName``: a DNS-1123 subdomain of at most 63 characters."""
    if len(name) > 63:
        return ["must be no more than 63 characters"]
    return validation.dns1123_subdomain(name.lower())


def _provisioner(value: object, path: str) -> list[Cause]:
    if not value:
        return [errors.field_required(path)]
    if not isinstance(value, str):
        return [errors.field_invalid(path, value, "must be a string")]
    if len(value) > 255:
        return [errors.field_too_long(path, 255)]
    return [errors.field_invalid(path, value, m) for m in validation.qualified_name(value.lower())]


class StorageClassStrategy(Strategy):
    def default(self, obj: Obj) -> None:
        obj.setdefault("reclaimPolicy", "Delete")
        obj.setdefault("volumeBindingMode", "Immediate")

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes = _provisioner(obj.get("provisioner"), "provisioner")
        for key, value in d(obj.get("parameters")).items():
            if not key:
                causes.append(errors.field_invalid("parameters", key, "parameter keys must be non-empty"))
            if not isinstance(value, str):
                causes.append(errors.field_invalid(f"parameters[{key}]", value, "must be a string"))
        policy = obj.get("reclaimPolicy")
        if policy not in RECLAIM_POLICIES:
            causes.append(errors.field_not_supported("reclaimPolicy", policy, RECLAIM_POLICIES))
        mode = obj.get("volumeBindingMode")
        if mode not in BINDING_MODES:
            causes.append(errors.field_not_supported("volumeBindingMode", mode, BINDING_MODES))
        if old is not None:
            for field in ("parameters", "provisioner"):
                if obj.get(field) != old.get(field):
                    causes.append(errors.field_forbidden(field, f"updates to {field} are forbidden."))
            if obj.get("reclaimPolicy") != old.get("reclaimPolicy"):
                causes.append(
                    errors.field_forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden.")
                )
            if obj.get("volumeBindingMode") != old.get("volumeBindingMode"):
                causes.append(
                    errors.field_forbidden("volumeBindingMode", "updates to volumeBindingMode are forbidden.")
                )
        return causes


class CSIDriverStrategy(GenerationStrategy):
    name_validator = staticmethod(csi_driver_name)

    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec.setdefault("attachRequired", True)
        spec.setdefault("podInfoOnMount", False)
        spec.setdefault("storageCapacity", False)
        spec.setdefault("fsGroupPolicy", "ReadWriteOnceWithFSType")
        spec.setdefault("requiresRepublish", False)
        spec.setdefault("seLinuxMount", False)
        if not spec.get("volumeLifecycleModes"):
            spec["volumeLifecycleModes"] = ["Persistent"]

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = d(obj.get("spec"))
        causes: list[Cause] = []
        for i, mode in enumerate(lst(spec.get("volumeLifecycleModes"))):
            if mode not in LIFECYCLE_MODES:
                causes.append(
                    errors.field_not_supported(f"spec.volumeLifecycleModes[{i}]", mode, LIFECYCLE_MODES)
                )
        policy = spec.get("fsGroupPolicy")
        if policy is not None and policy not in FS_GROUP_POLICIES:
            causes.append(errors.field_not_supported("spec.fsGroupPolicy", policy, FS_GROUP_POLICIES))
        return causes + immutable(obj, old, "spec.attachRequired", "spec.volumeLifecycleModes")


class CSINodeStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict) or spec.get("drivers") is None:
            return [errors.field_required("spec.drivers")]
        causes: list[Cause] = []
        seen: set[str] = set()
        for i, driver in enumerate(lst(spec.get("drivers"))):
            driver = d(driver)
            name = driver.get("name")
            if not name:
                causes.append(errors.field_required(f"spec.drivers[{i}].name"))
            elif name in seen:
                causes.append(errors.field_duplicate(f"spec.drivers[{i}].name", name))
            else:
                seen.add(str(name))
                causes += [
                    errors.field_invalid(f"spec.drivers[{i}].name", name, m)
                    for m in csi_driver_name(str(name))
                ]
            if not driver.get("nodeID"):
                causes.append(errors.field_required(f"spec.drivers[{i}].nodeID"))
        return causes


class CSIStorageCapacityStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes: list[Cause] = []
        name = obj.get("storageClassName")
        if not name:
            causes.append(errors.field_required("storageClassName"))
        else:
            causes += [
                errors.field_invalid("storageClassName", name, m)
                for m in validation.dns1123_subdomain(str(name))
            ]
        causes += validation.validate_label_selector(obj.get("nodeTopology"), "nodeTopology")
        for field in ("capacity", "maximumVolumeSize"):
            value = obj.get(field)
            if value is not None:
                parsed = quantity.parse(value)
                if parsed is None:
                    causes.append(errors.field_invalid(field, value, quantity.QUANTITY_MESSAGE))
                elif parsed < 0:
                    causes.append(
                        errors.field_invalid(field, str(value), "must be greater than or equal to 0")
                    )
        return causes


class VolumeAttachmentStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [errors.field_required("spec.attacher"), errors.field_required("spec.nodeName")]
        causes = _provisioner(spec.get("attacher"), "spec.attacher")
        if not spec.get("nodeName"):
            causes.append(errors.field_required("spec.nodeName"))
        source = d(spec.get("source"))
        present = [k for k in ("persistentVolumeName", "inlineVolumeSpec") if source.get(k) is not None]
        if len(present) != 1:
            causes.append(
                errors.field_required(
                    "spec.source", "must specify exactly one of inlineVolumeSpec and persistentVolumeName"
                )
            )
        if old is not None and spec != d(old.get("spec")):
            causes.append(errors.field_invalid("spec", "", "field is immutable"))
        return causes


class VolumeAttributesClassStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes: list[Cause] = []
        driver = obj.get("driverName")
        if not driver:
            causes.append(errors.field_required("driverName"))
        else:
            causes += [errors.field_invalid("driverName", driver, m) for m in csi_driver_name(str(driver))]
        if old is not None:
            if obj.get("parameters") != old.get("parameters"):
                causes.append(errors.field_forbidden("parameters", "updates to parameters are forbidden."))
            if obj.get("driverName") != old.get("driverName"):
                causes.append(errors.field_forbidden("driverName", "updates to driverName are forbidden."))
        return causes


def types() -> list[ResourceType]:
    g = "storage.k8s.io"
    return [
        rt(g, "v1", "csidrivers", "CSIDriver", False, strategy=CSIDriverStrategy()),
        rt(g, "v1", "csinodes", "CSINode", False, strategy=CSINodeStrategy()),
        rt(
            g, "v1", "csistoragecapacities", "CSIStorageCapacity", True, strategy=CSIStorageCapacityStrategy()
        ),
        rt(
            g,
            "v1",
            "storageclasses",
            "StorageClass",
            False,
            short_names=("sc",),
            strategy=StorageClassStrategy(),
        ),
        rt(
            g,
            "v1",
            "volumeattachments",
            "VolumeAttachment",
            False,
            strategy=VolumeAttachmentStrategy(),
            status=True,
        ),
        rt(
            g,
            "v1",
            "volumeattributesclasses",
            "VolumeAttributesClass",
            False,
            short_names=("vac",),
            strategy=VolumeAttributesClassStrategy(),
        ),
    ]


LOCAL_PROVISIONER = "vplane.io/local-path"


def default_storage_class() -> Obj:
    """The ``standard`` class a fresh server has (kind's and k3s's local-path classes have these settings)."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "standard", "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
        "provisioner": LOCAL_PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }

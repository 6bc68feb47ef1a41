"""resource.k8s.io/v1 (dynamic resource allocation): DeviceClasses, ResourceClaims,
ResourceClaimTemplates and ResourceSlices, stored and validated for the fields users write."""

from __future__ import annotations

from vplane.apiserver.kinds.common import GenerationStrategy, d, immutable, lst, rt
from vplane.apiserver.registry import ResourceType, Strategy
from vplane.kube import errors, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
ALLOCATION_MODES = ["All", "ExactCount"]


def _requests(devices: Obj, path: str) -> list[Cause]:
    causes: list[Cause] = []
    names: set[str] = set()
    for i, request in enumerate(lst(devices.get("requests"))):
        request = d(request)
        rpath = f"{path}.requests[{i}]"
        name = request.get("name")
        if not name:
            causes.append(errors.field_required(f"{rpath}.name"))
        elif isinstance(name, str):
            causes += [errors.field_invalid(f"{rpath}.name", name, m) for m in validation.dns1123_label(name)]
            if name in names:
                causes.append(errors.field_duplicate(f"{rpath}.name", name))
            names.add(name)
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        if (exactly is None) == (first is None):
            causes.append(
                errors.field_required(rpath, "exactly one of `exactly` or `firstAvailable` is required")
            )
        if isinstance(exactly, dict):
            if not exactly.get("deviceClassName"):
                causes.append(errors.field_required(f"{rpath}.exactly.deviceClassName"))
            mode = exactly.get("allocationMode")
            if mode is not None and mode not in ALLOCATION_MODES:
                causes.append(
                    errors.field_not_supported(f"{rpath}.exactly.allocationMode", mode, ALLOCATION_MODES)
                )
    return causes


class DeviceClassStrategy(GenerationStrategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes: list[Cause] = []
        for i, selector in enumerate(lst(d(obj.get("spec")).get("selectors"))):
            if not d(d(selector).get("cel")).get("expression"):
                causes.append(errors.field_required(f"spec.selectors[{i}].cel.expression"))
        return causes


class ResourceClaimStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes = _requests(d(d(obj.get("spec")).get("devices")), "spec.devices")
        if old is not None and obj.get("spec") != old.get("spec"):
            causes.append(errors.field_invalid("spec", "", "field is immutable"))
        return causes


class ResourceClaimTemplateStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes = _requests(d(d(d(obj.get("spec")).get("spec")).get("devices")), "spec.spec.devices")
        if old is not None and obj.get("spec") != old.get("spec"):
            causes.append(errors.field_invalid("spec", "", "field is immutable"))
        return causes


class ResourceSliceStrategy(GenerationStrategy):
    supported_field_labels = frozenset({"spec.nodeName", "spec.driver"})

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = d(obj.get("spec"))
        causes: list[Cause] = []
        if not spec.get("driver"):
            causes.append(errors.field_required("spec.driver"))
        pool = d(spec.get("pool"))
        if not pool.get("name"):
            causes.append(errors.field_required("spec.pool.name"))
        count = pool.get("resourceSliceCount")
        if not isinstance(count, int) or count <= 0:
            causes.append(
                errors.field_invalid("spec.pool.resourceSliceCount", count, "must be greater than zero")
            )
        chosen = [k for k in NODE_SELECTION if spec.get(k) not in (None, False, "")]
        if len(chosen) != 1:
            causes.append(
                errors.field_invalid(
                    "spec",
                    "",
                    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
                )
            )
        names: set[str] = set()
        for i, device in enumerate(lst(spec.get("devices"))):
            name = d(device).get("name")
            if not name:
                causes.append(errors.field_required(f"spec.devices[{i}].name"))
            elif name in names:
                causes.append(errors.field_duplicate(f"spec.devices[{i}].name", name))
            names.add(str(name))
        return causes + immutable(obj, old, "spec.driver", "spec.nodeName")

    def field_labels(self, obj: Obj) -> dict[str, str]:
        spec = d(obj.get("spec"))
        return {"spec.nodeName": str(spec.get("nodeName", "")), "spec.driver": str(spec.get("driver", ""))}

    def field_label_error(self, label: str) -> str:
        return f"field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: {label}"


def types() -> list[ResourceType]:
    g = "resource.k8s.io"
    return [
        rt(g, "v1", "deviceclasses", "DeviceClass", False, strategy=DeviceClassStrategy()),
        rt(g, "v1", "resourceclaims", "ResourceClaim", True, strategy=ResourceClaimStrategy(), status=True),
        rt(
            g,
            "v1",
            "resourceclaimtemplates",
            "ResourceClaimTemplate",
            True,
            strategy=ResourceClaimTemplateStrategy(),
        ),
        rt(g, "v1", "resourceslices", "ResourceSlice", False, strategy=ResourceSliceStrategy()),
    ]

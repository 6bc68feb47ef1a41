"""discovery.k8s.io/v1 EndpointSlices."""

from __future__ import annotations

import ipaddress

from vplane.apiserver.kinds.common import GenerationStrategy, d, immutable, lst, rt
from vplane.apiserver.registry import ResourceType
from vplane.kube import errors, podspec, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

ADDRESS_TYPES = ["FQDN", "IPv4", "IPv6"]
MAX_ENDPOINTS = 1000
MAX_PORTS = 20000


class EndpointSliceStrategy(GenerationStrategy):
    """Content changes bump ``metadata.generation`` (the EndpointSlice controller tracks what it wrote by it)."""

    def default(self, obj: Obj) -> None:
        for port in lst(obj.get("ports")):
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                port.setdefault("name", "")

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes: list[Cause] = []
        address_type = obj.get("addressType")
        if not address_type:
            causes.append(errors.field_required("addressType"))
        elif address_type not in ADDRESS_TYPES:
            causes.append(errors.field_not_supported("addressType", address_type, ADDRESS_TYPES))
        endpoints = lst(obj.get("endpoints"))
        if len(endpoints) > MAX_ENDPOINTS:
            causes.append(errors.field_too_many("endpoints", len(endpoints), MAX_ENDPOINTS))
        for i, endpoint in enumerate(endpoints):
            addresses = lst(d(endpoint).get("addresses"))
            if not addresses:
                causes.append(
                    errors.field_required(f"endpoints[{i}].addresses", "must contain at least 1 address")
                )
            for j, address in enumerate(addresses):
                path = f"endpoints[{i}].addresses[{j}]"
                if address_type in ("IPv4", "IPv6"):
                    try:
                        parsed = ipaddress.ip_address(str(address))
                    except ValueError:
                        causes.append(errors.field_invalid(path, address, "must be a valid IP address"))
                        continue
                    if parsed.version != (4 if address_type == "IPv4" else 6):
                        causes.append(
                            errors.field_invalid(path, address, f"must be an {address_type} address")
                        )
                elif address_type == "FQDN":
                    causes += [
                        errors.field_invalid(path, address, m)
                        for m in validation.dns1123_subdomain(str(address))
                    ]
        names: set[str] = set()
        for i, port in enumerate(lst(obj.get("ports"))):
            port = d(port)
            name = str(port.get("name") or "")
            if name in names:
                causes.append(errors.field_duplicate(f"ports[{i}].name", name))
            names.add(name)
            if name:
                causes += [
                    errors.field_invalid(f"ports[{i}].name", name, m) for m in validation.dns1123_label(name)
                ]
            protocol = port.get("protocol")
            if protocol not in podspec.PROTOCOLS:
                causes.append(errors.field_not_supported(f"ports[{i}].protocol", protocol, podspec.PROTOCOLS))
        return causes + immutable(obj, old, "addressType")


def types() -> list[ResourceType]:
    return [
        rt(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            True,
            strategy=EndpointSliceStrategy(),
        )
    ]

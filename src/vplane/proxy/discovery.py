"""The synthetic discovery document the proxy serves while the target cannot answer (spec §5).

With it the APIService stays ``Available``, so ``kubectl api-resources`` and namespace deletion in the
client keep working during an outage. Explicit keys list their resources, namespaced, with the single
verb ``get``; a wildcard key contributes nothing (the proxy cannot enumerate the target's resources).

Decision recorded (docs/resource-proxy.md): upstream does not document how the singular name and kind are
derived; we strip one trailing ``s`` for the singular (``ies`` becomes ``y``) and title-case it for the
kind. Only the fallback uses them; live discovery is the target's own.
"""

from __future__ import annotations

from typing import Any

import orjson

from vplane.kube.proxyconfig import ProxyTarget


def singular(plural: str) -> str:
    if plural.endswith("ies") and len(plural) > 3:
        return plural[:-3] + "y"
    if plural.endswith("s") and len(plural) > 1:
        return plural[:-1]
    return plural


def kind_of(plural: str) -> str:
    name = singular(plural)
    return name[:1].upper() + name[1:]


def fallback_document(target: ProxyTarget) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": target.group_version,
        "resources": [
            {
                "name": resource,
                "singularName": singular(resource),
                "namespaced": True,
                "kind": kind_of(resource),
                "verbs": ["get"],
            }
            for resource in target.resources
        ],
    }


def fallback_body(target: ProxyTarget) -> bytes:
    return orjson.dumps(fallback_document(target))


def is_discovery(path: str, target: ProxyTarget) -> bool:
    """Requests answered from discovery: the group/version document (``/apis/<g>/<v>``) and the group
    document (``/apis/<g>``). OpenAPI is fetched by the aggregator's availability check and is not
    counted: it has no fallback of its own (the client keeps the last document it merged)."""
    stripped = path.rstrip("/")
    return stripped in (f"/apis/{target.group}/{target.version}", f"/apis/{target.group}")

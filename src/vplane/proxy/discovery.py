"""The synthetic discovery document the proxy serves while the target cannot answer (spec §5).

With it the APIService stays ``Available``, so ``kubectl api-resources`` and namespace deletion in the
client keep working during an outage. Explicit keys list their resources, namespaced, with the single
verb ``get``; a wildcard key contributes nothing (the proxy cannot enumerate the target's resources).

Decision recorded (docs/resource-proxy.md): upstream does not document how the singular name and kind are
derived. The proxy remembers them from the target's last live discovery document; a resource it has never
seen there gets one trailing ``s`` stripped for the singular (``ies`` becomes ``y``), title-cased for the
kind. The real kind matters: kubectl maps a manifest's kind through discovery, so a guessed ``Myresource``
for ``MyResource`` makes ``kubectl apply`` answer "no matches for kind" instead of the proxy's 503 during
an outage, and until the client's next availability check after it.
"""

from __future__ import annotations

from collections.abc import Mapping
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


Names = Mapping[str, tuple[str, str]]
"""Resource (plural) -> (singular, kind), as the target's live discovery named them."""


def fallback_document(target: ProxyTarget, known: Names | None = None) -> dict[str, Any]:
    known = known or {}
    resources = []
    for resource in target.resources:
        singular_name, kind = known.get(resource) or (singular(resource), kind_of(resource))
        resources.append(
            {
                "name": resource,
                "singularName": singular_name,
                "namespaced": True,
                "kind": kind,
                "verbs": ["get"],
            }
        )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": target.group_version,
        "resources": resources,
    }


def fallback_body(target: ProxyTarget, known: Names | None = None) -> bytes:
    return orjson.dumps(fallback_document(target, known))


def names_of(body: bytes) -> dict[str, tuple[str, str]]:
    """(singular, kind) per resource of a live ``APIResourceList`` (subresources and junk skipped)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    resources = doc.get("resources") if isinstance(doc, dict) else None
    names: dict[str, tuple[str, str]] = {}
    for item in resources if isinstance(resources, list) else []:
        if not isinstance(item, dict):
            continue
        name, kind = item.get("name"), item.get("kind")
        if isinstance(name, str) and "/" not in name and isinstance(kind, str) and kind:
            single = item.get("singularName")
            names[name] = (single if isinstance(single, str) and single else singular(name), kind)
    return names


def is_discovery(path: str, target: ProxyTarget) -> bool:
    """Requests answered from discovery: the group/version document (``/apis/<g>/<v>``) and the group
    document (``/apis/<g>``). OpenAPI is fetched by the aggregator's availability check and is not
    counted: it has no fallback of its own (the client keeps the last document it merged)."""
    stripped = path.rstrip("/")
    return stripped in (f"/apis/{target.group}/{target.version}", f"/apis/{target.group}")

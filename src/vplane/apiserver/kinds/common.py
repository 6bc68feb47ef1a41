"""What the built-in kinds' declarations share: the ResourceType builder and common strategy pieces."""

from __future__ import annotations

from typing import Any

from vplane.apiserver.registry import STATUS_VERBS, ResourceType, Strategy, Subresource
from vplane.kube import errors, labels, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

DEFINITION_PREFIXES = {
    "": "io.k8s.api.core",
    "apps": "io.k8s.api.apps",
    "batch": "io.k8s.api.batch",
    "autoscaling": "io.k8s.api.autoscaling",
    "policy": "io.k8s.api.policy",
    "coordination.k8s.io": "io.k8s.api.coordination",
    "rbac.authorization.k8s.io": "io.k8s.api.rbac",
    "authorization.k8s.io": "io.k8s.api.authorization",
    "authentication.k8s.io": "io.k8s.api.authentication",
    "admissionregistration.k8s.io": "io.k8s.api.admissionregistration",
    "events.k8s.io": "io.k8s.api.events",
    "networking.k8s.io": "io.k8s.api.networking",
    "storage.k8s.io": "io.k8s.api.storage",
    "scheduling.k8s.io": "io.k8s.api.scheduling",
    "node.k8s.io": "io.k8s.api.node",
    "discovery.k8s.io": "io.k8s.api.discovery",
    "certificates.k8s.io": "io.k8s.api.certificates",
    "resource.k8s.io": "io.k8s.api.resource",
    "flowcontrol.apiserver.k8s.io": "io.k8s.api.flowcontrol",
    "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
    "apiregistration.k8s.io": "io.k8s.kube-aggregator.pkg.apis.apiregistration",
}

CREATE_ONLY = ("create",)
SCALE = Subresource("scale", "Scale", STATUS_VERBS, "autoscaling", "v1")


def definition(group: str, version: str, kind: str) -> str:
    return f"{DEFINITION_PREFIXES[group]}.{version}.{kind}"


def rt(group: str, version: str, resource: str, kind: str, namespaced: bool, **kw: Any) -> ResourceType:
    """A built-in ResourceType; ``status=True`` adds the status subresource (listed first, as upstream)."""
    status = kw.pop("status", False)
    subresources: dict[str, Subresource] = kw.pop("subresources", {})
    if status:
        subresources = {**subresources, "status": Subresource("status", kind, STATUS_VERBS)}
    subresources = dict(sorted(subresources.items()))
    return ResourceType(
        group,
        version,
        resource,
        kind,
        namespaced,
        subresources=subresources,
        schema_definition=definition(group, version, kind),
        **kw,
    )


def d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def lst(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


class GenerationStrategy(Strategy):
    uses_generation = True


def immutable(obj: Obj, old: Obj | None, *paths: str) -> list[Cause]:
    """``field is immutable`` for each dotted path whose value changed on update."""
    if old is None:
        return []
    causes: list[Cause] = []
    for path in paths:
        new_value, old_value = lookup(obj, path), lookup(old, path)
        if new_value != old_value:
            causes.append(errors.field_invalid(path, new_value, "field is immutable"))
    return causes


def lookup(obj: Any, path: str) -> Any:
    value = obj
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def required_string(obj: Obj, path: str) -> list[Cause]:
    value = lookup(obj, path)
    if value is None or value == "":
        return [errors.field_required(path)]
    return []


def validate_enum(obj: Obj, path: str, allowed: list[str], *, required: bool = False) -> list[Cause]:
    value = lookup(obj, path)
    if value is None or value == "":
        return [errors.field_required(path)] if required else []
    if value not in allowed:
        return [errors.field_not_supported(path, value, allowed)]
    return []


def non_negative(obj: Obj, path: str) -> list[Cause]:
    value = lookup(obj, path)
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return [errors.field_invalid(path, value, "must be greater than or equal to 0")]
    return []


def selector_matches_template(spec: Obj, path: str = "spec", what: str = "deployment") -> list[Cause]:
    """A workload's ``selector`` is required, valid, non-empty and matches its template's labels."""
    selector = spec.get("selector")
    if not isinstance(selector, dict):
        return [errors.field_required(f"{path}.selector")]
    causes = validation.validate_label_selector(selector, f"{path}.selector")
    if causes:
        return causes
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        return [errors.field_invalid(f"{path}.selector", selector, f"empty selector is invalid for {what}")]
    template_labels = d(d(d(spec.get("template")).get("metadata")).get("labels"))
    try:
        matches = labels.from_label_selector(selector).matches(template_labels)
    except errors.StatusError as exc:
        return [errors.field_invalid(f"{path}.selector", selector, exc.message)]
    if not matches:
        return [
            errors.field_invalid(
                f"{path}.template.metadata.labels",
                template_labels,
                "`selector` does not match template `labels`",
            )
        ]
    return []


def dns_name_causes(value: Any, path: str, check: Any = validation.dns1123_subdomain) -> list[Cause]:
    if not isinstance(value, str) or not value:
        return []
    return [errors.field_invalid(path, value, m) for m in check(value)]

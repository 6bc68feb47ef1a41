"""policy/v1: PodDisruptionBudgets (the eviction subresource that honours them is in ``subresources``)."""

from __future__ import annotations

from typing import Any

from vplane.apiserver.kinds.common import GenerationStrategy, d, rt
from vplane.apiserver.registry import ResourceType
from vplane.kube import errors, quantity, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

UNHEALTHY_POLICIES = ["AlwaysAllow", "IfHealthyBudget"]


def _int_or_percent(value: Any, path: str) -> list[Cause]:
    if value is None:
        return []
    parsed = quantity.int_or_percent(value)
    if parsed is None:
        return [
            errors.field_invalid(
                path,
                value,
                "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or "
                "'93%', regex used for validation is '[0-9]+%')",
            )
        ]
    amount, percent = parsed
    if amount < 0:
        return [errors.field_invalid(path, value, "must be greater than or equal to 0")]
    if percent and amount > 100:
        return [errors.field_invalid(path, value, "must not be greater than 100%")]
    return []


class PodDisruptionBudgetStrategy(GenerationStrategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = d(obj.get("spec"))
        causes: list[Cause] = []
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            causes.append(
                errors.field_invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set")
            )
        causes += _int_or_percent(spec.get("minAvailable"), "spec.minAvailable")
        causes += _int_or_percent(spec.get("maxUnavailable"), "spec.maxUnavailable")
        causes += validation.validate_label_selector(spec.get("selector"), "spec.selector")
        policy = spec.get("unhealthyPodEvictionPolicy")
        if policy is not None and policy not in UNHEALTHY_POLICIES:
            causes.append(
                errors.field_not_supported("spec.unhealthyPodEvictionPolicy", policy, UNHEALTHY_POLICIES)
            )
        return causes


def types() -> list[ResourceType]:
    return [
        rt(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            True,
            short_names=("pdb",),
            strategy=PodDisruptionBudgetStrategy(),
            status=True,
        )
    ]

"""scheduling.k8s.io/v1 PriorityClasses (with the two system classes present from the start) and
node.k8s.io/v1 RuntimeClasses."""

from __future__ import annotations

from vplane.apiserver.kinds.common import d, immutable, lst, rt
from vplane.apiserver.registry import ResourceType, Strategy
from vplane.kube import errors, podspec, quantity, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

HIGHEST_USER_PRIORITY = 1_000_000_000
SYSTEM_PREFIX = "system-"
PREEMPTION_POLICIES = ["Never", "PreemptLowerPriority"]
SYSTEM_CLASSES: tuple[tuple[str, int, str], ...] = (
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
)
"""Upstream's system priority classes (``pkg/apis/scheduling`` ``SystemPriorityClasses``)."""


def system_priority_classes() -> list[Obj]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "description": description,
            "preemptionPolicy": "PreemptLowerPriority",
        }
        for name, value, description in SYSTEM_CLASSES
    ]


class PriorityClassStrategy(Strategy):
    def default(self, obj: Obj) -> None:
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes: list[Cause] = []
        name = str(d(obj.get("metadata")).get("name", ""))
        value = obj.get("value", 0)
        system = {n: v for n, v, _ in SYSTEM_CLASSES}
        if name.startswith(SYSTEM_PREFIX):
            problem = ""
            if name not in system:
                problem = f"{name} is not a known system priority class"
            elif value != system[name]:
                problem = f"value of {name} PriorityClass must be {system[name]}"
            elif obj.get("globalDefault"):
                problem = f"globalDefault of {name} PriorityClass must be false"
            if problem:
                causes.append(
                    errors.field_forbidden(
                        "metadata.name",
                        f"priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. "
                        f"error: {problem}",
                    )
                )
        elif isinstance(value, int) and value > HIGHEST_USER_PRIORITY:
            causes.append(
                errors.field_forbidden(
                    "value", f"maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"
                )
            )
        policy = obj.get("preemptionPolicy")
        if policy not in PREEMPTION_POLICIES:
            causes.append(errors.field_not_supported("preemptionPolicy", policy, PREEMPTION_POLICIES))
        if old is not None:
            if obj.get("value") != old.get("value"):
                causes.append(errors.field_forbidden("Value", "may not be changed in an update."))
            if obj.get("preemptionPolicy") != old.get("preemptionPolicy"):
                causes.append(errors.field_invalid("preemptionPolicy", policy, "field is immutable"))
        return causes


class RuntimeClassStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        handler = obj.get("handler")
        causes: list[Cause] = []
        if not handler:
            causes.append(errors.field_required("handler"))
        elif isinstance(handler, str):
            causes += [errors.field_invalid("handler", handler, m) for m in validation.dns1123_label(handler)]
        overhead = d(d(obj.get("overhead")).get("podFixed"))
        for name, amount in overhead.items():
            if quantity.parse(amount) is None:
                causes.append(
                    errors.field_invalid(f"overhead.podFixed[{name}]", amount, quantity.QUANTITY_MESSAGE)
                )
        scheduling = d(obj.get("scheduling"))
        causes += validation.validate_labels(scheduling.get("nodeSelector"), "scheduling.nodeSelector")
        for i, toleration in enumerate(lst(scheduling.get("tolerations"))):
            effect = d(toleration).get("effect")
            if effect and effect not in podspec.TAINT_EFFECTS:
                causes.append(
                    errors.field_not_supported(
                        f"scheduling.tolerations[{i}].effect", effect, podspec.TAINT_EFFECTS
                    )
                )
        return causes + immutable(obj, old, "handler")


def types() -> list[ResourceType]:
    return [
        rt(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            "PriorityClass",
            False,
            short_names=("pc",),
            strategy=PriorityClassStrategy(),
        ),
        rt("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False, strategy=RuntimeClassStrategy()),
    ]

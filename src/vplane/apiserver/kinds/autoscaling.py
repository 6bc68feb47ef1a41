"""autoscaling/v1 and v2: HorizontalPodAutoscalers, stored as v2 and served in both versions.

v1 knows only a CPU utilization target. As upstream does, what v1 cannot say (other metrics, current
metrics, conditions, behavior) rides in ``autoscaling.alpha.kubernetes.io/*`` annotations of the v1
view, so an object read and written back through v1 loses nothing. The annotations hold v2-shaped JSON
(upstream writes v2beta1-shaped metrics there; only a v1 client that parses them could tell).
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

from vplane.apiserver.kinds.common import GenerationStrategy, d, lst, rt
from vplane.apiserver.registry import ResourceType
from vplane.kube import errors, quantity
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

V1 = "autoscaling/v1"
V2 = "autoscaling/v2"
METRICS_ANNOTATION = "autoscaling.alpha.kubernetes.io/metrics"
CURRENT_METRICS_ANNOTATION = "autoscaling.alpha.kubernetes.io/current-metrics"
CONDITIONS_ANNOTATION = "autoscaling.alpha.kubernetes.io/conditions"
BEHAVIOR_ANNOTATION = "autoscaling.alpha.kubernetes.io/behavior"
DEFAULT_CPU_UTILIZATION = 80
METRIC_TYPES = ["ContainerResource", "External", "Object", "Pods", "Resource"]
TARGET_TYPES = ["AverageValue", "Utilization", "Value"]
SELECT_POLICIES = ["Disabled", "Max", "Min"]
POLICY_TYPES = ["Percent", "Pods"]
MAX_STABILIZATION_WINDOW_SECONDS = 3600
MAX_PERIOD_SECONDS = 1800


def _cpu_metric(target: int) -> Obj:
    return {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}},
    }


def _is_cpu_utilization(metric: Any) -> bool:
    resource = d(d(metric).get("resource"))
    return (
        d(metric).get("type") == "Resource"
        and resource.get("name") == "cpu"
        and d(resource.get("target")).get("type") == "Utilization"
    )


class HPAConverter:
    """autoscaling/v1 <-> autoscaling/v2 (the storage version)."""

    def to_storage(self, obj: Obj) -> Obj:
        if obj.get("apiVersion") != V1:
            return obj
        out = copy.deepcopy(obj)
        out["apiVersion"] = V2
        meta = d(out.get("metadata"))
        annotations = d(meta.get("annotations"))
        spec = d(out.get("spec"))
        metrics: list[Any] = []
        target = spec.pop("targetCPUUtilizationPercentage", None)
        if isinstance(target, int):
            metrics.append(_cpu_metric(target))
        metrics += _pop_json(annotations, METRICS_ANNOTATION) or []
        if metrics:
            spec["metrics"] = metrics
        behavior = _pop_json(annotations, BEHAVIOR_ANNOTATION)
        if behavior is not None:
            default_behavior(behavior)  # upstream defaults it when the v2 form is read back
            spec["behavior"] = behavior
        status = out.get("status")
        current = _pop_json(annotations, CURRENT_METRICS_ANNOTATION) or []
        conditions = _pop_json(annotations, CONDITIONS_ANNOTATION)
        if isinstance(status, dict):
            cpu = status.pop("currentCPUUtilizationPercentage", None)
            if isinstance(cpu, int):
                current = [
                    {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": cpu}}},
                    *current,
                ]
            if current:
                status["currentMetrics"] = current
            if conditions:
                status["conditions"] = conditions
        if not annotations and "annotations" in meta:
            del meta["annotations"]
        return out

    def from_storage(self, obj: Obj) -> Obj:
        if obj.get("apiVersion") != V2:
            return obj
        out = copy.deepcopy(obj)
        out["apiVersion"] = V1
        meta = out.setdefault("metadata", {})
        annotations: dict[str, Any] = dict(d(meta.get("annotations")))
        spec = d(out.get("spec"))
        metrics = lst(spec.pop("metrics", None))
        cpu = next((m for m in metrics if _is_cpu_utilization(m)), None)
        if cpu is not None:
            spec["targetCPUUtilizationPercentage"] = d(d(cpu["resource"]).get("target")).get(
                "averageUtilization"
            )
        others = [m for m in metrics if m is not cpu]
        if others:
            annotations[METRICS_ANNOTATION] = orjson.dumps(others).decode()
        behavior = spec.pop("behavior", None)
        if behavior is not None:
            annotations[BEHAVIOR_ANNOTATION] = orjson.dumps(behavior).decode()
        status = out.get("status")
        if isinstance(status, dict):
            current = lst(status.pop("currentMetrics", None))
            cpu_now = next(
                (
                    m
                    for m in current
                    if d(m).get("type") == "Resource" and d(d(m).get("resource")).get("name") == "cpu"
                ),
                None,
            )
            if cpu_now is not None:
                value = d(d(d(cpu_now).get("resource")).get("current")).get("averageUtilization")
                if value is not None:
                    status["currentCPUUtilizationPercentage"] = value
            rest = [m for m in current if m is not cpu_now]
            if rest:
                annotations[CURRENT_METRICS_ANNOTATION] = orjson.dumps(rest).decode()
            conditions = status.pop("conditions", None)
            if conditions:
                annotations[CONDITIONS_ANNOTATION] = orjson.dumps(conditions).decode()
            status.setdefault("currentReplicas", 0)
            status.setdefault("desiredReplicas", 0)
        if annotations:
            meta["annotations"] = annotations
        return out


def _pop_json(annotations: dict[str, Any], key: str) -> Any:
    raw = annotations.pop(key, None)
    if not isinstance(raw, str):
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _scale_target(spec: Obj) -> list[Cause]:
    ref = d(spec.get("scaleTargetRef"))
    causes: list[Cause] = []
    if not ref.get("kind"):
        causes.append(errors.field_required("spec.scaleTargetRef.kind"))
    elif "/" in str(ref["kind"]) or "%" in str(ref["kind"]):
        causes.append(errors.field_invalid("spec.scaleTargetRef.kind", ref["kind"], "may not contain '/'"))
    if not ref.get("name"):
        causes.append(errors.field_required("spec.scaleTargetRef.name"))
    return causes


def _replicas(spec: Obj) -> list[Cause]:
    causes: list[Cause] = []
    low, high = spec.get("minReplicas"), spec.get("maxReplicas")
    if isinstance(low, int) and low < 1:
        causes.append(errors.field_invalid("spec.minReplicas", low, "must be greater than or equal to 1"))
    if not isinstance(high, int) or high < 1:
        causes.append(errors.field_invalid("spec.maxReplicas", high, "must be greater than 0"))
    elif isinstance(low, int) and high < low:
        causes.append(
            errors.field_invalid("spec.maxReplicas", high, "must be greater than or equal to `minReplicas`")
        )
    return causes


class HPAv2Strategy(GenerationStrategy):
    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("minReplicas", 1)
        if not spec.get("metrics"):
            spec["metrics"] = [_cpu_metric(DEFAULT_CPU_UTILIZATION)]
        default_behavior(spec.get("behavior"))

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [errors.field_required("spec")]
        causes = _scale_target(spec) + _replicas(spec)
        for i, metric in enumerate(lst(spec.get("metrics"))):
            causes += _metric(d(metric), f"spec.metrics[{i}]")
        behavior = d(spec.get("behavior"))
        for direction in ("scaleUp", "scaleDown"):
            rules = behavior.get(direction)
            if isinstance(rules, dict):
                causes += _scaling_rules(rules, f"spec.behavior.{direction}")
        return causes


def _scaling_rules(rules: Obj, path: str) -> list[Cause]:
    """``validateScalingRules``, in upstream's order."""
    causes: list[Cause] = []
    window = rules.get("stabilizationWindowSeconds")
    if isinstance(window, int) and window < 0:
        causes.append(
            errors.field_invalid(
                f"{path}.stabilizationWindowSeconds", window, "must be greater than or equal to zero"
            )
        )
    if isinstance(window, int) and window > MAX_STABILIZATION_WINDOW_SECONDS:
        causes.append(
            errors.field_invalid(
                f"{path}.stabilizationWindowSeconds",
                window,
                f"must be less than or equal to {MAX_STABILIZATION_WINDOW_SECONDS}",
            )
        )
    policy = rules.get("selectPolicy")
    if policy is not None and policy not in SELECT_POLICIES:
        causes.append(errors.field_not_supported(f"{path}.selectPolicy", policy, SELECT_POLICIES))
    policies = lst(rules.get("policies"))
    if not policies:
        causes.append(errors.field_required(f"{path}.policies", "must specify at least one Policy"))
    for j, rule in enumerate(policies):
        rule = d(rule)
        rpath = f"{path}.policies[{j}]"
        if rule.get("type") not in POLICY_TYPES:
            causes.append(errors.field_not_supported(f"{rpath}.type", rule.get("type") or "", POLICY_TYPES))
        value = rule.get("value")
        if not isinstance(value, int) or value <= 0:
            causes.append(errors.field_invalid(f"{rpath}.value", value or 0, "must be greater than zero"))
        period = rule.get("periodSeconds")
        if not isinstance(period, int) or period <= 0:
            causes.append(
                errors.field_invalid(f"{rpath}.periodSeconds", period or 0, "must be greater than zero")
            )
        elif period > MAX_PERIOD_SECONDS:
            causes.append(
                errors.field_invalid(
                    f"{rpath}.periodSeconds", period, f"must be less than or equal to {MAX_PERIOD_SECONDS}"
                )
            )
    tolerance = rules.get("tolerance")
    if tolerance is not None:
        amount = quantity.parse(tolerance)
        if amount is None:
            causes.append(errors.field_invalid(f"{path}.tolerance", tolerance, quantity.QUANTITY_MESSAGE))
        elif amount < 0:
            causes.append(
                errors.field_invalid(
                    f"{path}.tolerance", quantity.canonical(amount), "must be greater than or equal to 0"
                )
            )
    return causes


def default_behavior(behavior: Any) -> None:
    """``SetDefaults_HorizontalPodAutoscalerBehavior``: a ``behavior`` that is set gets every field its
    rules leave unset (null counts as unset). The scale-down window stays unset: the controller's
    ``--horizontal-pod-autoscaler-downscale-stabilization`` fills it in."""
    if not isinstance(behavior, dict):
        return
    defaults: dict[str, Obj] = {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15},
            ],
        },
        "scaleDown": {
            "selectPolicy": "Max",
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
        },
    }
    for direction, filled in defaults.items():
        rules = behavior.get(direction)
        if not isinstance(rules, dict):
            behavior[direction] = rules = {}
        for key, value in filled.items():
            if rules.get(key) is None:
                rules[key] = value
        amount = quantity.parse(rules.get("tolerance")) if rules.get("tolerance") is not None else None
        if amount is not None:
            rules["tolerance"] = quantity.canonical(amount)  # a quantity is stored as it prints


def _metric(metric: Obj, path: str) -> list[Cause]:
    kind = metric.get("type")
    if kind not in METRIC_TYPES:
        return [errors.field_not_supported(f"{path}.type", kind, METRIC_TYPES)]
    source_key = kind[0].lower() + kind[1:]
    source = metric.get(source_key)
    if not isinstance(source, dict):
        return [
            errors.field_required(
                f"{path}.{source_key}", "must populate information for the given metric source"
            )
        ]
    causes: list[Cause] = []
    spath = f"{path}.{source_key}"
    if kind in ("Resource", "ContainerResource") and not source.get("name"):
        causes.append(errors.field_required(f"{spath}.name", "must specify a resource name"))
    if kind == "ContainerResource" and not source.get("container"):
        causes.append(errors.field_required(f"{spath}.container", "must specify a container"))
    target = d(source.get("target"))
    target_type = target.get("type")
    if target_type not in TARGET_TYPES:
        causes.append(errors.field_not_supported(f"{spath}.target.type", target_type, TARGET_TYPES))
    utilization = target.get("averageUtilization")
    if isinstance(utilization, int) and utilization < 1:
        causes.append(
            errors.field_invalid(f"{spath}.target.averageUtilization", utilization, "must be greater than 0")
        )
    for field in ("value", "averageValue"):
        value = target.get(field)
        if value is not None and quantity.parse(value) is None:
            causes.append(errors.field_invalid(f"{spath}.target.{field}", value, quantity.QUANTITY_MESSAGE))
    return causes


class HPAv1Strategy(GenerationStrategy):
    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("minReplicas", 1)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [errors.field_required("spec")]
        causes = _scale_target(spec) + _replicas(spec)
        target = spec.get("targetCPUUtilizationPercentage")
        if isinstance(target, int) and target < 1:
            causes.append(
                errors.field_invalid("spec.targetCPUUtilizationPercentage", target, "must be greater than 0")
            )
        return causes


def types() -> list[ResourceType]:
    common: dict[str, Any] = {"short_names": ("hpa",), "categories": ("all",), "status": True}
    return [
        rt(
            "autoscaling",
            "v2",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            True,
            strategy=HPAv2Strategy(),
            **common,
        ),
        rt(
            "autoscaling",
            "v1",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            True,
            strategy=HPAv1Strategy(),
            storage_version="v2",
            converter=HPAConverter(),
            **common,
        ),
    ]

"""apps/v1: Deployments, ReplicaSets, StatefulSets, DaemonSets and ControllerRevisions.

Defaults are upstream's ``pkg/apis/apps/v1/defaults.go``; validation (``pkg/apis/apps/validation``) covers
what users of kubectl and Helm run into: selectors that do not match the template, immutable selectors,
rollout parameters, restart policies and StatefulSet's immutable fields.
"""

from __future__ import annotations

import copy
from typing import Any

from vplane.apiserver.kinds.common import (
    SCALE,
    GenerationStrategy,
    d,
    lst,
    non_negative,
    rt,
    selector_matches_template,
    validate_enum,
)
from vplane.apiserver.registry import ResourceType, Strategy
from vplane.kube import errors, podspec, quantity
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

STATEFULSET_UPDATE_FORBIDDEN = (
    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', "
    "'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
)
STATEFULSET_MUTABLE = (
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
)


def _selector_immutable(obj: Obj, old: Obj | None) -> list[Cause]:
    if old is None:
        return []
    new_selector, old_selector = d(obj.get("spec")).get("selector"), d(old.get("spec")).get("selector")
    if new_selector != old_selector:
        return [errors.field_invalid("spec.selector", new_selector, "field is immutable")]
    return []


def _percent_or_int(value: Any, path: str) -> list[Cause]:
    if value is None:
        return []
    parsed = quantity.int_or_percent(value)
    if parsed is None:
        return [
            errors.field_invalid(
                path,
                value,
                "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
            )
        ]
    amount, percent = parsed
    if amount < 0:
        return [errors.field_invalid(path, value, "must be greater than or equal to 0")]
    if percent and amount > 100:
        return [errors.field_invalid(path, value, "must not be greater than 100%")]
    return []


def _is_zero(value: Any) -> bool:
    parsed = quantity.int_or_percent(value)
    return parsed is not None and parsed[0] == 0


def _rolling(rolling: Obj, path: str) -> list[Cause]:
    causes = _percent_or_int(rolling.get("maxUnavailable"), f"{path}.maxUnavailable")
    causes += _percent_or_int(rolling.get("maxSurge"), f"{path}.maxSurge")
    if not causes and _is_zero(rolling.get("maxUnavailable")) and _is_zero(rolling.get("maxSurge", 0)):
        causes.append(
            errors.field_invalid(
                f"{path}.maxUnavailable", rolling.get("maxUnavailable"), "may not be 0 when `maxSurge` is 0"
            )
        )
    return causes


def _workload_common(obj: Obj, what: str) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [errors.field_required("spec")]
    causes = non_negative(obj, "spec.replicas") + non_negative(obj, "spec.minReadySeconds")
    causes += non_negative(obj, "spec.revisionHistoryLimit")
    causes += selector_matches_template(spec, "spec", what)
    causes += podspec.validate_template(spec.get("template"), "spec.template", restart_policies=["Always"])
    return causes


class DeploymentStrategy(GenerationStrategy):
    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
        if isinstance(strategy, dict) and strategy.get("type", "RollingUpdate") == "RollingUpdate":
            strategy.setdefault("type", "RollingUpdate")
            rolling = strategy.setdefault("rollingUpdate", {})
            if isinstance(rolling, dict):
                rolling.setdefault("maxUnavailable", "25%")
                rolling.setdefault("maxSurge", "25%")
        podspec.default_template(spec.get("template"))

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes = _workload_common(obj, "deployment")
        spec = d(obj.get("spec"))
        strategy = d(spec.get("strategy"))
        causes += [
            {**c, "field": "spec.strategy.type"}
            for c in validate_enum(strategy, "type", ["Recreate", "RollingUpdate"], required=True)
        ]
        if strategy.get("type") == "Recreate" and strategy.get("rollingUpdate") is not None:
            causes.append(
                errors.field_forbidden(
                    "spec.strategy.rollingUpdate", "may not be specified when strategy `type` is 'Recreate'"
                )
            )
        if strategy.get("type") == "RollingUpdate":
            causes += _rolling(d(strategy.get("rollingUpdate")), "spec.strategy.rollingUpdate")
        deadline, ready = spec.get("progressDeadlineSeconds"), spec.get("minReadySeconds") or 0
        if isinstance(deadline, int) and isinstance(ready, int) and deadline <= ready:
            causes.append(
                errors.field_invalid(
                    "spec.progressDeadlineSeconds", deadline, "must be greater than minReadySeconds"
                )
            )
        return causes + _selector_immutable(obj, old)


class ReplicaSetStrategy(GenerationStrategy):
    supported_field_labels = frozenset({"status.replicas"})

    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.setdefault("replicas", 1)
            podspec.default_template(spec.get("template"))

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        return _workload_common(obj, "deployment") + _selector_immutable(obj, old)

    def field_labels(self, obj: Obj) -> dict[str, str]:
        return {"status.replicas": str(d(obj.get("status")).get("replicas", 0))}


def _with_claim_volumes(obj: Obj) -> Obj:
    """The set as its pods will be: each ``volumeClaimTemplates`` entry a volume of the template, so mounts
    of a claim validate (upstream leaves a StatefulSet's pod spec unvalidated for this very reason)."""
    spec = d(obj.get("spec"))
    template = d(spec.get("template"))
    pod_spec = d(template.get("spec"))
    claims = [d(d(c).get("metadata")).get("name") for c in lst(spec.get("volumeClaimTemplates"))]
    present = {d(v).get("name") for v in lst(pod_spec.get("volumes"))}
    extra = [{"name": n, "persistentVolumeClaim": {"claimName": n}} for n in claims if n and n not in present]
    if not extra or not pod_spec:
        return obj
    volumes = [*lst(pod_spec.get("volumes")), *extra]
    return {**obj, "spec": {**spec, "template": {**template, "spec": {**pod_spec, "volumes": volumes}}}}


class StatefulSetStrategy(GenerationStrategy):
    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("revisionHistoryLimit", 10)
        strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("partition", 0)
        policy = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
        if isinstance(policy, dict):
            policy.setdefault("whenDeleted", "Retain")
            policy.setdefault("whenScaled", "Retain")
        for claim in lst(spec.get("volumeClaimTemplates")):
            if isinstance(claim, dict):
                claim_spec = claim.setdefault("spec", {})
                if isinstance(claim_spec, dict):
                    claim_spec.setdefault("volumeMode", "Filesystem")
                claim.setdefault("status", {"phase": "Pending"})
        podspec.default_template(spec.get("template"))

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes = _workload_common(_with_claim_volumes(obj), "statefulset")
        spec = d(obj.get("spec"))
        causes += [
            {**c, "field": "spec.podManagementPolicy"}
            for c in validate_enum(spec, "podManagementPolicy", ["OrderedReady", "Parallel"], required=True)
        ]
        strategy = d(spec.get("updateStrategy"))
        causes += [
            {**c, "field": "spec.updateStrategy.type"}
            for c in validate_enum(strategy, "type", ["OnDelete", "RollingUpdate"], required=True)
        ]
        rolling = d(strategy.get("rollingUpdate"))
        partition = rolling.get("partition")
        if isinstance(partition, int) and partition < 0:
            causes.append(
                errors.field_invalid(
                    "spec.updateStrategy.rollingUpdate.partition",
                    partition,
                    "must be greater than or equal to 0",
                )
            )
        if strategy.get("type") == "OnDelete" and strategy.get("rollingUpdate") is not None:
            causes.append(
                errors.field_invalid(
                    "spec.updateStrategy.rollingUpdate",
                    strategy.get("rollingUpdate"),
                    "only allowed for updateStrategy 'RollingUpdate'",
                )
            )
        policy = d(spec.get("persistentVolumeClaimRetentionPolicy"))
        for key in ("whenDeleted", "whenScaled"):
            value = policy.get(key)
            if value is not None and value not in ("Retain", "Delete"):
                causes.append(
                    errors.field_not_supported(
                        f"spec.persistentVolumeClaimRetentionPolicy.{key}", value, ["Retain", "Delete"]
                    )
                )
        for i, claim in enumerate(lst(spec.get("volumeClaimTemplates"))):
            name = d(d(claim).get("metadata")).get("name")
            if not name:
                causes.append(errors.field_required(f"spec.volumeClaimTemplates[{i}].metadata.name"))
        if old is not None:
            old_spec = d(old.get("spec"))
            a = {k: v for k, v in old_spec.items() if k not in STATEFULSET_MUTABLE}
            b = {k: v for k, v in spec.items() if k not in STATEFULSET_MUTABLE}
            if a != b:
                causes.append(errors.field_forbidden("spec", STATEFULSET_UPDATE_FORBIDDEN))
        return causes


TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
"""The internal ``spec.templateGeneration`` as apps/v1 shows it: set by the server, 1 on create and one more
on every template change; the DaemonSet controller labels pods ``pod-template-generation`` with it."""


def _template_generation(obj: Obj) -> int:
    value = d(d(obj.get("metadata")).get("annotations")).get(TEMPLATE_GENERATION)
    try:
        return int(value) if isinstance(value, str) else 0
    except ValueError:
        return 0


def _set_template_generation(obj: Obj, value: int) -> None:
    meta = obj.setdefault("metadata", {})
    annotations = {k: v for k, v in d(meta.get("annotations")).items() if k != TEMPLATE_GENERATION}
    if value:
        annotations[TEMPLATE_GENERATION] = str(value)
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)


class DaemonSetStrategy(GenerationStrategy):
    def prepare_for_create(self, obj: Obj) -> None:
        _set_template_generation(obj, max(_template_generation(obj), 1))

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        template = copy.deepcopy(d(obj.get("spec")).get("template"))
        podspec.default_template(template)
        generation = _template_generation(old)
        if template != d(old.get("spec")).get("template"):
            generation += 1
        _set_template_generation(obj, generation)

    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec.setdefault("revisionHistoryLimit", 10)
        strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", 1)
                    rolling.setdefault("maxSurge", 0)
        podspec.default_template(spec.get("template"))

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes = _workload_common(obj, "daemonset")
        strategy = d(d(obj.get("spec")).get("updateStrategy"))
        causes += [
            {**c, "field": "spec.updateStrategy.type"}
            for c in validate_enum(strategy, "type", ["OnDelete", "RollingUpdate"], required=True)
        ]
        if strategy.get("type") == "RollingUpdate":
            causes += _rolling(d(strategy.get("rollingUpdate")), "spec.updateStrategy.rollingUpdate")
        return causes + _selector_immutable(obj, old)


class ControllerRevisionStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes = non_negative(obj, "revision")
        if old is not None and copy.deepcopy(obj.get("data")) != old.get("data"):
            causes.append(errors.field_invalid("data", "", "field is immutable"))
        return causes


def types() -> list[ResourceType]:
    return [
        rt(
            "apps",
            "v1",
            "controllerrevisions",
            "ControllerRevision",
            True,
            strategy=ControllerRevisionStrategy(),
        ),
        rt(
            "apps",
            "v1",
            "daemonsets",
            "DaemonSet",
            True,
            short_names=("ds",),
            categories=("all",),
            strategy=DaemonSetStrategy(),
            status=True,
        ),
        rt(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            True,
            short_names=("deploy",),
            categories=("all",),
            strategy=DeploymentStrategy(),
            status=True,
            subresources={"scale": SCALE},
        ),
        rt(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            True,
            short_names=("rs",),
            categories=("all",),
            strategy=ReplicaSetStrategy(),
            status=True,
            subresources={"scale": SCALE},
        ),
        rt(
            "apps",
            "v1",
            "statefulsets",
            "StatefulSet",
            True,
            short_names=("sts",),
            categories=("all",),
            strategy=StatefulSetStrategy(),
            status=True,
            subresources={"scale": SCALE},
        ),
    ]

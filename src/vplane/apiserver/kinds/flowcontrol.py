"""flowcontrol.apiserver.k8s.io/v1: FlowSchemas and PriorityLevelConfigurations, stored (vplane does not
do API priority and fairness) with upstream's mandatory and suggested objects present from the start, so
tools that read them (``kubectl get flowschemas``, APF dashboards) see what a real cluster has."""

from __future__ import annotations

from vplane.apiserver.kinds.common import GenerationStrategy, d, lst, rt
from vplane.apiserver.registry import ResourceType
from vplane.kube import errors
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

API_VERSION = "flowcontrol.apiserver.k8s.io/v1"
AUTOUPDATE = "apf.kubernetes.io/autoupdate-spec"
PL_TYPES = ["Exempt", "Limited"]
LIMIT_RESPONSES = ["Queue", "Reject"]
DISTINGUISHERS = ["ByNamespace", "ByUser"]
SUBJECT_KINDS = ["Group", "ServiceAccount", "User"]

_ALL_RESOURCES = [
    {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": True, "namespaces": ["*"]}
]
_ALL_NON_RESOURCES = [{"verbs": ["*"], "nonResourceURLs": ["*"]}]


def _group(name: str) -> Obj:
    return {"kind": "Group", "group": {"name": name}}


def _user(name: str) -> Obj:
    return {"kind": "User", "user": {"name": name}}


def _kube_system_sa(name: str) -> Obj:
    return {"kind": "ServiceAccount", "serviceAccount": {"name": name, "namespace": "kube-system"}}


def _queued(shares: int, lendable: int, queues: int, hand: int, length: int) -> Obj:
    return {
        "type": "Limited",
        "limited": {
            "nominalConcurrencyShares": shares,
            "lendablePercent": lendable,
            "limitResponse": {
                "type": "Queue",
                "queuing": {"queues": queues, "handSize": hand, "queueLengthLimit": length},
            },
        },
    }


PRIORITY_LEVELS: list[tuple[str, Obj]] = [
    ("exempt", {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}),
    (
        "catch-all",
        {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 5,
                "lendablePercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    ),
    ("system", _queued(30, 33, 64, 6, 50)),
    ("node-high", _queued(40, 25, 64, 6, 50)),
    ("leader-election", _queued(10, 0, 16, 4, 50)),
    ("workload-high", _queued(40, 50, 128, 6, 50)),
    ("workload-low", _queued(100, 90, 128, 6, 50)),
    ("global-default", _queued(20, 50, 128, 6, 50)),
]
"""Upstream's bootstrap priority levels (the mandatory exempt and catch-all, then the suggested ones)."""


def _schema(
    precedence: int,
    level: str,
    distinguisher: str,
    subjects: list[Obj],
    resource_rules: list[Obj] | None = None,
    non_resource_rules: list[Obj] | None = None,
) -> Obj:
    rule: Obj = {"subjects": subjects}
    if resource_rules:
        rule["resourceRules"] = resource_rules
    if non_resource_rules:
        rule["nonResourceRules"] = non_resource_rules
    spec: Obj = {
        "priorityLevelConfiguration": {"name": level},
        "matchingPrecedence": precedence,
        "rules": [rule],
    }
    if distinguisher:
        spec["distinguisherMethod"] = {"type": distinguisher}
    return spec


def _leases(verbs: list[str]) -> Obj:
    return {
        "verbs": verbs,
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "namespaces": ["*"],
    }


_EVERYONE = [_group("system:unauthenticated"), _group("system:authenticated")]
FLOW_SCHEMAS: list[tuple[str, Obj]] = [
    ("exempt", _schema(1, "exempt", "", [_group("system:masters")], _ALL_RESOURCES, _ALL_NON_RESOURCES)),
    (
        "probes",
        _schema(
            2,
            "exempt",
            "",
            _EVERYONE,
            None,
            [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}],
        ),
    ),
    (
        "system-leader-election",
        _schema(
            100,
            "leader-election",
            "ByUser",
            [_user("system:kube-controller-manager"), _user("system:kube-scheduler")],
            [_leases(["get", "create", "update"])],
        ),
    ),
    (
        "endpoint-controller",
        _schema(
            150,
            "workload-high",
            "ByUser",
            [_user("system:kube-controller-manager"), _kube_system_sa("endpoint-controller")],
            [
                {
                    "verbs": ["get", "create", "update"],
                    "apiGroups": [""],
                    "resources": ["endpoints"],
                    "namespaces": ["*"],
                }
            ],
        ),
    ),
    (
        "workload-leader-election",
        _schema(
            200, "leader-election", "ByUser", [_kube_system_sa("*")], [_leases(["get", "create", "update"])]
        ),
    ),
    (
        "system-node-high",
        _schema(
            400,
            "node-high",
            "ByUser",
            [_group("system:nodes")],
            [
                {
                    "verbs": ["*"],
                    "apiGroups": [""],
                    "resources": ["nodes", "nodes/status"],
                    "clusterScope": True,
                    "namespaces": ["*"],
                },
                _leases(["*"]),
            ],
        ),
    ),
    (
        "system-nodes",
        _schema(500, "system", "ByUser", [_group("system:nodes")], _ALL_RESOURCES, _ALL_NON_RESOURCES),
    ),
    (
        "kube-controller-manager",
        _schema(
            800,
            "workload-high",
            "ByNamespace",
            [_user("system:kube-controller-manager")],
            _ALL_RESOURCES,
            _ALL_NON_RESOURCES,
        ),
    ),
    (
        "kube-scheduler",
        _schema(
            800,
            "workload-high",
            "ByNamespace",
            [_user("system:kube-scheduler")],
            _ALL_RESOURCES,
            _ALL_NON_RESOURCES,
        ),
    ),
    (
        "kube-system-service-accounts",
        _schema(
            900, "workload-high", "ByNamespace", [_kube_system_sa("*")], _ALL_RESOURCES, _ALL_NON_RESOURCES
        ),
    ),
    (
        "service-accounts",
        _schema(
            9000,
            "workload-low",
            "ByUser",
            [_group("system:serviceaccounts")],
            _ALL_RESOURCES,
            _ALL_NON_RESOURCES,
        ),
    ),
    (
        "global-default",
        _schema(9900, "global-default", "ByUser", _EVERYONE, _ALL_RESOURCES, _ALL_NON_RESOURCES),
    ),
    ("catch-all", _schema(10000, "catch-all", "ByUser", _EVERYONE, _ALL_RESOURCES, _ALL_NON_RESOURCES)),
]
"""Upstream's bootstrap flow schemas, in matching-precedence order."""


def bootstrap_objects() -> list[Obj]:
    out: list[Obj] = []
    for name, spec in PRIORITY_LEVELS:
        out.append(_object("PriorityLevelConfiguration", name, spec))
    for name, spec in FLOW_SCHEMAS:
        out.append(_object("FlowSchema", name, spec))
    return out


def _object(kind: str, name: str, spec: Obj) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "annotations": {AUTOUPDATE: "true"}},
        "spec": spec,
    }


def dangling_condition(level: str, exists: bool, now: str) -> Obj:
    """The ``Dangling`` condition upstream's APF controller keeps on each FlowSchema."""
    if exists:
        return {
            "type": "Dangling",
            "status": "False",
            "lastTransitionTime": now,
            "reason": "Found",
            "message": f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" and it exists',
        }
    return {
        "type": "Dangling",
        "status": "True",
        "lastTransitionTime": now,
        "reason": "NotFound",
        "message": f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" but there is no such object',
    }


class PriorityLevelStrategy(GenerationStrategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = d(obj.get("spec"))
        kind = spec.get("type")
        causes: list[Cause] = []
        if kind not in PL_TYPES:
            return [errors.field_not_supported("spec.type", kind, PL_TYPES)]
        name = d(obj.get("metadata")).get("name")
        if kind == "Limited":
            limited = spec.get("limited")
            if not isinstance(limited, dict):
                return [errors.field_required("spec.limited", "must not be empty when type is Limited")]
            if spec.get("exempt") is not None:
                causes.append(errors.field_forbidden("spec.exempt", "must be nil if the type is Limited"))
            response = d(limited.get("limitResponse"))
            if response.get("type") not in LIMIT_RESPONSES:
                causes.append(
                    errors.field_not_supported(
                        "spec.limited.limitResponse.type", response.get("type"), LIMIT_RESPONSES
                    )
                )
            if response.get("type") == "Queue" and not isinstance(response.get("queuing"), dict):
                causes.append(
                    errors.field_required(
                        "spec.limited.limitResponse.queuing", "must not be empty if the type is Queue"
                    )
                )
            lendable = limited.get("lendablePercent")
            if isinstance(lendable, int) and not 0 <= lendable <= 100:
                causes.append(
                    errors.field_invalid(
                        "spec.limited.lendablePercent", lendable, "must be between 0 and 100, inclusive"
                    )
                )
        else:
            if spec.get("limited") is not None:
                causes.append(
                    errors.field_forbidden("spec.limited", "must be nil if the type is not Limited")
                )
            if name not in ("exempt",):
                causes.append(
                    errors.field_forbidden("spec.type", "type must be 'Limited' if name is not 'exempt'")
                )
        return causes


class FlowSchemaStrategy(GenerationStrategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = d(obj.get("spec"))
        causes: list[Cause] = []
        if not d(spec.get("priorityLevelConfiguration")).get("name"):
            causes.append(
                errors.field_required(
                    "spec.priorityLevelConfiguration.name", "must reference a priority level"
                )
            )
        precedence = spec.get("matchingPrecedence")
        if isinstance(precedence, int) and not 1 <= precedence <= 10000:
            causes.append(
                errors.field_invalid(
                    "spec.matchingPrecedence", precedence, "must be between 1 and 10000, inclusive"
                )
            )
        method = d(spec.get("distinguisherMethod")).get("type")
        if spec.get("distinguisherMethod") is not None and method not in DISTINGUISHERS:
            causes.append(errors.field_not_supported("spec.distinguisherMethod.type", method, DISTINGUISHERS))
        for i, rule in enumerate(lst(spec.get("rules"))):
            subjects = lst(d(rule).get("subjects"))
            if not subjects:
                causes.append(
                    errors.field_required(
                        f"spec.rules[{i}].subjects", "subjects must contain at least one value"
                    )
                )
            for j, subject in enumerate(subjects):
                kind = d(subject).get("kind")
                if kind not in SUBJECT_KINDS:
                    causes.append(
                        errors.field_not_supported(f"spec.rules[{i}].subjects[{j}].kind", kind, SUBJECT_KINDS)
                    )
            if not d(rule).get("resourceRules") and not d(rule).get("nonResourceRules"):
                causes.append(
                    errors.field_required(
                        f"spec.rules[{i}]",
                        "at least one of resourceRules and nonResourceRules has to be non-empty",
                    )
                )
        return causes


def types() -> list[ResourceType]:
    g = "flowcontrol.apiserver.k8s.io"
    return [
        rt(g, "v1", "flowschemas", "FlowSchema", False, strategy=FlowSchemaStrategy(), status=True),
        rt(
            g,
            "v1",
            "prioritylevelconfigurations",
            "PriorityLevelConfiguration",
            False,
            strategy=PriorityLevelStrategy(),
            status=True,
        ),
    ]

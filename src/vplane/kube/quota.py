"""ResourceQuota as upstream counts it: usage evaluators, resource-list arithmetic, the admission check.

Shared by the quota admission plug-in (``vplane.apiserver.kinds.quota``), which charges each create to
``status.used`` before the object is stored, and the ResourceQuota controller
(``vplane.controllers.kcm.resourcequota``), which recomputes usage from what exists. Pure: no I/O.

Facts from upstream (``k8s.io/apiserver/pkg/quota/v1``, ``pkg/quota/v1/evaluator/core``,
``k8s.io/apiserver/pkg/admission/plugin/resourcequota``):

- a pod is charged ``count/pods`` always and ``pods``, ``cpu``/``requests.cpu``, ``limits.cpu``,
  ``memory``/``requests.memory``, ``limits.memory``, ``ephemeral-storage``/..., hugepages and extended
  ``requests.<name>`` while it is not finished (nor stuck terminating past its grace period); requests
  and limits are ``PodRequests``/``PodLimits`` (containers summed, raised to the largest init container,
  sidecars added, pod-level resources and overhead);
- a quota that limits ``cpu``, ``memory`` or their ``requests.``/``limits.`` forms refuses a pod whose
  containers do not all set them (``must specify ...``);
- services count ``services``, ``services.nodeports`` (NodePort and LoadBalancer ports) and
  ``services.loadbalancers``; claims count ``persistentvolumeclaims`` and ``requests.storage``, also per
  storage class (``<class>.storageclass.storage.k8s.io/<resource>``);
- every other kind counts as ``count/<resource>[.<group>]`` on create, and ``configmaps``, ``secrets``,
  ``replicationcontrollers``, ``resourcequotas`` under their legacy names too;
- refusals read ``exceeded quota: <name>, requested: <r>=<q>,..., used: ..., limited: ...`` with the
  quantities canonical and the resources sorted.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vplane.kube.quantity import Quantity

ResourceList = dict[str, Quantity]
Obj = dict[str, Any]

ONE = Quantity(1)

STORAGE_CLASS_SUFFIX = ".storageclass.storage.k8s.io/"
STORAGE_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"

IGNORED_RESOURCES = frozenset({("", "events")})
"""What quota admission never evaluates (upstream's default ignored resources)."""


class QuotaDenied(Exception):
    """A refusal; the admission plug-in turns the message into a 403 for the object."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# -- resource lists ------------------------------------------------------------------------------------------


def _d(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def parse_list(raw: Any) -> ResourceList:
    """A ``ResourceList`` from the wire; entries that are not quantities are left out."""
    out: ResourceList = {}
    for name, value in _d(raw).items():
        parsed = Quantity.parse(value)
        if parsed is not None:
            out[str(name)] = parsed
    return out


def to_wire(values: Mapping[str, Quantity]) -> dict[str, str]:
    """Canonical strings, keys sorted as Go's JSON encoder writes a map."""
    return {name: str(values[name]) for name in sorted(values)}


def add(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    result: ResourceList = {}
    for name, value in a.items():
        result[name] = value + b[name] if name in b else value
    for name, value in b.items():
        if name not in result:
            result[name] = value
    return result


def subtract_non_negative(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    """``SubtractWithNonNegativeResult``: ``a - b`` per resource, never below zero."""
    zero = Quantity(0)
    result: ResourceList = {}
    for name, value in a.items():
        diff = value - b[name] if name in b else value
        result[name] = diff if diff.value >= 0 else zero
    for name in b:
        if name not in result:
            result[name] = zero
    return result


def mask(values: Mapping[str, Quantity], names: Iterable[str]) -> ResourceList:
    keep = set(names)
    return {name: value for name, value in values.items() if name in keep}


def less_than_or_equal(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> tuple[bool, list[str]]:
    """Whether every resource of ``a`` that ``b`` also names is within it, and those that are not."""
    exceeded = [name for name, value in a.items() if name in b and value.value > b[name].value]
    return not exceeded, exceeded


def equals(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> bool:
    return a.keys() == b.keys() and all(a[name].value == b[name].value for name in a)


def remove_zeros(values: Mapping[str, Quantity]) -> ResourceList:
    return {name: value for name, value in values.items() if value.value != 0}


def negative(values: Mapping[str, Quantity]) -> list[str]:
    return [name for name, value in values.items() if value.value < 0]


def pretty(values: Mapping[str, Quantity]) -> str:
    """``prettyPrint``: ``name=quantity`` sorted by name, comma-joined."""
    return ",".join(f"{name}={values[name]}" for name in sorted(values))


# -- pods --------------------------------------------------------------------------------------------------------

_COMPUTE_VALIDATED = frozenset(
    {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)
"""Resources a quota may only track if every container states them (upstream's ``validationSet``)."""

POD_RESOURCES = (
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
)
_POD_PREFIXES = ("hugepages-", "requests.hugepages-")


def is_native_resource(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def is_extended_resource(name: str) -> bool:
    """``IsExtendedResourceName``: a qualified name outside ``kubernetes.io`` that is not a quota form."""
    return not is_native_resource(name) and not name.startswith("requests.")


def _add_into(total: ResourceList, values: Mapping[str, Quantity]) -> None:
    for name, value in values.items():
        total[name] = total[name] + value if name in total else value


def _max_into(total: ResourceList, values: Mapping[str, Quantity]) -> None:
    for name, value in values.items():
        if name not in total or value.value > total[name].value:
            total[name] = value


def _pod_amounts(pod: Obj, field: str) -> ResourceList:
    """``PodRequests`` (``field="requests"``) or ``PodLimits``: containers summed, then raised to what the
    init containers need while they run (a restartable init container keeps running beside everything
    after it), pod-level ``spec.resources`` for cpu and memory where set, plus ``spec.overhead``."""
    spec = _d(pod.get("spec"))
    total: ResourceList = {}
    for container in _l(spec.get("containers")):
        _add_into(total, parse_list(_d(_d(container).get("resources")).get(field)))
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for container in _l(spec.get("initContainers")):
        container = _d(container)
        own = parse_list(_d(container.get("resources")).get(field))
        if container.get("restartPolicy") == "Always":
            _add_into(total, own)
            _add_into(sidecars, own)
            _max_into(init_peak, sidecars)
        else:
            running = dict(own)
            _add_into(running, sidecars)
            _max_into(init_peak, running)
    _max_into(total, init_peak)
    pod_level = parse_list(_d(spec.get("resources")).get(field))
    for name in ("cpu", "memory"):
        if name in pod_level:
            total[name] = pod_level[name]
    if field == "requests" or total:
        overhead = parse_list(spec.get("overhead"))
        if field == "limits":
            overhead = {name: value for name, value in overhead.items() if name in total}
        _add_into(total, overhead)
    return total


def pod_requests(pod: Obj) -> ResourceList:
    return _pod_amounts(pod, "requests")


def pod_limits(pod: Obj) -> ResourceList:
    return _pod_amounts(pod, "limits")


def compute_usage(requests: Mapping[str, Quantity], limits: Mapping[str, Quantity]) -> ResourceList:
    """``podComputeUsageHelper``: the quota resources a set of requests and limits charges."""
    result: ResourceList = {"pods": ONE}
    for name in ("cpu", "memory", "ephemeral-storage"):
        if name in requests:
            result[name] = requests[name]
            result[f"requests.{name}"] = requests[name]
        if name in limits:
            result[f"limits.{name}"] = limits[name]
    for name, value in requests.items():
        if name.startswith("hugepages-"):
            result[name] = value
            result[f"requests.{name}"] = value
        if is_extended_resource(name):
            result[f"requests.{name}"] = value
    return result


def parse_time(value: Any) -> float | None:
    """A ``metav1.Time`` as seconds since the epoch (None when absent or malformed)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)).timestamp()


def pod_is_charged(pod: Obj, now: float) -> bool:
    """``QuotaV1Pod``: not finished, and not stuck terminating past its grace period."""
    if _d(pod.get("status")).get("phase") in ("Failed", "Succeeded"):
        return False
    meta = _d(pod.get("metadata"))
    grace = meta.get("deletionGracePeriodSeconds")
    deleted = parse_time(meta.get("deletionTimestamp"))
    return not (deleted is not None and isinstance(grace, int) and now > deleted + grace)


def is_best_effort(pod: Obj) -> bool:
    """``GetPodQOS() == BestEffort``: no container (nor the pod) asks for or limits cpu or memory."""
    spec = _d(pod.get("spec"))
    holders = [
        _d(_d(c).get("resources")) for c in (*_l(spec.get("containers")), *_l(spec.get("initContainers")))
    ]
    holders.append(_d(spec.get("resources")))
    for resources in holders:
        for field in ("requests", "limits"):
            for name, value in parse_list(resources.get(field)).items():
                if name in ("cpu", "memory") and value.value > 0:
                    return False
    return True


def _cross_namespace_terms(terms: Any, weighted: bool) -> bool:
    for term in _l(terms):
        term = _d(_d(term).get("podAffinityTerm")) if weighted else _d(term)
        if term.get("namespaces") or term.get("namespaceSelector") is not None:
            return True
    return False


def uses_cross_namespace_affinity(pod: Obj) -> bool:
    affinity = _d(_d(pod.get("spec")).get("affinity"))
    for kind in ("podAffinity", "podAntiAffinity"):
        part = _d(affinity.get(kind))
        if _cross_namespace_terms(part.get("requiredDuringSchedulingIgnoredDuringExecution"), False):
            return True
        if _cross_namespace_terms(part.get("preferredDuringSchedulingIgnoredDuringExecution"), True):
            return True
    return False


# -- scopes -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScopeSelector:
    """One ``ScopedResourceSelectorRequirement`` (a ``spec.scopes`` entry is ``<scope> Exists``)."""

    scope: str
    operator: str = "Exists"
    values: tuple[str, ...] = ()

    def matches_value(self, value: str | None) -> bool:
        """As a label selector over ``{scope: value}`` (absent when ``value`` is None)."""
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        return False


def scope_selectors(quota: Obj) -> list[ScopeSelector]:
    """``getScopeSelectorsFromQuota``: ``spec.scopes`` then ``spec.scopeSelector.matchExpressions``."""
    spec = _d(quota.get("spec"))
    out = [ScopeSelector(str(s)) for s in _l(spec.get("scopes"))]
    for expr in _l(_d(spec.get("scopeSelector")).get("matchExpressions")):
        expr = _d(expr)
        out.append(
            ScopeSelector(
                str(expr.get("scopeName") or ""),
                str(expr.get("operator") or ""),
                tuple(str(v) for v in _l(expr.get("values"))),
            )
        )
    return out


# -- evaluators ---------------------------------------------------------------------------------------------------


class Evaluator:
    """Upstream ``quota.Evaluator`` for one group/resource. This base is the object-count evaluator."""

    def __init__(self, group: str, resource: str, alias: str = "") -> None:
        self.group = group
        self.resource = resource
        self.count_name = f"count/{resource}.{group}" if group else f"count/{resource}"
        self.alias = alias

    def handles(self, operation: str, subresource: str, obj: Obj | None, old: Obj | None) -> bool:
        return operation == "CREATE"

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        own = {self.count_name, self.alias} - {""}
        return [name for name in names if name in own]

    def matches_scope(self, selector: ScopeSelector, obj: Obj) -> bool:
        return False

    def constraints(self, required: Sequence[str], obj: Obj) -> str | None:
        return None

    def usage(self, obj: Obj, now: float) -> ResourceList:
        result: ResourceList = {self.count_name: ONE}
        if self.alias:
            result[self.alias] = ONE
        return result

    def matches(self, quota: Obj, obj: Obj) -> bool:
        """``generic.Matches``: the quota tracks one of this evaluator's resources and every scope holds."""
        hard = list(_d(_d(quota.get("status")).get("hard")))
        if not self.matching_resources(hard):
            return False
        return all(self.matches_scope(selector, obj) for selector in scope_selectors(quota))


class PodEvaluator(Evaluator):
    def __init__(self) -> None:
        super().__init__("", "pods")

    def handles(self, operation: str, subresource: str, obj: Obj | None, old: Obj | None) -> bool:
        if subresource not in ("", "resize"):
            return False
        return operation == "CREATE" or (subresource == "resize" and operation == "UPDATE")

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        return [
            name
            for name in names
            if name in POD_RESOURCES
            or name.startswith(_POD_PREFIXES)
            or (not is_native_resource(name) and name.startswith("requests."))
        ]

    def matches_scope(self, selector: ScopeSelector, obj: Obj) -> bool:
        spec = _d(obj.get("spec"))
        scope = selector.scope
        if scope == "Terminating":
            return _terminating(spec)
        if scope == "NotTerminating":
            return not _terminating(spec)
        if scope == "BestEffort":
            return is_best_effort(obj)
        if scope == "NotBestEffort":
            return not is_best_effort(obj)
        if scope == "PriorityClass":
            name = spec.get("priorityClassName") or None
            if selector.operator == "Exists":
                return name is not None
            return selector.matches_value(name)
        if scope == "CrossNamespacePodAffinity":
            return uses_cross_namespace_affinity(obj)
        return False

    def constraints(self, required: Sequence[str], obj: Obj) -> str | None:
        """Every container (init containers too) must state what a quota limits among cpu and memory."""
        wanted = set(required) & _COMPUTE_VALIDATED
        if not wanted:
            return None
        spec = _d(obj.get("spec"))
        missing: dict[str, set[str]] = {}
        for container in (*_l(spec.get("containers")), *_l(spec.get("initContainers"))):
            container = _d(container)
            resources = _d(container.get("resources"))
            has = compute_usage(parse_list(resources.get("requests")), parse_list(resources.get("limits")))
            for name in wanted - has.keys():
                missing.setdefault(name, set()).add(str(container.get("name") or ""))
        if not missing:
            return None
        parts = [f"{name} for: {','.join(sorted(missing[name]))}" for name in sorted(missing)]
        return "must specify " + "; ".join(parts)

    def usage(self, obj: Obj, now: float) -> ResourceList:
        result: ResourceList = {self.count_name: ONE}
        if not pod_is_charged(obj, now):
            return result
        return add(result, compute_usage(pod_requests(obj), pod_limits(obj)))


def _terminating(spec: Obj) -> bool:
    deadline = spec.get("activeDeadlineSeconds")
    return isinstance(deadline, int) and deadline >= 0


SERVICE_RESOURCES = ("count/services", "services", "services.nodeports", "services.loadbalancers")


class ServiceEvaluator(Evaluator):
    def __init__(self) -> None:
        super().__init__("", "services")

    def handles(self, operation: str, subresource: str, obj: Obj | None, old: Obj | None) -> bool:
        return operation in ("CREATE", "UPDATE")

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        return [name for name in names if name in SERVICE_RESOURCES]

    def usage(self, obj: Obj, now: float) -> ResourceList:
        spec = _d(obj.get("spec"))
        ports = _l(spec.get("ports"))
        result: ResourceList = {
            "count/services": ONE,
            "services": ONE,
            "services.loadbalancers": Quantity(0),
            "services.nodeports": Quantity(0),
        }
        kind = spec.get("type")
        if kind == "NodePort":
            result["services.nodeports"] = Quantity(len(ports))
        elif kind == "LoadBalancer":
            if spec.get("allocateLoadBalancerNodePorts") is False:
                count = sum(1 for p in ports if _d(p).get("nodePort"))
                result["services.nodeports"] = Quantity(count)
            else:
                result["services.nodeports"] = Quantity(len(ports))
            result["services.loadbalancers"] = ONE
        return result


PVC_RESOURCES = ("persistentvolumeclaims", "requests.storage")


def claim_class(pvc: Obj) -> str:
    """``GetPersistentVolumeClaimClass``: the beta annotation first, then ``spec.storageClassName``."""
    annotations = _d(_d(pvc.get("metadata")).get("annotations"))
    if STORAGE_CLASS_ANNOTATION in annotations:
        return str(annotations[STORAGE_CLASS_ANNOTATION])
    return str(_d(pvc.get("spec")).get("storageClassName") or "")


def _attributes_classes(pvc: Obj) -> set[str]:
    spec, status = _d(pvc.get("spec")), _d(pvc.get("status"))
    names = {
        spec.get("volumeAttributesClassName"),
        status.get("currentVolumeAttributesClassName"),
        _d(status.get("modifyVolumeStatus")).get("targetVolumeAttributesClassName"),
    }
    return {str(n) for n in names if n}


class ClaimEvaluator(Evaluator):
    def __init__(self) -> None:
        super().__init__("", "persistentvolumeclaims")

    def handles(self, operation: str, subresource: str, obj: Obj | None, old: Obj | None) -> bool:
        if subresource == "":
            return operation in ("CREATE", "UPDATE")
        if subresource == "status" and obj is not None and old is not None:
            new_size = _d(_d(obj.get("status")).get("allocatedResources")).get("storage")
            old_size = _d(_d(old.get("status")).get("allocatedResources")).get("storage")
            return new_size != old_size or _attributes_classes(obj) != _attributes_classes(old)
        return False

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        out = []
        for name in names:
            if (
                name == self.count_name
                or name in PVC_RESOURCES
                or any(name.endswith(STORAGE_CLASS_SUFFIX + r) for r in PVC_RESOURCES)
            ):
                out.append(name)
        return out

    def matches_scope(self, selector: ScopeSelector, obj: Obj) -> bool:
        if selector.scope != "VolumeAttributesClass":
            return False
        names = _attributes_classes(obj)
        if selector.operator == "Exists":
            return bool(names)
        if not names:
            return selector.matches_value(None)
        return any(selector.matches_value(name) for name in names)

    def usage(self, obj: Obj, now: float) -> ResourceList:
        result: ResourceList = {"persistentvolumeclaims": ONE, self.count_name: ONE}
        klass = claim_class(obj)
        if klass:
            result[f"{klass}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"] = ONE
        storage = claim_storage(obj)
        if storage is not None:
            result["requests.storage"] = storage
            if klass:
                result[f"{klass}{STORAGE_CLASS_SUFFIX}requests.storage"] = storage
        return result


def claim_storage(pvc: Obj) -> Quantity | None:
    """What a claim is charged for storage: its request (whole bytes), or more if more was allocated."""
    requested = Quantity.parse(_d(_d(_d(pvc.get("spec")).get("resources")).get("requests")).get("storage"))
    if requested is None:
        return None
    result = Quantity(requested.value.to_integral_value(rounding="ROUND_CEILING"), requested.format)
    allocated = Quantity.parse(_d(_d(pvc.get("status")).get("allocatedResources")).get("storage"))
    if allocated is not None and allocated.value > result.value:
        result = Quantity(allocated.value.to_integral_value(rounding="ROUND_CEILING"), allocated.format)
    return result


LEGACY_COUNT_ALIASES = {
    "configmaps": "configmaps",
    "resourcequotas": "resourcequotas",
    "replicationcontrollers": "replicationcontrollers",
    "secrets": "secrets",
}


def evaluator_for(group: str, resource: str) -> Evaluator:
    """The evaluator upstream's registry holds for a group/resource (an object counter for any other)."""
    if not group:
        if resource == "pods":
            return PodEvaluator()
        if resource == "services":
            return ServiceEvaluator()
        if resource == "persistentvolumeclaims":
            return ClaimEvaluator()
        if resource in LEGACY_COUNT_ALIASES:
            return Evaluator("", resource, LEGACY_COUNT_ALIASES[resource])
    return Evaluator(group, resource)


def counted_group_resources(names: Iterable[str]) -> set[tuple[str, str]]:
    """The (group, resource) pairs whose objects a quota with these hard resources needs counted."""
    out: set[tuple[str, str]] = set()
    for name in names:
        if (
            name in POD_RESOURCES
            or name.startswith(_POD_PREFIXES)
            or (not is_native_resource(name) and name.startswith("requests."))
        ):
            out.add(("", "pods"))
        if name in SERVICE_RESOURCES:
            out.add(("", "services"))
        if name in PVC_RESOURCES or STORAGE_CLASS_SUFFIX in name or name == "count/persistentvolumeclaims":
            out.add(("", "persistentvolumeclaims"))
        if name in LEGACY_COUNT_ALIASES:
            out.add(("", name))
        if name.startswith("count/"):
            resource, _, group = name[len("count/") :].partition(".")
            out.add((group, resource))
    return out


# -- the admission check ------------------------------------------------------------------------------------------


def _hard(quota: Obj) -> ResourceList:
    return parse_list(_d(quota.get("status")).get("hard"))


def _used(quota: Obj) -> ResourceList:
    return parse_list(_d(quota.get("status")).get("used"))


def check_request(
    quotas: Sequence[Obj],
    evaluator: Evaluator,
    *,
    operation: str,
    subresource: str,
    obj: Obj,
    old: Obj | None,
    now: float,
) -> list[Obj]:
    """``CheckRequest``: the namespace's quotas as they would be with this request charged (the same
    objects when nothing changes, copies with a new ``status.used`` otherwise), or :class:`QuotaDenied`."""
    interesting: list[int] = []
    for index, quota in enumerate(quotas):
        if not evaluator.matches(quota, obj):
            continue
        name = str(_d(quota.get("metadata")).get("name") or "")
        hard = _hard(quota)
        restricted = evaluator.matching_resources(hard)
        failure = evaluator.constraints(restricted, obj)
        if failure is not None:
            raise QuotaDenied(f"failed quota: {name}: {failure}")
        used = _d(_d(quota.get("status")).get("used"))
        if any(resource not in used for resource in restricted):
            raise QuotaDenied(f"status unknown for quota: {name}, resources: {','.join(sorted(restricted))}")
        interesting.append(index)
    if not interesting:
        return list(quotas)
    usage = evaluator.usage(obj, now)
    bad = negative(usage)
    if bad:
        raise QuotaDenied(f"quota usage is negative for resource(s): {','.join(sorted(bad))}")
    delta: dict[int, ResourceList] = {index: usage for index in interesting}
    if operation == "UPDATE":
        if old is None:
            raise QuotaDenied("unable to get previous usage since prior version of object was not found")
        if _d(old.get("metadata")).get("resourceVersion"):
            change = subtract_non_negative(usage, evaluator.usage(old, now))
            for index in interesting:
                if evaluator.matches(quotas[index], old):
                    delta[index] = change
    delta = {index: kept for index, values in delta.items() if (kept := remove_zeros(values))}
    if not delta:
        return list(quotas)
    out = list(quotas)
    for index in interesting:
        if index not in delta:
            continue
        quota = quotas[index]
        hard, used = _hard(quota), _used(quota)
        requested = mask(delta[index], hard)
        new_used = add(used, requested)
        if subresource != "status":
            allowed, exceeded = less_than_or_equal(mask(new_used, requested), hard)
            if not allowed:
                name = str(_d(quota.get("metadata")).get("name") or "")
                raise QuotaDenied(
                    f"exceeded quota: {name}, requested: {pretty(mask(requested, exceeded))}, "
                    f"used: {pretty(mask(used, exceeded))}, limited: {pretty(mask(hard, exceeded))}"
                )
        charged = copy.deepcopy(quota)
        charged.setdefault("status", {})["used"] = to_wire(new_used)
        out[index] = charged
    return out


# -- the controller's view -----------------------------------------------------------------------------------------


def calculate_usage(
    quota: Obj,
    objects: Callable[[str, str], Iterable[Obj] | None],
    now: float,
) -> ResourceList:
    """``quota.CalculateUsage`` for one quota: the usage of what exists for each resource it limits.

    ``objects(group, resource)`` gives the namespace's objects of a kind, or None when they cannot be
    counted (the resources it would have counted are left out, so their last observation stays)."""
    hard_names = list(parse_list(_d(quota.get("spec")).get("hard")))
    selectors = scope_selectors(quota)
    result: ResourceList = {}
    for group, resource in sorted(counted_group_resources(hard_names)):
        evaluator = evaluator_for(group, resource)
        matched = evaluator.matching_resources(hard_names)
        if not matched:
            continue
        items = objects(group, resource)
        if items is None:
            continue
        used: ResourceList = {name: Quantity(0) for name in matched}
        for item in items:
            if all(evaluator.matches_scope(selector, item) for selector in selectors):
                used = add(used, evaluator.usage(item, now))
        result = add(result, mask(used, matched))
    return result


def status_for(quota: Obj, observed: Mapping[str, Quantity]) -> Obj | None:
    """``syncResourceQuota``: the status to write (``hard`` from the spec, ``used`` the last observation
    updated with this one, both over the spec's resources), or None when the stored one says the same."""
    spec_hard = parse_list(_d(quota.get("spec")).get("hard"))
    status = _d(quota.get("status"))
    previous = parse_list(status.get("used"))
    dirty = status.get("hard") is None or status.get("used") is None
    dirty = dirty or not equals(spec_hard, parse_list(status.get("hard")))
    used = mask({**previous, **observed}, spec_hard)
    dirty = dirty or not equals(used, previous)
    if not dirty:
        return None
    return {"hard": to_wire(spec_hard), "used": to_wire(used)}


def replenish_resources(group: str, resource: str, names: Iterable[str]) -> bool:
    """Whether a quota with these resources should be recomputed after a change to this kind."""
    return bool(evaluator_for(group, resource).matching_resources(names))

"""LimitRange as upstream applies it (``plugin/pkg/admission/limitranger``, ``SetDefaults_LimitRangeItem``).

- A ``Container`` item's defaults are filled in when a LimitRange is stored: ``default`` from ``max``,
  ``defaultRequest`` from ``default``, then from ``min``.
- A new pod's containers and init containers get the ``default`` limits and ``defaultRequest`` requests
  they do not state, and the pod is annotated ``kubernetes.io/limit-ranger: LimitRanger plugin set: cpu,
  memory request for container app; cpu limit for container app``.
- Then every container is held to ``min``, ``max`` and ``maxLimitRequestRatio`` (``Container`` items), the
  pod's totals to ``Pod`` items, and a claim's storage request to ``PersistentVolumeClaim`` items, with
  upstream's messages (``maximum cpu usage per Container is 1, but limit is 2``); several failures of one
  LimitRange read as ``[first, second]``.

Amounts are compared in thousandths rounded up, as upstream's ``MilliValue`` comparisons.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from vplane.kube.quantity import Quantity
from vplane.kube.quota import parse_list

Obj = dict[str, Any]
ResourceList = dict[str, Quantity]

ANNOTATION = "kubernetes.io/limit-ranger"
CONTAINER = "Container"
POD = "Pod"
CLAIM = "PersistentVolumeClaim"


def _d(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _items(limit_range: Obj) -> list[Obj]:
    return [_d(item) for item in _l(_d(limit_range.get("spec")).get("limits"))]


def default_limit_range(obj: Obj) -> None:
    """``SetDefaults_LimitRangeItem`` for every ``Container`` item, in place."""
    for item in _items(obj):
        if item.get("type") != CONTAINER:
            continue
        default = item.setdefault("default", {})
        request = item.setdefault("defaultRequest", {})
        if not isinstance(default, dict) or not isinstance(request, dict):
            continue
        for name, value in _d(item.get("max")).items():
            default.setdefault(name, value)
        for name, value in default.items():
            request.setdefault(name, value)
        for name, value in _d(item.get("min")).items():
            request.setdefault(name, value)
        if not default:
            del item["default"]
        if not request:
            del item["defaultRequest"]


def container_defaults(limit_range: Obj) -> tuple[dict[str, Any], dict[str, Any]]:
    """(requests, limits) a LimitRange's ``Container`` items supply, later items winning."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    for item in _items(limit_range):
        if item.get("type") == CONTAINER:
            requests.update(_d(item.get("defaultRequest")))
            limits.update(_d(item.get("default")))
    return requests, limits


def _merge_container(
    container: Obj, requests: Mapping[str, Any], limits: Mapping[str, Any], label: str
) -> list[str]:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        resources = container["resources"] = {}
    own_limits = resources.get("limits")
    if not isinstance(own_limits, dict):
        own_limits = {}
    own_requests = resources.get("requests")
    if not isinstance(own_requests, dict):
        own_requests = {}
    set_limits = sorted(name for name in limits if name not in own_limits)
    set_requests = sorted(name for name in requests if name not in own_requests)
    for name in set_limits:
        own_limits[name] = _canonical(limits[name])
    for name in set_requests:
        own_requests[name] = _canonical(requests[name])
    if own_limits:
        resources["limits"] = own_limits
    if own_requests:
        resources["requests"] = own_requests
    notes = []
    name = container.get("name") or ""
    if set_requests:
        notes.append(f"{', '.join(set_requests)} request for {label} {name}")
    if set_limits:
        notes.append(f"{', '.join(set_limits)} limit for {label} {name}")
    return notes


def _canonical(value: Any) -> Any:
    parsed = Quantity.parse(value)
    return str(parsed) if parsed is not None else value


def apply_defaults(pod: Obj, limit_ranges: list[Obj]) -> Obj:
    """The pod with each LimitRange's container defaults merged in turn (``PodMutateLimitFunc``), as a
    new object; the same object when nothing was added."""
    result = pod
    for limit_range in limit_ranges:
        requests, limits = container_defaults(limit_range)
        if not requests and not limits:
            continue
        candidate = copy.deepcopy(result)
        spec = _d(candidate.get("spec"))
        notes: list[str] = []
        for container in _l(spec.get("containers")):
            if isinstance(container, dict):
                notes += _merge_container(container, requests, limits, "container")
        for container in _l(spec.get("initContainers")):
            if isinstance(container, dict):
                notes += _merge_container(container, requests, limits, "init container")
        if notes:
            meta = candidate.setdefault("metadata", {})
            annotations = meta.get("annotations")
            if not isinstance(annotations, dict):
                annotations = meta["annotations"] = {}
            annotations[ANNOTATION] = "LimitRanger plugin set: " + "; ".join(notes)
            result = candidate
    return result


# -- validation -----------------------------------------------------------------------------------------------------


def _min(
    kind: str, name: str, enforced: Quantity, requests: ResourceList, limits: ResourceList
) -> str | None:
    request, limit = requests.get(name), limits.get(name)
    if request is None:
        return f"minimum {name} usage per {kind} is {enforced}.  No request is specified"
    if request.milli_value() < enforced.milli_value():
        return f"minimum {name} usage per {kind} is {enforced}, but request is {request}"
    if limit is not None and limit.milli_value() < enforced.milli_value():
        return f"minimum {name} usage per {kind} is {enforced}, but limit is {limit}"
    return None


def _max(
    kind: str, name: str, enforced: Quantity, requests: ResourceList, limits: ResourceList
) -> str | None:
    request, limit = requests.get(name), limits.get(name)
    if limit is None:
        return f"maximum {name} usage per {kind} is {enforced}.  No limit is specified"
    if limit.milli_value() > enforced.milli_value():
        return f"maximum {name} usage per {kind} is {enforced}, but limit is {limit}"
    if request is not None and request.milli_value() > enforced.milli_value():
        return f"maximum {name} usage per {kind} is {enforced}, but request is {request}"
    return None


def _max_request(kind: str, name: str, enforced: Quantity, requests: ResourceList) -> str | None:
    request = requests.get(name)
    if request is None:
        return f"maximum {name} usage per {kind} is {enforced}.  No request is specified"
    if request.milli_value() > enforced.milli_value():
        return f"maximum {name} usage per {kind} is {enforced}, but request is {request}"
    return None


def _ratio(
    kind: str, name: str, enforced: Quantity, requests: ResourceList, limits: ResourceList
) -> str | None:
    request, limit = requests.get(name), limits.get(name)
    if request is None or request.milli_value() == 0:
        return (
            f"{name} max limit to request ratio per {kind} is {enforced}, but no request is specified or "
            "request is 0"
        )
    if limit is None or limit.milli_value() == 0:
        return (
            f"{name} max limit to request ratio per {kind} is {enforced}, but no limit is specified or "
            "limit is 0"
        )
    observed = limit.milli_value() / request.milli_value()
    if observed * 1000 > enforced.milli_value():
        return (
            f"{name} max limit to request ratio per {kind} is {enforced}, but provided ratio is {observed:f}"
        )
    return None


def _check(item: Obj, kind: str, requests: ResourceList, limits: ResourceList) -> list[str]:
    failures: list[str | None] = []
    for name, enforced in sorted(parse_list(item.get("min")).items()):
        failures.append(_min(kind, name, enforced, requests, limits))
    for name, enforced in sorted(parse_list(item.get("max")).items()):
        failures.append(_max(kind, name, enforced, requests, limits))
    for name, enforced in sorted(parse_list(item.get("maxLimitRequestRatio")).items()):
        failures.append(_ratio(kind, name, enforced, requests, limits))
    return [f for f in failures if f is not None]


def _container_lists(container: Any) -> tuple[ResourceList, ResourceList]:
    resources = _d(_d(container).get("resources"))
    return parse_list(resources.get("requests")), parse_list(resources.get("limits"))


def _pod_totals(pod: Obj, field: str) -> ResourceList:
    """The limitranger's ``podRequests``/``podLimits``: containers summed, raised to the init containers'
    needs (sidecars added); no overhead."""
    spec = _d(pod.get("spec"))
    total: ResourceList = {}
    for container in _l(spec.get("containers")):
        _add(total, parse_list(_d(_d(container).get("resources")).get(field)))
    sidecars: ResourceList = {}
    peak: ResourceList = {}
    for container in _l(spec.get("initContainers")):
        container = _d(container)
        own = parse_list(_d(container.get("resources")).get(field))
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            running = dict(sidecars)
        else:
            running = dict(own)
            _add(running, sidecars)
        for name, value in running.items():
            if name not in peak or value.value > peak[name].value:
                peak[name] = value
    for name, value in peak.items():
        if name not in total or value.value > total[name].value:
            total[name] = value
    return total


def _add(total: ResourceList, values: Mapping[str, Quantity]) -> None:
    for name, value in values.items():
        total[name] = total[name] + value if name in total else value


def validate_pod(limit_range: Obj, pod: Obj) -> list[str]:
    """``PodValidateLimitFunc``: what this LimitRange finds wrong with the pod."""
    spec = _d(pod.get("spec"))
    failures: list[str] = []
    for item in _items(limit_range):
        kind = item.get("type")
        if kind == CONTAINER:
            for container in (*_l(spec.get("containers")), *_l(spec.get("initContainers"))):
                requests, limits = _container_lists(container)
                failures += _check(item, CONTAINER, requests, limits)
        elif kind == POD:
            failures += _check(item, POD, _pod_totals(pod, "requests"), _pod_totals(pod, "limits"))
    return failures


def validate_claim(limit_range: Obj, pvc: Obj) -> list[str]:
    """``PersistentVolumeClaimValidateLimitFunc``: ``min`` and ``max`` against the storage request."""
    requests = parse_list(_d(_d(_d(pvc.get("spec")).get("resources")).get("requests")))
    failures: list[str | None] = []
    for item in _items(limit_range):
        if item.get("type") != CLAIM:
            continue
        for name, enforced in sorted(parse_list(item.get("min")).items()):
            failures.append(_min(CLAIM, name, enforced, requests, {}))
        for name, enforced in sorted(parse_list(item.get("max")).items()):
            failures.append(_max_request(CLAIM, name, enforced, requests))
    return [f for f in failures if f is not None]


def aggregate(messages: list[str]) -> str:
    """``utilerrors.NewAggregate(...).Error()``: one message as is, several de-duplicated in brackets."""
    unique = list(dict.fromkeys(messages))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]"

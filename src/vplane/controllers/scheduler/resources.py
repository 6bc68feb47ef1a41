"""What a pod requests and what a node can hold, as integers, computed the way kube-scheduler does.

CPU is counted in millicores and everything else in whole units, each rounded up as apimachinery's
``Quantity.MilliValue``/``Value`` do. A pod's request is component-helpers' ``PodRequests``: the sum of its
containers, raised to the largest init container (a restartable "sidecar" init container keeps running,
so it adds to the sum and to every later init container), pod-level ``spec.resources`` where set, plus
``spec.overhead``. The non-zero variant (100m CPU and 200Mi memory for a container that requests
neither) is what scoring uses, so pods without requests still spread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING
from typing import Any

from vplane.kube import quantity

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

DEFAULT_MILLI_CPU_REQUEST = 100
"""``schedutil.DefaultMilliCPURequest``: what scoring assumes for a container without a CPU request."""
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
"""``schedutil.DefaultMemoryRequest`` (200 MiB)."""

_POD_LEVEL_RESOURCES = (CPU, MEMORY)
"""Resources ``spec.resources`` may set for the whole pod (besides hugepages, which are scalar)."""

Resources = dict[str, int]


def is_scalar(name: str) -> bool:
    """``schedutil.IsScalarResourceName``: extended (``example.com/gpu``), hugepages, prefixed native and
    attachable-volume resources are counted; anything else the scheduler does not know is ignored."""
    if name.startswith(("hugepages-", "attachable-volumes-")):
        return True
    if "/" not in name:
        return False
    return "kubernetes.io/" in name or not name.startswith("requests.")


def amount(name: str, value: Any) -> int:
    """One quantity as the scheduler counts it; a malformed quantity counts as zero."""
    parsed = quantity.parse(value)
    if parsed is None:
        return 0
    if name == CPU:
        parsed = parsed * 1000
    return int(parsed.to_integral_value(rounding=ROUND_CEILING))


def _counted(name: str) -> bool:
    return name in (CPU, MEMORY, EPHEMERAL_STORAGE) or is_scalar(name)


def resource_list(values: Any) -> Resources:
    """A ``ResourceList`` (requests, overhead) reduced to the resources the scheduler counts."""
    if not isinstance(values, Mapping):
        return {}
    return {str(k): amount(str(k), v) for k, v in values.items() if _counted(str(k))}


def allocatable(node: Mapping[str, Any]) -> Resources:
    """``status.allocatable`` (or ``status.capacity`` when a node reports none), with ``pods`` as a count."""
    status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    values = status.get("allocatable")
    if not isinstance(values, Mapping) or not values:
        values = status.get("capacity")
    if not isinstance(values, Mapping):
        return {}
    out = resource_list(values)
    if PODS in values:
        out[PODS] = amount(PODS, values[PODS])
    return out


def _add(total: Resources, more: Mapping[str, int]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def _max(total: Resources, other: Mapping[str, int]) -> None:
    for name, value in other.items():
        if value > total.get(name, 0):
            total[name] = value


def container_requests(container: Mapping[str, Any]) -> Resources:
    """A container's requests; a resource with only a limit requests its limit, as the API server's
    defaulting sets it (so a server that skipped that defaulting is read the same way)."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    requests = resources.get("requests")
    limits = resources.get("limits")
    out = resource_list(requests)
    if isinstance(limits, Mapping):
        for name, value in limits.items():
            key = str(name)
            if _counted(key) and not (isinstance(requests, Mapping) and key in requests):
                out[key] = amount(key, value)
    return out


def _containers(spec: Mapping[str, Any], field: str) -> Iterable[Mapping[str, Any]]:
    items = spec.get(field)
    if not isinstance(items, list):
        return ()
    return (c for c in items if isinstance(c, Mapping))


def _with_defaults(requests: Resources, pod_level: Mapping[str, int] | None) -> Resources:
    """``applyNonMissing``: a CPU or memory request absent from the container (and the pod) is assumed."""
    out = dict(requests)
    if CPU not in out and not (pod_level and CPU in pod_level):
        out[CPU] = DEFAULT_MILLI_CPU_REQUEST
    if MEMORY not in out and not (pod_level and MEMORY in pod_level):
        out[MEMORY] = DEFAULT_MEMORY_REQUEST
    return out


def _pod_level(spec: Mapping[str, Any]) -> Resources | None:
    resources = spec.get("resources")
    if not isinstance(resources, Mapping):
        return None
    requests = resource_list(resources.get("requests"))
    wanted = {k: v for k, v in requests.items() if k in _POD_LEVEL_RESOURCES or k.startswith("hugepages-")}
    return wanted or None


def pod_requests(spec: Mapping[str, Any], *, non_zero: bool = False) -> Resources:
    """``resourcehelper.PodRequests`` (with ``NonMissingContainerRequests`` when ``non_zero``)."""
    pod_level = _pod_level(spec)
    total: Resources = {}
    for container in _containers(spec, "containers"):
        requests = container_requests(container)
        _add(total, _with_defaults(requests, pod_level) if non_zero else requests)
    sidecars: Resources = {}
    init_max: Resources = {}
    for container in _containers(spec, "initContainers"):
        requests = container_requests(container)
        if non_zero:
            requests = _with_defaults(requests, pod_level)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            effective = dict(sidecars)
        else:
            effective = dict(requests)
            _add(effective, sidecars)
        _max(init_max, effective)
    _max(total, init_max)
    if pod_level:
        total.update(pod_level)
    _add(total, resource_list(spec.get("overhead")))
    return total


def is_zero(requests: Mapping[str, int]) -> bool:
    return not any(requests.values())

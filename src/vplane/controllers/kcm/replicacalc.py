"""The HPA's replica count for one pod metric, decided purely (upstream's ``ReplicaCalculator``:
``GetResourceReplicas`` for a utilization target and ``calcPlainMetricReplicas`` for an average value).

Every pod the selector matches is sorted as ``groupPods`` does: deleted and Failed pods are ignored;
Pending pods are unready; pods the metrics server said nothing about are missing; for CPU, a pod whose
Ready condition or start time is absent is unready, and so is one still within the CPU initialization
period that is not Ready or whose sample does not yet cover one full window since it turned Ready, and
one past that period that is not Ready and never was (its Ready condition last changed within the
initial readiness delay after it started). Unready and ignored pods' samples are dropped. When no pod is
unready or missing the ratio of ready pods decides alone; otherwise missing pods count as using their
request (at least the target) on a scale-down and nothing on a scale-up, unready pods count as using
nothing on a scale-up, the ratio is computed again, and the count stays when that brings it within the
tolerance or reverses the direction. Times are the caller's clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vplane.controllers.kcm.podautoscalerutil import Tolerances

CPU_INITIALIZATION_PERIOD = 300.0
"""``--horizontal-pod-autoscaler-cpu-initialization-period``."""
INITIAL_READINESS_DELAY = 30.0
"""``--horizontal-pod-autoscaler-initial-readiness-delay``."""
ZERO_TIME = -62135596800.0
"""Go's zero time (0001-01-01) in seconds since the epoch: what an unset time compares as upstream."""


class ReplicaCalcError(Exception):
    """The count cannot be computed; the message is upstream's."""


@dataclass(frozen=True)
class PodFacts:
    """What ``groupPods`` and ``calculatePodRequests`` read of one pod."""

    name: str
    phase: str = "Running"
    deleting: bool = False
    ready: str | None = "True"
    """The Ready condition's status; None without one."""
    ready_changed: float | None = None
    """The Ready condition's ``lastTransitionTime`` (None: unset, upstream's zero time)."""
    started: float | None = None
    """``status.startTime``; None when unset."""
    request: int | None = 0
    """The summed request in milli-units of the containers measured; None when one lacks it."""
    unrequested: str = ""
    """The first measured container without a request (for the error)."""


@dataclass(frozen=True)
class Sample:
    """One pod's metric: the value (milli-units), when it was taken and over which window (seconds)."""

    value: int
    timestamp: float | None = None
    window: float = 0.0


@dataclass
class Groups:
    ready: int = 0
    unready: set[str] = field(default_factory=set)
    missing: set[str] = field(default_factory=set)
    ignored: set[str] = field(default_factory=set)


def group_pods(
    pods: Sequence[PodFacts],
    samples: Mapping[str, Sample],
    resource: str,
    now: float,
    cpu_initialization_period: float = CPU_INITIALIZATION_PERIOD,
    initial_readiness_delay: float = INITIAL_READINESS_DELAY,
) -> Groups:
    """``groupPods``: an unset time is upstream's zero time, earlier than any real one."""
    groups = Groups()
    for pod in pods:
        if pod.deleting or pod.phase == "Failed":
            groups.ignored.add(pod.name)
            continue
        if pod.phase == "Pending":
            groups.unready.add(pod.name)
            continue
        sample = samples.get(pod.name)
        if sample is None:
            groups.missing.add(pod.name)
            continue
        if resource == "cpu":
            if pod.ready is None or pod.started is None:
                unready = True
            elif pod.started + cpu_initialization_period > now:
                taken = ZERO_TIME if sample.timestamp is None else sample.timestamp
                changed = ZERO_TIME if pod.ready_changed is None else pod.ready_changed
                unready = pod.ready == "False" or taken < changed + sample.window
            else:
                changed = ZERO_TIME if pod.ready_changed is None else pod.ready_changed
                unready = pod.ready == "False" and pod.started + initial_readiness_delay > changed
            if unready:
                groups.unready.add(pod.name)
                continue
        groups.ready += 1
    return groups


def _utilization_ratio(
    values: Mapping[str, int], requests: Mapping[str, int], target: int
) -> tuple[float, int, int]:
    """``GetResourceUtilizationRatio``: (ratio, utilization %, raw average per pod); samples of pods the
    lister does not know are left out."""
    total = requested = entries = 0
    for name, value in values.items():
        request = requests.get(name)
        if request is None:
            continue
        total += value
        requested += request
        entries += 1
    if requested == 0:
        raise ReplicaCalcError("no metrics returned matched known pods")
    utilization = (total * 100) // requested
    return (utilization / target if target else 0.0), utilization, total // entries


def _usage_ratio(values: Mapping[str, int], target: int) -> tuple[float, int]:
    """``GetMetricUsageRatio``: (ratio, average per pod)."""
    usage = sum(values.values()) // len(values)
    return (usage / target if target else 0.0), usage


def _requests(pods: Sequence[PodFacts], resource: str) -> dict[str, int]:
    """``calculatePodRequests``: every listed pod must request the resource in each measured container."""
    out: dict[str, int] = {}
    for pod in pods:
        if pod.request is None:
            raise ReplicaCalcError(
                f"missing request for {resource} in container {pod.unrequested} of Pod {pod.name}"
            )
        out[pod.name] = pod.request
    return out


def _settle(current: int, ratio: float, new_ratio: float, counted: int, tolerance: Tolerances) -> int:
    """The end of both calculations: keep the count when the adjusted ratio is within the tolerance, or
    when it (or the number of pods now counted) would turn the scaling direction around."""
    if tolerance.within(new_ratio) or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current
    replicas = math.ceil(new_ratio * counted)
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return current
    return replicas


def _partition(
    pods: Sequence[PodFacts],
    samples: Mapping[str, Sample],
    resource: str,
    now: float,
    cpu_initialization_period: float,
    initial_readiness_delay: float,
) -> tuple[Groups, dict[str, int]]:
    if not pods:
        raise ReplicaCalcError("no pods returned by selector while calculating replica count")
    groups = group_pods(pods, samples, resource, now, cpu_initialization_period, initial_readiness_delay)
    values = {
        name: s.value
        for name, s in samples.items()
        if name not in groups.ignored and name not in groups.unready
    }
    if not values:
        raise ReplicaCalcError("did not receive metrics for targeted pods (pods might be unready)")
    return groups, values


@dataclass(frozen=True)
class ResourceReplicas:
    replicas: int
    utilization: int
    """Percent of the requests, of the pods that counted before any adjustment."""
    raw_average: int
    """Milli-units per pod, likewise."""


def resource_replicas(
    current: int,
    target_utilization: int,
    resource: str,
    pods: Sequence[PodFacts],
    samples: Mapping[str, Sample],
    tolerance: Tolerances,
    now: float,
    cpu_initialization_period: float = CPU_INITIALIZATION_PERIOD,
    initial_readiness_delay: float = INITIAL_READINESS_DELAY,
) -> ResourceReplicas:
    """``GetResourceReplicas`` for a utilization target."""
    groups, values = _partition(
        pods, samples, resource, now, cpu_initialization_period, initial_readiness_delay
    )
    requests = _requests(pods, resource)
    ratio, utilization, raw = _utilization_ratio(values, requests, target_utilization)
    with_unready = bool(groups.unready) and ratio > 1.0
    if not with_unready and not groups.missing:
        if tolerance.within(ratio):
            return ResourceReplicas(current, utilization, raw)
        return ResourceReplicas(math.ceil(ratio * groups.ready), utilization, raw)
    if groups.missing:
        if ratio < 1.0:
            fallback = max(100, target_utilization)
            for name in groups.missing:
                values[name] = requests[name] * fallback // 100
        elif ratio > 1.0:
            for name in groups.missing:
                values[name] = 0
    if with_unready:
        for name in groups.unready:
            values[name] = 0
    new_ratio, _, _ = _utilization_ratio(values, requests, target_utilization)
    return ResourceReplicas(_settle(current, ratio, new_ratio, len(values), tolerance), utilization, raw)


def plain_replicas(
    current: int,
    target_usage: int,
    resource: str,
    pods: Sequence[PodFacts],
    samples: Mapping[str, Sample],
    tolerance: Tolerances,
    now: float,
    cpu_initialization_period: float = CPU_INITIALIZATION_PERIOD,
    initial_readiness_delay: float = INITIAL_READINESS_DELAY,
) -> tuple[int, int]:
    """``calcPlainMetricReplicas`` (an ``AverageValue`` target): (replicas, average per pod)."""
    groups, values = _partition(
        pods, samples, resource, now, cpu_initialization_period, initial_readiness_delay
    )
    ratio, usage = _usage_ratio(values, target_usage)
    with_unready = bool(groups.unready) and ratio > 1.0
    if not with_unready and not groups.missing:
        if tolerance.within(ratio):
            return current, usage
        return math.ceil(ratio * groups.ready), usage
    if groups.missing:
        # Upstream: exactly the target on a scale-down, nothing otherwise.
        for name in groups.missing:
            values[name] = target_usage if ratio < 1.0 else 0
    if with_unready:
        for name in groups.unready:
            values[name] = 0
    new_ratio, _ = _usage_ratio(values, target_usage)
    return _settle(current, ratio, new_ratio, len(values), tolerance), usage


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_window(text: object) -> float:
    """A PodMetrics ``window`` (a Go duration such as ``30s`` or ``1m0s``) in seconds; 0 when absent or
    malformed (upstream's zero duration)."""
    if not isinstance(text, str) or not text:
        return 0.0
    body = text.lstrip("+-")
    parts = _DURATION.findall(body)
    if not parts or "".join(n + u for n, u in parts) != body:
        return 0.0
    return sum(float(n) * _UNITS[u] for n, u in parts)

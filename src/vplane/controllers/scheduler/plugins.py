"""The node-local plugins: filters and scores that look at one pod and one node at a time.

Each filter returns None when the node passes, or a :class:`~.framework.Status` with upstream's reason
and code (``UnschedulableAndUnresolvable`` where removing pods cannot help, so preemption skips the node).
Scores are integers in [0, 100] after normalisation, as ``framework.MaxNodeScore``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vplane.controllers.scheduler import resources
from vplane.controllers.scheduler.framework import Status, unresolvable, unschedulable
from vplane.controllers.scheduler.model import DEFAULT_BIND_ALL_HOST_IP, NodeInfo, PodInfo
from vplane.controllers.scheduler.nodeselection import (
    PreferredTerm,
    RequiredNodeAffinity,
    do_not_schedule,
    tolerated,
    untolerated_taint,
)

MAX_NODE_SCORE = 100

NODE_UNSCHEDULABLE = "NodeUnschedulable"
NODE_NAME = "NodeName"
TAINT_TOLERATION = "TaintToleration"
NODE_AFFINITY = "NodeAffinity"
NODE_PORTS = "NodePorts"
NODE_RESOURCES_FIT = "NodeResourcesFit"
BALANCED_ALLOCATION = "NodeResourcesBalancedAllocation"

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_NAME = "node(s) didn't match the requested node name"
REASON_TAINTS = "node(s) had untolerated taint(s)"
"""1.35+ wording (earlier releases named the taint: ``node(s) had untolerated taint {key: value}``)."""
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_AFFINITY_CONFLICT = "pod affinity terms conflict"
REASON_NODE_PORTS = "node(s) didn't have free ports for the requested pod ports"
REASON_TOO_MANY_PODS = "Too many pods"
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


# -- filters -------------------------------------------------------------------------------------------


def node_unschedulable(tolerations: Sequence[Mapping[str, Any]], node: NodeInfo) -> Status | None:
    """A cordoned node takes only pods that tolerate its ``node.kubernetes.io/unschedulable`` taint."""
    if not node.unschedulable or tolerated(tolerations, UNSCHEDULABLE_TAINT):
        return None
    return unresolvable(REASON_UNSCHEDULABLE)


def node_name(pod: PodInfo, node: NodeInfo) -> Status | None:
    if pod.node_name and pod.node_name != node.name:
        return unresolvable(REASON_NODE_NAME)
    return None


def taint_toleration(tolerations: list[Mapping[str, Any]], node: NodeInfo) -> Status | None:
    """NoSchedule and NoExecute taints must be tolerated; PreferNoSchedule only lowers the score."""
    if untolerated_taint(node.taints, tolerations, do_not_schedule) is None:
        return None
    return unresolvable(REASON_TAINTS)


def node_affinity(required: RequiredNodeAffinity, node: NodeInfo) -> Status | None:
    if required.empty or required.matches(node.labels, node.name):
        return None
    return unresolvable(REASON_NODE_AFFINITY)


def _port_conflict(used: Mapping[tuple[str, str, int], int], ip: str, protocol: str, port: int) -> bool:
    """``HostPortInfo.CheckConflict``: 0.0.0.0 conflicts with every address; others with themselves and it."""
    if ip == DEFAULT_BIND_ALL_HOST_IP:
        return any(p == port and proto == protocol for (_ip, proto, p) in used)
    return (DEFAULT_BIND_ALL_HOST_IP, protocol, port) in used or (ip, protocol, port) in used


def node_ports(pod: PodInfo, node: NodeInfo) -> Status | None:
    for ip, protocol, port in pod.host_ports:
        if _port_conflict(node.used_ports, ip, protocol, port):
            return unschedulable(REASON_NODE_PORTS)
    return None


def insufficient_resources(pod: PodInfo, node: NodeInfo) -> list[str]:
    """``fitsRequest``: the reasons in upstream's order (pods, cpu, memory, ephemeral-storage, scalars)."""
    reasons = []
    if len(node.pods) + 1 > node.allocatable.get(resources.PODS, 0):
        reasons.append(REASON_TOO_MANY_PODS)
    requests = pod.requests
    if resources.is_zero(requests):
        return reasons
    for name in (resources.CPU, resources.MEMORY, resources.EPHEMERAL_STORAGE):
        wanted = requests.get(name, 0)
        if wanted > 0 and wanted > node.allocatable.get(name, 0) - node.requested.get(name, 0):
            reasons.append(f"Insufficient {name}")
    for name, wanted in requests.items():
        if name in (resources.CPU, resources.MEMORY, resources.EPHEMERAL_STORAGE) or wanted == 0:
            continue
        if wanted > node.allocatable.get(name, 0) - node.requested.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


def node_resources_fit(pod: PodInfo, node: NodeInfo) -> Status | None:
    reasons = insufficient_resources(pod, node)
    return unschedulable(*reasons) if reasons else None


# -- scores --------------------------------------------------------------------------------------------


def default_normalize(scores: dict[str, int], reverse: bool) -> dict[str, int]:
    """``helper.DefaultNormalizeScore``: scale to [0, 100] by the maximum; ``reverse`` flips it."""
    highest = max(scores.values(), default=0)
    if highest == 0:
        return {n: MAX_NODE_SCORE if reverse else 0 for n in scores}
    out = {}
    for name, score in scores.items():
        scaled = MAX_NODE_SCORE * score // highest
        out[name] = MAX_NODE_SCORE - scaled if reverse else scaled
    return out


def taint_toleration_score(tolerations: Sequence[Mapping[str, Any]], node: NodeInfo) -> int:
    """How many PreferNoSchedule taints the pod does not tolerate (reversed when normalised)."""
    prefer = [t for t in tolerations if (t.get("effect") or "") in ("", "PreferNoSchedule")]
    return sum(
        1
        for taint in node.taints
        if taint.get("effect") == "PreferNoSchedule" and not tolerated(prefer, taint)
    )


def node_affinity_score(preferred: Sequence[PreferredTerm], node: NodeInfo) -> int:
    return sum(p.weight for p in preferred if p.term.matches(node.labels, node.name))


def _least_requested(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def least_allocated_score(pod: PodInfo, node: NodeInfo) -> int:
    """NodeResourcesFit's default ``LeastAllocated`` strategy over cpu and memory (weight 1 each), on the
    non-zero requests so that pods without requests still spread."""
    score = weights = 0
    for capacity, requested in (
        (node.allocatable.get(resources.CPU, 0), node.non_zero_cpu + pod.non_zero_cpu),
        (node.allocatable.get(resources.MEMORY, 0), node.non_zero_memory + pod.non_zero_memory),
    ):
        if capacity == 0:
            continue
        score += _least_requested(requested, capacity)
        weights += 1
    return score // weights if weights else 0


def balanced_allocation_applies(pod: PodInfo) -> bool:
    """Best-effort pods (no cpu or memory requests) skip BalancedAllocation (upstream issue 129138)."""
    return bool(pod.requests.get(resources.CPU) or pod.requests.get(resources.MEMORY))


def balanced_allocation_score(pod: PodInfo, node: NodeInfo) -> int:
    """``balancedResourceScorer``: 100 times one minus the spread of the cpu and memory fractions in use."""
    fractions = []
    for name in (resources.CPU, resources.MEMORY):
        capacity = node.allocatable.get(name, 0)
        if capacity == 0:
            continue
        fractions.append(min((node.requested.get(name, 0) + pod.requests.get(name, 0)) / capacity, 1.0))
    std = abs(fractions[0] - fractions[1]) / 2 if len(fractions) == 2 else 0.0
    return int((1 - std) * MAX_NODE_SCORE)

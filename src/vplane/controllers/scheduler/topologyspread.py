"""PodTopologySpread: ``DoNotSchedule`` constraints filter, ``ScheduleAnyway`` constraints score.

A constraint counts the pods of the incoming pod's namespace that its selector (plus ``matchLabelKeys``)
selects, per value of its topology key, over the nodes that carry every constraint's topology key and
pass its node inclusion policies (node affinity honoured, taints ignored, by default). A node fails when
placing the pod there would make its domain exceed the smallest domain by more than ``maxSkew``
(the smallest counts as 0 while fewer than ``minDomains`` domains exist). Terminating pods do not count.
The cluster-level default constraints (which need the pod's Services and ReplicaSets) are not applied.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vplane.controllers.scheduler.framework import Status, unresolvable, unschedulable
from vplane.controllers.scheduler.model import HOSTNAME_LABEL, NodeInfo, PodInfo
from vplane.controllers.scheduler.nodeselection import (
    RequiredNodeAffinity,
    do_not_schedule,
    pod_tolerations,
    untolerated_taint,
)
from vplane.controllers.scheduler.plugins import MAX_NODE_SCORE
from vplane.kube import labels
from vplane.kube.errors import StatusError

NAME = "PodTopologySpread"
REASON_CONSTRAINTS = "node(s) didn't match pod topology spread constraints"
REASON_MISSING_LABEL = REASON_CONSTRAINTS + " (missing required label)"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class Constraint:
    max_skew: int
    topology_key: str
    selector: labels.Selector
    min_domains: int = 1
    honor_node_affinity: bool = True
    honor_node_taints: bool = False

    def counts_node(self, pod: PodInfo, required: RequiredNodeAffinity, node: NodeInfo) -> bool:
        """``matchNodeInclusionPolicies``."""
        if self.honor_node_affinity and not required.empty and not required.matches(node.labels, node.name):
            return False
        if self.honor_node_taints:
            tolerations = pod_tolerations(pod.spec)
            if untolerated_taint(node.taints, tolerations, do_not_schedule) is not None:
                return False
        return True


def constraints(pod: PodInfo, action: str) -> tuple[Constraint, ...] | Status:
    """The pod's constraints with ``whenUnsatisfiable: action``; a selector that does not parse rejects it."""
    out = []
    for raw in pod.spec.get("topologySpreadConstraints") or []:
        raw = _d(raw)
        if raw.get("whenUnsatisfiable") != action:
            continue
        try:
            selector = labels.from_label_selector(
                _d(raw.get("labelSelector")) if raw.get("labelSelector") is not None else None
            )
        except StatusError as exc:
            return unresolvable(exc.message)
        keys = [str(k) for k in raw.get("matchLabelKeys") or [] if str(k) in pod.labels]
        if keys and not selector.matches_nothing:
            selector = selector.add(labels.Requirement(k, labels.Operator.IN, (pod.labels[k],)) for k in keys)
        max_skew, min_domains = raw.get("maxSkew"), raw.get("minDomains")
        out.append(
            Constraint(
                max_skew=max_skew if isinstance(max_skew, int) else 1,
                topology_key=str(raw.get("topologyKey") or ""),
                selector=selector,
                min_domains=min_domains if isinstance(min_domains, int) and min_domains > 0 else 1,
                honor_node_affinity=(raw.get("nodeAffinityPolicy") or "Honor") == "Honor",
                honor_node_taints=(raw.get("nodeTaintsPolicy") or "Ignore") == "Honor",
            )
        )
    return tuple(out)


def _has_keys(node: NodeInfo, items: Iterable[Constraint]) -> bool:
    return all(c.topology_key in node.labels for c in items)


def count_matching(pods: Iterable[PodInfo], selector: labels.Selector, namespace: str) -> int:
    """``countPodsMatchSelector``: an empty selector counts nothing; terminating pods do not count."""
    if selector.empty:
        return 0
    return sum(1 for p in pods if not p.deleting and p.namespace == namespace and selector.matches(p.labels))


@dataclass(slots=True)
class FilterState:
    pod: PodInfo
    required: RequiredNodeAffinity
    constraints: tuple[Constraint, ...]
    counts: list[dict[str, int]] = field(default_factory=list)
    """Per constraint: matching pods per topology value, over the domains that count."""

    def clone(self) -> FilterState:
        return FilterState(self.pod, self.required, self.constraints, [dict(c) for c in self.counts])

    def min_match(self, index: int) -> int:
        domains = self.counts[index]
        if len(domains) < self.constraints[index].min_domains:
            return 0
        return min(domains.values(), default=0)

    def update_with_pod(self, other: PodInfo, node: NodeInfo, sign: int) -> None:
        """PreFilter extensions AddPod/RemovePod (preemption adds and removes pods from a node)."""
        if other.namespace != self.pod.namespace or node.node is None:
            return
        if not _has_keys(node, self.constraints):
            return
        for i, c in enumerate(self.constraints):
            if not c.selector.matches(other.labels) or not c.counts_node(self.pod, self.required, node):
                continue
            value = node.labels[c.topology_key]
            self.counts[i][value] = self.counts[i].get(value, 0) + sign


def pre_filter(pod: PodInfo, nodes: Iterable[NodeInfo]) -> FilterState | Status | None:
    found = constraints(pod, DO_NOT_SCHEDULE)
    if isinstance(found, Status):
        return found
    if not found:
        return None
    required = RequiredNodeAffinity.of(pod.spec)
    state = FilterState(pod, required, found, [{} for _ in found])
    for node in nodes:
        if node.node is None or not _has_keys(node, found):
            continue
        for i, c in enumerate(found):
            if not c.counts_node(pod, required, node):
                continue
            value = node.labels[c.topology_key]
            state.counts[i][value] = state.counts[i].get(value, 0) + count_matching(
                node.pods.values(), c.selector, pod.namespace
            )
    return state


def filter_node(state: FilterState | None, node: NodeInfo) -> Status | None:
    if state is None:
        return None
    for i, c in enumerate(state.constraints):
        value = node.labels.get(c.topology_key)
        if value is None:
            return unresolvable(REASON_MISSING_LABEL)
        self_match = 1 if c.selector.matches(state.pod.labels) else 0
        skew = state.counts[i].get(value, 0) + self_match - state.min_match(i)
        if skew > c.max_skew:
            return unschedulable(REASON_CONSTRAINTS)
    return None


# -- scoring -------------------------------------------------------------------------------------------


@dataclass(slots=True)
class ScoreState:
    pod: PodInfo
    constraints: tuple[Constraint, ...]
    ignored: set[str]
    pair_counts: dict[tuple[str, str], int]
    weights: list[float]


def pre_score(pod: PodInfo, feasible: list[NodeInfo], all_nodes: list[NodeInfo]) -> ScoreState | None:
    """``ScheduleAnyway`` constraints over the feasible nodes; None when the pod has none."""
    found = constraints(pod, SCHEDULE_ANYWAY)
    if isinstance(found, Status) or not found or not feasible or not all_nodes:
        return None
    state = ScoreState(pod, found, set(), {}, [])
    sizes = [0] * len(found)
    for node in feasible:
        if not _has_keys(node, found):
            state.ignored.add(node.name)
            continue
        for i, c in enumerate(found):
            if c.topology_key == HOSTNAME_LABEL:
                continue
            pair = (c.topology_key, node.labels[c.topology_key])
            if pair not in state.pair_counts:
                state.pair_counts[pair] = 0
                sizes[i] += 1
    for i, c in enumerate(found):
        size = len(feasible) - len(state.ignored) if c.topology_key == HOSTNAME_LABEL else sizes[i]
        state.weights.append(math.log(size + 2))
    required = RequiredNodeAffinity.of(pod.spec)
    for node in all_nodes:
        if node.node is None or not _has_keys(node, found):
            continue
        for c in found:
            if not c.counts_node(pod, required, node):
                continue
            pair = (c.topology_key, node.labels[c.topology_key])
            if pair in state.pair_counts:
                state.pair_counts[pair] += count_matching(node.pods.values(), c.selector, pod.namespace)
    return state


def score(state: ScoreState, node: NodeInfo) -> int:
    if node.name in state.ignored:
        return 0
    total = 0.0
    for i, c in enumerate(state.constraints):
        value = node.labels.get(c.topology_key)
        if value is None:
            continue
        if c.topology_key == HOSTNAME_LABEL:
            count = count_matching(node.pods.values(), c.selector, state.pod.namespace)
        else:
            count = state.pair_counts.get((c.topology_key, value), 0)
        total += count * state.weights[i] + (c.max_skew - 1)
    return math.floor(total + 0.5)  # Go's math.Round: halves away from zero (scores are never negative)


def normalize(state: ScoreState, scores: Mapping[str, int]) -> dict[str, int]:
    counted = {n: s for n, s in scores.items() if n not in state.ignored}
    low = min(counted.values(), default=0)
    high = max(counted.values(), default=0)
    out = {}
    for name, value in scores.items():
        if name in state.ignored:
            out[name] = 0
        elif high == 0:
            out[name] = MAX_NODE_SCORE
        else:
            out[name] = MAX_NODE_SCORE * (high + low - value) // high
    return out

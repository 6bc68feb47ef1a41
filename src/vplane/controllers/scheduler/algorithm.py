"""One scheduling cycle: pre-filter, filter, score, pick a node (upstream ``schedulePod``).

Plugins run in the default profile's order — NodeUnschedulable, NodeName, TaintToleration, NodeAffinity,
NodePorts, NodeResourcesFit, PodTopologySpread, InterPodAffinity — and a node's first failing plugin
gives its reasons. Pods nominated to a node (by an earlier preemption) with at least the incoming pod's
priority count as if they were there. Scores are weighted as the default profile weighs them:
TaintToleration 3, NodeAffinity 2, PodTopologySpread 2, InterPodAffinity 2, NodeResourcesFit 1 and
NodeResourcesBalancedAllocation 1. Ties are broken at random.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from vplane.controllers.scheduler import interpodaffinity, plugins, topologyspread
from vplane.controllers.scheduler.framework import (
    NO_NODES_AVAILABLE,
    SUCCESS,
    Code,
    Diagnosis,
    NodeToStatus,
    Status,
    fit_error_message,
    unresolvable,
)
from vplane.controllers.scheduler.model import NodeInfo, PodInfo
from vplane.controllers.scheduler.nodeselection import (
    PreferredTerm,
    RequiredNodeAffinity,
    pod_tolerations,
    preferred_terms,
    required_node_names,
)

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5

NamespaceLabels = Callable[[str], Mapping[str, str]]


@dataclass(slots=True)
class Snapshot:
    """The cluster as one cycle sees it: schedulable nodes in a stable order, and nominated pods."""

    nodes: list[NodeInfo]
    nominated: Mapping[str, list[PodInfo]] = field(default_factory=dict)
    namespace_labels: NamespaceLabels = lambda _ns: {}

    def __post_init__(self) -> None:
        self.by_name = {n.name: n for n in self.nodes}

    by_name: dict[str, NodeInfo] = field(default_factory=dict, init=False)


@dataclass(slots=True)
class CycleState:
    """What the pre-filters computed for one pod (upstream ``CycleState``)."""

    pod: PodInfo
    tolerations: list[Mapping[str, Any]]
    required: RequiredNodeAffinity
    affinity: interpodaffinity.FilterState | None = None
    spread: topologyspread.FilterState | None = None

    def clone(self) -> CycleState:
        return replace(
            self,
            affinity=self.affinity.clone() if self.affinity is not None else None,
            spread=self.spread.clone() if self.spread is not None else None,
        )

    def add_pod(self, other: PodInfo, node: NodeInfo) -> None:
        node.add_pod(other)
        self._update(other, node, 1)

    def remove_pod(self, other: PodInfo, node: NodeInfo) -> None:
        node.remove_pod(other.key)
        self._update(other, node, -1)

    def _update(self, other: PodInfo, node: NodeInfo, sign: int) -> None:
        if self.affinity is not None:
            self.affinity.update_with_pod(other, node, sign)
        if self.spread is not None:
            self.spread.update_with_pod(other, node, sign)


@dataclass(frozen=True, slots=True)
class PreFilterOutcome:
    state: CycleState
    status: Status = SUCCESS
    node_names: frozenset[str] | None = None
    """NodeAffinity's PreFilterResult: only these nodes can match (None: any)."""
    result_plugins: tuple[str, ...] = ()


def pre_filter(pod: PodInfo, snapshot: Snapshot) -> PreFilterOutcome:
    spec = pod.spec
    state = CycleState(pod, pod_tolerations(spec), RequiredNodeAffinity.of(spec))
    names = required_node_names(spec)
    if names is not None and not names:
        return PreFilterOutcome(
            state, unresolvable(plugins.REASON_AFFINITY_CONFLICT, plugin=plugins.NODE_AFFINITY)
        )
    spread = topologyspread.pre_filter(pod, snapshot.nodes)
    if isinstance(spread, Status):
        return PreFilterOutcome(state, spread.with_plugin(topologyspread.NAME))
    state.spread = spread
    affinity = interpodaffinity.pre_filter(pod, snapshot.nodes, snapshot.namespace_labels)
    if isinstance(affinity, Status):
        return PreFilterOutcome(state, affinity.with_plugin(interpodaffinity.NAME))
    state.affinity = affinity
    if names is not None:
        return PreFilterOutcome(state, node_names=frozenset(names), result_plugins=(plugins.NODE_AFFINITY,))
    return PreFilterOutcome(state)


def run_filters(state: CycleState, node: NodeInfo) -> Status:
    """``RunFilterPlugins``: the first plugin that rejects the node decides."""
    pod = state.pod
    checks: tuple[tuple[str, Callable[[], Status | None]], ...] = (
        (plugins.NODE_UNSCHEDULABLE, lambda: plugins.node_unschedulable(state.tolerations, node)),
        (plugins.NODE_NAME, lambda: plugins.node_name(pod, node)),
        (plugins.TAINT_TOLERATION, lambda: plugins.taint_toleration(state.tolerations, node)),
        (plugins.NODE_AFFINITY, lambda: plugins.node_affinity(state.required, node)),
        (plugins.NODE_PORTS, lambda: plugins.node_ports(pod, node)),
        (plugins.NODE_RESOURCES_FIT, lambda: plugins.node_resources_fit(pod, node)),
        (topologyspread.NAME, lambda: topologyspread.filter_node(state.spread, node)),
        (interpodaffinity.NAME, lambda: interpodaffinity.filter_node(state.affinity, node)),
    )
    for name, check in checks:
        status = check()
        if status is not None:
            return status.with_plugin(name)
    return SUCCESS


def run_filters_with_nominated(state: CycleState, node: NodeInfo, snapshot: Snapshot) -> Status:
    """``RunFilterPluginsWithNominatedPods``: pods nominated to the node with at least this pod's priority
    are added first; if the node passes with them it must also pass without them (affinity to them)."""
    nominated = [
        p
        for p in snapshot.nominated.get(node.name, ())
        if p.priority >= state.pod.priority and p.uid != state.pod.uid and p.key not in node.pods
    ]
    if not nominated:
        return run_filters(state, node)
    with_state, with_node = state.clone(), node.clone()
    for other in nominated:
        with_state.add_pod(other, with_node)
    status = run_filters(with_state, with_node)
    if not status.success:
        return status
    return run_filters(state, node)


def num_feasible_nodes_to_find(percentage: int, num_all_nodes: int) -> int:
    """``numFeasibleNodesToFind``: small clusters are searched whole; large ones until enough fit."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage == 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass(slots=True)
class Result:
    """A cycle's outcome: a node, or why there is none."""

    node: str = ""
    state: CycleState | None = None
    diagnosis: Diagnosis = field(default_factory=Diagnosis)
    num_all_nodes: int = 0
    no_nodes: bool = False
    evaluated: int = 0
    feasible: int = 0

    @property
    def message(self) -> str:
        if self.no_nodes:
            return NO_NODES_AVAILABLE
        return fit_error_message(self.num_all_nodes, self.diagnosis)


@dataclass(slots=True)
class Algorithm:
    percentage_of_nodes_to_score: int = 0
    hard_pod_affinity_weight: int = 1
    rng: random.Random = field(default_factory=random.Random)
    next_start_node_index: int = 0

    def schedule(self, pod: PodInfo, snapshot: Snapshot) -> Result:
        nodes = snapshot.nodes
        if not nodes:
            return Result(no_nodes=True)
        result = Result(num_all_nodes=len(nodes))
        diagnosis = result.diagnosis
        pre = pre_filter(pod, snapshot)
        result.state = pre.state
        if not pre.status.success:
            diagnosis.node_to_status.absent = pre.status
            diagnosis.pre_filter_message = pre.status.message
            diagnosis.add_plugin_status(pre.status)
            return result
        state = pre.state
        if pod.nominated_node_name and pod.nominated_node_name in snapshot.by_name:
            node = snapshot.by_name[pod.nominated_node_name]
            status = run_filters_with_nominated(state, node, snapshot)
            if status.success:
                result.node, result.evaluated, result.feasible = node.name, 1, 1
                return result
            diagnosis.node_to_status.statuses[node.name] = status
            diagnosis.add_plugin_status(status)
        candidates = nodes
        if pre.node_names is not None:
            candidates = [n for n in nodes if n.name in pre.node_names]
            plugin_list = "[" + " ".join(sorted(pre.result_plugins)) + "]"
            diagnosis.node_to_status.absent = unresolvable(f"node(s) didn't satisfy plugin(s) {plugin_list}")
        feasible = self._find_feasible(state, candidates, snapshot, diagnosis, len(nodes))
        result.evaluated = len(feasible) + len(diagnosis.node_to_status.statuses)
        result.feasible = len(feasible)
        if not feasible:
            return result
        if len(feasible) == 1:
            result.node = feasible[0].name
            return result
        result.node = self._select(self.prioritize(state, feasible, snapshot))
        return result

    def _find_feasible(
        self, state: CycleState, nodes: list[NodeInfo], snapshot: Snapshot, diagnosis: Diagnosis, num_all: int
    ) -> list[NodeInfo]:
        if not nodes:
            return []
        wanted = num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, len(nodes))
        feasible: list[NodeInfo] = []
        processed = 0
        for i in range(len(nodes)):
            node = nodes[(self.next_start_node_index + i) % len(nodes)]
            processed += 1
            status = run_filters_with_nominated(state, node, snapshot)
            if status.success:
                feasible.append(node)
                if len(feasible) >= wanted:
                    break
            else:
                diagnosis.node_to_status.statuses[node.name] = status
                diagnosis.add_plugin_status(status)
        self.next_start_node_index = (self.next_start_node_index + processed) % num_all
        return feasible

    def prioritize(self, state: CycleState, nodes: list[NodeInfo], snapshot: Snapshot) -> dict[str, int]:
        """``prioritizeNodes``: each plugin's normalised score times its weight, summed per node."""
        pod = state.pod
        totals = dict.fromkeys((n.name for n in nodes), 0)

        def add(weight: int, scores: Mapping[str, int]) -> None:
            for name, value in scores.items():
                totals[name] += weight * value

        taints = {n.name: plugins.taint_toleration_score(state.tolerations, n) for n in nodes}
        add(3, plugins.default_normalize(taints, reverse=True))
        preferred: tuple[PreferredTerm, ...] = preferred_terms(pod.spec)
        if preferred:
            affinity = {n.name: plugins.node_affinity_score(preferred, n) for n in nodes}
            add(2, plugins.default_normalize(affinity, reverse=False))
        add(1, {n.name: plugins.least_allocated_score(pod, n) for n in nodes})
        spread = topologyspread.pre_score(pod, nodes, snapshot.nodes)
        if spread is not None:
            raw = {n.name: topologyspread.score(spread, n) for n in nodes}
            add(2, topologyspread.normalize(spread, raw))
        pod_affinity = interpodaffinity.pre_score(
            pod, snapshot.nodes, snapshot.namespace_labels, self.hard_pod_affinity_weight
        )
        if pod_affinity is not None:
            raw = {n.name: interpodaffinity.score(pod_affinity, n) for n in nodes}
            add(2, interpodaffinity.normalize(raw))
        if plugins.balanced_allocation_applies(pod):
            add(1, {n.name: plugins.balanced_allocation_score(pod, n) for n in nodes})
        return totals

    def _select(self, totals: Mapping[str, int]) -> str:
        best = max(totals.values())
        return self.rng.choice([name for name, score in totals.items() if score == best])


def statuses_by_code(node_to_status: NodeToStatus, nodes: Iterable[NodeInfo], code: Code) -> list[NodeInfo]:
    """``NodesForStatusCode``: the nodes whose status (or the absent nodes' status) has ``code``."""
    return [n for n in nodes if node_to_status.get(n.name).code == code]

"""InterPodAffinity: required pod affinity and anti-affinity (filter) and the preferred terms (score).

Counts are kept per topology pair (label key, value) as upstream's ``topologyToMatchedTermCount``:

- ``existing_anti``: pairs where an existing pod's required anti-affinity term selects the incoming pod;
- ``affinity``: pairs holding pods that match *all* of the incoming pod's required affinity terms;
- ``anti``: pairs holding pods that match one of its required anti-affinity terms.

A namespace selector is evaluated against the labels of the namespace of the pod being matched (upstream
merges the matching namespaces into the term first; the outcome is the same). The first pod of a group
with affinity to itself may go anywhere that has the topology keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from vplane.controllers.scheduler.framework import Status, unresolvable, unschedulable
from vplane.controllers.scheduler.model import AffinityTerm, NodeInfo, PodInfo, WeightedTerm
from vplane.controllers.scheduler.plugins import MAX_NODE_SCORE

NAME = "InterPodAffinity"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"

NamespaceLabels = Callable[[str], Mapping[str, str]]
Pair = tuple[str, str]


def _update(counts: Counter[Pair], node: NodeInfo, key: str, value: int) -> None:
    label = node.labels.get(key)
    if label is None:
        return
    pair = (key, label)
    counts[pair] += value
    if counts[pair] == 0:
        del counts[pair]


def matches_all(terms: Iterable[AffinityTerm], pod: PodInfo, ns_labels: NamespaceLabels) -> bool:
    """``podMatchesAllAffinityTerms``: false for no terms."""
    terms = tuple(terms)
    if not terms:
        return False
    labels = ns_labels(pod.namespace)
    return all(t.matches_pod(pod, labels) for t in terms)


@dataclass(slots=True)
class FilterState:
    pod: PodInfo
    ns_labels: NamespaceLabels
    existing_anti: Counter[Pair] = field(default_factory=Counter)
    affinity: Counter[Pair] = field(default_factory=Counter)
    anti: Counter[Pair] = field(default_factory=Counter)

    def clone(self) -> FilterState:
        return FilterState(
            self.pod, self.ns_labels, Counter(self.existing_anti), Counter(self.affinity), Counter(self.anti)
        )

    def update_with_pod(self, other: PodInfo, node: NodeInfo, sign: int) -> None:
        """PreFilter extensions AddPod/RemovePod: ``other`` joins or leaves ``node``."""
        incoming_labels = self.ns_labels(self.pod.namespace)
        for term in other.required_anti_affinity:
            if term.matches_pod(self.pod, incoming_labels):
                _update(self.existing_anti, node, term.topology_key, sign)
        if matches_all(self.pod.required_affinity, other, self.ns_labels):
            for term in self.pod.required_affinity:
                _update(self.affinity, node, term.topology_key, sign)
        other_labels = self.ns_labels(other.namespace)
        for term in self.pod.required_anti_affinity:
            if term.matches_pod(other, other_labels):
                _update(self.anti, node, term.topology_key, sign)


def pre_filter(
    pod: PodInfo, nodes: Iterable[NodeInfo], ns_labels: NamespaceLabels
) -> FilterState | Status | None:
    """The filter's state, a rejection for a pod whose terms do not parse, or None (nothing to check)."""
    if pod.parse_errors:
        errors = pod.parse_errors
        text = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        return unresolvable(f"parsing pod: {text}")
    state = FilterState(pod, ns_labels)
    incoming_labels = ns_labels(pod.namespace)
    nodes = list(nodes)
    for node in nodes:
        if not node.pods_with_required_anti_affinity:
            continue
        for existing in node.pods.values():
            for term in existing.required_anti_affinity:
                if term.matches_pod(pod, incoming_labels):
                    _update(state.existing_anti, node, term.topology_key, 1)
    if not state.existing_anti and not pod.required_affinity and not pod.required_anti_affinity:
        return None
    if pod.required_affinity or pod.required_anti_affinity:
        for node in nodes:
            for existing in node.pods.values():
                if matches_all(pod.required_affinity, existing, ns_labels):
                    for term in pod.required_affinity:
                        _update(state.affinity, node, term.topology_key, 1)
                existing_labels = ns_labels(existing.namespace)
                for term in pod.required_anti_affinity:
                    if term.matches_pod(existing, existing_labels):
                        _update(state.anti, node, term.topology_key, 1)
    return state


def _satisfies_affinity(state: FilterState, node: NodeInfo) -> bool:
    pods_exist = True
    for term in state.pod.required_affinity:
        value = node.labels.get(term.topology_key)
        if value is None:
            return False  # every topology label must exist on the node
        if state.affinity.get((term.topology_key, value), 0) <= 0:
            pods_exist = False
    if pods_exist:
        return True
    # The first pod of a group with affinity to itself: no pod matches anywhere, but it matches itself.
    return not state.affinity and matches_all(state.pod.required_affinity, state.pod, state.ns_labels)


def _satisfies_anti_affinity(state: FilterState, node: NodeInfo) -> bool:
    if not state.anti:
        return True
    for term in state.pod.required_anti_affinity:
        value = node.labels.get(term.topology_key)
        if value is not None and state.anti.get((term.topology_key, value), 0) > 0:
            return False
    return True


def _satisfies_existing_anti_affinity(state: FilterState, node: NodeInfo) -> bool:
    if not state.existing_anti:
        return True
    return not any(state.existing_anti.get(pair, 0) > 0 for pair in node.labels.items())


def filter_node(state: FilterState | None, node: NodeInfo) -> Status | None:
    if state is None:
        return None
    if not _satisfies_affinity(state, node):
        return unresolvable(REASON_AFFINITY)
    if not _satisfies_anti_affinity(state, node):
        return unschedulable(REASON_ANTI_AFFINITY)
    if not _satisfies_existing_anti_affinity(state, node):
        return unschedulable(REASON_EXISTING_ANTI_AFFINITY)
    return None


# -- scoring -------------------------------------------------------------------------------------------

TopologyScore = dict[str, dict[str, int]]


def _process_terms(
    scores: TopologyScore,
    terms: Iterable[WeightedTerm],
    pod: PodInfo,
    ns_labels: Mapping[str, str],
    node: NodeInfo,
    sign: int,
) -> None:
    for weighted in terms:
        _process_term(scores, weighted.term, weighted.weight, pod, ns_labels, node, sign)


def _process_term(
    scores: TopologyScore,
    term: AffinityTerm,
    weight: int,
    pod: PodInfo,
    ns_labels: Mapping[str, str],
    node: NodeInfo,
    sign: int,
) -> None:
    if not term.matches_pod(pod, ns_labels):
        return
    value = node.labels.get(term.topology_key)
    if value is None:
        return
    by_value = scores.setdefault(term.topology_key, {})
    by_value[value] = by_value.get(value, 0) + weight * sign


def pre_score(
    pod: PodInfo, nodes: Iterable[NodeInfo], ns_labels: NamespaceLabels, hard_pod_affinity_weight: int
) -> TopologyScore | None:
    """Weights per topology pair from the incoming pod's preferred terms and existing pods' terms; None
    when nothing applies (the plugin is skipped)."""
    has_constraints = bool(pod.preferred_affinity or pod.preferred_anti_affinity)
    incoming_labels = ns_labels(pod.namespace)
    scores: TopologyScore = {}
    for node in nodes:
        if not node.labels or not (has_constraints or node.pods_with_affinity):
            continue
        for existing in node.pods.values():
            if not has_constraints and not existing.has_affinity:
                continue
            existing_labels = ns_labels(existing.namespace)
            _process_terms(scores, pod.preferred_affinity, existing, existing_labels, node, 1)
            _process_terms(scores, pod.preferred_anti_affinity, existing, existing_labels, node, -1)
            if hard_pod_affinity_weight > 0:
                for term in existing.required_affinity:
                    _process_term(scores, term, hard_pod_affinity_weight, pod, incoming_labels, node, 1)
            _process_terms(scores, existing.preferred_affinity, pod, incoming_labels, node, 1)
            _process_terms(scores, existing.preferred_anti_affinity, pod, incoming_labels, node, -1)
    return scores or None


def score(state: TopologyScore, node: NodeInfo) -> int:
    return sum(values.get(node.labels[key], 0) for key, values in state.items() if key in node.labels)


def normalize(scores: dict[str, int]) -> dict[str, int]:
    """Min-max scaling to [0, 100]; all equal scores become 0."""
    if not scores:
        return scores
    low, high = min(scores.values()), max(scores.values())
    spread = high - low
    if spread <= 0:
        return {n: 0 for n in scores}
    return {n: int(MAX_NODE_SCORE * ((s - low) / spread)) for n, s in scores.items()}

"""DefaultPreemption: find lower-priority pods whose removal lets the pod fit, and pick a node.

For each node the filters rejected with ``Unschedulable`` (not ``UnschedulableAndUnresolvable``: taints,
node affinity and the like are not solved by removing pods), every pod of lower priority is removed and
the filters run again; if the pod fits, the removed pods are given back one at a time, most important
first (PodDisruptionBudget-violating ones before the others), keeping back each one the pod still fits
with. The node is then chosen by the fewest budget violations, the lowest highest-victim priority, the
smallest priority sum, the fewest victims, the latest start, in that order. With no candidate the
message is a second ``FitError`` over the dry-run's statuses, the other nodes reading ``Preemption is
not helpful for scheduling``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vplane.controllers.leaderelection import parse_micro_time
from vplane.controllers.scheduler.algorithm import CycleState, Snapshot, run_filters_with_nominated
from vplane.controllers.scheduler.framework import (
    Code,
    Diagnosis,
    NodeToStatus,
    Status,
    fit_error_message,
    unresolvable,
)
from vplane.controllers.scheduler.model import NodeInfo, PodInfo
from vplane.kube import labels
from vplane.kube.errors import StatusError

NAME = "DefaultPreemption"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."
PREFIX = "preemption: "
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class Budget:
    """The parts of a PodDisruptionBudget preemption reads."""

    namespace: str
    selector: labels.Selector | None
    disruptions_allowed: int
    disrupted_pods: frozenset[str]

    @classmethod
    def of(cls, pdb: Mapping[str, Any]) -> Budget:
        meta, spec, status = _d(pdb.get("metadata")), _d(pdb.get("spec")), _d(pdb.get("status"))
        try:
            raw = spec.get("selector")
            selector = labels.from_label_selector(raw if isinstance(raw, dict) else None)
        except StatusError:
            selector = None  # an invalid selector matches no pod
        allowed = status.get("disruptionsAllowed")
        return cls(
            namespace=str(meta.get("namespace") or ""),
            selector=selector,
            disruptions_allowed=allowed if isinstance(allowed, int) else 0,
            disrupted_pods=frozenset(_d(status.get("disruptedPods"))),
        )


def split_by_budget(
    pods: Sequence[PodInfo], budgets: Sequence[Budget]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """``filterPodsWithPDBViolation``: (violating, non-violating), each keeping the input order. A pod
    violates when evicting it (and those before it) takes a matching budget below zero."""
    allowed = [b.disruptions_allowed for b in budgets]
    violating: list[PodInfo] = []
    fine: list[PodInfo] = []
    for pod in pods:
        violated = False
        if pod.labels:
            for i, budget in enumerate(budgets):
                if budget.namespace != pod.namespace or budget.selector is None:
                    continue
                if budget.selector.empty or not budget.selector.matches(pod.labels):
                    continue
                if pod.name in budget.disrupted_pods:
                    continue  # already counted by the API server's eviction
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        (violating if violated else fine).append(pod)
    return violating, fine


def _start_time(pod: PodInfo, now: float) -> float:
    """``GetPodStartTime``: ``status.startTime``, or now for a pod that has not started."""
    started = parse_micro_time(_d(pod.pod.get("status")).get("startTime"))
    return started if started is not None else now


def importance_key(now: float) -> Callable[[PodInfo], tuple[int, float]]:
    """``MoreImportantPod`` as a sort key: higher priority first, then the earlier start."""
    return lambda pod: (-pod.priority, _start_time(pod, now))


@dataclass(slots=True)
class Victims:
    pods: list[PodInfo]
    pdb_violations: int


def select_victims_on_node(
    state: CycleState, node: NodeInfo, snapshot: Snapshot, budgets: Sequence[Budget], now: float
) -> tuple[Victims | None, Status]:
    """``SelectVictimsOnNode`` on copies of the node and the cycle state."""
    state, node = state.clone(), node.clone()
    pod = state.pod
    potential = [p for p in node.pods.values() if p.priority < pod.priority]
    if not potential:
        return None, unresolvable(NO_VICTIMS)
    for victim in potential:
        state.remove_pod(victim, node)
    status = run_filters_with_nominated(state, node, snapshot)
    if not status.success:
        return None, status
    potential.sort(key=importance_key(now))
    violating, fine = split_by_budget(potential, budgets)
    victims: list[PodInfo] = []
    violations = 0

    def reprieve(candidate: PodInfo) -> bool:
        state.add_pod(candidate, node)
        if run_filters_with_nominated(state, node, snapshot).success:
            return True
        state.remove_pod(candidate, node)
        victims.append(candidate)
        return False

    for candidate in violating:
        if not reprieve(candidate):
            violations += 1
    for candidate in fine:
        reprieve(candidate)
    if violating and fine:
        victims.sort(key=importance_key(now))
    if not victims:
        return None, Status(Code.ERROR, (f'expected at least one victim pod on node "{node.name}"',))
    return Victims(victims, violations), Status(Code.SUCCESS)


def pick_one_node(candidates: Mapping[str, Victims], now: float) -> str:
    """``pickOneNodeForPreemption`` with the default score functions, in order."""
    if not candidates:
        return ""

    def earliest_start(node: str) -> float:
        # ``GetEarliestPodStartTime``: among the highest-priority victims; the later, the better.
        pods = candidates[node].pods
        top = max(p.priority for p in pods)
        return min(_start_time(p, now) for p in pods if p.priority == top)

    scorers: list[Callable[[str], float]] = [
        lambda n: -candidates[n].pdb_violations,
        lambda n: -candidates[n].pods[0].priority,
        lambda n: -sum(p.priority + 2**31 for p in candidates[n].pods),
        lambda n: -len(candidates[n].pods),
        earliest_start,
    ]
    names = list(candidates)
    for scorer in scorers:
        scores = {n: scorer(n) for n in names}
        best = max(scores.values())
        names = [n for n in names if scores[n] == best]
        if len(names) == 1:
            return names[0]
    return names[0]


def eligible(pod: PodInfo, node_to_status: NodeToStatus, snapshot: Snapshot) -> tuple[bool, str]:
    """``PodEligibleToPreemptOthers``."""
    if pod.spec.get("preemptionPolicy") == "Never":
        return False, NEVER
    nominated = pod.nominated_node_name
    if nominated:
        if node_to_status.get(nominated).code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return True, ""
        node = snapshot.by_name.get(nominated)
        if node is not None:
            for other in node.pods.values():
                if other.priority < pod.priority and other.deleting and _preempted(other):
                    return False, TERMINATING
    return True, ""


def _preempted(pod: PodInfo) -> bool:
    for condition in _d(pod.pod.get("status")).get("conditions") or []:
        condition = _d(condition)
        if condition.get("type") == DISRUPTION_TARGET:
            return condition.get("status") == "True" and condition.get("reason") == PREEMPTION_BY_SCHEDULER
    return False


@dataclass(slots=True)
class Outcome:
    """A preemption attempt: on success a node and what to delete; otherwise the message."""

    code: Code
    message: str = ""
    node: str = ""
    victims: list[PodInfo] = field(default_factory=list)
    clear_nominations: list[PodInfo] = field(default_factory=list)
    nominate: bool = False
    """Whether the pod's ``nominatedNodeName`` is to be set to ``node`` (cleared when ``node`` is empty)."""


def num_candidates(num_nodes: int, percentage: int, absolute: int) -> int:
    n = num_nodes * percentage // 100
    return min(max(n, absolute), num_nodes)


def preempt(
    state: CycleState,
    diagnosis: Diagnosis,
    snapshot: Snapshot,
    budgets: Sequence[Budget],
    *,
    now: float,
    rng: random.Random,
    min_candidate_percentage: int = 10,
    min_candidate_absolute: int = 100,
) -> Outcome:
    """``Evaluator.Preempt``; the message is returned without the ``preemption:`` prefix."""
    pod = state.pod
    ok, why = eligible(pod, diagnosis.node_to_status, snapshot)
    if not ok:
        return Outcome(Code.UNSCHEDULABLE, why)
    all_nodes = snapshot.nodes
    potential = [n for n in all_nodes if diagnosis.node_to_status.get(n.name).code == Code.UNSCHEDULABLE]
    statuses = NodeToStatus(absent=unresolvable(NOT_HELPFUL))
    candidates: dict[str, Victims] = {}
    errors: list[str] = []
    if potential:
        offset = rng.randrange(len(potential))
        wanted = num_candidates(len(potential), min_candidate_percentage, min_candidate_absolute)
        non_violating = violating = 0
        for i in range(len(potential)):
            node = potential[(offset + i) % len(potential)]
            victims, status = select_victims_on_node(state, node, snapshot, budgets, now)
            if victims is not None:
                candidates[node.name] = victims
                if victims.pdb_violations == 0:
                    non_violating += 1
                else:
                    violating += 1
                if non_violating > 0 and non_violating + violating >= wanted:
                    break
                continue
            if status.code == Code.ERROR:
                errors.append(status.message)
            statuses.statuses[node.name] = status
    if not candidates:
        if errors:
            return Outcome(Code.ERROR, errors[0])
        message = fit_error_message(len(all_nodes), Diagnosis(node_to_status=statuses))
        # The pod's nomination is cleared: no node will have room for it.
        return Outcome(Code.UNSCHEDULABLE, message, nominate=True)
    best = pick_one_node(candidates, now)
    chosen = candidates[best]
    lower = [
        p
        for p in snapshot.nominated.get(best, ())
        if p.priority < pod.priority and p.nominated_node_name == best
    ]
    return Outcome(Code.SUCCESS, node=best, victims=chosen.pods, clear_nominations=lower, nominate=True)


def disruption_condition(scheduler_name: str) -> dict[str, str]:
    """The condition a victim gets before it is deleted (``PreemptPod``)."""
    return {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": PREEMPTION_BY_SCHEDULER,
        "message": f"{scheduler_name}: preempting to accommodate a higher priority pod",
    }


def post_filter_message(outcome: Outcome, dra_note: bool) -> str:
    """``RunPostFilterPlugins``'s message: the DynamicResources note (pods without claims), then ours."""
    if outcome.code == Code.SUCCESS:
        return ""
    reasons = ["no new claims to deallocate"] if dra_note else []
    if outcome.message:
        reasons.append(PREFIX + outcome.message)
    return ", ".join(reasons)

"""DefaultPreemption: victims, reprieve order, PodDisruptionBudgets, node choice and the messages."""

from __future__ import annotations

import random

from test_scheduler_builders import cluster, node, pod, schedule

from vplane.controllers.scheduler import preemption
from vplane.controllers.scheduler.cache import SchedulerCache
from vplane.controllers.scheduler.framework import Code
from vplane.controllers.scheduler.model import PodInfo
from vplane.controllers.scheduler.preemption import Budget, Victims, pick_one_node, split_by_budget


def attempt(cache: SchedulerCache, incoming: dict, *, dra: bool = False) -> tuple[preemption.Outcome, str]:
    result = schedule(cache, incoming)
    assert not result.node and result.state is not None
    outcome = preemption.preempt(
        result.state,
        result.diagnosis,
        cache.snapshot(),
        list(cache.budgets.values()),
        now=1e9,
        rng=random.Random(0),
    )
    result.diagnosis.post_filter_message = preemption.post_filter_message(outcome, dra)
    return outcome, result.message


def pdb(
    name: str, allowed: int, namespace: str = "default", disrupted: tuple[str, ...] = (), **labels: str
) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": labels}},
        "status": {
            "disruptionsAllowed": allowed,
            "disruptedPods": dict.fromkeys(disrupted, "2026-01-01T00:00:00Z"),
        },
    }


def test_no_lower_priority_pods_means_no_victims() -> None:
    cache = cluster([node("n1", cpu="1")], [pod("a", cpu="1", node_name="n1", priority=10)])
    outcome, message = attempt(cache, pod("p", cpu="1", priority=10))
    assert outcome.code == Code.UNSCHEDULABLE
    assert message == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
        "1 No preemption victims found for incoming pod."
    )


def test_the_dynamic_resources_note_comes_first_as_in_1_34_and_later() -> None:
    cache = cluster([node("n1", cpu="1")], [pod("a", cpu="1", node_name="n1", priority=10)])
    _, message = attempt(cache, pod("p", cpu="1", priority=10), dra=True)
    assert message == (
        "0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, preemption: "
        "0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )


def test_unresolvable_nodes_are_not_helped_by_preemption() -> None:
    nodes = [node("n1", cpu="1"), node("n2", taints=[{"key": "k", "effect": "NoSchedule"}])]
    cache = cluster(nodes, [pod("a", cpu="1", node_name="n1", priority=10)])
    outcome, message = attempt(cache, pod("p", cpu="1", priority=10))
    assert message == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint(s). preemption: "
        "0/2 nodes are available: 1 No preemption victims found for incoming pod, "
        "1 Preemption is not helpful for scheduling."
    )
    assert outcome.nominate and outcome.node == ""  # any earlier nomination is cleared


def test_still_not_fitting_without_all_victims_reports_the_filter() -> None:
    cache = cluster([node("n1", cpu="1")], [pod("a", cpu="500m", node_name="n1", priority=1)])
    _, message = attempt(cache, pod("p", cpu="2", priority=10))
    assert message.endswith("preemption: 0/1 nodes are available: 1 Insufficient cpu.")


def test_preemption_policy_never() -> None:
    cache = cluster([node("n1", cpu="1")], [pod("a", cpu="1", node_name="n1", priority=1)])
    outcome, message = attempt(cache, pod("p", cpu="1", priority=10, preemptionPolicy="Never"))
    assert outcome.code == Code.UNSCHEDULABLE and not outcome.nominate
    assert (
        message
        == "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    )


def test_the_fewest_and_least_important_victims_are_chosen() -> None:
    pods = [
        pod("low", cpu="1", node_name="n1", priority=1),
        pod("mid", cpu="1", node_name="n1", priority=5),
        pod("high", cpu="1", node_name="n1", priority=100),
    ]
    cache = cluster([node("n1", cpu="3")], pods)
    outcome, message = attempt(cache, pod("p", cpu="1", priority=10))
    assert outcome.code == Code.SUCCESS and outcome.node == "n1"
    assert [v.name for v in outcome.victims] == ["low"]  # mid is reprieved first and fits back
    assert message == "0/1 nodes are available: 1 Insufficient cpu."


def test_every_lower_pod_that_must_go_goes() -> None:
    pods = [pod(f"low{i}", cpu="1", node_name="n1", priority=i) for i in range(3)]
    cache = cluster([node("n1", cpu="3")], pods)
    outcome, _ = attempt(cache, pod("p", cpu="2500m", priority=10))
    assert sorted(v.name for v in outcome.victims) == ["low0", "low1", "low2"]
    assert [v.priority for v in outcome.victims] == [2, 1, 0]  # most important first


def test_the_node_with_lower_priority_victims_is_chosen() -> None:
    pods = [pod("a", cpu="1", node_name="n1", priority=5), pod("b", cpu="1", node_name="n2", priority=1)]
    cache = cluster([node("n1", cpu="1"), node("n2", cpu="1")], pods)
    outcome, _ = attempt(cache, pod("p", cpu="1", priority=10))
    assert outcome.node == "n2" and [v.name for v in outcome.victims] == ["b"]


def test_budgets_steer_preemption_to_pods_they_allow() -> None:
    pods = [
        pod("guarded", cpu="1", node_name="n1", priority=1, labels={"app": "db"}),
        pod("free", cpu="1", node_name="n2", priority=1, labels={"app": "web"}),
    ]
    cache = cluster([node("n1", cpu="1"), node("n2", cpu="1")], pods)
    cache.set_budget("default/db", pdb("db", 0, app="db"))
    outcome, _ = attempt(cache, pod("p", cpu="1", priority=10))
    assert outcome.node == "n2"


def test_a_budget_is_violated_only_when_nothing_else_helps() -> None:
    cache = cluster(
        [node("n1", cpu="1")], [pod("guarded", cpu="1", node_name="n1", priority=1, labels={"app": "db"})]
    )
    cache.set_budget("default/db", pdb("db", 0, app="db"))
    outcome, _ = attempt(cache, pod("p", cpu="1", priority=10))
    assert outcome.code == Code.SUCCESS and [v.name for v in outcome.victims] == ["guarded"]


def test_split_by_budget() -> None:
    a, b, c = (PodInfo.of(pod(n, labels={"app": "db"})) for n in "abc")
    other = PodInfo.of(pod("x", namespace="other", labels={"app": "db"}))
    budgets = [Budget.of(pdb("db", 1, app="db", disrupted=("c",)))]
    violating, fine = split_by_budget([a, b, c, other], budgets)
    # a uses the one allowed disruption; b goes below zero; c was already counted by the API server
    assert [p.name for p in violating] == ["b"]
    assert [p.name for p in fine] == ["a", "c", "x"]
    assert split_by_budget([a], [Budget.of({"metadata": {"namespace": "default"}, "spec": {}})]) == ([], [a])


def test_pick_one_node_order_of_criteria() -> None:
    low = PodInfo.of(pod("low", priority=1))
    mid = PodInfo.of(pod("mid", priority=5))
    assert pick_one_node({"a": Victims([low], 1), "b": Victims([mid], 0)}, 0) == "b"
    assert pick_one_node({"a": Victims([mid], 0), "b": Victims([low], 0)}, 0) == "b"
    assert pick_one_node({"a": Victims([low, low], 0), "b": Victims([low], 0)}, 0) == "b"
    assert pick_one_node({}, 0) == ""


def test_lower_priority_pods_nominated_to_the_node_lose_their_nomination() -> None:
    nominated = pod("waiting", cpu="1", priority=1)
    nominated["status"]["nominatedNodeName"] = "n1"
    cache = cluster([node("n1", cpu="1")], [pod("a", cpu="1", node_name="n1", priority=1), nominated])
    outcome, _ = attempt(cache, pod("p", cpu="1", priority=10))
    assert outcome.node == "n1" and [p.name for p in outcome.clear_nominations] == ["waiting"]


def test_nominated_pods_of_higher_priority_hold_room() -> None:
    nominated = pod("first", cpu="1", priority=100)
    nominated["status"]["nominatedNodeName"] = "n1"
    cache = cluster([node("n1", cpu="1")], [nominated])
    assert (
        schedule(cache, pod("p", cpu="1", priority=10)).message
        == "0/1 nodes are available: 1 Insufficient cpu."
    )
    assert schedule(cache, pod("q", cpu="1", priority=1000)).node == "n1"


def test_a_pod_goes_to_its_nominated_node_first() -> None:
    incoming = pod("p", cpu="1", priority=10)
    incoming["status"]["nominatedNodeName"] = "n2"
    cache = cluster([node("n1"), node("n2")])
    for seed in range(5):
        assert schedule(cache, incoming, seed).node == "n2"

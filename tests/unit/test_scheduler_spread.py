"""PodTopologySpread: maxSkew, minDomains, missing labels, node inclusion policies, ScheduleAnyway."""

from __future__ import annotations

from test_scheduler_builders import cluster, node, pod, schedule

from vplane.controllers.scheduler import topologyspread
from vplane.controllers.scheduler.model import PodInfo

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def spread(key: str = ZONE, skew: int = 1, when: str = "DoNotSchedule", **extra: object) -> dict:
    return {
        "maxSkew": skew,
        "topologyKey": key,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"app": "web"}},
        **extra,
    }


def web(name: str, node_name: str | None = None, *constraints: dict, **kw: object) -> dict:
    spec = {"topologySpreadConstraints": list(constraints)} if constraints else {}
    return pod(name, labels={"app": "web"}, node_name=node_name, **spec, **kw)  # type: ignore[arg-type]


def zones() -> list[dict]:
    return [node("a1", labels={ZONE: "a"}), node("a2", labels={ZONE: "a"}), node("b1", labels={ZONE: "b"})]


def test_max_skew_sends_the_pod_to_the_emptier_zone() -> None:
    cache = cluster(zones(), [web("w1", "a1")])
    result = schedule(cache, web("w2", None, spread()))
    assert result.node == "b1"
    assert result.diagnosis.node_to_status.get("a2").reasons == (
        "node(s) didn't match pod topology spread constraints",
    )


def test_skew_within_the_limit_is_allowed_anywhere() -> None:
    cache = cluster(zones(), [web("w1", "a1")])
    for seed in range(4):
        assert schedule(cache, web("w2", None, spread(skew=2)), seed).node


def test_nodes_missing_the_topology_key_are_unresolvable() -> None:
    cache = cluster([node("plain")])
    result = schedule(cache, web("w1", None, spread()))
    assert result.message == (
        "0/1 nodes are available: 1 node(s) didn't match pod topology spread constraints (missing required label)."
    )


def test_only_pods_the_selector_picks_in_the_same_namespace_count() -> None:
    cache = cluster(
        zones(),
        [
            pod("other", labels={"app": "db"}, node_name="a1"),
            pod("elsewhere", namespace="ns2", labels={"app": "web"}, node_name="a1"),
        ],
    )
    for seed in range(4):
        assert schedule(cache, web("w", None, spread()), seed).node


def test_terminating_pods_do_not_count() -> None:
    leaving = web("w1", "a1")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cache = cluster([node("a1", labels={ZONE: "a"}), node("b1", labels={ZONE: "b"})], [leaving])
    assert schedule(cache, web("w2", None, spread())).feasible == 2
    del leaving["metadata"]["deletionTimestamp"]
    assert (
        schedule(
            cluster([node("a1", labels={ZONE: "a"}), node("b1", labels={ZONE: "b"})], [leaving]),
            web("w2", None, spread()),
        ).feasible
        == 1
    )


def test_min_domains_treats_the_global_minimum_as_zero() -> None:
    cache = cluster(zones(), [web("w1", "b1"), web("w2", "a1")])
    # two domains with one pod each; minDomains 3 makes the minimum 0, so skew 1+1-0 > 1 everywhere
    result = schedule(cache, web("w3", None, spread(minDomains=3)))
    assert (
        result.message == "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints."
    )


def test_node_affinity_policy_honours_the_pods_node_selector_when_counting() -> None:
    nodes = [node("a1", labels={ZONE: "a", "pool": "x"}), node("b1", labels={ZONE: "b"})]
    cache = cluster(nodes, [web("w1", "b1"), web("w2", "b1")])
    incoming = web("w3", None, spread(), nodeSelector={"pool": "x"})
    # zone b is not counted (its node does not match the selector), so a can take the pod
    assert schedule(cache, incoming).node == "a1"
    ignoring = web("w3", None, spread(nodeAffinityPolicy="Ignore", skew=1), nodeSelector={"pool": "x"})
    assert schedule(cache, ignoring).node == "a1"  # a has 0, b has 2: 0+1-0 <= 1


def test_node_taints_policy_honor_skips_tainted_domains() -> None:
    tainted = node("b1", labels={ZONE: "b"}, taints=[{"key": "k", "effect": "NoSchedule"}])
    cache = cluster([node("a1", labels={ZONE: "a"}), tainted], [web("w1", "a1")])
    # b is tainted: with Honor only zone a counts, so its minimum is 1 and the pod fits in a again
    honoring = web("w2", None, spread(nodeTaintsPolicy="Honor"))
    assert schedule(cache, honoring).node == "a1"
    assert not schedule(cache, web("w2", None, spread())).node  # a: 1+1-0 > 1; b is tainted


def test_match_label_keys_narrow_the_selector_to_the_pods_own_values() -> None:
    cache = cluster(zones(), [pod("old", labels={"app": "web", "rev": "1"}, node_name="a1")])
    constraint = spread(matchLabelKeys=["rev"])
    new = pod("new", labels={"app": "web", "rev": "2"}, topologySpreadConstraints=[constraint])
    assert schedule(cache, new).feasible == 3  # the old revision does not count
    same_revision = pod("new", labels={"app": "web", "rev": "1"}, topologySpreadConstraints=[constraint])
    assert schedule(cache, same_revision).node == "b1"


def test_schedule_anyway_prefers_the_emptier_domain() -> None:
    cache = cluster(zones(), [web("w1", "a1"), web("w2", "a2")])
    for seed in range(5):
        assert schedule(cache, web("w3", None, spread(when="ScheduleAnyway")), seed).node == "b1"


def test_scores_normalise_so_the_emptiest_domain_gets_100() -> None:
    cache = cluster(zones(), [web("w1", "a1")])
    snap = cache.snapshot()
    incoming = PodInfo.of(web("w2", None, spread(when="ScheduleAnyway")))
    state = topologyspread.pre_score(incoming, snap.nodes, snap.nodes)
    assert state is not None
    raw = {n.name: topologyspread.score(state, n) for n in snap.nodes}
    assert raw["a1"] == raw["a2"] > raw["b1"] == 0
    assert topologyspread.normalize(state, raw) == {"a1": 0, "a2": 0, "b1": 100}

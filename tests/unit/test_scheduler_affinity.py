"""InterPodAffinity: required affinity and anti-affinity (both directions), namespaces, preferred terms."""

from __future__ import annotations

from test_scheduler_builders import cluster, node, pod, schedule

from vplane.controllers.scheduler import interpodaffinity
from vplane.controllers.scheduler.model import PodInfo

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def term(key: str = HOST, **match: str) -> dict:
    return {"labelSelector": {"matchLabels": match}, "topologyKey": key}


def affine(*terms: dict, anti: bool = False, preferred: bool = False, weight: int = 10) -> dict:
    field = "podAntiAffinity" if anti else "podAffinity"
    if preferred:
        items = [{"weight": weight, "podAffinityTerm": t} for t in terms]
        return {field: {"preferredDuringSchedulingIgnoredDuringExecution": items}}
    return {field: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def zones() -> list[dict]:
    return [node("a1", labels={ZONE: "a"}), node("a2", labels={ZONE: "a"}), node("b1", labels={ZONE: "b"})]


def test_required_affinity_goes_where_a_matching_pod_runs_in_the_same_domain() -> None:
    cache = cluster(zones(), [pod("db", labels={"app": "db"}, node_name="a1")])
    incoming = pod("web", affinity=affine(term(ZONE, app="db")))
    result = schedule(cache, incoming)
    assert result.node in ("a1", "a2")
    assert result.diagnosis.node_to_status.get("b1").reasons == ("node(s) didn't match pod affinity rules",)


def test_required_affinity_with_no_match_anywhere_is_unschedulable() -> None:
    cache = cluster(zones(), [pod("db", labels={"app": "db"}, node_name="a1")])
    result = schedule(cache, pod("web", affinity=affine(term(ZONE, app="cache"))))
    assert result.message == "0/3 nodes are available: 3 node(s) didn't match pod affinity rules."


def test_the_first_pod_of_a_self_affine_group_may_go_anywhere() -> None:
    cache = cluster(zones())
    result = schedule(cache, pod("web", labels={"app": "web"}, affinity=affine(term(ZONE, app="web"))))
    assert result.node


def test_nodes_without_the_topology_key_fail_affinity() -> None:
    cache = cluster([node("plain"), *zones()], [pod("db", labels={"app": "db"}, node_name="b1")])
    result = schedule(cache, pod("web", affinity=affine(term(ZONE, app="db"))))
    assert result.node == "b1"
    assert result.diagnosis.node_to_status.get("plain").reasons == (
        "node(s) didn't match pod affinity rules",
    )


def test_anti_affinity_keeps_pods_apart_per_host() -> None:
    cache = cluster(zones(), [pod("w1", labels={"app": "web"}, node_name="a1")])
    incoming = pod("w2", labels={"app": "web"}, affinity=affine(term(HOST, app="web"), anti=True))
    result = schedule(cache, incoming)
    assert result.node in ("a2", "b1")
    assert result.diagnosis.node_to_status.get("a1").reasons == (
        "node(s) didn't match pod anti-affinity rules",
    )


def test_existing_pods_anti_affinity_keeps_the_incoming_pod_out_of_their_zone() -> None:
    guard = pod("guard", node_name="a1", affinity=affine(term(ZONE, app="web"), anti=True))
    cache = cluster(zones(), [guard])
    result = schedule(cache, pod("web", labels={"app": "web"}))
    assert result.node == "b1"
    reasons = {result.diagnosis.node_to_status.get(n).reasons for n in ("a1", "a2")}
    assert reasons == {("node(s) didn't satisfy existing pods anti-affinity rules",)}


def test_anti_affinity_everywhere_is_a_sorted_count() -> None:
    cache = cluster(
        [node("n1"), node("n2"), node("n3", cpu="0")],
        [pod("w1", labels={"app": "web"}, node_name="n1"), pod("w2", labels={"app": "web"}, node_name="n2")],
    )
    incoming = pod("w3", cpu="1", labels={"app": "web"}, affinity=affine(term(HOST, app="web"), anti=True))
    assert schedule(cache, incoming).message == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match pod anti-affinity rules."
    )


def test_terms_select_the_pod_namespace_unless_told_otherwise() -> None:
    cache = cluster(
        zones(),
        [pod("db", namespace="data", labels={"app": "db"}, node_name="b1")],
        namespaces={"data": {"team": "storage"}, "default": {}},
    )
    same_namespace = pod("web", affinity=affine(term(ZONE, app="db")))
    assert not schedule(cache, same_namespace).node
    named = term(ZONE, app="db") | {"namespaces": ["data"]}
    assert schedule(cache, pod("web", affinity=affine(named))).node == "b1"
    by_label = term(ZONE, app="db") | {"namespaceSelector": {"matchLabels": {"team": "storage"}}}
    assert schedule(cache, pod("web", affinity=affine(by_label))).node == "b1"
    everywhere = term(ZONE, app="db") | {"namespaceSelector": {}}
    assert schedule(cache, pod("web", affinity=affine(everywhere))).node == "b1"


def test_a_selector_that_does_not_parse_rejects_the_pod_before_filtering() -> None:
    bad = {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}, "topologyKey": HOST}
    result = schedule(cluster(zones()), pod("web", affinity=affine(bad)))
    assert result.diagnosis.pre_filter_message.startswith("parsing pod: ")
    assert result.message.startswith("0/3 nodes are available: parsing pod: ")


def test_preferred_affinity_and_anti_affinity_score_domains() -> None:
    cache = cluster(zones(), [pod("db", labels={"app": "db"}, node_name="b1")])
    near = pod("web", affinity=affine(term(ZONE, app="db"), preferred=True))
    for seed in range(5):
        assert schedule(cache, near, seed).node == "b1"
    far = pod("web", affinity=affine(term(ZONE, app="db"), anti=True, preferred=True))
    for seed in range(5):
        assert schedule(cache, far, seed).node in ("a1", "a2")


def test_existing_pods_preferences_attract_the_incoming_pod() -> None:
    friendly = pod("cache", node_name="a2", affinity=affine(term(HOST, app="web"), preferred=True, weight=50))
    cache = cluster(zones(), [friendly])
    snap = cache.snapshot()
    scores = interpodaffinity.pre_score(
        PodInfo.of(pod("web", labels={"app": "web"})), snap.nodes, snap.namespace_labels, 1
    )
    assert scores == {HOST: {"a2": 50}}
    assert interpodaffinity.normalize({"a1": 0, "a2": 50, "b1": 0}) == {"a1": 0, "a2": 100, "b1": 0}


def test_removing_a_pod_updates_the_counts() -> None:
    w1 = pod("w1", labels={"app": "web"}, node_name="a1")
    cache = cluster(zones(), [w1])
    snap = cache.snapshot()
    incoming = PodInfo.of(pod("w2", labels={"app": "web"}, affinity=affine(term(ZONE, app="web"), anti=True)))
    state = interpodaffinity.pre_filter(incoming, snap.nodes, snap.namespace_labels)
    assert isinstance(state, interpodaffinity.FilterState)
    a2 = snap.by_name["a2"]
    assert interpodaffinity.filter_node(state, a2) is not None
    state.update_with_pod(PodInfo.of(w1), snap.by_name["a1"], -1)
    assert interpodaffinity.filter_node(state, a2) is None

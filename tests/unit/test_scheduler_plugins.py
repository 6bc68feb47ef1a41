"""The node-local plugins: each filter's verdict and reason, and the scores."""

from __future__ import annotations

from test_scheduler_builders import cluster, node, pod, schedule

from vplane.controllers.scheduler import plugins
from vplane.controllers.scheduler.framework import Code
from vplane.controllers.scheduler.model import NodeInfo, PodInfo
from vplane.controllers.scheduler.nodeselection import (
    RequiredNodeAffinity,
    preferred_terms,
    required_node_names,
    tolerates,
)


def info(n: dict, *pods: dict) -> NodeInfo:
    cache = cluster([n], list(pods))
    return cache.nodes[n["metadata"]["name"]]


def affinity(*terms: dict, preferred: list | None = None) -> dict:
    node_affinity: dict = {}
    if terms:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": list(terms)}
    if preferred:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return {"nodeAffinity": node_affinity}


# -- NodeResourcesFit ------------------------------------------------------------------------------------


def test_fit_counts_requests_of_the_pods_already_on_the_node() -> None:
    n = info(node("n1", cpu="2", memory="1Gi"), pod("a", cpu="1500m", node_name="n1"))
    assert plugins.node_resources_fit(PodInfo.of(pod("b", cpu="500m")), n) is None
    status = plugins.node_resources_fit(PodInfo.of(pod("b", cpu="501m", memory="2Gi")), n)
    assert status is not None and status.code == Code.UNSCHEDULABLE
    assert status.reasons == ("Insufficient cpu", "Insufficient memory")


def test_fit_reports_too_many_pods_and_scalar_resources() -> None:
    n = info(node("n1", pods=1, **{"example.com/gpu": "1"}), pod("a", node_name="n1"))
    gpu_pod = pod("b", containers=[{"name": "c", "resources": {"requests": {"example.com/gpu": "2"}}}])
    status = plugins.node_resources_fit(PodInfo.of(gpu_pod), n)
    assert status is not None and status.reasons == ("Too many pods", "Insufficient example.com/gpu")


def test_a_pod_without_requests_fits_anywhere_with_room_for_a_pod() -> None:
    n = info(node("n1", cpu="0", memory="0"))
    assert plugins.node_resources_fit(PodInfo.of(pod("b")), n) is None


# -- NodeUnschedulable, TaintToleration ------------------------------------------------------------------


def test_cordoned_nodes_take_only_pods_tolerating_the_unschedulable_taint() -> None:
    n = info(node("n1", unschedulable=True))
    status = plugins.node_unschedulable([], n)
    assert status is not None and status.reasons == ("node(s) were unschedulable",)
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    tolerating = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    assert plugins.node_unschedulable(tolerating, n) is None


def test_taints_need_tolerations_for_no_schedule_and_no_execute_only() -> None:
    taints = [
        {"key": "gpu", "value": "yes", "effect": "NoSchedule"},
        {"key": "soft", "effect": "PreferNoSchedule"},
    ]
    n = info(node("n1", taints=taints))
    status = plugins.taint_toleration([], n)
    assert status is not None and status.reasons == ("node(s) had untolerated taint(s)",)
    assert plugins.taint_toleration([{"key": "gpu", "value": "yes", "effect": "NoSchedule"}], n) is None
    assert plugins.taint_toleration([{"key": "gpu", "operator": "Exists"}], n) is None
    assert plugins.taint_toleration([{"operator": "Exists"}], n) is None
    assert plugins.taint_toleration([{"key": "gpu", "value": "no"}], n) is not None
    no_execute = info(node("n2", taints=[{"key": "k", "effect": "NoExecute"}]))
    assert plugins.taint_toleration([{"key": "k", "effect": "NoSchedule"}], no_execute) is not None


def test_toleration_matching_rules() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert tolerates({"key": "k", "value": "v"}, taint)
    assert tolerates({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, taint)
    assert not tolerates({"key": "k", "operator": "Exists", "effect": "NoExecute"}, taint)
    assert not tolerates({"key": "other", "operator": "Exists"}, taint)
    assert tolerates({"key": "k", "value": "", "operator": "Equal"}, {"key": "k", "effect": "NoSchedule"})


def test_prefer_no_schedule_taints_lower_the_score() -> None:
    soft = [{"key": "soft", "effect": "PreferNoSchedule"}]
    n1, n2 = info(node("n1", taints=soft)), info(node("n2"))
    raw = {"n1": plugins.taint_toleration_score([], n1), "n2": plugins.taint_toleration_score([], n2)}
    assert raw == {"n1": 1, "n2": 0}
    assert plugins.default_normalize(raw, reverse=True) == {"n1": 0, "n2": 100}
    tolerating = [{"key": "soft", "operator": "Exists", "effect": "PreferNoSchedule"}]
    assert plugins.taint_toleration_score(tolerating, n1) == 0


# -- NodeAffinity ----------------------------------------------------------------------------------------


def test_node_selector_and_required_affinity_both_apply() -> None:
    n = info(node("n1", labels={"zone": "a", "disk": "ssd", "cores": "8"}))
    spec = {
        "nodeSelector": {"disk": "ssd"},
        "affinity": affinity({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}),
    }
    assert plugins.node_affinity(RequiredNodeAffinity.of(spec), n) is None
    spec["nodeSelector"] = {"disk": "hdd"}
    status = plugins.node_affinity(RequiredNodeAffinity.of(spec), n)
    assert status is not None and status.reasons == ("node(s) didn't match Pod's node affinity/selector",)


def test_node_selector_terms_are_ored_and_their_requirements_anded() -> None:
    n = info(node("n1", labels={"zone": "a", "cores": "8"}))

    def matches(*terms: dict) -> bool:
        return plugins.node_affinity(RequiredNodeAffinity.of({"affinity": affinity(*terms)}), n) is None

    assert matches({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]})
    assert not matches({"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["4"]}]})
    assert matches(
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
    )
    assert not matches(
        {"matchExpressions": [{"key": "zone", "operator": "Exists"}, {"key": "gpu", "operator": "Exists"}]}
    )
    assert matches({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]})
    assert matches({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})
    assert not matches({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]})
    assert not matches({})  # an empty term matches nothing
    assert not matches({"matchExpressions": [{"key": "zone", "operator": "Bogus", "values": ["a"]}]})


def test_affinity_to_node_names_narrows_the_nodes_looked_at() -> None:
    name_term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    assert required_node_names({"affinity": affinity(name_term)}) == {"n2"}
    label_term = {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}
    assert required_node_names({"affinity": affinity(name_term, label_term)}) is None
    cache = cluster([node("n1"), node("n2", cpu="0")])
    result = schedule(cache, pod("p", cpu="1", affinity=affinity(name_term)))
    assert result.message == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )


def test_preferred_node_affinity_scores_the_weights_of_matching_terms() -> None:
    preferred = [
        {
            "weight": 10,
            "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        },
        {"weight": 5, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}},
        {"weight": 0, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}},
    ]
    terms = preferred_terms({"affinity": affinity(preferred=preferred)})
    a = info(node("a", labels={"zone": "a", "disk": "x"}))
    b = info(node("b", labels={"zone": "b"}))
    raw = {"a": plugins.node_affinity_score(terms, a), "b": plugins.node_affinity_score(terms, b)}
    assert raw == {"a": 15, "b": 0}
    assert plugins.default_normalize(raw, reverse=False) == {"a": 100, "b": 0}
    cache = cluster([node("a", labels={"zone": "a"}), node("b", labels={"zone": "b"})])
    for seed in range(5):
        assert schedule(cache, pod("p", affinity=affinity(preferred=preferred)), seed).node == "a"


# -- NodePorts, NodeName ----------------------------------------------------------------------------------


def host_port_pod(name: str, port: int, ip: str | None = None, node_name: str | None = None) -> dict:
    port_spec: dict = {"containerPort": 80, "hostPort": port, "protocol": "TCP"}
    if ip:
        port_spec["hostIP"] = ip
    return pod(name, node_name=node_name, containers=[{"name": "c", "ports": [port_spec]}])


def test_host_ports_conflict_on_the_same_address_or_with_all_addresses() -> None:
    n = info(node("n1"), host_port_pod("a", 8080, ip="10.0.0.1", node_name="n1"))
    assert plugins.node_ports(PodInfo.of(host_port_pod("b", 8080, ip="10.0.0.2")), n) is None
    status = plugins.node_ports(PodInfo.of(host_port_pod("b", 8080)), n)
    assert status is not None and status.reasons == (
        "node(s) didn't have free ports for the requested pod ports",
    )
    assert plugins.node_ports(PodInfo.of(host_port_pod("b", 8080, ip="10.0.0.1")), n) is not None
    assert plugins.node_ports(PodInfo.of(host_port_pod("b", 9090)), n) is None


def test_node_name() -> None:
    n = info(node("n1"))
    status = plugins.node_name(PodInfo.of(pod("p", node_name="n2")), n)
    assert status is not None and status.reasons == ("node(s) didn't match the requested node name",)


# -- resource scores ---------------------------------------------------------------------------------------


def test_least_allocated_prefers_emptier_nodes_and_assumes_requests_for_empty_pods() -> None:
    busy = info(node("busy", cpu="1", memory="1Gi"), pod("a", cpu="500m", memory="512Mi", node_name="busy"))
    idle = info(node("idle", cpu="1", memory="1Gi"))
    incoming = PodInfo.of(pod("p"))  # counts as 100m and 200Mi
    # busy: cpu (1000-600)*100/1000 = 40, memory (1024-712)*100/1024 = 30 -> 35
    assert plugins.least_allocated_score(incoming, busy) == 35
    assert plugins.least_allocated_score(incoming, idle) == (90 + 80) // 2


def test_balanced_allocation_rewards_even_cpu_and_memory_use() -> None:
    n = info(node("n1", cpu="1", memory="1Gi"))
    even = PodInfo.of(pod("p", cpu="500m", memory="512Mi"))
    lopsided = PodInfo.of(pod("q", cpu="1", memory="0"))
    assert plugins.balanced_allocation_score(even, n) == 100
    assert plugins.balanced_allocation_score(lopsided, n) == 50
    assert not plugins.balanced_allocation_applies(PodInfo.of(pod("r")))


def test_pods_spread_over_equal_nodes() -> None:
    cache = cluster([node("n1"), node("n2")])
    first = schedule(cache, pod("a", cpu="1"))
    cache.assume(PodInfo.of(pod("a", cpu="1")), first.node)
    second = schedule(cache, pod("b", cpu="1"))
    assert {first.node, second.node} == {"n1", "n2"}

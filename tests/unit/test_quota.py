"""ResourceQuota arithmetic, decided purely: canonical quantities, what pods, services and claims are charged,
the admission check and its refusals in upstream's words, and the controller's status."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vplane.kube import quota
from vplane.kube.quantity import BINARY_SI, Quantity, canonical

T0 = 1_700_000_000.0


@pytest.mark.parametrize(
    ("raw", "printed"),
    [
        ("1500", "1500"),
        ("1000", "1k"),
        ("0.5", "500m"),
        ("1024Mi", "1Gi"),
        ("1.5Gi", "1536Mi"),
        ("100m", "100m"),
        ("1e3", "1e3"),
        ("12e2", "1200"),
        ("0", "0"),
        ("1025", "1025"),
        ("0.0000000001", "1n"),
        (2, "2"),
        ("-1500m", "-1500m"),
        ("32575m", "32575m"),
    ],
)
def test_quantities_print_canonically(raw: Any, printed: str) -> None:
    parsed = Quantity.parse(raw)
    assert parsed is not None and str(parsed) == printed


def test_sums_keep_the_first_nonzero_format() -> None:
    zero, mi = Quantity.parse("0"), Quantity.parse("128Mi")
    assert zero is not None and mi is not None
    assert str(zero + mi) == "128Mi"
    assert str(mi + mi) == "256Mi"
    assert str(mi + Quantity.parse("100M")) == "234217728"  # type: ignore[operator]
    assert str(Quantity.parse("400m") + Quantity.parse("400m")) == "800m"  # type: ignore[operator]


@given(st.integers(min_value=-(10**15), max_value=10**15), st.sampled_from(["", "m", "k", "Mi", "Gi"]))
def test_canonical_spelling_reads_back_the_same_value(number: int, suffix: str) -> None:
    parsed = Quantity.parse(f"{number}{suffix}")
    assert parsed is not None
    again = Quantity.parse(str(parsed))
    assert again is not None and again.value == parsed.value
    assert canonical(parsed.value, BINARY_SI) == str(Quantity(parsed.value, BINARY_SI))


def container(
    name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
) -> dict:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "nginx", "resources": resources}


def pod(*containers: dict, init: list[dict] | None = None, **spec: Any) -> dict:
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if init:
        body["initContainers"] = init
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": body}


def wire(values: dict[str, Quantity]) -> dict[str, str]:
    return quota.to_wire(values)


def test_pod_usage_sums_containers_and_raises_to_init_containers() -> None:
    p = pod(
        container("a", {"cpu": "100m", "memory": "64Mi"}, {"cpu": "200m"}),
        container("b", {"cpu": "300m", "memory": "64Mi"}),
        init=[container("setup", {"cpu": "1", "memory": "32Mi"})],
    )
    usage = quota.PodEvaluator().usage(p, T0)
    assert wire(usage) == {
        "count/pods": "1",
        "cpu": "1",
        "limits.cpu": "200m",
        "memory": "128Mi",
        "pods": "1",
        "requests.cpu": "1",
        "requests.memory": "128Mi",
    }


def test_sidecars_add_to_the_pod_and_to_later_init_containers() -> None:
    sidecar = {**container("proxy", {"cpu": "100m"}), "restartPolicy": "Always"}
    p = pod(container("app", {"cpu": "200m"}), init=[sidecar, container("late", {"cpu": "250m"})])
    assert str(quota.pod_requests(p)["cpu"]) == "350m"  # max(200+100, 250+100)


def test_overhead_and_extended_resources() -> None:
    p = pod(
        container("a", {"cpu": "1", "example.com/gpu": "2", "hugepages-2Mi": "4Mi"}), overhead={"cpu": "250m"}
    )
    usage = wire(quota.PodEvaluator().usage(p, T0))
    assert usage["requests.cpu"] == "1250m"
    assert usage["requests.example.com/gpu"] == "2"
    assert usage["hugepages-2Mi"] == usage["requests.hugepages-2Mi"] == "4Mi"


def test_finished_and_stuck_terminating_pods_count_only_as_objects() -> None:
    done = {**pod(container("a", {"cpu": "1"})), "status": {"phase": "Succeeded"}}
    assert wire(quota.PodEvaluator().usage(done, T0)) == {"count/pods": "1"}
    stuck = pod(container("a", {"cpu": "1"}))
    stuck["metadata"].update(deletionTimestamp="2023-11-14T22:13:20Z", deletionGracePeriodSeconds=30)
    assert quota.pod_is_charged(stuck, T0 + 10)
    assert not quota.pod_is_charged(stuck, T0 + 31)


def test_services_charge_node_ports_and_load_balancers() -> None:
    evaluator = quota.ServiceEvaluator()
    ports = [{"port": 80}, {"port": 443, "nodePort": 30443}]
    assert (
        wire(evaluator.usage({"spec": {"type": "NodePort", "ports": ports}}, T0))["services.nodeports"] == "2"
    )
    lb = wire(evaluator.usage({"spec": {"type": "LoadBalancer", "ports": ports}}, T0))
    assert (lb["services.loadbalancers"], lb["services.nodeports"]) == ("1", "2")
    no_ports = {"type": "LoadBalancer", "ports": ports, "allocateLoadBalancerNodePorts": False}
    assert wire(evaluator.usage({"spec": no_ports}, T0))["services.nodeports"] == "1"


def test_claims_charge_storage_per_class() -> None:
    claim = {"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1.5Gi"}}}}
    usage = wire(quota.ClaimEvaluator().usage(claim, T0))
    assert usage == {
        "count/persistentvolumeclaims": "1",
        "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "1",
        "gold.storageclass.storage.k8s.io/requests.storage": "1536Mi",
        "persistentvolumeclaims": "1",
        "requests.storage": "1536Mi",
    }
    claim["status"] = {"allocatedResources": {"storage": "2Gi"}}
    assert str(quota.claim_storage(claim)) == "2Gi"


def rq(name: str, hard: dict[str, str], used: dict[str, str] | None = None, **spec: Any) -> dict:
    status: dict[str, Any] = {"hard": hard}
    if used is not None:
        status["used"] = used
    return {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "7"},
        "spec": {"hard": hard, **spec},
        "status": status,
    }


def check(quotas: list[dict], obj: dict, resource: str = "pods", **kw: Any) -> list[dict]:
    evaluator = quota.evaluator_for("", resource)
    return quota.check_request(
        quotas,
        evaluator,
        operation=kw.get("operation", "CREATE"),
        subresource=kw.get("subresource", ""),
        obj=obj,
        old=kw.get("old"),
        now=T0,
    )


def test_a_create_within_quota_is_charged() -> None:
    q = rq("compute", {"pods": "3", "requests.cpu": "1"}, {"pods": "1", "requests.cpu": "200m"})
    (charged,) = check([q], pod(container("a", {"cpu": "300m"})))
    assert charged is not q
    assert charged["status"]["used"] == {"pods": "2", "requests.cpu": "500m"}
    assert q["status"]["used"] == {"pods": "1", "requests.cpu": "200m"}  # the input is left alone


def test_exceeded_quota_names_what_is_over_in_upstream_words() -> None:
    q = rq(
        "compute-resources",
        {"limits.cpu": "6", "limits.memory": "12Gi", "pods": "10"},
        {"limits.cpu": "6", "limits.memory": "12Gi", "pods": "6"},
    )
    with pytest.raises(quota.QuotaDenied) as denied:
        check([q], pod(container("a", {"cpu": "1", "memory": "2Gi"}, {"cpu": "1", "memory": "2Gi"})))
    assert denied.value.message == (
        "exceeded quota: compute-resources, requested: limits.cpu=1,limits.memory=2Gi, "
        "used: limits.cpu=6,limits.memory=12Gi, limited: limits.cpu=6,limits.memory=12Gi"
    )


def test_compute_quota_requires_every_container_to_state_it() -> None:
    q = rq("q", {"requests.cpu": "4", "limits.memory": "1Gi"}, {"requests.cpu": "0", "limits.memory": "0"})
    with pytest.raises(quota.QuotaDenied) as denied:
        check([q], pod(container("web", {"cpu": "1"}), container("log")))
    assert denied.value.message == (
        "failed quota: q: must specify limits.memory for: log,web; requests.cpu for: log"
    )


def test_quota_without_usage_yet_refuses_until_the_controller_has_counted() -> None:
    unknown = rq("q", {"pods": "2"})
    with pytest.raises(quota.QuotaDenied) as denied:
        check([unknown], pod(container("a")))
    assert denied.value.message == "status unknown for quota: q, resources: pods"
    not_synced = {**rq("q", {"pods": "2"}), "status": {}}
    assert check([not_synced], pod(container("a"))) == [not_synced]


def test_scopes_select_which_pods_a_quota_counts() -> None:
    best_effort = rq("be", {"pods": "1"}, {"pods": "1"}, scopes=["BestEffort"])
    assert check([best_effort], pod(container("a", {"cpu": "1"}))) == [best_effort]
    with pytest.raises(quota.QuotaDenied):
        check([best_effort], pod(container("a")))
    by_class = rq(
        "high",
        {"pods": "1"},
        {"pods": "1"},
        scopeSelector={
            "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]
        },
    )
    assert check([by_class], pod(container("a"), priorityClassName="low")) == [by_class]
    with pytest.raises(quota.QuotaDenied):
        check([by_class], pod(container("a"), priorityClassName="high"))
    terminating = rq("t", {"pods": "0"}, {"pods": "0"}, scopes=["Terminating"])
    assert check([terminating], pod(container("a"))) == [terminating]
    with pytest.raises(quota.QuotaDenied):
        check([terminating], pod(container("a"), activeDeadlineSeconds=10))


def test_object_counts_and_legacy_names() -> None:
    q = rq(
        "objects", {"count/configmaps": "2", "configmaps": "5"}, {"count/configmaps": "2", "configmaps": "2"}
    )
    with pytest.raises(quota.QuotaDenied) as denied:
        check([q], {"metadata": {"name": "c"}}, "configmaps")
    assert "requested: count/configmaps=1, used: count/configmaps=2, limited: count/configmaps=2" in str(
        denied.value
    )
    apps = rq("apps", {"count/deployments.apps": "1"}, {"count/deployments.apps": "0"})
    (charged,) = quota.check_request(
        [apps],
        quota.evaluator_for("apps", "deployments"),
        operation="CREATE",
        subresource="",
        obj={},
        old=None,
        now=T0,
    )
    assert charged["status"]["used"] == {"count/deployments.apps": "1"}


def test_updates_are_charged_the_growth_only() -> None:
    q = rq("q", {"services.nodeports": "2"}, {"services.nodeports": "1"})
    old = {"metadata": {"resourceVersion": "3"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}
    same = {"spec": {"type": "NodePort", "ports": [{"port": 81}]}}
    assert check([q], same, "services", operation="UPDATE", old=old) == [q]
    grown = {"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81}, {"port": 82}]}}
    with pytest.raises(quota.QuotaDenied) as denied:
        check([q], grown, "services", operation="UPDATE", old=old)
    assert "requested: services.nodeports=2, used: services.nodeports=1" in denied.value.message


def test_the_controller_writes_hard_and_used_over_the_spec() -> None:
    q = {
        "metadata": {"name": "q"},
        "spec": {"hard": {"pods": "2", "requests.memory": "1024Mi", "count/secrets": "1"}},
    }
    pods = [pod(container("a", {"memory": "100Mi"})), pod(container("b", {"memory": "28Mi"}))]

    def objects(group: str, resource: str) -> list[dict] | None:
        return {"pods": pods, "secrets": [{}]}.get(resource) if not group else None

    usage = quota.calculate_usage(q, objects, T0)
    status = quota.status_for(q, usage)
    assert status == {
        "hard": {"count/secrets": "1", "pods": "2", "requests.memory": "1Gi"},
        "used": {"count/secrets": "1", "pods": "2", "requests.memory": "128Mi"},
    }
    assert quota.status_for({**q, "status": status}, usage) is None
    empty = quota.calculate_usage(q, lambda group, resource: [], T0)
    assert quota.to_wire(empty) == {"count/secrets": "0", "pods": "0", "requests.memory": "0"}


def test_counted_kinds_follow_the_hard_resources() -> None:
    names = [
        "requests.cpu",
        "services.loadbalancers",
        "count/jobs.batch",
        "secrets",
        "gold.storageclass.storage.k8s.io/requests.storage",
    ]
    assert quota.counted_group_resources(names) == {
        ("", "pods"),
        ("", "services"),
        ("batch", "jobs"),
        ("", "secrets"),
        ("", "persistentvolumeclaims"),
    }
    assert Decimal(0) == quota.Quantity(0).value

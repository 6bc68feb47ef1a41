"""Pure pod helpers: readiness and availability, the order pods are deleted in, pods from templates,
named ports, and the ReplicaSet status and slow-start decisions."""

from __future__ import annotations

from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.replicaset import calculate_status, slow_start_batches, status_for_write
from vplane.controllers.kcm.timefmt import format_time, format_time_nano, parse_time
from vplane.kube.errors import StatusError

NOW = 1_700_000_000.0


def pod(
    name: str,
    *,
    node: str = "",
    phase: str = "Pending",
    ready: bool | None = None,
    ready_at: float | None = None,
    created: float = NOW - 1000,
    restarts: int = 0,
    cost: int | None = None,
    labels: dict[str, str] | None = None,
) -> dict:
    status: dict = {"phase": phase, "containerStatuses": [{"name": "c", "restartCount": restarts}]}
    if ready is not None:
        status["conditions"] = [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "lastTransitionTime": format_time(ready_at if ready_at is not None else NOW - 100),
            }
        ]
    meta: dict = {
        "name": name,
        "uid": f"uid-{name}",
        "creationTimestamp": format_time(created),
        "labels": labels or {},
    }
    if cost is not None:
        meta["annotations"] = {podutil.POD_DELETION_COST: str(cost)}
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


def names(pods: list[dict]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_availability_needs_min_ready_seconds_strictly_passed() -> None:
    p = pod("a", phase="Running", ready=True, ready_at=NOW - 10)
    assert podutil.is_pod_available(p, 0, NOW)
    assert podutil.is_pod_available(p, 9, NOW)
    assert not podutil.is_pod_available(p, 10, NOW)  # upstream: ready time + minReady strictly before now
    assert podutil.available_in([p], 10, NOW) is not None
    assert podutil.available_in([p], 10, NOW) > 0
    assert podutil.available_in([p], 0, NOW) is None
    assert not podutil.is_pod_available(pod("b", ready=False), 0, NOW)


def test_deletion_order_follows_upstream_ranking() -> None:
    candidates = [
        pod("running-ready-old", node="n1", phase="Running", ready=True, ready_at=NOW - 10_000),
        pod("running-ready-new", node="n1", phase="Running", ready=True, ready_at=NOW - 10),
        pod("running-not-ready", node="n1", phase="Running", ready=False),
        pod("pending", node="n1", phase="Pending"),
        pod("unknown", node="n1", phase="Unknown"),
        pod("unscheduled", phase="Pending"),
    ]
    order = podutil.pods_to_delete(candidates, candidates, len(candidates) - 1, NOW)
    assert names(order) == ["unscheduled", "pending", "unknown", "running-not-ready", "running-ready-new"]


def test_deletion_prefers_low_cost_doubled_up_restarted_and_newer() -> None:
    low, high = pod("low", node="n1", cost=-5), pod("high", node="n1", cost=5)
    assert names(podutil.pods_to_delete([high, low], [high, low], 1, NOW)) == ["low"]
    alone = pod("alone", node="n2")
    crowded = pod("crowded", node="n1")
    related = [crowded, pod("other1", node="n1"), pod("other2", node="n1"), alone]
    assert names(podutil.pods_to_delete([alone, crowded], related, 1, NOW)) == ["crowded"]
    calm, flappy = pod("calm", node="n1", restarts=0), pod("flappy", node="n1", restarts=7)
    assert names(podutil.pods_to_delete([calm, flappy], [], 1, NOW)) == ["flappy"]
    old, new = pod("old", node="n1", created=NOW - 100_000), pod("new", node="n1", created=NOW - 10)
    assert names(podutil.pods_to_delete([old, new], [], 1, NOW)) == ["new"]


def test_deleting_everything_keeps_order_without_ranking() -> None:
    pods = [pod("a"), pod("b")]
    assert names(podutil.pods_to_delete(pods, [], 2, NOW)) == ["a", "b"]


def test_pod_from_template_carries_labels_owner_and_generate_name() -> None:
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-abc", "uid": "u1"}}
    template = {
        "metadata": {"labels": {"app": "web", "pod-template-hash": "abc"}, "annotations": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    p = podutil.pod_from_template(template, rs, "replicaset-controller")
    assert p["metadata"]["generateName"] == "web-abc-"
    assert p["metadata"]["labels"] == {"app": "web", "pod-template-hash": "abc"}
    assert p["metadata"]["annotations"] == {"a": "b"}
    assert p["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web-abc",
            "uid": "u1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    p["spec"]["containers"][0]["image"] = "changed"
    assert template["spec"]["containers"][0]["image"] == "i"  # a copy
    long_parent = {**rs, "metadata": {"name": "x" * 60, "uid": "u2"}}
    assert (
        podutil.pod_from_template(template, long_parent, "replicaset-controller")["metadata"]["generateName"]
        == "replicaset-controller-"
    )


def test_find_port_by_number_and_by_name_and_protocol() -> None:
    p = {
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "ports": [
                        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
                        {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                    ],
                }
            ],
            "initContainers": [
                {
                    "name": "side",
                    "restartPolicy": "Always",
                    "ports": [{"name": "metrics", "containerPort": 9090}],
                }
            ],
        }
    }
    assert podutil.find_port(p, {"port": 80, "targetPort": 81}) == 81
    assert podutil.find_port(p, {"port": 80, "targetPort": "http", "protocol": "TCP"}) == 8080
    assert podutil.find_port(p, {"port": 53, "targetPort": "dns", "protocol": "TCP"}) is None
    assert podutil.find_port(p, {"port": 53, "targetPort": "dns", "protocol": "UDP"}) == 53
    assert podutil.find_port(p, {"port": 1, "targetPort": "metrics"}) == 9090
    assert podutil.find_port(p, {"port": 1, "targetPort": "nope"}) is None


def test_slow_start_batches_double() -> None:
    assert slow_start_batches(500, 1) == [1, 2, 4, 8, 16, 32, 64, 128, 245]
    assert slow_start_batches(3, 1) == [1, 2]
    assert slow_start_batches(0, 1) == []


def test_replicaset_status_counts_and_failure_condition() -> None:
    rs = {
        "metadata": {"name": "web", "generation": 4},
        "spec": {
            "replicas": 3,
            "minReadySeconds": 30,
            "template": {"metadata": {"labels": {"app": "web", "tier": "a"}}},
        },
        "status": {},
    }
    pods = [
        pod("a", phase="Running", ready=True, ready_at=NOW - 60, labels={"app": "web", "tier": "a"}),
        pod("b", phase="Running", ready=True, ready_at=NOW - 5, labels={"app": "web", "tier": "a"}),
    ]
    quota = StatusError(
        403,
        "Forbidden",
        'pods "web-x" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2',
    )
    status = calculate_status(rs, pods, quota, NOW)
    assert (
        status["replicas"],
        status["fullyLabeledReplicas"],
        status["readyReplicas"],
        status["availableReplicas"],
    ) == (2, 2, 2, 1)
    (failure,) = status["conditions"]
    assert failure["type"] == "ReplicaFailure"
    assert failure["reason"] == "FailedCreate"
    assert failure["message"] == quota.message
    wire = status_for_write(rs, status)
    assert wire is not None and wire["observedGeneration"] == 4
    rs["status"] = wire
    assert status_for_write(rs, calculate_status(rs, pods, quota, NOW)) is None  # nothing new
    cleared = calculate_status(rs, pods, None, NOW)
    assert "conditions" not in cleared


def test_times_round_trip() -> None:
    assert format_time(NOW + 0.7) == "2023-11-14T22:13:20Z"
    assert parse_time("2023-11-14T22:13:20Z") == NOW
    assert format_time_nano(NOW) == "2023-11-14T22:13:20Z"
    assert format_time_nano(NOW + 0.25) == "2023-11-14T22:13:20.25Z"
    assert parse_time("garbage") is None and parse_time(None) is None


def test_terminating_replicas_are_reported_only_when_there_are_some() -> None:
    rs = {
        "metadata": {"generation": 1},
        "spec": {"replicas": 1, "template": {"metadata": {"labels": {}}}},
        "status": {},
    }
    assert "terminatingReplicas" not in calculate_status(rs, [], None, NOW)
    assert calculate_status(rs, [], None, NOW, terminating=2)["terminatingReplicas"] == 2

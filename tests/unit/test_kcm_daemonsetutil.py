"""The DaemonSet controller's pure decisions (``daemonsetutil``): which nodes run a daemon pod (node
selector, node affinity, taints and the tolerations every DaemonSet pod gets), the pods it makes, what the
manage loop creates and deletes (duplicates, failed pods with their back-off, nodes gone), the rolling
update without and with surge, status counts and revision history."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from vplane.controllers.kcm import daemonsetutil as dsu
from vplane.controllers.kcm import history
from vplane.controllers.kcm.timefmt import format_time
from vplane.kube.objects import Obj

NOW = 1_700_000_000.0


def ds(**spec: Any) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "ns", "uid": "ds-uid", "generation": 1},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "revisionHistoryLimit": 10,
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "c", "image": "agent:1"}]},
            },
            **spec,
        },
    }


def node(name: str, labels: dict[str, str] | None = None, taints: list[Obj] | None = None) -> Obj:
    body: Obj = {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {},
    }
    if taints:
        body["spec"]["taints"] = taints
    return body


def dpod(
    name: str,
    node_name: str,
    hash_: str,
    *,
    phase: str = "Running",
    ready: bool = True,
    created: float = NOW - 1000,
    bound: bool = True,
) -> Obj:
    obj: Obj = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {"app": "agent", dsu.HASH_LABEL: hash_},
            "creationTimestamp": format_time(created),
        },
        "spec": {
            "affinity": dsu.replace_node_affinity(None, node_name),
            "containers": [{"name": "c", "image": "agent:1"}],
        },
        "status": {"phase": phase},
    }
    if bound:
        obj["spec"]["nodeName"] = node_name
    if ready:
        obj["status"]["conditions"] = [
            {"type": "Ready", "status": "True", "lastTransitionTime": format_time(NOW - 500)}
        ]
    return obj


# -- nodes ----------------------------------------------------------------------------------------------------


def test_every_daemon_pod_tolerates_node_problems_and_cordons() -> None:
    spec: Obj = {
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ]
    }
    dsu.add_daemon_tolerations(spec)
    assert spec["tolerations"] == [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    ]
    host: Obj = {"hostNetwork": True}
    dsu.add_daemon_tolerations(host)
    assert host["tolerations"][-1] == {
        "key": "node.kubernetes.io/network-unavailable",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    again = copy.deepcopy(host)
    dsu.add_daemon_tolerations(again)
    assert again == host


def test_which_nodes_run_a_daemon_pod() -> None:
    plain = ds()
    assert dsu.node_should_run(node("n1"), plain) == (True, True)
    selective = ds()
    selective["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    assert dsu.node_should_run(node("n1"), selective) == (False, False)
    assert dsu.node_should_run(node("n1", {"pool": "a"}), selective) == (True, True)
    affine = ds()
    affine["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}
                ]
            }
        }
    }
    assert dsu.node_should_run(node("n1", {"zone": "z2"}), affine) == (False, False)
    assert dsu.node_should_run(node("n1", {"zone": "z1"}), affine) == (True, True)
    pinned = ds()
    pinned["spec"]["template"]["spec"]["nodeName"] = "n2"
    assert dsu.node_should_run(node("n1"), pinned) == (False, False)
    assert dsu.node_should_run(node("n2"), pinned) == (True, True)


def test_taints_keep_new_pods_off_and_evict_old_ones() -> None:
    no_schedule = node("n1", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
    no_execute = node("n1", taints=[{"key": "dedicated", "value": "x", "effect": "NoExecute"}])
    cordoned = node("n1", taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])
    not_ready = node("n1", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}])
    plain = ds()
    assert dsu.node_should_run(no_schedule, plain) == (False, True)  # a pod there may stay
    assert dsu.node_should_run(no_execute, plain) == (False, False)  # evicted
    assert dsu.node_should_run(cordoned, plain) == (True, True)  # tolerated by every DaemonSet pod
    assert dsu.node_should_run(not_ready, plain) == (True, True)
    tolerant = ds()
    tolerant["spec"]["template"]["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    assert dsu.node_should_run(no_execute, tolerant) == (True, True)


def test_the_pod_for_a_node_is_pinned_by_affinity() -> None:
    d = ds(
        template={
            "metadata": {"labels": {"app": "agent"}},
            "spec": {
                "containers": [{"name": "c", "image": "agent:1"}],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}]
                        },
                        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
                    }
                },
            },
        }
    )
    d["metadata"]["annotations"] = {dsu.TEMPLATE_GENERATION_ANNOTATION: "3"}
    template = dsu.pod_template(d, "h1")
    p = dsu.pod_for_node(template, d, "n7")
    assert p["metadata"]["generateName"] == "agent-"
    assert p["metadata"]["labels"] == {
        "app": "agent",
        dsu.TEMPLATE_GENERATION_LABEL: "3",
        dsu.HASH_LABEL: "h1",
    }
    assert p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
    affinity = p["spec"]["affinity"]["nodeAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n7"]}]}]
    }
    assert affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 1, "preference": {}}]
    assert dsu.target_node({"spec": p["spec"]}) == "n7"
    assert dsu.target_node({"spec": {"nodeName": "n8"}}) == "n8"
    assert dsu.target_node({"spec": {}}) is None
    assert dsu.is_pod_updated(p, "h1", 3)
    assert dsu.is_pod_updated({"metadata": {"labels": {dsu.TEMPLATE_GENERATION_LABEL: "3"}}}, "h2", 3)
    assert not dsu.is_pod_updated({"metadata": {"labels": {dsu.HASH_LABEL: "h0"}}}, "h1", None)


# -- manage -------------------------------------------------------------------------------------------------


def decide(
    d: Obj, nodes: list[Obj], pods: list[Obj], backoff: dsu.FailedPodBackoff | None = None, now: float = NOW
) -> dsu.Decision:
    return dsu.manage(d, nodes, dsu.nodes_to_pods(pods), "h1", now, backoff or dsu.FailedPodBackoff(1, 900))


def names(pods: list[Obj]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_manage_creates_on_empty_nodes_and_removes_extras() -> None:
    d = ds()
    nodes = [node("n1"), node("n2"), node("n3", taints=[{"key": "k", "effect": "NoExecute"}])]
    pods = [
        dpod("a", "n1", "h1", created=NOW - 100),
        dpod("b", "n1", "h1", created=NOW - 50),  # a duplicate: the newer one goes
        dpod("c", "n3", "h1"),  # evicted by the NoExecute taint
        dpod("d", "gone", "h1", bound=False),  # pending for a node that no longer exists
        dpod("e", "gone-too", "h1"),  # bound to a vanished node: the pod GC's business
    ]
    decision = decide(d, nodes, pods)
    assert decision.create_on == ["n2"]
    assert names(decision.delete) == ["b", "c", "d"]
    assert decision.events == []


def test_failed_pods_are_replaced_with_a_back_off() -> None:
    d = ds()
    backoff = dsu.FailedPodBackoff(1, 900)
    failed = [dpod("a", "n1", "h1", phase="Failed", ready=False)]
    first = decide(d, [node("n1")], failed, backoff)
    assert names(first.delete) == ["a"]
    assert first.events == [
        ("Warning", "FailedDaemonPod", "Found failed daemon pod ns/a on node n1, will try to kill it")
    ]
    again = decide(d, [node("n1")], failed, backoff, now=NOW + 0.5)
    assert again.delete == [] and again.requeue_after == 1
    later = decide(d, [node("n1")], failed, backoff, now=NOW + 1.5)
    assert names(later.delete) == ["a"]
    assert backoff.get(dsu.failed_pod_key(d, "n1")) == 2  # doubled
    done = decide(d, [node("n1")], [dpod("b", "n1", "h1", phase="Succeeded", ready=False)])
    assert done.events == [
        ("Normal", "SucceededDaemonPod", "Found succeeded daemon pod ns/b on node n1, will try to delete it")
    ]


def test_failed_pod_back_off_doubles_caps_and_starts_over() -> None:
    backoff = dsu.FailedPodBackoff(1, 4)
    for expected in (1, 2, 4, 4):
        backoff.next("k", NOW)
        assert backoff.get("k") == expected
    assert backoff.in_backoff_since_update("k", NOW + 3)
    assert not backoff.in_backoff_since_update("k", NOW + 4)
    backoff.next("k", NOW + 20)  # idle for more than twice the maximum
    assert backoff.get("k") == 1
    backoff.gc(NOW + 100)
    assert backoff.get("k") == 0


# -- rolling update -------------------------------------------------------------------------------------------


def test_rolling_update_without_surge_respects_max_unavailable() -> None:
    d = ds()
    nodes = [node(f"n{i}") for i in range(4)]
    old = [dpod(f"p{i}", f"n{i}", "h0") for i in range(4)]
    doomed, surge = dsu.rolling_update(d, nodes, dsu.nodes_to_pods(old), "h1", NOW)
    assert (names(doomed), surge) == (["p0"], [])
    # one node without a pod (being replaced) already spends the budget
    doomed, _ = dsu.rolling_update(d, nodes, dsu.nodes_to_pods(old[1:]), "h1", NOW)
    assert doomed == []
    # an unavailable old pod is replaced regardless
    broken = [*old[:3], dpod("p3", "n3", "h0", ready=False)]
    doomed, _ = dsu.rolling_update(d, nodes, dsu.nodes_to_pods(broken), "h1", NOW)
    assert names(doomed) == ["p3"]
    wide = ds(
        updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%", "maxSurge": 0}}
    )
    doomed, _ = dsu.rolling_update(wide, nodes, dsu.nodes_to_pods(old), "h1", NOW)
    assert names(doomed) == ["p0", "p1"]


def test_rolling_update_with_surge_starts_new_pods_first() -> None:
    d = ds(updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    nodes = [node(f"n{i}") for i in range(3)]
    old = [dpod(f"p{i}", f"n{i}", "h0") for i in range(3)]
    doomed, surge = dsu.rolling_update(d, nodes, dsu.nodes_to_pods(old), "h1", NOW)
    assert (doomed, surge) == ([], ["n0"])
    starting = [*old, dpod("q0", "n0", "h1", ready=False)]
    assert dsu.rolling_update(d, nodes, dsu.nodes_to_pods(starting), "h1", NOW) == ([], [])
    up = [*old, dpod("q0", "n0", "h1")]
    doomed, surge = dsu.rolling_update(d, nodes, dsu.nodes_to_pods(up), "h1", NOW)
    assert (names(doomed), surge) == (["p0"], ["n1"])
    # the manage loop keeps both while the new pod is not available, then drops the old one
    decision = dsu.manage(
        d, nodes[:1], dsu.nodes_to_pods(starting[:1] + starting[3:]), "h1", NOW, dsu.FailedPodBackoff(1, 9)
    )
    assert decision.delete == []
    decision = dsu.manage(
        d, nodes[:1], dsu.nodes_to_pods(up[:1] + up[3:]), "h1", NOW, dsu.FailedPodBackoff(1, 9)
    )
    assert names(decision.delete) == ["p0"]


# -- status and history -----------------------------------------------------------------------------------------


def test_status_counts() -> None:
    d = ds()
    d["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    nodes = [node("n1", {"pool": "a"}), node("n2", {"pool": "a"}), node("n3", {"pool": "a"}), node("n4")]
    pods = [
        dpod("a", "n1", "h1"),
        dpod("b", "n2", "h0", ready=False),
        dpod("c", "n4", "h1"),  # misscheduled: n4 is not in the pool
    ]
    counts = dsu.status_counts(d, nodes, dsu.nodes_to_pods(pods), "h1", NOW)
    assert counts == {
        "desiredNumberScheduled": 3,
        "currentNumberScheduled": 2,
        "numberMisscheduled": 1,
        "numberReady": 1,
        "updatedNumberScheduled": 1,
        "numberAvailable": 1,
        "numberUnavailable": 2,
    }
    status = dsu.status_for_write(d, counts, True)
    assert status is not None and status["observedGeneration"] == 1
    d["status"] = status
    assert dsu.status_for_write(d, counts, True) is None
    empty = dsu.status_for_write(ds(), dict.fromkeys(counts, 0), True)
    assert empty == {
        "observedGeneration": 1,
        "desiredNumberScheduled": 0,
        "currentNumberScheduled": 0,
        "numberMisscheduled": 0,
        "numberReady": 0,
    }


def test_revisions_snapshot_the_template_and_old_ones_are_cleaned_up() -> None:
    d = ds(revisionHistoryLimit=1)
    rev = dsu.snapshot(d, 3)
    hash_ = dsu.template_hash(d)
    assert rev["metadata"]["name"] == f"agent-{hash_}"
    assert rev["metadata"]["labels"] == {"app": "agent", dsu.HASH_LABEL: hash_}
    assert rev["data"] == history.template_patch(d)
    assert dsu.matches(d, rev)
    changed = copy.deepcopy(d)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "agent:2"
    assert not dsu.matches(changed, rev)
    assert dsu.template_hash(changed) != hash_
    d["status"] = {"collisionCount": 1}
    assert dsu.template_hash(d) != hash_
    old = []
    for n, h in ((1, "h1"), (2, "h2"), (3, "h3")):
        r = copy.deepcopy(rev)
        r["revision"] = n
        r["metadata"]["labels"][dsu.HASH_LABEL] = h
        old.append(r)
    # limit 1: two must go; h1 is still on a pod, so the two after it go (upstream counts only old ones)
    assert [history.number(r) for r in dsu.revisions_to_clean(d, old, {"h1"})] == [2, 3]
    assert [history.number(r) for r in dsu.revisions_to_clean(d, old, set())] == [1, 2]
    assert dsu.keep_of(old) is old[2]
    assert dsu.max_revision(old) == 3


@pytest.mark.parametrize(
    ("strategy", "surge", "unavailable"),
    [
        ({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 0}}, 0, 3),
        ({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "10%"}}, 1, 0),
        ({"type": "OnDelete"}, 0, 0),
    ],
)
def test_budgets_round_up(strategy: Obj, surge: int, unavailable: int) -> None:
    d = ds(updateStrategy=strategy)
    assert dsu.surge_count(d, 10) == surge
    assert dsu.unavailable_count(d, 10) == unavailable

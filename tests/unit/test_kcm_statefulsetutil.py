"""The StatefulSet controller's pure decisions (``statefulsetutil``) and the revision history helpers
(``history``): names and ordinals, what one sync does under OrderedReady and Parallel, partitions, OnDelete
and maxUnavailable, claim templates and the retention policy's owner references, revision hashing, reuse
and truncation, and the status written."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from vplane.controllers.kcm import history
from vplane.controllers.kcm import statefulsetutil as ssu
from vplane.controllers.kcm.timefmt import format_time
from vplane.kube.objects import Obj

NOW = 1_700_000_000.0
SET_UID = "set-uid"


def sts(replicas: int = 3, **spec: Any) -> Obj:
    body: Obj = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": SET_UID, "generation": 1},
        "spec": {
            "replicas": replicas,
            "serviceName": "web",
            "podManagementPolicy": "OrderedReady",
            "selector": {"matchLabels": {"app": "web"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "revisionHistoryLimit": 10,
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1"}]},
            },
            **spec,
        },
    }
    return body


def revision(sts_obj: Obj, number: int = 1) -> Obj:
    rev = ssu.new_revision(sts_obj, number, 0)
    rev["metadata"]["uid"] = f"rev-{number}"
    return rev


def pod(
    name: str,
    rev: str,
    *,
    phase: str = "Running",
    ready: bool = True,
    deleting: bool = False,
    ready_since: float = NOW - 100,
) -> Obj:
    ordinal = ssu.ordinal({"metadata": {"name": name}})
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {
                "app": "web",
                ssu.POD_NAME_LABEL: name,
                ssu.POD_INDEX_LABEL: str(ordinal),
                ssu.REVISION_LABEL: rev,
            },
        },
        "spec": {"containers": [{"name": "c", "image": "nginx:1"}]},
        "status": {"phase": phase},
    }
    if ready:
        obj["status"]["conditions"] = [
            {"type": "Ready", "status": "True", "lastTransitionTime": format_time(ready_since)}
        ]
    if deleting:
        obj["metadata"]["deletionTimestamp"] = format_time(NOW)
    return obj


def plan_for(sts_obj: Obj, pods: list[Obj], claims: dict[str, Obj] | None = None, **kw: Any) -> ssu.Plan:
    current = kw.pop("current", None) or revision(sts_obj)
    update = kw.pop("update", None) or current
    return ssu.plan(
        sts_obj,
        pods,
        current,
        update,
        history.apply_revision(sts_obj, current, ssu.STATEFULSETS),
        history.apply_revision(sts_obj, update, ssu.STATEFULSETS),
        claims or {},
        0,
        NOW,
    )


def steps(plan: ssu.Plan) -> list[tuple[str, str]]:
    return [(s.action, s.pod["metadata"]["name"]) for phase in plan.phases for s in phase.steps]


# -- names --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("web-0", ("web", 0)),
        ("my-web-12", ("my-web", 12)),
        ("web-01", ("web", 1)),
        ("web", ("", -1)),
        ("web-", ("", -1)),
        ("web-2147483647", ("web", 2147483647)),
        ("web-2147483648", ("web", -1)),  # past int32: ParseInt fails, upstream keeps the parent
    ],
)
def test_parent_and_ordinal(name: str, expected: tuple[str, int]) -> None:
    assert ssu.parent_and_ordinal(name) == expected


def test_a_new_pod_has_its_identity_storage_and_revision() -> None:
    s = sts(volumeClaimTemplates=[{"metadata": {"name": "www"}, "spec": {"accessModes": ["ReadWriteOnce"]}}])
    s["spec"]["template"]["spec"]["volumes"] = [{"name": "cfg", "emptyDir": {}}]
    p = ssu.new_versioned_pod(s, s, "cur", "upd", 2)
    meta = p["metadata"]
    assert meta["name"] == "web-2"
    assert meta["generateName"] == "web-"
    assert meta["namespace"] == "ns"
    assert meta["labels"] == {
        "app": "web",
        ssu.POD_NAME_LABEL: "web-2",
        ssu.POD_INDEX_LABEL: "2",
        ssu.REVISION_LABEL: "upd",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": "web",
            "uid": SET_UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert p["spec"]["hostname"] == "web-2"
    assert p["spec"]["subdomain"] == "web"
    assert p["spec"]["volumes"] == [
        {"name": "www", "persistentVolumeClaim": {"claimName": "www-web-2"}},
        {"name": "cfg", "emptyDir": {}},
    ]
    assert ssu.identity_matches(s, p) and ssu.storage_matches(s, p)


def test_claims_carry_the_template_and_the_selector_labels() -> None:
    s = sts(
        volumeClaimTemplates=[
            {
                "metadata": {"name": "data", "labels": {"tier": "db"}},
                "spec": {"resources": {"requests": {"storage": "1Gi"}}},
                "status": {"phase": "Pending"},
            }
        ]
    )
    ((template_name, claim),) = ssu.claims_for(s, 4)
    assert template_name == "data"
    assert claim == {
        "metadata": {"name": "data-web-4", "namespace": "ns", "labels": {"tier": "db", "app": "web"}},
        "spec": {"resources": {"requests": {"storage": "1Gi"}}},
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
    }


def test_pods_below_the_partition_are_made_at_the_current_revision() -> None:
    s = sts(updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 2}})
    old = copy.deepcopy(s)
    s["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    assert ssu.new_versioned_pod(old, s, "a", "b", 1)["metadata"]["labels"][ssu.REVISION_LABEL] == "a"
    assert ssu.new_versioned_pod(old, s, "a", "b", 1)["spec"]["containers"][0]["image"] == "nginx:1"
    assert ssu.new_versioned_pod(old, s, "a", "b", 2)["metadata"]["labels"][ssu.REVISION_LABEL] == "b"
    on_delete = sts(updateStrategy={"type": "OnDelete"})
    assert (
        ssu.new_versioned_pod(on_delete, on_delete, "a", "b", 0)["metadata"]["labels"][ssu.REVISION_LABEL]
        == "b"
    )


# -- one sync ---------------------------------------------------------------------------------------------------


def test_ordered_ready_creates_one_pod_and_waits() -> None:
    s = sts()
    plan = plan_for(s, [])
    assert steps(plan) == [("create", "web-0")]
    assert plan.phases[0].halt
    current = plan.status["currentRevision"]
    assert steps(plan_for(s, [pod("web-0", current, ready=False)])) == []
    assert steps(plan_for(s, [pod("web-0", current, phase="Pending", ready=False)])) == []
    assert steps(plan_for(s, [pod("web-0", current)])) == [("create", "web-1")]
    assert steps(plan_for(s, [pod("web-0", current), pod("web-1", current)])) == [("create", "web-2")]


def test_ordered_ready_waits_for_min_ready_seconds() -> None:
    s = sts(minReadySeconds=30)
    current = plan_for(s, []).status["currentRevision"]
    assert steps(plan_for(s, [pod("web-0", current, ready_since=NOW - 10)])) == []
    assert steps(plan_for(s, [pod("web-0", current, ready_since=NOW - 31)])) == [("create", "web-1")]


def test_parallel_creates_every_missing_pod_at_once() -> None:
    s = sts(podManagementPolicy="Parallel")
    plan = plan_for(s, [])
    assert steps(plan) == [("create", "web-0"), ("create", "web-1"), ("create", "web-2")]
    assert not plan.monotonic


def test_failed_pods_are_deleted_to_be_recreated() -> None:
    s = sts()
    current = plan_for(s, []).status["currentRevision"]
    plan = plan_for(s, [pod("web-0", current, phase="Failed", ready=False), pod("web-1", current)])
    assert steps(plan) == [("delete", "web-0")]
    assert plan.phases[0].halt


def test_scale_down_removes_the_highest_ordinal_first_one_at_a_time() -> None:
    s = sts(replicas=1)
    current = plan_for(s, []).status["currentRevision"]
    pods = [pod(f"web-{i}", current) for i in range(3)]
    assert steps(plan_for(s, pods)) == [("delete", "web-2")]
    pods[2]["metadata"]["deletionTimestamp"] = format_time(NOW)
    assert steps(plan_for(s, pods)) == []  # waits for web-2 to be gone
    assert steps(plan_for(s, pods[:2])) == [("delete", "web-1")]
    parallel = sts(replicas=1, podManagementPolicy="Parallel")
    assert steps(plan_for(parallel, [pod(f"web-{i}", current) for i in range(3)])) == [
        ("delete", "web-2"),
        ("delete", "web-1"),
    ]


def test_scale_down_waits_for_unhealthy_pods_but_removes_the_first_unhealthy_one() -> None:
    s = sts(replicas=1)
    current = plan_for(s, []).status["currentRevision"]
    # web-2 healthy and web-1 not: web-1 is the first unhealthy pod, web-2 goes first anyway
    pods = [pod("web-0", current), pod("web-1", current, ready=False), pod("web-2", current)]
    assert steps(plan_for(s, pods)) == [("delete", "web-2")]
    # web-2 unhealthy but web-1 was unhealthy first: wait
    pods = [pod("web-0", current), pod("web-1", current, ready=False), pod("web-2", current, ready=False)]
    assert steps(plan_for(s, pods)) == []
    pods = [pod("web-0", current), pod("web-1", current, ready=False)]
    assert steps(plan_for(s, pods)) == [("delete", "web-1")]


def test_rolling_update_replaces_from_the_highest_ordinal_down_to_the_partition() -> None:
    old = sts()
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    current, update = revision(old, 1), revision(new, 2)
    cur, upd = current["metadata"]["name"], update["metadata"]["name"]
    assert cur != upd
    pods = [pod(f"web-{i}", cur) for i in range(3)]
    plan = plan_for(new, pods, current=current, update=update)
    assert steps(plan) == [("delete", "web-2")]
    assert plan.phases[-1].steps[0].for_update
    assert plan.status["currentReplicas"] == 3 and plan.status["updatedReplicas"] == 0
    pods[2] = pod("web-2", upd)
    assert steps(plan_for(new, pods, current=current, update=update)) == [("delete", "web-1")]
    pods[2] = pod("web-2", upd, ready=False)
    assert steps(plan_for(new, pods, current=current, update=update)) == []
    partitioned = copy.deepcopy(new)
    partitioned["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = 2
    pods[2] = pod("web-2", upd)
    assert steps(plan_for(partitioned, pods, current=current, update=update)) == []
    on_delete = copy.deepcopy(new)
    on_delete["spec"]["updateStrategy"] = {"type": "OnDelete"}
    assert (
        steps(plan_for(on_delete, [pod(f"web-{i}", cur) for i in range(3)], current=current, update=update))
        == []
    )


def test_max_unavailable_allows_several_replacements_at_once() -> None:
    old = sts(replicas=4, podManagementPolicy="Parallel")
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    new["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = 2
    current, update = revision(old, 1), revision(new, 2)
    cur = current["metadata"]["name"]
    pods = [pod(f"web-{i}", cur) for i in range(4)]
    assert steps(plan_for(new, pods, current=current, update=update)) == [
        ("delete", "web-3"),
        ("delete", "web-2"),
    ]
    pods[0] = pod("web-0", cur, ready=False)  # one already unavailable: one more may go
    assert steps(plan_for(new, pods, current=current, update=update)) == [("delete", "web-3")]
    assert ssu.max_unavailable(new, 4) == 2
    new["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = "10%"
    assert ssu.max_unavailable(new, 4) == 1  # rounds down, never below 1


def test_pods_with_a_wrong_identity_are_updated() -> None:
    s = sts()
    current = plan_for(s, []).status["currentRevision"]
    stray = pod("web-0", current)
    del stray["metadata"]["labels"][ssu.POD_NAME_LABEL]
    assert steps(plan_for(s, [stray])) == [("update", "web-0"), ("create", "web-1")]


def test_a_deleting_set_only_counts() -> None:
    s = sts()
    s["metadata"]["deletionTimestamp"] = format_time(NOW)
    plan = plan_for(s, [pod("web-0", "x")])
    assert plan.phases == []
    assert plan.status["replicas"] == 1


def test_status_counts_and_rolling_update_completion() -> None:
    s = sts()
    current = revision(s)
    name = current["metadata"]["name"]
    plan = plan_for(s, [pod(f"web-{i}", name) for i in range(3)], current=current)
    status = plan.status
    assert status == {
        "observedGeneration": 1,
        "replicas": 3,
        "readyReplicas": 3,
        "availableReplicas": 3,
        "currentReplicas": 3,
        "updatedReplicas": 3,
        "currentRevision": name,
        "updateRevision": name,
        "collisionCount": 0,
    }
    assert ssu.status_changed(s, status)
    s["status"] = ssu.wire_status(s, status)
    assert not ssu.status_changed(s, dict(status))
    done = {**status, "currentRevision": "old", "currentReplicas": 0}
    ssu.complete_rolling_update(s, done)
    assert (done["currentRevision"], done["currentReplicas"]) == (name, 3)
    empty = ssu.wire_status(
        s, {"replicas": 0, "availableReplicas": 0, "currentRevision": "", "collisionCount": 0}
    )
    assert empty == {"replicas": 0, "availableReplicas": 0, "collisionCount": 0}


# -- claims and the retention policy -------------------------------------------------------------------------


def claim(name: str, *refs: Obj) -> Obj:
    return {"metadata": {"name": name, "namespace": "ns", "ownerReferences": list(refs)}}


SET_REF = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": SET_UID, "controller": True}


def pod_ref(name: str, uid: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": True}


@pytest.mark.parametrize(
    ("when_deleted", "when_scaled", "replicas", "expected"),
    [
        ("Retain", "Retain", 3, []),
        ("Delete", "Retain", 3, ["set"]),
        ("Retain", "Delete", 3, []),
        ("Retain", "Delete", 1, ["pod"]),  # web-2 is condemned
        ("Delete", "Delete", 3, ["set"]),
        ("Delete", "Delete", 1, ["pod"]),
    ],
)
def test_claim_owner_references_follow_the_policy(
    when_deleted: str, when_scaled: str, replicas: int, expected: list[str]
) -> None:
    s = sts(
        replicas=replicas,
        persistentVolumeClaimRetentionPolicy={"whenDeleted": when_deleted, "whenScaled": when_scaled},
        volumeClaimTemplates=[{"metadata": {"name": "www"}}],
    )
    p = pod("web-2", "r")
    bare = claim("www-web-2")
    refs = ssu.updated_claim_refs(bare, s, p)
    kinds = ["set" if r["kind"] == "StatefulSet" else "pod" for r in refs]
    assert kinds == expected
    assert ssu.claim_owner_up_to_date(bare, s, p) == (expected == [])
    fixed = claim("www-web-2", *refs)
    assert ssu.claim_owner_up_to_date(fixed, s, p)
    assert ssu.claims_match_retention(s, p, {"ns/www-web-2": fixed})
    assert ssu.claims_match_retention(s, p, {})  # a missing claim is picked up later


def test_claims_owned_by_other_controllers_are_left_alone() -> None:
    s = sts(
        persistentVolumeClaimRetentionPolicy={"whenDeleted": "Delete", "whenScaled": "Delete"},
        volumeClaimTemplates=[{"metadata": {"name": "www"}}],
    )
    p = pod("web-0", "r")
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "other", "controller": True}
    foreign = claim("www-web-0", other)
    assert ssu.has_unexpected_controller(foreign, s, p)
    assert ssu.claim_owner_up_to_date(foreign, s, p)  # nothing of ours to clean up
    assert ssu.updated_claim_refs(foreign, s, p) == [other]
    stale = claim("www-web-0", {**SET_REF, "uid": "an-earlier-set"})
    assert ssu.claim_owner_up_to_date(stale, s, p)  # an earlier set's claim: not touched


def test_a_claim_of_an_earlier_pod_blocks_its_successor_when_scaled_claims_are_deleted() -> None:
    s = sts(
        persistentVolumeClaimRetentionPolicy={"whenDeleted": "Retain", "whenScaled": "Delete"},
        volumeClaimTemplates=[{"metadata": {"name": "www"}}],
    )
    leftover = {"ns/www-web-0": claim("www-web-0", pod_ref("web-0", "uid-of-the-old-web-0"))}
    assert steps(plan_for(s, [], leftover)) == []
    retained = sts(volumeClaimTemplates=[{"metadata": {"name": "www"}}])
    assert steps(plan_for(retained, [], leftover)) == [("create", "web-0")]


# -- revisions ---------------------------------------------------------------------------------------------


def test_go_json_and_fnv1() -> None:
    assert (
        history.go_json({"b": 1, "a": ["<&>", "é"]}) == '{"a":["\\u003c\\u0026\\u003e","é"],"b":1}'.encode()
    )
    assert history.fnv32(b"") == 0x811C9DC5
    assert history.fnv32(b"a") == 0x050C5D7E  # FNV-1, not FNV-1a (0xe40c292c)
    # Go: rand.SafeEncodeString(fmt.Sprint(fnv32(data + strconv.Itoa(collisionCount))))
    assert history.hash_data(b"a", None) == "d8bfb88b"
    assert history.hash_data(b"a", 0) == "5ddbd9db46"
    assert history.hash_data(b"a", 7) == "5ddbd9db49"


def test_a_revision_holds_the_template_patch() -> None:
    s = sts()
    s["metadata"]["annotations"] = {"kubernetes.io/change-cause": "v1"}
    rev = ssu.new_revision(s, 4, 0)
    assert rev["data"] == {"spec": {"template": {**s["spec"]["template"], "$patch": "replace"}}}
    hash_ = history.hash_data(history.go_json(rev["data"]), 0)
    assert rev["metadata"]["name"] == f"web-{hash_}"
    assert rev["metadata"]["labels"] == {"app": "web", history.HASH_LABEL: hash_}
    assert rev["metadata"]["annotations"] == {"kubernetes.io/change-cause": "v1"}
    assert rev["revision"] == 4
    changed = copy.deepcopy(s)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    restored = history.apply_revision(changed, rev, ssu.STATEFULSETS)
    assert restored["spec"]["template"] == s["spec"]["template"]
    assert history.revision_name("x" * 300, "h") == "x" * 223 + "-h"


def test_the_update_revision_is_kept_reused_or_created() -> None:
    v1 = sts()
    v2 = copy.deepcopy(v1)
    v2["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    r1, r2 = revision(v1, 1), revision(v2, 2)
    choice = ssu.choose_update_revision(v2, [r1, r2], 0)
    assert (choice.action, choice.revision["metadata"]["name"]) == ("keep", r2["metadata"]["name"])
    choice = ssu.choose_update_revision(v1, [r1, r2], 0)  # a rollback: the old revision becomes number 3
    assert (choice.action, choice.revision["metadata"]["name"], choice.number) == (
        "renumber",
        r1["metadata"]["name"],
        3,
    )
    v3 = copy.deepcopy(v1)
    v3["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:3"
    choice = ssu.choose_update_revision(v3, [r1, r2], 0)
    assert (choice.action, choice.number) == ("create", 3)
    assert ssu.choose_update_revision(v1, [], 0).number == 1
    v1["status"] = {"currentRevision": r1["metadata"]["name"]}
    assert ssu.current_revision(v1, [r1, r2], r2) is r1
    v1["status"] = {}
    assert ssu.current_revision(v1, [r1, r2], r2) is r2


def test_history_keeps_live_revisions_and_the_newest_old_ones() -> None:
    s = sts(revisionHistoryLimit=2)
    revs = []
    for n in range(1, 7):
        r = copy.deepcopy(revision(s, n))
        r["metadata"]["name"] = f"web-r{n}"
        revs.append(r)
    doomed = ssu.revisions_to_delete(s, [pod("web-0", "web-r2")], revs, "web-r5", "web-r6")
    # live: r2 (a pod), r5 (current), r6 (update); of r1, r3, r4 the newest two stay
    assert [r["metadata"]["name"] for r in doomed] == ["web-r1"]
    s["spec"]["revisionHistoryLimit"] = 0
    doomed = ssu.revisions_to_delete(s, [], revs, "web-r5", "web-r6")
    assert [r["metadata"]["name"] for r in doomed] == ["web-r1", "web-r2", "web-r3", "web-r4"]


def test_equal_revisions_compare_data_unless_numeric_hashes_differ() -> None:
    s = sts()
    a, b = revision(s, 1), revision(s, 2)
    assert history.equal_revision(a, b)
    a["metadata"]["labels"][history.HASH_LABEL] = "42"
    b["metadata"]["labels"][history.HASH_LABEL] = "43"
    assert not history.equal_revision(a, b)  # Go parses both labels as numbers and they differ
    b["metadata"]["labels"][history.HASH_LABEL] = "4" * 12  # too large for int32: the data decides
    assert history.equal_revision(a, b)
    assert history.sort_revisions([b, a]) == [a, b]

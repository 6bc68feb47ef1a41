"""Pure Deployment decisions: fenceposts and percentages, proportional scaling, the template hash,
revisions, status and the Progressing/Available conditions with upstream's reasons and messages."""

from __future__ import annotations

import pytest

from vplane.controllers.kcm import deploymentutil as du
from vplane.controllers.kcm.timefmt import format_time

T0 = 1_700_000_000.0


def deployment(replicas: int = 3, surge: object = "25%", unavailable: object = "25%", **spec: object) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "uid": "d-uid", "generation": 1},
        "spec": {
            "replicas": replicas,
            "progressDeadlineSeconds": 600,
            "revisionHistoryLimit": 10,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable},
            },
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "i:1"}]},
            },
            **spec,
        },
    }


def replica_set(
    name: str,
    replicas: int,
    *,
    created: float = T0,
    available: int = 0,
    revision: str | None = None,
    **annotations: str,
) -> dict:
    notes = dict(annotations)
    if revision is not None:
        notes[du.REVISION] = revision
    return {
        "metadata": {
            "name": name,
            "uid": f"{name}-uid",
            "creationTimestamp": format_time(created),
            "annotations": notes,
        },
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": "web"}}}},
        "status": {"replicas": replicas, "availableReplicas": available, "readyReplicas": available},
    }


@pytest.mark.parametrize(
    ("surge", "unavailable", "desired", "expected"),
    [
        # ResolveFenceposts's own examples (deployment_util.go)
        ("0%", "1%", 2, (0, 1)),
        ("0%", "1%", 1, (0, 1)),
        ("1%", "25%", 2, (1, 0)),
        ("1%", "25%", 1, (1, 0)),
        ("1%", "0%", 2, (1, 0)),
        ("1%", "0%", 1, (1, 0)),
        # the defaults: surge rounds up, unavailability down
        ("25%", "25%", 10, (3, 2)),
        ("25%", "25%", 3, (1, 0)),
        ("25%", "25%", 4, (1, 1)),
        (0, 0, 5, (0, 1)),  # both zero: one may be unavailable
        (2, 1, 5, (2, 1)),
        ("50%", "50%", 7, (4, 3)),
    ],
)
def test_fenceposts_round_as_upstream(
    surge: object, unavailable: object, desired: int, expected: tuple[int, int]
) -> None:
    assert du.resolve_fenceposts(surge, unavailable, desired) == expected


def test_max_unavailable_is_capped_by_replicas_and_zero_for_recreate() -> None:
    assert du.max_unavailable(deployment(replicas=2, surge=0, unavailable=5)) == 2
    assert du.max_unavailable(deployment(replicas=0)) == 0
    recreate = deployment()
    recreate["spec"]["strategy"] = {"type": "Recreate"}
    assert du.max_surge(recreate) == 0 and du.max_unavailable(recreate) == 0


def test_percent_must_be_a_percentage() -> None:
    with pytest.raises(ValueError, match="string is not a percentage"):
        du.int_or_percent("5", 10, True)


def test_template_hash_is_safe_encoded_and_changes_with_collision_count() -> None:
    tmpl = deployment()["spec"]["template"]
    first = du.compute_hash(tmpl, None)
    assert first == du.compute_hash(dict(reversed(list(tmpl.items()))), None)  # key order does not matter
    assert set(first) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert 1 <= len(first) <= 10  # the decimal of a 32-bit value, one character per digit
    assert du.compute_hash(tmpl, 1) != first
    assert du.compute_hash(tmpl, 1) != du.compute_hash(tmpl, 2)
    other = {**tmpl, "spec": {"containers": [{"name": "c", "image": "i:2"}]}}
    assert du.compute_hash(other, None) != first


def test_safe_encode_and_fnv_match_upstream() -> None:
    # FNV-1a 32 of "" is the offset basis; "a" is 0xe40c292c (reference values of the algorithm)
    assert du.fnv32a(b"") == 0x811C9DC5
    assert du.fnv32a(b"a") == 0xE40C292C
    # SafeEncodeString maps each byte modulo the alphabet: "0" is byte 48 -> 48 % 27 = 21 -> "4"
    assert du.safe_encode("0123") == "4567"


def test_equal_ignore_hash_ignores_the_hash_label_and_empty_maps() -> None:
    a = {
        "metadata": {"labels": {"app": "web", du.POD_TEMPLATE_HASH: "abc"}},
        "spec": {"containers": [{"name": "c"}]},
    }
    b = {"metadata": {"labels": {"app": "web"}, "annotations": {}}, "spec": {"containers": [{"name": "c"}]}}
    assert du.equal_ignore_hash(a, b)
    c = {"metadata": {"labels": {"app": "other"}}, "spec": {"containers": [{"name": "c"}]}}
    assert not du.equal_ignore_hash(a, c)


def test_new_rs_replicas_respects_surge() -> None:
    d = deployment(replicas=10)  # surge 3
    old = replica_set("old", 10)
    new = replica_set("new", 0)
    assert du.new_rs_new_replicas(d, [old, new], new) == 3
    new["spec"]["replicas"] = 3
    assert du.new_rs_new_replicas(d, [old, new], new) == 3  # at 13 = 10 + surge: cannot grow
    old["spec"]["replicas"] = 5
    assert du.new_rs_new_replicas(d, [old, new], new) == 8
    recreate = deployment(replicas=4)
    recreate["spec"]["strategy"] = {"type": "Recreate"}
    assert du.new_rs_new_replicas(recreate, [new], new) == 4


def test_proportional_scaling_shares_by_max_replicas_annotation() -> None:
    d = deployment(replicas=20, surge=0, unavailable=1)  # scaled from 10 to 20
    a = replica_set("a", 6, **{du.MAX_REPLICAS: "10"})
    b = replica_set("b", 4, **{du.MAX_REPLICAS: "10"})
    assert du.get_proportion(a, d, 10, 0) == 6
    assert du.get_proportion(b, d, 10, 6) == 4
    assert du.get_proportion(b, d, 10, 10) == 0
    assert du.round_half_away(2.5) == 3 and du.round_half_away(-2.5) == -3


def test_find_active_or_latest() -> None:
    old = replica_set("old", 0, created=T0)
    older = replica_set("older", 0, created=T0 - 10)
    assert du.find_active_or_latest(None, [older, old]) is old  # none active: the newest
    active = replica_set("active", 2)
    assert du.find_active_or_latest(None, [older, active]) is active
    assert du.find_active_or_latest(replica_set("new", 1), [active]) is None


def test_new_set_annotations_keep_revision_history_when_rolled_back_to() -> None:
    d = deployment()
    d["metadata"]["annotations"] = {
        "kubernetes.io/change-cause": "v2",
        du.REVISION: "5",
        du.LAST_APPLIED: "{}",
    }
    rs = replica_set("web-1", 3, revision="1")
    assert du.set_new_rs_annotations(d, rs, "4", exists=True)
    notes = rs["metadata"]["annotations"]
    assert notes[du.REVISION] == "4"
    assert notes[du.REVISION_HISTORY] == "1"
    assert notes["kubernetes.io/change-cause"] == "v2"
    assert du.LAST_APPLIED not in notes
    assert du.set_new_rs_annotations(d, rs, "6", exists=True)
    assert rs["metadata"]["annotations"][du.REVISION_HISTORY] == "1,4"
    assert not du.set_new_rs_annotations(d, rs, "6", exists=True)  # nothing new
    fresh = replica_set("web-2", 0)
    du.set_new_rs_annotations(d, fresh, "7", exists=False)
    assert fresh["metadata"]["annotations"][du.DESIRED_REPLICAS] == "3"
    assert fresh["metadata"]["annotations"][du.MAX_REPLICAS] == "4"


def test_revision_history_is_bounded_to_2000_characters() -> None:
    rs = replica_set("web-1", 3, revision="99")
    rs["metadata"]["annotations"][du.REVISION_HISTORY] = ",".join(str(n) for n in range(1000, 1000 + 400))
    du.set_new_rs_annotations(deployment(), rs, "100000", exists=True)
    history = rs["metadata"]["annotations"][du.REVISION_HISTORY]
    assert len(history) <= 2000
    assert history.endswith(",99")


def test_cleanup_order_is_by_revision() -> None:
    sets = [
        replica_set("c", 0, revision="3"),
        replica_set("a", 0, revision="1"),
        replica_set("b", 0, revision="2"),
    ]
    assert [rs["metadata"]["name"] for rs in du.by_revision(sets)] == ["a", "b", "c"]


def test_status_counts_and_available_condition() -> None:
    d = deployment(replicas=4)  # maxUnavailable 1
    new = replica_set("new", 2, available=2)
    old = replica_set("old", 2, available=1)
    status = du.calculate_status([old, new], new, d, T0)
    assert status["replicas"] == 4
    assert status["updatedReplicas"] == 2
    assert status["availableReplicas"] == 3
    assert status["unavailableReplicas"] == 1
    assert status["observedGeneration"] == 1
    available = du.get_condition(status, "Available")
    assert available is not None
    assert (available["status"], available["reason"], available["message"]) == (
        "True",
        "MinimumReplicasAvailable",
        "Deployment has minimum availability.",
    )
    old["status"]["availableReplicas"] = 0
    status = du.calculate_status([old, new], new, d, T0)
    available = du.get_condition(status, "Available")
    assert available is not None
    assert (available["status"], available["reason"], available["message"]) == (
        "False",
        "MinimumReplicasUnavailable",
        "Deployment does not have minimum availability.",
    )


def test_progressing_then_complete_then_timed_out() -> None:
    d = deployment(replicas=2)
    new = replica_set("web-abc", 1, available=0)
    d["status"] = {
        "conditions": [
            du.new_condition(
                "Progressing", "True", du.NEW_REPLICA_SET, 'Created new replica set "web-abc"', T0
            )
        ]
    }
    status = du.rollout_status([new], new, d, T0 + 5)
    progressing = du.get_condition(status, "Progressing")
    assert progressing is not None
    assert progressing["reason"] == "ReplicaSetUpdated"
    assert progressing["message"] == 'ReplicaSet "web-abc" is progressing.'
    assert progressing["lastTransitionTime"] == format_time(T0)  # still True: the transition time stays
    assert progressing["lastUpdateTime"] == format_time(T0 + 5)

    d["status"] = status
    # no progress for longer than progressDeadlineSeconds
    assert du.progress_check_in(d, status, T0 + 10) == pytest.approx(600 - 5 + 1)
    stuck = du.rollout_status([new], new, d, T0 + 5 + 601)
    timed_out = du.get_condition(stuck, "Progressing")
    assert timed_out is not None
    assert (timed_out["status"], timed_out["reason"], timed_out["message"]) == (
        "False",
        "ProgressDeadlineExceeded",
        'ReplicaSet "web-abc" has timed out progressing.',
    )

    done = replica_set("web-abc", 2, available=2)
    complete = du.rollout_status([done], done, d, T0 + 20)
    cond = du.get_condition(complete, "Progressing")
    assert cond is not None
    assert (cond["reason"], cond["message"]) == (
        "NewReplicaSetAvailable",
        'ReplicaSet "web-abc" has successfully progressed.',
    )
    assert du.progress_check_in(d, complete, T0 + 20) is None


def test_no_progress_deadline_drops_the_progressing_condition() -> None:
    d = deployment(progressDeadlineSeconds=du.MAX_INT32)
    d["status"] = {"conditions": [du.new_condition("Progressing", "True", du.NEW_REPLICA_SET, "x", T0)]}
    status = du.rollout_status([], None, d, T0)
    assert du.get_condition(status, "Progressing") is None


def test_replica_failure_is_copied_from_the_new_set() -> None:
    d = deployment()
    new = replica_set("new", 3)
    new["status"]["conditions"] = [
        {
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": "quota",
            "lastTransitionTime": format_time(T0),
        }
    ]
    status = du.rollout_status([new], new, d, T0)
    failure = du.get_condition(status, "ReplicaFailure")
    assert failure is not None and failure["reason"] == "FailedCreate" and failure["message"] == "quota"
    new["status"]["conditions"] = []
    d["status"] = status
    assert du.get_condition(du.rollout_status([new], new, d, T0), "ReplicaFailure") is None


def test_set_condition_keeps_same_reason_and_transition_time() -> None:
    status: dict = {}
    du.set_condition(status, du.new_condition("Available", "True", "A", "first", T0))
    du.set_condition(status, du.new_condition("Available", "True", "A", "second", T0 + 1))
    assert status["conditions"][0]["message"] == "first"
    du.set_condition(status, du.new_condition("Available", "True", "B", "third", T0 + 2))
    assert status["conditions"][0]["lastTransitionTime"] == format_time(T0)
    assert status["conditions"][0]["reason"] == "B"


def test_saturation_needs_the_annotation_and_availability() -> None:
    d = deployment(replicas=3)
    rs = replica_set("new", 3, available=3)
    assert not du.is_saturated(d, rs)
    rs["metadata"]["annotations"][du.DESIRED_REPLICAS] = "3"
    assert du.is_saturated(d, rs)
    rs["status"]["availableReplicas"] = 2
    assert not du.is_saturated(d, rs)


def test_terminating_replicas_sum_only_when_every_set_reports_them() -> None:
    d = deployment(replicas=2)
    a, b = replica_set("a", 1), replica_set("b", 1)
    a["status"]["terminatingReplicas"] = 2
    assert "terminatingReplicas" not in du.calculate_status([a, b], b, d, T0)
    b["status"]["terminatingReplicas"] = 1
    assert du.calculate_status([a, b], b, d, T0)["terminatingReplicas"] == 3

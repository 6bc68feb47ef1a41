"""PodDisruptionBudget status decided purely: expected and desired counts for every spec form, healthy pods,
granted evictions and their timeout, the DisruptionAllowed condition, and the fail-safe."""

from __future__ import annotations

from typing import Any

import pytest

from vplane.controllers.kcm import disruption as dis
from vplane.controllers.kcm.timefmt import format_time

T0 = 1_700_000_000.0


def pod(
    name: str,
    *,
    ready: bool = True,
    owner: str | None = "rs1",
    kind: str = "ReplicaSet",
    deleting: bool = False,
) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": {"app": "web"}}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": owner, "controller": True}
        ]
    if deleting:
        meta["deletionTimestamp"] = format_time(T0)
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


def pdb(generation: int = 1, status: dict | None = None, **spec: Any) -> dict:
    return {
        "metadata": {"name": "budget", "namespace": "ns", "generation": generation},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
        "status": status or {},
    }


def scales(**replicas: int) -> dis.ScaleOf:
    def scale_of(ref: dict, pod: dict) -> tuple[str, int] | None:
        name = ref["name"]
        return (name, replicas[name]) if name in replicas else None

    return scale_of


def test_min_available_integer_counts_pods() -> None:
    pods = [pod("a"), pod("b"), pod("c")]
    assert dis.expected_pod_count(pdb(minAvailable=2), pods, scales()) == (3, 2, [])


def test_percentages_and_max_unavailable_use_controller_scale() -> None:
    pods = [pod("a"), pod("b", owner="rs2"), pod("c", owner=None)]
    assert dis.expected_pod_count(pdb(minAvailable="50%"), pods, scales(rs1=3, rs2=2)) == (5, 3, ["c"])
    assert dis.expected_pod_count(pdb(maxUnavailable="25%"), pods, scales(rs1=3, rs2=2)) == (5, 3, ["c"])
    assert dis.expected_pod_count(pdb(maxUnavailable=10), pods, scales(rs1=3, rs2=2)) == (5, 0, ["c"])
    with pytest.raises(dis.CountFailed, match='found no controllers for pod "a"'):
        dis.expected_pod_count(pdb(maxUnavailable=1), [pod("a")], scales())
    with pytest.raises(dis.CountFailed, match="jobs.batch does not implement the scale subresource"):
        dis.expected_pod_count(pdb(minAvailable="50%"), [pod("a", kind="Job")], scales())


def test_status_counts_and_condition() -> None:
    pods = [pod("a"), pod("b"), pod("c", ready=False), pod("d", deleting=True)]
    budget = pdb(minAvailable=1)
    counts = dis.Counts(dis.count_healthy(pods, {}, T0), 1, 4, {})
    status = dis.status_for(budget, counts, T0)
    assert status == {
        "observedGeneration": 1,
        "disruptionsAllowed": 1,
        "currentHealthy": 2,
        "desiredHealthy": 1,
        "expectedPods": 4,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True",
                "observedGeneration": 1,
                "reason": "SufficientPods",
                "message": "",
                "lastTransitionTime": format_time(T0),
            }
        ],
    }
    assert dis.status_for({**budget, "status": status}, counts, T0 + 5) is None
    fewer = dis.status_for({**budget, "status": status}, dis.Counts(1, 1, 4, {}), T0 + 5)
    assert fewer is not None and fewer["disruptionsAllowed"] == 0
    assert fewer["conditions"][0]["reason"] == "InsufficientPods"
    assert fewer["conditions"][0]["lastTransitionTime"] == format_time(T0 + 5)
    nothing_expected = dis.status_for(budget, dis.Counts(3, 0, 0, {}), T0)
    assert nothing_expected is not None and nothing_expected["disruptionsAllowed"] == 0


def test_granted_evictions_count_until_seen_or_timed_out() -> None:
    pods = [pod("a"), pod("b"), pod("gone", deleting=True)]
    granted = {"a": format_time(T0), "gone": format_time(T0), "ghost": format_time(T0)}
    budget = pdb(minAvailable=1, status={"disruptedPods": granted})
    kept, recheck, overdue = dis.disrupted_pod_map(pods, budget, T0 + 10)
    assert kept == {"a": format_time(T0)} and recheck == T0 + 120 and overdue == []
    assert dis.count_healthy(pods, kept, T0 + 10) == 1
    kept, recheck, overdue = dis.disrupted_pod_map(pods, budget, T0 + 121)
    assert kept == {} and recheck is None and [p["metadata"]["name"] for p in overdue] == ["a"]


def test_fail_safe_allows_nothing() -> None:
    budget = pdb(minAvailable="50%", status={"disruptionsAllowed": 3, "observedGeneration": 1})
    status = dis.fail_safe_status(budget, 'found no controllers for pod "a"', T0)
    assert status["disruptionsAllowed"] == 0
    (cond,) = status["conditions"]
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False",
        "SyncFailed",
        'found no controllers for pod "a"',
    )

"""The HPA's replica calculation with missing and unready pods, on the scenarios of upstream's
``replica_calculator_test.go`` (same pods, levels, requests and expected counts): two containers per pod
each requesting the pod's request and using its level, a CPU initialization period of 2 minutes, an
initial readiness delay of 10 s, a 10% tolerance, metrics stamped with the zero time over a 1-minute
window, pods started at the zero time unless "hot" (just started) or "cool" (3 minutes ago)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from vplane.controllers.kcm.podautoscalerutil import Tolerances
from vplane.controllers.kcm.replicacalc import (
    ZERO_TIME,
    PodFacts,
    ReplicaCalcError,
    ResourceReplicas,
    Sample,
    group_pods,
    parse_window,
    plain_replicas,
    resource_replicas,
)

NOW = 1_700_000_000.0
HOT, COOL = NOW, NOW - 180
TOL = Tolerances(0.1, 0.1)
CONTAINERS = 2


def scenario(
    current: int,
    levels: Sequence[int],
    target: int,
    *,
    requests: Sequence[int] | None = None,
    readiness: Sequence[str] = (),
    starts: Sequence[float] = (),
    phases: Sequence[str] = (),
    deleting: Sequence[bool] = (),
    resource: str = "cpu",
) -> ResourceReplicas:
    count = max(current, len(phases))
    request_list = list(requests) if requests is not None else [1000] * count
    pods = [
        PodFacts(
            f"test-pod-{i}",
            phase=phases[i] if i < len(phases) else "Running",
            deleting=deleting[i] if i < len(deleting) else False,
            ready=readiness[i] if i < len(readiness) else "True",
            started=starts[i] if i < len(starts) else ZERO_TIME,
            request=CONTAINERS * request_list[i] if i < len(request_list) else None,
            unrequested="" if i < len(request_list) else "container0",
        )
        for i in range(count)
    ]
    samples = {f"test-pod-{i}": Sample(CONTAINERS * level, None, 60) for i, level in enumerate(levels)}
    return resource_replicas(current, target, resource, pods, samples, TOL, NOW, 120, 10)


@pytest.mark.parametrize(
    ("name", "kwargs", "expected"),
    [
        ("ScaleUp", dict(current=3, levels=[300, 500, 700], target=30), (5, 50, 1000)),
        (
            "ScaleUpUnreadyLessScale",
            dict(current=3, levels=[300, 500, 700], target=30, readiness=["False", "True", "True"]),
            (4, 60, 1200),
        ),
        (
            "ScaleUpHotCpuLessScale",
            dict(current=3, levels=[300, 500, 700], target=30, starts=[HOT, COOL, COOL]),
            (4, 60, 1200),
        ),
        (
            "ScaleUpUnreadyNoScale",
            dict(current=3, levels=[400, 500, 700], target=30, readiness=["True", "False", "False"]),
            (3, 40, 800),
        ),
        (
            "ScaleHotCpuNoScale",
            dict(
                current=3,
                levels=[400, 500, 700],
                target=30,
                readiness=["True", "False", "False"],
                starts=[COOL, HOT, HOT],
            ),
            (3, 40, 800),
        ),
        (
            "ScaleUpIgnoresFailedPods",
            dict(
                current=2,
                levels=[500, 700],
                target=30,
                readiness=["True", "True", "False", "False"],
                phases=["Running", "Running", "Failed", "Failed"],
            ),
            (4, 60, 1200),
        ),
        (
            "ScaleUpIgnoresDeletionPods",
            dict(
                current=2,
                levels=[500, 700],
                target=30,
                readiness=["True", "True", "False", "False"],
                phases=["Running"] * 4,
                deleting=[False, False, True, True],
            ),
            (4, 60, 1200),
        ),
        ("ScaleDown", dict(current=5, levels=[100, 300, 500, 250, 250], target=50), (3, 28, 560)),
        (
            "ScaleDownIncludeUnreadyPods",
            dict(
                current=5,
                levels=[100, 300, 500, 250, 250],
                target=50,
                readiness=["True", "True", "True", "False", "False"],
            ),
            (2, 30, 600),
        ),
        (
            "ScaleDownExcludeUnscheduledPods",
            dict(
                current=5,
                levels=[100],
                target=50,
                readiness=["True"] + ["False"] * 4,
                phases=["Running"] + ["Pending"] * 4,
            ),
            (1, 10, 200),
        ),
        (
            "ScaleDownIgnoreHotCpuPods",
            dict(current=5, levels=[100, 300, 500, 250, 250], target=50, starts=[COOL] * 3 + [HOT] * 2),
            (2, 30, 600),
        ),
        (
            "ScaleDownIgnoresFailedPods",
            dict(
                current=5,
                levels=[100, 300, 500, 250, 250],
                target=50,
                readiness=["True"] * 5 + ["False"] * 2,
                phases=["Running"] * 5 + ["Failed"] * 2,
            ),
            (3, 28, 560),
        ),
        (
            "Tolerance",
            dict(current=3, levels=[1010, 1030, 1020], target=100, requests=[900, 1000, 1100]),
            (3, 102, 2040),
        ),
        (
            "SuperfluousMetrics",
            dict(current=4, levels=[4000, 9500, 3000, 7000, 3200, 2000], target=100),
            (24, 587, 11750),
        ),
        ("MissingMetrics", dict(current=4, levels=[400, 95], target=100), (3, 24, 495)),
        ("MissingMetricsNoChangeEq", dict(current=2, levels=[1000], target=100), (2, 100, 2000)),
        ("MissingMetricsNoChangeGt", dict(current=2, levels=[1900], target=100), (2, 190, 3800)),
        ("MissingMetricsNoChangeLt", dict(current=2, levels=[600], target=100), (2, 60, 1200)),
        (
            "MissingMetricsUnreadyChange",
            dict(current=3, levels=[100, 450], target=50, readiness=["False", "True", "True"]),
            (3, 45, 900),
        ),
        (
            "MissingMetricsHotCpuNoChange",
            dict(current=3, levels=[100, 450], target=50, starts=[HOT, COOL, COOL]),
            (3, 45, 900),
        ),
        (
            "MissingMetricsUnreadyScaleUp",
            dict(current=3, levels=[100, 2000], target=50, readiness=["False", "True", "True"]),
            (4, 200, 4000),
        ),
        (
            "MissingMetricsHotCpuScaleUp",
            dict(
                current=3,
                levels=[100, 2000],
                target=50,
                readiness=["False", "True", "True"],
                starts=[HOT, COOL, COOL],
            ),
            (4, 200, 4000),
        ),
        (
            "MissingMetricsUnreadyScaleDown",
            dict(current=4, levels=[100, 100, 100], target=50, readiness=["False", "True", "True", "True"]),
            (3, 10, 200),
        ),
        (
            "DuringRollingUpdateWithMaxSurge",
            dict(current=2, levels=[100, 100], target=50, phases=["Running"] * 3),
            (2, 10, 200),
        ),
    ],
)
def test_upstream_resource_scenarios(
    name: str, kwargs: dict[str, object], expected: tuple[int, int, int]
) -> None:
    found = scenario(**kwargs)  # type: ignore[arg-type]
    assert (found.replicas, found.utilization, found.raw_average) == expected, name


def test_errors_carry_upstreams_messages() -> None:
    with pytest.raises(ReplicaCalcError, match="^missing request for cpu in container container0 of Pod"):
        scenario(1, [200], 100, requests=[])
    pods = [PodFacts("test-pod-0", request=2000)]
    with pytest.raises(ReplicaCalcError, match="^no metrics returned matched known pods$"):
        resource_replicas(1, 100, "cpu", pods, {"an-older-pod-name": Sample(200)}, TOL, NOW)
    with pytest.raises(ReplicaCalcError, match=r"^did not receive metrics for targeted pods \(pods might"):
        resource_replicas(
            1, 100, "cpu", [PodFacts("p", ready="False", started=NOW - 1)], {"p": Sample(1)}, TOL, NOW
        )
    with pytest.raises(
        ReplicaCalcError, match="^no pods returned by selector while calculating replica count$"
    ):
        resource_replicas(1, 100, "cpu", [], {"p": Sample(1)}, TOL, NOW)


def test_computed_tolerance_boundary() -> None:
    """Upstream's ``TestReplicaCalcComputedToleranceAlgImplementation``: 10 pods using 150m of ~300m each;
    a target just past the tolerance scales down to 9, one just inside it keeps 10."""
    requests = [400, 200, 310, 290, 302, 298, 301, 299, 300, 300]
    pods = [PodFacts(f"p{i}", request=r, started=ZERO_TIME) for i, r in enumerate(requests)]
    samples = {f"p{i}": Sample(150, None, 60) for i in range(10)}
    assert resource_replicas(10, 56, "cpu", pods, samples, TOL, NOW, 120, 10) == ResourceReplicas(9, 50, 150)
    assert resource_replicas(10, 55, "cpu", pods, samples, TOL, NOW, 120, 10).replicas == 10


def test_group_pods_initialization_period_and_readiness_delay() -> None:
    """Upstream's ``TestGroupPods`` facts: within the period a Ready pod counts only once its sample covers
    a full window since it turned Ready; after it, a not-Ready pod is ignored only if it never was Ready."""
    fresh = Sample(1, NOW, 30)
    ready = PodFacts("b", phase="Succeeded", started=NOW - 60, ready_changed=NOW - 30)
    assert group_pods([ready], {"b": fresh}, "cpu", NOW).ready == 1
    assert group_pods([ready], {"b": Sample(1, NOW, 60)}, "cpu", NOW).unready == {"b"}
    assert group_pods([PodFacts("m", ready=None, started=None)], {"m": Sample(1)}, "memory", NOW).ready == 1
    assert group_pods([PodFacts("l", ready=None, started=NOW)], {"l": Sample(1)}, "cpu", NOW).unready == {"l"}
    never = PodFacts("n", ready="False", started=NOW - 600, ready_changed=NOW - 600 + 5)
    once = PodFacts("o", ready="False", started=NOW - 600, ready_changed=NOW - 600 + 45)
    groups = group_pods([never, once], {"n": fresh, "o": fresh}, "cpu", NOW)
    assert (groups.unready, groups.ready) == ({"n"}, 1)
    gone = group_pods([PodFacts("g", deleting=True), PodFacts("f", phase="Failed")], {}, "cpu", NOW)
    assert gone.ignored == {"g", "f"}
    assert group_pods([PodFacts("x", started=COOL)], {}, "cpu", NOW).missing == {"x"}


def test_the_five_minute_defaults() -> None:
    """The controller's defaults: 5 minutes of CPU initialization, a 30 s initial readiness delay."""
    sample = Sample(1, NOW - 10, 15)
    recent = PodFacts("r", started=NOW - 240, ready_changed=NOW - 20)
    assert group_pods([recent], {"r": sample}, "cpu", NOW).unready == {"r"}
    settled = PodFacts("s", started=NOW - 301, ready_changed=NOW - 20)
    assert group_pods([settled], {"s": sample}, "cpu", NOW).ready == 1
    late = PodFacts("l", ready="False", started=NOW - 400, ready_changed=NOW - 400 + 29)
    assert group_pods([late], {"l": sample}, "cpu", NOW).unready == {"l"}


@pytest.mark.parametrize(
    ("current", "levels", "readiness", "target", "expected"),
    [
        # Upstream's CM (pods metric) cases, which share calcPlainMetricReplicas.
        (3, [20000, 10000, 30000], (), 15000, (4, 20000)),
        (3, [50000, 10000, 30000], ("True", "True", "False"), 15000, (6, 30000)),
        (5, [12000] * 5, (), 20000, (3, 12000)),
        (3, [20000, 21000, 21000], (), 20000, (3, 20666)),
    ],
)
def test_plain_metric_scenarios(
    current: int, levels: list[int], readiness: Sequence[str], target: int, expected: tuple[int, int]
) -> None:
    pods = [
        PodFacts(f"p{i}", ready=readiness[i] if i < len(readiness) else "True", started=ZERO_TIME)
        for i in range(current)
    ]
    samples = {f"p{i}": Sample(v, None, 60) for i, v in enumerate(levels)}
    assert plain_replicas(current, target, "", pods, samples, TOL, NOW, 120, 10) == expected


def test_plain_metric_missing_pods() -> None:
    """Missing pods count as exactly the target on a scale-down and as nothing on a scale-up."""
    pods = [PodFacts(f"p{i}", started=ZERO_TIME) for i in range(4)]
    down = {"p0": Sample(100), "p1": Sample(100)}
    # ratio 0.5 -> with two pods at the 200 target: 600/4 = 150, 0.75 -> 3 pods.
    assert plain_replicas(4, 200, "memory", pods, down, TOL, NOW) == (3, 100)
    up = {"p0": Sample(600), "p1": Sample(600)}
    # ratio 3 -> with two pods at 0: 300/200 = 1.5 -> 6 pods.
    assert plain_replicas(4, 200, "memory", pods, up, TOL, NOW) == (6, 600)
    # a reversal keeps the count: 2 of 4 at 230 are above, the missing at 0 bring it below.
    assert plain_replicas(4, 200, "memory", pods, {"p0": Sample(230), "p1": Sample(230)}, TOL, NOW) == (
        4,
        230,
    )


def test_parse_window() -> None:
    assert parse_window("30s") == 30
    assert parse_window("1m0s") == 60
    assert parse_window("1.5s") == 1.5
    assert parse_window("500ms") == 0.5
    assert parse_window("") == parse_window(None) == parse_window("soon") == 0

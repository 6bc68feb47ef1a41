"""``spec.behavior`` of a HorizontalPodAutoscaler decided purely with fake time: each policy type, the
select policies (Max, Min, Disabled), the two stabilization windows, the scale-event history over each
policy's period, the bounds, the conditions upstream sets, and the per-direction tolerances."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vplane.controllers.kcm import podautoscaler as hpa
from vplane.controllers.kcm.podautoscalerutil import (
    SCALE_UP_DEFAULT,
    History,
    Normalized,
    Policy,
    Rules,
    Tolerances,
    behavior_rules,
    normalize_with_behaviors,
    tolerances,
)
from vplane.controllers.kcm.replicacalc import ZERO_TIME, PodFacts, Sample, resource_replicas

T0 = 1_700_000_000.0
KEY = "ns/web"
UP_LIMIT = (
    "True",
    "ScaleUpLimit",
    "the desired replica count is increasing faster than the maximum scale rate",
)
DOWN_LIMIT = (
    "True",
    "ScaleDownLimit",
    "the desired replica count is decreasing faster than the maximum scale rate",
)
WITHIN = ("False", "DesiredWithinRange", "the desired count is within the acceptable range")
READY = ("ReadyForNewScale", "recommended size matches current size")


def rules(behavior: dict[str, Any], downscale_window: float = 300) -> tuple[Rules, Rules]:
    found = behavior_rules(behavior, downscale_window)
    assert found is not None
    return found


def immediate(
    up: list[dict[str, Any]], down: list[dict[str, Any]], select: str = "Max"
) -> tuple[Rules, Rules]:
    """Both directions with no stabilization window, so only the policies act."""
    return rules(
        {
            "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": select, "policies": up},
            "scaleDown": {"stabilizationWindowSeconds": 0, "selectPolicy": select, "policies": down},
        }
    )


def pods(value: int, period: int = 60) -> dict[str, Any]:
    return {"type": "Pods", "value": value, "periodSeconds": period}


def percent(value: int, period: int = 60) -> dict[str, Any]:
    return {"type": "Percent", "value": value, "periodSeconds": period}


def step(
    history: History,
    current: int,
    desired: int,
    behavior: tuple[Rules, Rules],
    now: float,
    low: int = 1,
    high: int = 100,
) -> Normalized:
    """One sync: normalize, then record the scale event as the controller does after a rescale."""
    history.initial(KEY, current, now)
    out = normalize_with_behaviors(history, KEY, current, desired, low, high, behavior, now)
    history.store_scale_event(KEY, behavior, current, out.replicas, now)
    return out


def test_unset_fields_take_upstreams_defaults() -> None:
    assert behavior_rules(None, 300) is None
    up, down = rules({}, downscale_window=120)
    assert up == SCALE_UP_DEFAULT
    assert up.policies == (Policy("Pods", 4, 15), Policy("Percent", 100, 15)) and up.window == 0
    # the scale-down window left unset is the controller's --horizontal-pod-autoscaler-downscale-stabilization
    assert down == Rules(120, "Max", (Policy("Percent", 100, 15),))
    up, down = rules({"scaleUp": {"selectPolicy": "Min"}, "scaleDown": {"stabilizationWindowSeconds": 30}})
    assert (up.select, up.policies, down.window) == ("Min", SCALE_UP_DEFAULT.policies, 30)


def test_default_scale_up_doubles_or_adds_four_per_15s() -> None:
    behavior = rules({"scaleDown": {"stabilizationWindowSeconds": 0}})
    history = History()
    out = step(history, 1, 50, behavior, T0)
    assert (out.replicas, out.limited, out.able) == (5, UP_LIMIT, READY)  # max(1 + 4, 1 * 2)
    out = step(history, 5, 50, behavior, T0 + 5)  # within 15 s: counted from the period's start (1)
    assert (out.replicas, out.limited) == (5, UP_LIMIT)
    out = step(history, 5, 50, behavior, T0 + 16)
    assert (out.replicas, out.limited) == (10, UP_LIMIT)  # max(5 + 4, 5 * 2)


def test_pods_policy_limits_each_period() -> None:
    behavior = immediate([pods(2)], [pods(3)])
    history = History()
    assert step(history, 4, 20, behavior, T0).replicas == 6
    assert step(history, 6, 20, behavior, T0 + 30).replicas == 6  # the period's 2 pods are used up
    assert step(history, 6, 20, behavior, T0 + 61).replicas == 8
    # scaling down: the events of both directions within the period move its starting point
    out = step(history, 8, 1, behavior, T0 + 70)
    assert (out.replicas, out.limited) == (3, DOWN_LIMIT)  # the period started at 8 - 2 (up at 61), less 3
    out = step(history, 3, 1, behavior, T0 + 100)  # start: 3 - 2 (up at 61) + 5 (down at 70) = 6
    assert (out.replicas, out.limited) == (3, DOWN_LIMIT)
    out = step(history, 3, 1, behavior, T0 + 131)
    assert (out.replicas, out.limited) == (1, WITHIN)


def test_percent_policy_rounds_up_when_growing_and_down_when_shrinking() -> None:
    behavior = immediate([percent(50)], [percent(25)])
    assert step(History(), 3, 20, behavior, T0).replicas == 5  # ceil(3 * 1.5)
    assert step(History(), 1, 20, behavior, T0).replicas == 2  # ceil(1.5): never stuck at one
    assert step(History(), 10, 1, behavior, T0).replicas == 7  # int(10 * 0.75)
    history = History()
    assert step(history, 10, 1, behavior, T0).replicas == 7
    assert step(history, 7, 1, behavior, T0 + 59).replicas == 7  # 25% of the period's 10 already gone


def test_select_policy_max_min_and_disabled() -> None:
    up, down = [pods(4), percent(100)], [pods(2), percent(50)]
    assert step(History(), 10, 50, immediate(up, down, "Max"), T0).replicas == 20
    assert step(History(), 10, 50, immediate(up, down, "Min"), T0).replicas == 14
    assert step(History(), 10, 1, immediate(up, down, "Max"), T0).replicas == 5  # the biggest change
    assert step(History(), 10, 1, immediate(up, down, "Min"), T0).replicas == 8  # the smallest change
    out = step(History(), 10, 50, immediate(up, down, "Disabled"), T0)
    assert (out.replicas, out.limited) == (10, UP_LIMIT)
    out = step(History(), 10, 1, immediate(up, down, "Disabled"), T0)
    assert (out.replicas, out.limited) == (10, DOWN_LIMIT)
    # one direction disabled, the other free
    behavior = rules({"scaleDown": {"selectPolicy": "Disabled"}, "scaleUp": {"policies": [pods(100)]}})
    assert step(History(), 10, 50, behavior, T0).replicas == 50
    assert step(History(), 10, 1, behavior, T0).replicas == 10


def test_bounds_name_the_limit_that_applied() -> None:
    behavior = immediate([pods(100)], [pods(100)])
    out = step(History(), 5, 50, behavior, T0, low=2, high=8)
    assert out.replicas == 8 and out.limited == (
        "True",
        "TooManyReplicas",
        "the desired replica count is more than the maximum replica count",
    )
    out = step(History(), 5, 1, behavior, T0, low=2, high=8)
    assert out.replicas == 2 and out.limited == (
        "True",
        "TooFewReplicas",
        "the desired replica count is less than the minimum replica count",
    )
    out = step(History(), 5, 7, behavior, T0, low=2, high=8)
    assert (out.replicas, out.limited, out.able) == (7, WITHIN, READY)


def test_scale_up_window_takes_the_lowest_recent_recommendation() -> None:
    behavior = rules(
        {"scaleUp": {"stabilizationWindowSeconds": 60, "policies": [pods(100)]}, "scaleDown": {}}
    )
    history = History()
    out = step(history, 2, 6, behavior, T0)  # the initial recommendation (2) is in the window
    assert (out.replicas, out.limited) == (2, WITHIN)
    assert out.able == (
        "ScaleUpStabilized",
        "recent recommendations were lower than current one, applying the lowest recent recommendation",
    )
    assert step(history, 2, 5, behavior, T0 + 30).replicas == 2
    out = step(history, 2, 9, behavior, T0 + 61)  # left in the window: 5 (T0+30) and 9 now
    assert (out.replicas, out.able[0]) == (5, "ScaleUpStabilized")
    out = step(history, 5, 9, behavior, T0 + 95)
    assert (out.replicas, out.able) == (9, READY)


def test_scale_down_window_takes_the_highest_recent_recommendation() -> None:
    behavior = rules({"scaleDown": {"stabilizationWindowSeconds": 120}})
    history = History()
    out = step(history, 8, 2, behavior, T0)
    assert out.replicas == 8 and out.able == (
        "ScaleDownStabilized",
        "recent recommendations were higher than current one, applying the highest recent recommendation",
    )
    assert step(history, 8, 4, behavior, T0 + 60).replicas == 8
    assert step(history, 8, 3, behavior, T0 + 121).replicas == 4  # 8 (T0) has left the window
    assert step(history, 4, 3, behavior, T0 + 181).replicas == 3
    # unset: the controller's window, here 10 s
    behavior = rules({}, downscale_window=10)
    history = History()
    assert step(history, 8, 2, behavior, T0).replicas == 8
    assert step(history, 8, 2, behavior, T0 + 11).replicas == 2


def test_history_keeps_only_what_the_longest_period_reads() -> None:
    behavior = immediate([pods(1, period=30)], [pods(1, period=30)])
    history = History()
    for i in range(100):
        step(history, 5 + i, 500, behavior, T0 + 31 * i)
    assert len(history.ups[KEY]) <= 2
    assert len(history.recommendations[KEY]) <= 2
    history.forget(KEY)
    assert KEY not in history.ups and KEY not in history.recommendations
    # without behavior no scale events are kept (nothing reads them)
    history.store_scale_event(KEY, None, 1, 5, T0)
    assert KEY not in history.ups


def utilization(
    current: int,
    usage: Sequence[int],
    requests: Sequence[int],
    target: int,
    tolerance: Tolerances | None = None,
) -> tuple[int, int]:
    """(replicas, utilization %) for ready pods that all report, through the replica calculation."""
    pods = [PodFacts(f"p{i}", request=r, started=ZERO_TIME) for i, r in enumerate(requests)]
    samples = {f"p{i}": Sample(u, None, 60) for i, u in enumerate(usage)}
    found = resource_replicas(
        current, target, "cpu", pods, samples, tolerance or tolerances(None, hpa.TOLERANCE), T0
    )
    return found.replicas, found.utilization


def test_utilization_with_tolerance() -> None:
    assert utilization(2, [500, 500], [1000, 1000], 50) == (2, 50)
    assert utilization(2, [540, 540], [1000, 1000], 50) == (2, 54)  # within 10%
    assert utilization(2, [900, 900], [1000, 1000], 50) == (4, 90)
    assert utilization(4, [100, 100, 100, 100], [1000] * 4, 50) == (1, 10)


def test_tolerance_per_direction() -> None:
    assert tolerances(None, 0.1) == Tolerances(0.1, 0.1)
    found = tolerances({"scaleUp": {"tolerance": "0"}, "scaleDown": {"tolerance": "50m"}}, 0.1)
    assert found == Tolerances(0.05, 0.0)
    assert tolerances({"scaleUp": {"tolerance": "-1"}}, 0.1) == Tolerances(0.1, 0.1)
    # 52% of a 50% target: within the default 10% but not within a zero scale-up tolerance
    assert utilization(2, [520, 520], [1000, 1000], 50) == (2, 52)
    assert utilization(2, [520, 520], [1000, 1000], 50, found) == (3, 52)
    # 47%: more than 5% below the target, so a scale-down, but within the default 10%
    assert utilization(20, [470] * 20, [1000] * 20, 50) == (20, 47)
    assert utilization(20, [470] * 20, [1000] * 20, 50, found) == (19, 47)

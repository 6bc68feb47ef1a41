"""HorizontalPodAutoscaler decisions made purely: bounds before metrics, the scale rules and their
ScalingLimited reasons, downscale stabilization, and conditions."""

from __future__ import annotations

from vplane.controllers.kcm import podautoscaler as hpa
from vplane.controllers.kcm.podautoscalerutil import History
from vplane.controllers.kcm.timefmt import format_time

T0 = 1_700_000_000.0


def test_bounds_come_before_metrics() -> None:
    assert hpa.bounds_decision(0, 1, 5) == ("disabled", 0, "")
    assert hpa.bounds_decision(0, 0, 5) is None
    assert hpa.bounds_decision(1, 2, 5) == ("rescale", 2, "Current number of replicas below Spec.MinReplicas")
    assert hpa.bounds_decision(9, 2, 5) == ("rescale", 5, "Current number of replicas above Spec.MaxReplicas")
    assert hpa.bounds_decision(3, 2, 5) is None


def test_scale_rules_name_the_bound_that_applied() -> None:
    assert hpa.convert_with_rules(3, 4, 2, 10) == (
        4,
        "DesiredWithinRange",
        "the desired count is within the acceptable range",
    )
    assert hpa.convert_with_rules(3, 20, 2, 10)[:2] == (6, "ScaleUpLimit")  # at most double
    assert hpa.convert_with_rules(1, 20, 1, 10)[:2] == (4, "ScaleUpLimit")  # or 4
    assert hpa.convert_with_rules(3, 20, 2, 5)[:2] == (5, "TooManyReplicas")
    assert hpa.convert_with_rules(3, 1, 2, 5)[:2] == (2, "TooFewReplicas")


def test_downscale_follows_the_highest_recent_recommendation() -> None:
    recs = History()
    recs.initial("ns/web", 5, T0)
    assert recs.stabilize("ns/web", 2, 300, T0 + 10) == 5
    assert recs.stabilize("ns/web", 3, 300, T0 + 301) == 3
    recs.initial("ns/web", 9, T0 + 302)  # only the first sight counts
    assert recs.stabilize("ns/web", 1, 300, T0 + 302) == 3


def test_conditions_keep_transition_times_unless_status_changes() -> None:
    status: dict = {}
    hpa.set_condition(status, "AbleToScale", "True", "SucceededGetScale", "ok", T0)
    hpa.set_condition(status, "ScalingActive", "False", "FailedGetResourceMetric", "no metrics", T0)
    hpa.set_condition(status, "AbleToScale", "True", "SucceededRescale", "scaled", T0 + 5)
    assert [c["type"] for c in status["conditions"]] == ["AbleToScale", "ScalingActive"]
    able = status["conditions"][0]
    assert (able["reason"], able["lastTransitionTime"]) == ("SucceededRescale", format_time(T0))
    hpa.set_condition(status, "AbleToScale", "False", "FailedGetScale", "gone", T0 + 9)
    assert status["conditions"][0]["lastTransitionTime"] == format_time(T0 + 9)

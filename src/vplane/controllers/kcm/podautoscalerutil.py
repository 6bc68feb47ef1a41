"""``spec.behavior`` of a HorizontalPodAutoscaler, decided purely (upstream's
``normalizeDesiredReplicasWithBehaviors``): the recommendation is first stabilized over each direction's
window (the lowest recent one for a scale-up, the highest for a scale-down), then limited by the
direction's policies over the scale events of each policy's period. Times are the caller's clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vplane.kube import quantity

MAX = "Max"
MIN = "Min"
DISABLED = "Disabled"


@dataclass(frozen=True)
class Policy:
    kind: str
    """``Pods`` or ``Percent``."""
    value: int
    period: int
    """``periodSeconds``."""


@dataclass(frozen=True)
class Rules:
    """One direction's ``HPAScalingRules`` with every default filled in."""

    window: float
    select: str
    policies: tuple[Policy, ...]
    tolerance: float | None = None
    """``None``: the controller's ``--horizontal-pod-autoscaler-tolerance``."""


SCALE_UP_DEFAULT = Rules(0, MAX, (Policy("Pods", 4, 15), Policy("Percent", 100, 15)))
SCALE_DOWN_POLICIES = (Policy("Percent", 100, 15),)


def _rules(raw: Any, default: Rules) -> Rules:
    """``copyHPAScalingRules`` onto the defaults (what the API server's defaulting already did; repeated
    because the object may come from a server that did not)."""
    if not isinstance(raw, dict):
        return default
    window = raw.get("stabilizationWindowSeconds")
    select = raw.get("selectPolicy")
    policies = raw.get("policies")
    tolerance = _tolerance(raw.get("tolerance"))
    return Rules(
        float(window) if isinstance(window, int) else default.window,
        str(select) if isinstance(select, str) else default.select,
        tuple(
            Policy(str(p.get("type") or ""), _int(p.get("value")), _int(p.get("periodSeconds")))
            for p in policies
            if isinstance(p, dict)
        )
        if isinstance(policies, list)
        else default.policies,
        tolerance if tolerance is not None else default.tolerance,
    )


def _int(raw: Any) -> int:
    """A policy's number; anything else (from a server that did not validate) counts as zero."""
    return raw if isinstance(raw, int) else 0


def _tolerance(raw: Any) -> float | None:
    if raw is None:
        return None
    amount = quantity.parse(raw)
    if amount is None or amount < 0:
        return None
    return float(amount)


def behavior_rules(behavior: Any, downscale_window: float) -> tuple[Rules, Rules] | None:
    """(scale-up, scale-down) rules of ``spec.behavior``, None when it is unset. A scale-down window left
    unset is the controller's ``--horizontal-pod-autoscaler-downscale-stabilization``
    (``maybeInitScaleDownStabilizationWindow``)."""
    if not isinstance(behavior, dict):
        return None
    return (
        _rules(behavior.get("scaleUp"), SCALE_UP_DEFAULT),
        _rules(behavior.get("scaleDown"), Rules(downscale_window, MAX, SCALE_DOWN_POLICIES)),
    )


@dataclass(frozen=True)
class Tolerances:
    """How far the usage ratio may stray below and above 1.0 before the count changes."""

    down: float
    up: float

    def within(self, ratio: float) -> bool:
        return 1.0 - self.down <= ratio <= 1.0 + self.up


def tolerances(behavior: Any, default: float) -> Tolerances:
    """Each direction's ``tolerance`` (beta and on by default since 1.35), else the controller's."""
    rules = behavior_rules(behavior, 0) if isinstance(behavior, dict) else None
    if rules is None:
        return Tolerances(default, default)
    up, down = rules
    return Tolerances(
        down.tolerance if down.tolerance is not None else default,
        up.tolerance if up.tolerance is not None else default,
    )


# -- history ------------------------------------------------------------------------------------------------------


@dataclass
class ScaleEvent:
    change: int
    at: float


@dataclass
class History:
    """Per HPA: the recommendations made (for the stabilization windows) and the scale events done in each
    direction (for the policies' periods). Entries older than anything that may still read them are
    dropped when new ones are stored, so the lists stay bounded."""

    recommendations: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    ups: dict[str, list[ScaleEvent]] = field(default_factory=dict)
    downs: dict[str, list[ScaleEvent]] = field(default_factory=dict)

    def forget(self, key: str) -> None:
        for table in (self.recommendations, self.ups, self.downs):
            table.pop(key, None)

    def initial(self, key: str, current: int, now: float) -> None:
        """``recordInitialRecommendation``: the target's size counts as the first recommendation."""
        self.recommendations.setdefault(key, [(now, current)])

    def stabilize(self, key: str, recommendation: int, window: float, now: float) -> int:
        """Without ``behavior`` (``stabilizeRecommendation``): the highest recommendation of the
        controller's downscale window wins."""
        kept = [(t, r) for t, r in self.recommendations.get(key, []) if t > now - window]
        kept.append((now, recommendation))
        self.recommendations[key] = kept
        return max(r for _, r in kept)

    def stabilize_with_behaviors(
        self, key: str, current: int, desired: int, up: Rules, down: Rules, now: float
    ) -> tuple[int, str, str]:
        """``stabilizeRecommendationWithBehaviors``: (recommendation, AbleToScale reason, message); the
        reason is for when the recommendation differs from ``desired``."""
        up_cutoff, down_cutoff = now - up.window, now - down.window
        up_limit = down_limit = desired
        for t, r in self.recommendations.get(key, []):
            if t > up_cutoff:
                up_limit = min(up_limit, r)
            if t > down_cutoff:
                down_limit = max(down_limit, r)
        recommendation = min(max(current, up_limit), down_limit)
        oldest = min(up_cutoff, down_cutoff)
        kept = [(t, r) for t, r in self.recommendations.get(key, []) if t > oldest]
        kept.append((now, desired))
        self.recommendations[key] = kept
        if desired >= current:
            return (
                recommendation,
                "ScaleUpStabilized",
                "recent recommendations were lower than current one, applying the lowest recent recommendation",
            )
        return (
            recommendation,
            "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent recommendation",
        )

    def store_scale_event(
        self, key: str, rules: tuple[Rules, Rules] | None, previous: int, new: int, now: float
    ) -> None:
        """``storeScaleEvent``: kept only for an HPA with ``behavior`` (nothing else reads them)."""
        if rules is None or new == previous:
            return
        up, down = rules
        table, direction = (self.ups, up) if new > previous else (self.downs, down)
        longest = max((p.period for p in direction.policies), default=0)
        events = [e for e in table.get(key, []) if e.at >= now - longest]
        events.append(ScaleEvent(abs(new - previous), now))
        table[key] = events

    def period_start(self, key: str, current: int, period: int, now: float) -> int:
        """The replica count at the start of the period: the changes done within it undone."""
        added = sum(e.change for e in self.ups.get(key, []) if e.at > now - period)
        removed = sum(e.change for e in self.downs.get(key, []) if e.at > now - period)
        return current - added + removed


# -- the limits -----------------------------------------------------------------------------------------------------


def scale_up_limit(starts: Sequence[int], rules: Rules, current: int) -> int:
    """``calculateScaleUpLimitWithScalingRules``; ``starts[i]`` is the period start for policy i."""
    if rules.select == DISABLED:
        return current
    proposals = [
        start + p.value if p.kind == "Pods" else math.ceil(start * (1 + p.value / 100))
        for p, start in zip(rules.policies, starts, strict=True)
        if p.kind in ("Pods", "Percent")
    ]
    if not proposals:
        return current
    return min(proposals) if rules.select == MIN else max(proposals)


def scale_down_limit(starts: Sequence[int], rules: Rules, current: int) -> int:
    """``calculateScaleDownLimitWithBehaviors``: Percent rounds toward zero, as upstream's int32 cast."""
    if rules.select == DISABLED:
        return current
    proposals = [
        start - p.value if p.kind == "Pods" else int(start * (1 - p.value / 100))
        for p, start in zip(rules.policies, starts, strict=True)
        if p.kind in ("Pods", "Percent")
    ]
    if not proposals:
        return current
    return max(proposals) if rules.select == MIN else min(proposals)


SCALE_UP_LIMIT = (
    "ScaleUpLimit",
    "the desired replica count is increasing faster than the maximum scale rate",
)
SCALE_DOWN_LIMIT = (
    "ScaleDownLimit",
    "the desired replica count is decreasing faster than the maximum scale rate",
)
TOO_MANY = ("TooManyReplicas", "the desired replica count is more than the maximum replica count")
TOO_FEW = ("TooFewReplicas", "the desired replica count is less than the minimum replica count")
WITHIN_RANGE = ("DesiredWithinRange", "the desired count is within the acceptable range")
"""ScalingLimited reasons and messages (upstream's), shared by the rules with and without behavior."""


def upper_bound(limit: int, high: int) -> tuple[int, str, str]:
    """The most replicas a scale-up may reach: the rate limit while it is below maxReplicas, else
    maxReplicas, with the reason that applies."""
    return (limit, *SCALE_UP_LIMIT) if high > limit else (high, *TOO_MANY)


def convert_with_behavior_rate(
    history: History,
    key: str,
    current: int,
    desired: int,
    low: int,
    high: int,
    up: Rules,
    down: Rules,
    now: float,
) -> tuple[int, str, str]:
    """``convertDesiredReplicasWithBehaviorRate``: (replicas, ScalingLimited reason, message)."""
    if desired > current:
        starts = [history.period_start(key, current, p.period, now) for p in up.policies]
        maximum, reason, message = upper_bound(max(scale_up_limit(starts, up, current), current), high)
        if desired > maximum:
            return maximum, reason, message
    elif desired < current:
        starts = [history.period_start(key, current, p.period, now) for p in down.policies]
        limit = min(scale_down_limit(starts, down, current), current)
        minimum, reason, message = (limit, *SCALE_DOWN_LIMIT) if low < limit else (low, *TOO_FEW)
        if desired < minimum:
            return minimum, reason, message
    return (desired, *WITHIN_RANGE)


@dataclass(frozen=True)
class Normalized:
    """What ``normalizeDesiredReplicasWithBehaviors`` decided and the two conditions it sets."""

    replicas: int
    able: tuple[str, str]
    """AbleToScale (True) reason and message."""
    limited: tuple[str, str, str]
    """ScalingLimited status, reason and message."""


def normalize_with_behaviors(
    history: History,
    key: str,
    current: int,
    desired: int,
    low: int,
    high: int,
    rules: tuple[Rules, Rules],
    now: float,
) -> Normalized:
    up, down = rules
    stabilized, reason, message = history.stabilize_with_behaviors(key, current, desired, up, down, now)
    able = (
        (reason, message)
        if stabilized != desired
        else ("ReadyForNewScale", "recommended size matches current size")
    )
    replicas, limit_reason, limit_message = convert_with_behavior_rate(
        history, key, current, stabilized, low, high, up, down, now
    )
    status = "False" if replicas == stabilized else "True"
    return Normalized(replicas, able, (status, limit_reason, limit_message))

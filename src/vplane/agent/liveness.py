"""The agent's liveness loop, as a pure counter: consecutive failures and the recovery that ends them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CANNOT_REACH = "Agent cannot reach platform"
"""Spec §10.4: logged on every failed check, with the failure counter."""
REACHED_AGAIN = "Agent reached platform again"


@dataclass(frozen=True)
class LivenessEvent:
    kind: Literal["failed", "recovered"]
    failures: int
    """Consecutive failures so far (failed), or how many there were (recovered)."""


class Liveness:
    """Feed it each check's result; it says what to log."""

    def __init__(self) -> None:
        self.failures = 0
        self.total_failures = 0

    def observe(self, ok: bool) -> LivenessEvent | None:
        if ok:
            if not self.failures:
                return None
            event = LivenessEvent("recovered", self.failures)
            self.failures = 0
            return event
        self.failures += 1
        self.total_failures += 1
        return LivenessEvent("failed", self.failures)

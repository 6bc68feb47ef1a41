"""Pure timing decisions of the mesh: reconnect backoff and the memory of failed direct paths.

Both take an injectable random source or clock, so tests check them without sleeping.
"""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    """Exponential backoff with jitter: min, min x factor, ... capped at max, each spread by +/- jitter.

    Jitter spreads the reconnects of many nodes after a platform restart; remotedialer's fixed 5 s sleep
    is the anti-pattern the anchors warn about (shared/reference/anchors-multicluster.md §3.1).
    """

    def __init__(
        self,
        minimum: float,
        maximum: float,
        factor: float = 1.5,
        jitter: float = 0.2,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if minimum <= 0 or maximum < minimum:
            raise ValueError("backoff needs 0 < minimum <= maximum")
        self.minimum = minimum
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self._rand = rand
        self._current = minimum

    def next(self) -> float:
        base = self._current
        self._current = min(self.maximum, self._current * self.factor)
        spread = base * self.jitter * (2 * self._rand() - 1)
        return max(0.0, base + spread)

    def reset(self) -> None:
        self._current = self.minimum


class DirectPathMemory:
    """Which direct endpoints failed recently; dials skip them until ``retry_after`` has passed."""

    def __init__(self, retry_after: float, clock: Callable[[], float]) -> None:
        self.retry_after = retry_after
        self._clock = clock
        self._failed: dict[str, float] = {}

    def should_try(self, endpoint: str) -> bool:
        failed_at = self._failed.get(endpoint)
        if failed_at is None:
            return True
        if self._clock() - failed_at >= self.retry_after:
            del self._failed[endpoint]
            return True
        return False

    def failed(self, endpoint: str) -> None:
        self._failed[endpoint] = self._clock()

    def succeeded(self, endpoint: str) -> None:
        self._failed.pop(endpoint, None)

"""A de-duplicating, rate-limited work queue of keys (client-go's ``workqueue``, reduced to what we use).

Controllers queue *keys*, not events: however many times an object changes while its key waits, it is
reconciled once, against the latest state. A key being processed is never handed to a second worker;
if it is added meanwhile, it is queued again when :meth:`WorkQueue.done` is called. Failed keys come back
after a per-key exponential back-off (:class:`ExponentialBackoff`), which :meth:`WorkQueue.forget`
resets after a success.

Delays are measured with an injectable clock that must advance with the event loop's clock; the
default is the running loop's own ``time()``, so fake-time tests (looptime) need nothing special.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

K = TypeVar("K", bound=Hashable)

DUE_SLACK = 1e-6
"""A delayed key is due this close to its time: asyncio runs timers up to its clock resolution early and
fake clocks move in whole ticks (looptime: 1 µs), so a key due at ``0.07500000000000001`` while the clock
reads ``0.075`` would otherwise wake a worker again and again without the clock moving."""

Clock = Callable[[], float]


class WorkQueueSettings(BaseModel):
    """Back-off of failed keys, in seconds; defaults are client-go's controller rate limiter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backoff_base: float = 0.005
    """The first retry's delay; each further failure doubles it."""
    backoff_max: float = 1000.0
    """The cap on one key's delay."""


class ExponentialBackoff(Generic[K]):
    """Per-key failure counts and the delay they earn: ``base * 2**failures``, capped at ``max``."""

    def __init__(self, base: float, maximum: float) -> None:
        self.base = base
        self.maximum = maximum
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        """Count one more failure of ``key`` and return how long it should wait."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        if failures >= 64:  # 2**64 * base is past any sane cap; also keeps the float finite
            return self.maximum
        return float(min(self.base * 2**failures, self.maximum))

    def retries(self, key: K) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)


class ShutDown(Exception):
    """The queue was shut down: workers should return."""


class WorkQueue(Generic[K]):
    """Keys waiting to be processed, each at most once in the queue and at most once in flight."""

    def __init__(self, settings: WorkQueueSettings | None = None, *, clock: Clock | None = None) -> None:
        self.settings = settings or WorkQueueSettings()
        self.backoff: ExponentialBackoff[K] = ExponentialBackoff(
            self.settings.backoff_base, self.settings.backoff_max
        )
        self._clock = clock
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()  # queued, or added again while processing
        self._processing: set[K] = set()
        self._delayed: list[tuple[float, int, K]] = []  # heap of (ready_at, tiebreak, key)
        self._ready_at: dict[K, float] = {}  # each delayed key's earliest time; older heap entries are stale
        self._seq = itertools.count()
        self._wakeup = asyncio.Event()
        self._shutting_down = False

    def __len__(self) -> int:
        """Keys ready to be handed out (not the delayed ones, not those in flight)."""
        return len(self._queue)

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def add(self, key: K) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._wakeup.set()

    def add_after(self, key: K, delay: float) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        ready_at = self._now() + delay
        if self._ready_at.get(key, float("inf")) <= ready_at:
            return  # already due no later than that (client-go keeps the earliest)
        self._ready_at[key] = ready_at
        heapq.heappush(self._delayed, (ready_at, next(self._seq), key))
        self._wakeup.set()  # a sleeping get() may now have an earlier deadline

    def add_rate_limited(self, key: K) -> None:
        """Queue ``key`` again after its back-off (a failure)."""
        self.add_after(key, self.backoff.when(key))

    def forget(self, key: K) -> None:
        """Clear ``key``'s failures (a success), so its next failure starts from ``backoff_base``."""
        self.backoff.forget(key)

    def num_requeues(self, key: K) -> int:
        return self.backoff.retries(key)

    def done(self, key: K) -> None:
        """``key`` is no longer in flight; if it was added meanwhile, it is queued now."""
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._wakeup.set()

    async def get(self) -> K:
        """The next key; the caller must call :meth:`done` with it. Raises :class:`ShutDown`."""
        while True:
            self._promote_due()
            if self._queue:
                key = self._queue.popleft()
                self._dirty.discard(key)
                self._processing.add(key)
                return key
            if self._shutting_down:
                raise ShutDown
            self._wakeup.clear()
            timeout = self._delayed[0][0] - self._now() if self._delayed else None
            try:
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    def shut_down(self) -> None:
        """Stop handing out keys: waiting and later :meth:`get` calls raise :class:`ShutDown`.

        Queued and delayed keys are dropped; keys in flight finish (their :meth:`done` is a no-op).
        """
        self._shutting_down = True
        self._queue.clear()
        self._dirty.clear()
        self._delayed.clear()
        self._ready_at.clear()
        self._wakeup.set()

    def _promote_due(self) -> None:
        if not self._delayed:
            return
        now = self._now()
        while self._delayed and self._delayed[0][0] <= now + DUE_SLACK:
            ready_at, _, key = heapq.heappop(self._delayed)
            if self._ready_at.get(key) == ready_at:
                del self._ready_at[key]
                self.add(key)

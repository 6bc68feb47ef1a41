"""What a controller waits to see before it acts on a key again (upstream ``ControllerExpectations``).

A ReplicaSet that just asked for 30 pods must not ask again while its informer has only seen 12 of them:
the cache lags the writes. Creations are counted down as the pod informer reports them; deletions are
tracked by pod key so a repeated delete event is counted once (``UIDTrackingControllerExpectations``).
Expectations that were not met within ``ttl`` seconds (a lost event) are treated as met, as upstream's
five-minute timeout does. Pure bookkeeping with an injectable clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

Clock = Callable[[], float]


@dataclass
class _Record:
    adds: int
    deletes: set[str] = field(default_factory=set)
    since: float = 0.0

    def fulfilled(self) -> bool:
        return self.adds <= 0 and not self.deletes


class Expectations:
    def __init__(self, clock: Clock, ttl: float = 300.0) -> None:
        self._clock = clock
        self.ttl = ttl
        self._records: dict[str, _Record] = {}

    def satisfied(self, key: str) -> bool:
        """True when the controller may act on ``key``: nothing pending, all seen, or waited too long."""
        record = self._records.get(key)
        if record is None or record.fulfilled():
            return True
        return self._clock() - record.since > self.ttl

    def expect_creations(self, key: str, count: int) -> None:
        self._records[key] = _Record(adds=count, since=self._clock())

    def expect_deletions(self, key: str, pod_keys: Iterable[str]) -> None:
        self._records[key] = _Record(adds=0, deletes=set(pod_keys), since=self._clock())

    def expect(self, key: str, creations: int, pod_keys: Iterable[str]) -> None:
        """Both at once (upstream ``SetExpectations``): a DaemonSet creates on some nodes and deletes on
        others in the same sync."""
        self._records[key] = _Record(adds=creations, deletes=set(pod_keys), since=self._clock())

    def creation_observed(self, key: str) -> None:
        record = self._records.get(key)
        if record is not None:
            record.adds -= 1

    def deletion_observed(self, key: str, pod_key: str) -> None:
        record = self._records.get(key)
        if record is not None:
            record.deletes.discard(pod_key)

    def forget(self, key: str) -> None:
        self._records.pop(key, None)

    def pending(self, key: str) -> tuple[int, int]:
        """(creations, deletions) still expected, for logs and tests."""
        record = self._records.get(key)
        return (max(record.adds, 0), len(record.deletes)) if record is not None else (0, 0)

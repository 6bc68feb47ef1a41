"""The in-memory cache in front of a :class:`Store`.

Reads never touch the backend: the cache holds every live key's current value (the same ``bytes``
objects the backend produced) in key order, plus a ring of recent events for watches that resume from
an older revision. The backend feeds it committed events in revision order before acknowledging the
write that caused them, so a read that follows an acknowledged write always sees it.

This is kube-apiserver's watch cache, simplified by the fact that the cache is fed synchronously: there
is no window in which the cache lags an acknowledged write. A backend shared by several processes (etcd)
feeds it asynchronously instead; :meth:`Cache.wait_for` is the hook that keeps read-your-writes there,
for up to ``write_wait`` seconds: the write is committed either way, and a cache that stays behind (a
watch being reopened) must not hold the writer's answer until the request times out with an outcome
it cannot know (kube-apiserver's cache waits 3 s for a revision the same way).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator, Sequence

import structlog
from sortedcontainers import SortedDict

from vplane.storage.interface import CompactedError, Event, KeyValue, RevisionMismatchError, Store
from vplane.storage.sqlite import prefix_end

Listener = Callable[[Sequence[Event]], None]

log = structlog.get_logger(__name__)


class Cache:
    """Current state and recent history of a store, for reads and watches."""

    def __init__(self, store: Store, *, window: int = 10_000, write_wait: float = 3.0) -> None:
        self.store = store
        self.window = window
        self.write_wait = write_wait
        self._items: SortedDict = SortedDict()
        self._ring: deque[Event] = deque(maxlen=window)
        self._revision = 0
        self._listeners: list[Listener] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    async def start(self) -> None:
        await self.store.start()
        items, revision = await self.store.snapshot()
        self._items = SortedDict((kv.key, kv) for kv in items)
        self._revision = revision
        self.store.subscribe(self._apply, revision)

    @property
    def revision(self) -> int:
        return self._revision

    # -- reads -----------------------------------------------------------------------------------

    def get(self, key: str) -> KeyValue | None:
        kv: KeyValue | None = self._items.get(key)
        return kv

    def iter_prefix(self, prefix: str, start: str = "") -> Iterator[KeyValue]:
        """Live values under ``prefix`` in key order, from ``start`` (inclusive)."""
        return iter(self.list_prefix(prefix, start))

    def list_prefix(self, prefix: str, start: str = "") -> list[KeyValue]:
        """The same as a list, taken in one step (a slice of the sorted keys, then dict lookups)."""
        items = self._items
        low = max(prefix, start)
        first: int = items.bisect_left(low)
        last: int = items.bisect_left(prefix_end(prefix))
        if first >= last:
            return []
        keys = items.keys()[first:last]
        get = dict.__getitem__
        return [get(items, key) for key in keys]

    def count_prefix(self, prefix: str, start: str = "") -> int:
        low = max(prefix, start)
        first: int = self._items.bisect_left(low)
        last: int = self._items.bisect_left(prefix_end(prefix))
        return max(0, last - first)

    async def events_after(self, revision: int) -> list[Event]:
        """Events newer than ``revision``: from the ring when it reaches back far enough, else the store."""
        if revision >= self._revision:
            return []
        if self._ring and self._ring[0].revision <= revision + 1:
            return [e for e in self._ring if e.revision > revision]
        if revision < self.store.compacted_revision:
            raise CompactedError(revision, self.store.compacted_revision)
        return await self.store.history(revision)

    def recent_events_after(self, revision: int) -> list[Event] | None:
        """Like :meth:`events_after` but synchronous; ``None`` when the ring does not reach back."""
        if revision >= self._revision:
            return []
        if self._ring and self._ring[0].revision <= revision + 1:
            return [e for e in self._ring if e.revision > revision]
        return None

    # -- writes (read-your-writes) ---------------------------------------------------------------

    async def create(self, key: str, value: bytes) -> KeyValue:
        kv = await self.store.create(key, value)
        await self.wait_for(kv.mod_revision)
        return kv

    async def update(self, key: str, value: bytes, expected_revision: int) -> KeyValue:
        try:
            kv = await self.store.update(key, value, expected_revision)
        except RevisionMismatchError as exc:
            await self._catch_up(exc)
            raise
        await self.wait_for(kv.mod_revision)
        return kv

    async def delete(self, key: str, expected_revision: int) -> KeyValue:
        try:
            kv = await self.store.delete(key, expected_revision)
        except RevisionMismatchError as exc:
            await self._catch_up(exc)
            raise
        await self.wait_for(kv.mod_revision)
        return kv

    async def _catch_up(self, mismatch: RevisionMismatchError) -> None:
        """The store holds a newer version than the cache (a write of another replica, or one whose event
        is late): wait for it, so the caller's retry reads it instead of losing the same race again."""
        if mismatch.current is not None and mismatch.current.mod_revision > self._revision:
            await self.wait_for(mismatch.current.mod_revision)

    async def wait_for(self, revision: int) -> bool:
        """Wait until the cache holds ``revision``, for up to ``write_wait`` seconds; False if it did not."""
        if self._revision >= revision:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (revision, future)
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(future, self.write_wait)
        except TimeoutError:
            log.warning(
                "cache behind the store; not waiting longer",
                revision=revision,
                cached=self._revision,
                waited=self.write_wait,
            )
            return False
        finally:
            if waiter in self._waiters:  # timed out or cancelled: not left behind
                self._waiters.remove(waiter)
        return True

    # -- listeners -------------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        try:
            self._listeners.remove(listener)
        except ValueError:
            pass

    def _apply(self, events: Sequence[Event]) -> None:
        items = self._items
        repaired: dict[int, Event] | None = None
        for event in events:
            if event.type == "DELETE":
                last = items.pop(event.kv.key, None)
                if event.prev is None and last is not None:
                    # etcd leaves out the value before a deletion when that revision is compacted away (a
                    # watch catching up): the cache still has it, and watchers expect the last object.
                    kv = KeyValue(event.kv.key, last.value, event.kv.mod_revision, last.create_revision)
                    repaired = repaired or {}
                    repaired[id(event)] = event = Event("DELETE", kv, last)
            else:
                items[event.kv.key] = event.kv
            self._ring.append(event)
        if repaired is not None:
            fixed = repaired
            events = [fixed.get(id(e), e) for e in events]
        if events:
            self._revision = events[-1].revision
        for listener in list(self._listeners):
            listener(events)
        if self._waiters:
            still = []
            for revision, future in self._waiters:
                if revision <= self._revision:
                    if not future.done():
                        future.set_result(None)
                else:
                    still.append((revision, future))
            self._waiters = still

"""The cache in front of a store fed asynchronously (as etcd's watch feeds it): how long a write's answer
waits for its own event, and deletions whose previous value the backend left out."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from vplane.storage.cache import Cache
from vplane.storage.interface import Event, KeyValue, RevisionMismatchError, StorageError, Subscriber


class DelayedStore:
    """A backend whose writes commit at once and whose events the test delivers when it chooses (a watch)."""

    def __init__(self) -> None:
        self.revision = 1
        self.compacted_revision = 0
        self.failure: StorageError | None = None
        self.subscriber: Subscriber | None = None
        self.undelivered: list[Event] = []
        self.delivered: list[Event] = []

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def problem(self) -> str | None:
        return None

    async def snapshot(self) -> tuple[list[KeyValue], int]:
        return [], self.revision

    def subscribe(self, callback: Subscriber, after: int) -> None:
        self.subscriber = callback

    async def create(self, key: str, value: bytes) -> KeyValue:
        self.revision += 1
        kv = KeyValue(key, value, self.revision, self.revision)
        self.undelivered.append(Event("PUT", kv, None))
        return kv

    async def update(self, key: str, value: bytes, expected_revision: int) -> KeyValue:
        current = next(e.kv for e in reversed(self.committed) if e.kv.key == key)
        if current.mod_revision != expected_revision:
            raise RevisionMismatchError(key, current)
        self.revision += 1
        kv = KeyValue(key, value, self.revision, current.create_revision)
        self.undelivered.append(Event("PUT", kv, current))
        return kv

    @property
    def committed(self) -> list[Event]:
        return self.delivered + self.undelivered

    def deliver(self, events: Sequence[Event] | None = None) -> None:
        assert self.subscriber is not None
        batch = list(self.undelivered if events is None else events)
        self.undelivered = []
        self.delivered += batch
        self.subscriber(batch)


async def started(store: DelayedStore, write_wait: float = 3.0) -> Cache:
    cache = Cache(store, window=100, write_wait=write_wait)  # type: ignore[arg-type]
    await cache.start()
    return cache


async def test_a_write_answers_once_its_event_reaches_the_cache() -> None:
    store = DelayedStore()
    cache = await started(store)
    write = asyncio.ensure_future(cache.create("/a", b"1"))
    await asyncio.sleep(0)
    assert not write.done()  # read-your-writes: not before the cache holds it
    store.deliver()
    kv = await write
    assert cache.get("/a") == kv


@pytest.mark.looptime
async def test_a_write_answers_after_the_wait_when_its_event_does_not_come(looptime: float) -> None:
    store = DelayedStore()
    cache = await started(store, write_wait=3.0)
    kv = await cache.create("/a", b"1")
    assert kv.mod_revision == 2  # the committed write, not an error
    assert looptime == 3.0
    assert cache.get("/a") is None  # the cache is behind, as the warning says
    assert await cache.wait_for(2) is False
    store.deliver()  # the event arrives later: no waiter left over to trip on
    assert cache.get("/a") == kv
    assert await cache.wait_for(2) is True


async def test_a_deletion_without_its_previous_value_gets_the_cached_one() -> None:
    store = DelayedStore()
    cache = await started(store)
    seen: list[Event] = []
    cache.add_listener(seen.extend)
    created = KeyValue("/a", b"last", 2, 2)
    store.deliver([Event("PUT", created, None)])
    # What etcd's watch sends when the revision before the deletion is compacted: key and revision only.
    bare = Event("DELETE", KeyValue("/a", b"", 3, 3), None)
    store.deliver([Event("PUT", KeyValue("/b", b"x", 3, 3), None), bare])
    deleted = seen[-1]
    assert deleted.type == "DELETE"
    assert deleted.kv == KeyValue("/a", b"last", 3, 2)
    assert deleted.prev == created
    assert [e.kv.key for e in seen] == ["/a", "/b", "/a"]
    assert (await cache.events_after(2))[-1] == deleted  # the history watchers resume from, too
    assert cache.get("/a") is None


async def test_an_update_refused_for_a_newer_version_waits_for_the_cache_to_hold_it() -> None:
    """Another replica's write the cache has not seen yet: the refused writer's retry must read it, not the
    cache's older copy (or it loses the same race again and again)."""
    store = DelayedStore()
    cache = await started(store)
    first = asyncio.ensure_future(cache.create("/a", b"1"))
    await asyncio.sleep(0)
    store.deliver()
    created = await first
    newer = await store.update("/a", b"2", created.mod_revision)  # committed elsewhere, event on its way
    refused = asyncio.ensure_future(cache.update("/a", b"3", created.mod_revision))
    await asyncio.sleep(0.01)
    assert not refused.done()  # waiting for the newer version, not yet refused
    store.deliver()
    with pytest.raises(RevisionMismatchError):
        await refused
    assert cache.get("/a") == newer  # what the retry reads


async def test_a_cancelled_wait_leaves_no_waiter_behind() -> None:
    store = DelayedStore()
    cache = await started(store)
    write = asyncio.ensure_future(cache.create("/a", b"1"))
    await asyncio.sleep(0)
    write.cancel()
    with pytest.raises(asyncio.CancelledError):
        await write
    assert cache._waiters == []

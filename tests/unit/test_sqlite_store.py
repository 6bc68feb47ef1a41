"""The SQLite backend and the cache above it: revisions, compare-and-swap, history, compaction."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import ValidationError

from vplane.apiserver.settings import APIServerSettings
from vplane.storage.cache import Cache
from vplane.storage.interface import (
    CompactedError,
    Event,
    KeyExistsError,
    KeyNotFoundError,
    RevisionMismatchError,
)
from vplane.storage.sqlite import SQLiteStore


async def open_cache(path: Path, window: int = 100) -> Cache:
    cache = Cache(SQLiteStore(path / "db.sqlite"), window=window)
    await cache.start()
    return cache


async def test_revisions_are_global_and_strictly_increasing(tmp_path: Path) -> None:
    cache = await open_cache(tmp_path)
    a = await cache.create("/a/1", b"one")
    b = await cache.create("/b/1", b"two")
    a2 = await cache.update("/a/1", b"three", a.mod_revision)
    assert (a.mod_revision, b.mod_revision, a2.mod_revision) == (1, 2, 3)
    assert a2.create_revision == 1
    assert cache.get("/a/1") == a2
    await cache.store.close()


async def test_compare_and_swap_rejects_stale_and_missing(tmp_path: Path) -> None:
    cache = await open_cache(tmp_path)
    a = await cache.create("/a/1", b"one")
    with pytest.raises(KeyExistsError):
        await cache.create("/a/1", b"again")
    await cache.update("/a/1", b"two", a.mod_revision)
    with pytest.raises(RevisionMismatchError):
        await cache.update("/a/1", b"stale", a.mod_revision)
    with pytest.raises(KeyNotFoundError):
        await cache.delete("/nope", 0)
    assert cache.revision == 2
    await cache.store.close()


async def test_delete_event_carries_last_value(tmp_path: Path) -> None:
    cache = await open_cache(tmp_path)
    seen: list[Event] = []
    cache.add_listener(seen.extend)
    a = await cache.create("/a/1", b"one")
    tomb = await cache.delete("/a/1", a.mod_revision)
    assert tomb.value == b"one" and tomb.mod_revision == 2
    assert [e.type for e in seen] == ["PUT", "DELETE"]
    assert cache.get("/a/1") is None
    await cache.store.close()


async def test_concurrent_writers_share_commits_and_lose_nothing(tmp_path: Path) -> None:
    cache = await open_cache(tmp_path, window=1000)
    results = await asyncio.gather(*(cache.create(f"/k/{i:04d}", b"v") for i in range(300)))
    revisions = sorted(kv.mod_revision for kv in results)
    assert revisions == list(range(1, 301))
    assert cache.count_prefix("/k/") == 300
    await cache.store.close()


async def test_restart_reloads_state_and_history(tmp_path: Path) -> None:
    cache = await open_cache(tmp_path)
    a = await cache.create("/a/1", b"one")
    await cache.update("/a/1", b"two", a.mod_revision)
    await cache.create("/a/2", b"x")
    await cache.store.close()

    again = await open_cache(tmp_path)
    assert again.revision == 3
    assert [kv.value for kv in again.iter_prefix("/a/")] == [b"two", b"x"]
    history = await again.events_after(0)
    assert [(e.type, e.kv.value, e.prev.value if e.prev else None) for e in history] == [
        ("PUT", b"one", None),
        ("PUT", b"two", b"one"),
        ("PUT", b"x", None),
    ]
    old = await again.store.range_at("/a/", 1)
    assert [(kv.key, kv.value) for kv in old] == [("/a/1", b"one")]
    await again.store.close()


async def test_compaction_forgets_old_revisions(tmp_path: Path) -> None:
    cache = await open_cache(tmp_path, window=2)
    kv = await cache.create("/a/1", b"0")
    for i in range(1, 6):
        kv = await cache.update("/a/1", str(i).encode(), kv.mod_revision)
    await cache.store.compact(4)
    with pytest.raises(CompactedError):
        await cache.store.range_at("/a/", 2)
    with pytest.raises(CompactedError):
        await cache.events_after(1)
    assert [e.revision for e in await cache.events_after(4)] == [5, 6]
    assert [kv.value for kv in await cache.store.range_at("/a/", 4)] == [b"3"]
    await cache.store.close()
    again = await open_cache(tmp_path)
    assert again.store.compacted_revision == 4 and again.revision == 6
    await again.store.close()


async def test_shared_file_two_stores_see_each_others_writes_in_order(tmp_path: Path) -> None:
    """Two processes' stores on one file (tenant replicas): one revision sequence, events in order."""
    a = Cache(SQLiteStore(tmp_path / "db.sqlite", shared=True, poll_interval=0.01), window=100)
    b = Cache(SQLiteStore(tmp_path / "db.sqlite", shared=True, poll_interval=0.01), window=100)
    await a.start()
    await b.start()
    seen_a: list[int] = []
    seen_b: list[int] = []
    a.add_listener(lambda events: seen_a.extend(e.revision for e in events))
    b.add_listener(lambda events: seen_b.extend(e.revision for e in events))
    x = await a.create("/k/x", b"1")
    y = await b.create("/k/y", b"2")  # b catches up on a's row under the write lock first
    assert (x.mod_revision, y.mod_revision) == (1, 2)
    with pytest.raises(RevisionMismatchError):
        await b.update("/k/x", b"stale", 99)
    x2 = await b.update("/k/x", b"3", x.mod_revision)
    for _ in range(200):
        if a.revision == x2.mod_revision:
            break
        await asyncio.sleep(0.01)
    assert a.get("/k/x") == x2 and a.get("/k/y") == y
    assert seen_a == [1, 2, 3] and seen_b == [1, 2, 3]
    await a.store.close()
    await b.store.close()


# -- group commit: waiting for writes already under way ---------------------------------------------------


async def _store(path: Path, in_flight: int, linger: float) -> SQLiteStore:
    store = SQLiteStore(path / "db.sqlite", writes_in_flight=lambda: in_flight, commit_linger=linger)
    await store.start()
    return store


async def test_a_commit_waits_for_writes_still_on_their_way(tmp_path: Path) -> None:
    """Two writes under way, one submitted: the commit waits for the second and serves both."""
    store = await _store(tmp_path, in_flight=2, linger=30.0)
    first = asyncio.ensure_future(store.create("/a", b"1"))
    await asyncio.sleep(0.05)
    assert not first.done()
    second = await asyncio.wait_for(store.create("/b", b"2"), 10)
    assert (await first).mod_revision == 1 and second.mod_revision == 2
    assert store.commits == 1
    await store.close()


async def test_the_wait_for_writes_that_never_come_is_bounded(tmp_path: Path) -> None:
    """The caller reports writes that never reach the store (a request failed validation, say): the
    commit goes ahead after ``commit_linger``."""
    store = await _store(tmp_path, in_flight=5, linger=0.1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    kv = await asyncio.wait_for(store.create("/a", b"1"), 10)
    assert kv.mod_revision == 1
    assert loop.time() - started >= 0.09  # it did wait (the lower bound is the setting, not a speed)
    assert store.commits == 1
    await store.close()


async def test_no_wait_when_every_write_under_way_is_submitted(tmp_path: Path) -> None:
    """A lone writer is never delayed, whatever the linger allows (here far beyond the test timeout)."""
    store = await _store(tmp_path, in_flight=1, linger=30.0)
    for i in range(5):
        await asyncio.wait_for(store.create(f"/k{i}", b"v"), 10)  # a linger would time this out
    assert store.commits == 5
    await store.close()


@pytest.mark.parametrize("value", [-0.001, 1.5])
def test_the_commit_linger_setting_is_bounded(tmp_path: Path, value: float) -> None:
    """A negative wait, or one of more than a second, is refused with the setting's name."""
    with pytest.raises(ValidationError, match="commit_linger_seconds"):
        APIServerSettings(data_dir=tmp_path, commit_linger_seconds=value)

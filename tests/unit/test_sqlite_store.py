"""The SQLite backend and the cache above it: revisions, compare-and-swap, history, compaction."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

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

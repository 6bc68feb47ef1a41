"""The etcd backend against a real etcd: the Store contract the SQLite tests check, replicas sharing one
etcd, a watch that resumes and one that cannot, and API servers on it driven by kubectl."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from harness import APIServerProcess, EtcdProcess, Kubectl
from vplane.storage.cache import Cache
from vplane.storage.etcd import EtcdStore, EtcdUnavailable
from vplane.storage.interface import (
    CompactedError,
    Event,
    KeyExistsError,
    KeyNotFoundError,
    RevisionMismatchError,
)

_prefixes = itertools.count()


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix of this test's own in the worker's etcd."""
    return f"/t{next(_prefixes)}-{request.node.name[:40]}"


@pytest.fixture
async def cache(etcd: EtcdProcess, prefix: str) -> AsyncIterator[Cache]:
    opened = Cache(EtcdStore([etcd.url], prefix=prefix, retry_interval=0.05), window=100)
    await opened.start()
    yield opened
    await opened.store.close()


async def test_revisions_and_compare_and_swap(cache: Cache) -> None:
    a = await cache.create("/a/1", b"one")
    assert cache.get("/a/1") == a  # read-your-writes: the watch delivered it before create returned
    b = await cache.create("/b/1", b"two")
    a2 = await cache.update("/a/1", b"three", a.mod_revision)
    assert a.mod_revision < b.mod_revision < a2.mod_revision
    assert (a2.create_revision, cache.get("/a/1")) == (a.mod_revision, a2)
    with pytest.raises(KeyExistsError):
        await cache.create("/a/1", b"again")
    with pytest.raises(RevisionMismatchError) as stale:
        await cache.update("/a/1", b"stale", a.mod_revision)
    assert stale.value.current == a2
    with pytest.raises(KeyNotFoundError):
        await cache.update("/missing", b"x", 0)
    with pytest.raises(KeyNotFoundError):
        await cache.delete("/missing", 0)
    unconditional = await cache.update("/a/1", b"four", 0)
    gone = await cache.delete("/a/1", unconditional.mod_revision)
    assert (gone.value, gone.create_revision) == (b"four", a.mod_revision)
    assert gone.mod_revision > unconditional.mod_revision and cache.get("/a/1") is None
    events = await cache.events_after(a.mod_revision)
    assert [(e.type, e.kv.key) for e in events][-1] == ("DELETE", "/a/1")
    assert events[-1].kv.value == b"four" and events[-1].prev is not None


async def test_two_replicas_on_one_prefix_see_each_others_writes_in_order(
    etcd: EtcdProcess, prefix: str
) -> None:
    one = Cache(EtcdStore([etcd.url], prefix=prefix), window=100)
    two = Cache(EtcdStore([etcd.url], prefix=prefix), window=100)
    await one.start()
    await two.start()
    seen: list[Event] = []
    two.add_listener(seen.extend)
    writes = [await one.create(f"/k/{i}", str(i).encode()) for i in range(20)]
    await asyncio.wait_for(two.wait_for(writes[-1].mod_revision), 10)
    assert [e.kv for e in seen] == writes
    assert two.list_prefix("/k/") == sorted(writes, key=lambda kv: kv.key)
    await one.store.close()
    await two.store.close()


async def test_reads_at_a_revision_history_and_compaction(etcd: EtcdProcess, prefix: str) -> None:
    cache = Cache(EtcdStore([etcd.url], prefix=prefix), window=100)
    await cache.start()
    first = await cache.create("/r/a", b"1")
    await cache.create("/r/b", b"2")
    later = await cache.update("/r/a", b"3", first.mod_revision)
    store = cache.store
    assert [kv.value for kv in await store.range_at("/r/", first.mod_revision)] == [b"1"]
    assert [kv.key for kv in await store.range_at("/r/", later.mod_revision, start="/r/b")] == ["/r/b"]
    assert len(await store.range_at("/r/", later.mod_revision, limit=1)) == 1
    history = await store.history(first.mod_revision)
    assert [e.revision for e in history] == [first.mod_revision + 1, later.mod_revision]
    assert await store.history(first.mod_revision, limit=1) == history[:1]
    await store.compact(later.mod_revision)
    assert store.compacted_revision == later.mod_revision
    with pytest.raises(CompactedError):
        await store.range_at("/r/", first.mod_revision)
    with pytest.raises(CompactedError):
        await store.history(first.mod_revision)
    await store.close()
    # A replica that starts later learns the compacted revision from etcd, and the state survives.
    again = Cache(EtcdStore([etcd.url], prefix=prefix), window=100)
    await again.start()
    assert again.store.compacted_revision == later.mod_revision
    assert again.get("/r/a") == later
    await again.store.close()


async def test_a_watch_that_starts_behind_compaction_fails_the_store(etcd: EtcdProcess, prefix: str) -> None:
    writer = EtcdStore([etcd.url], prefix=prefix)
    await writer.start()
    kvs = [await writer.create(f"/c/{i}", b"x") for i in range(3)]
    await writer.compact(kvs[-1].mod_revision)
    reader = EtcdStore([etcd.url], prefix=prefix)
    await reader.start()
    reader.subscribe(lambda events: None, kvs[0].mod_revision)  # events it can no longer get
    failure = await asyncio.wait_for(reader.wait_failed(), 10)
    assert "watch fell behind compaction" in str(failure) and reader.failure is failure
    await reader.close()
    await writer.close()


async def test_the_watch_resumes_after_etcd_restarts_and_calls_fail_while_it_is_down(
    tmp_path: Path, etcd_binary: str
) -> None:
    own = EtcdProcess(tmp_path / "etcd", etcd_binary).start()
    try:
        cache = Cache(EtcdStore([own.url], prefix="/p", request_timeout=2, retry_interval=0.1), window=100)
        await cache.start()
        before = await cache.create("/x/1", b"1")
        own.stop()
        with pytest.raises(EtcdUnavailable):
            await cache.store.create("/x/2", b"2")
        assert "etcd unavailable" in (cache.store.problem() or "")  # the etcd health check fails
        own.start()
        after = await cache.create("/x/3", b"3")  # waits for its event: the watch came back
        assert cache.get("/x/1") == before and cache.get("/x/3") == after
        assert cache.store.failure is None and cache.store.problem() is None
        await cache.store.close()
    finally:
        own.stop()


def test_settings_need_servers_for_etcd() -> None:
    from pydantic import ValidationError

    from vplane.apiserver.settings import APIServerSettings

    with pytest.raises(ValidationError, match="storage_backend etcd needs etcd_servers"):
        APIServerSettings(data_dir=Path("/nowhere"), storage_backend="etcd")
    with pytest.raises(ValidationError, match="is not an etcd client URL"):
        APIServerSettings(data_dir=Path("/nowhere"), etcd_servers=["127.0.0.1:2379"])


def test_api_servers_on_one_etcd_serve_one_cluster(
    etcd: EtcdProcess, tmp_path: Path, kubectl_path: str, prefix: str
) -> None:
    """Two API servers (HA replicas) on one etcd prefix: kubectl writes through one and reads and watches
    through the other; a restarted server finds everything in etcd, none of it in its data directory."""
    settings = {"storage_backend": "etcd", "etcd_servers": f"[{etcd.url}]", "etcd_prefix": prefix}
    one = APIServerProcess(tmp_path / "one", settings).start()
    two = APIServerProcess(tmp_path / "two", settings).start()
    try:
        k1 = Kubectl(kubectl_path, one.kubeconfig, tmp_path / "cache1")
        k2 = Kubectl(kubectl_path, two.kubeconfig, tmp_path / "cache2")
        watch = k2.popen("get", "configmaps", "-n", "default", "--watch-only", "-o", "name")
        k1.run("create", "configmap", "shared", "-n", "default", "--from-literal=a=1")
        assert json.loads(k2.run("get", "configmap", "shared", "-n", "default", "-o", "json").out)[
            "data"
        ] == {"a": "1"}
        k2.run("patch", "configmap", "shared", "-n", "default", "-p", '{"data":{"a":"2"}}')
        assert k1.run("get", "configmap", "shared", "-n", "default", "-o", "jsonpath={.data.a}").out == "2"
        assert watch.stdout is not None
        assert watch.stdout.readline().strip() == "configmap/shared"
        watch.kill()
        watch.communicate()
        one.restart()
        assert k1.run("get", "configmap", "shared", "-n", "default", "-o", "jsonpath={.data.a}").out == "2"
        assert not (tmp_path / "one" / "state.db").exists()
        k1.run("delete", "configmap", "shared", "-n", "default")
        assert k2.run("get", "configmap", "shared", "-n", "default", check=False).code == 1
    finally:
        one.stop()
        two.stop()

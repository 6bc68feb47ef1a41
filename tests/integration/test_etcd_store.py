"""The etcd backend against a real etcd: the Store contract the SQLite tests check, replicas sharing one
etcd, a watch that resumes and one that cannot, and API servers on it driven by kubectl."""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from harness import APIServerProcess, EtcdProcess, Kubectl, free_port
from vplane.storage.cache import Cache
from vplane.storage.etcd import EtcdOutcomeUnknown, EtcdStore, EtcdUnavailable
from vplane.storage.interface import (
    CompactedError,
    Event,
    KeyExistsError,
    KeyNotFoundError,
    RevisionMismatchError,
)
from vplane.support import tls

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


# -- faults the review of 2026-12-05 found (each failed before the fix) --------------------------------


async def serve(app: web.Application, context: ssl.SSLContext | None = None) -> tuple[web.AppRunner, str]:
    """A fault-injecting endpoint in front of (or instead of) etcd, on a free loopback port."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"{'https' if context else 'http'}://127.0.0.1:{port}"


async def test_watch_responses_past_aiohttps_line_limit_are_delivered(etcd: EtcdProcess, prefix: str) -> None:
    """One etcd watch response carries up to 1,000 revisions (base64, with previous values): a large value,
    or a watch catching up on many writes, is one line far beyond aiohttp's 128 KiB line limit."""
    store = EtcdStore([etcd.url], prefix=prefix, retry_interval=0.05)
    await store.start()
    try:
        first = await store.create("/big", b"a" * 400_000)
        updated = await store.update("/big", b"b" * 400_000, first.mod_revision)
        writes = [await store.create(f"/small/{i:03}", b"x" * 1024) for i in range(300)]
        seen: list[Event] = []
        done = asyncio.Event()

        def deliver(batch: list[Event]) -> None:
            seen.extend(batch)
            if seen[-1].revision >= writes[-1].mod_revision:
                done.set()

        store.subscribe(deliver, first.mod_revision - 1)  # catches up on every write in few responses
        await asyncio.wait_for(done.wait(), 20)
        assert [e.kv for e in seen] == [first, updated, *writes]
        assert store.failure is None
    finally:
        await store.close()


async def test_history_ends_when_etcds_newest_revision_is_outside_the_prefix(
    etcd: EtcdProcess, prefix: str
) -> None:
    """history() reads to etcd's current revision; when that revision changed another prefix's key (or
    the compaction record), no event of this prefix reaches it, and progress requests end the read."""
    store = EtcdStore([etcd.url], prefix=prefix)
    other = EtcdStore([etcd.url], prefix=prefix + "-other")
    await store.start()
    await other.start()
    try:
        mine = [await store.create(f"/k/{i}", b"v") for i in range(3)]
        await other.create("/elsewhere", b"v")
        history = await asyncio.wait_for(store.history(mine[0].mod_revision - 1), 5)
        assert [e.kv for e in history] == mine
        await store.compact(mine[1].mod_revision)  # writes the compaction record last
        history = await asyncio.wait_for(store.history(mine[1].mod_revision), 5)
        assert [e.kv for e in history] == mine[2:]
    finally:
        await store.close()
        await other.close()


async def test_another_replicas_compaction_reads_as_compacted(etcd: EtcdProcess, prefix: str) -> None:
    """A replica learns a compaction done by another one when etcd refuses its read; the error (410 in the
    API server) names the recorded revision, and that replica's own older compaction cannot move the
    record back."""
    one = EtcdStore([etcd.url], prefix=prefix)
    two = EtcdStore([etcd.url], prefix=prefix)
    await one.start()
    await two.start()
    try:
        kvs = [await one.create(f"/k/{i}", b"v") for i in range(5)]
        await one.compact(kvs[3].mod_revision)
        assert two.compacted_revision == 0
        with pytest.raises(CompactedError) as old_history:
            await two.history(kvs[0].mod_revision)
        assert old_history.value.compacted == kvs[3].mod_revision
        assert two.compacted_revision == kvs[3].mod_revision
        three = EtcdStore([etcd.url], prefix=prefix)
        await three.start()
        three._compacted = 0  # as a replica that started before the compaction
        with pytest.raises(CompactedError) as old_range:
            await three.range_at("/", kvs[1].mod_revision)
        assert old_range.value.compacted == kvs[3].mod_revision
        three._compacted = 0
        await three.compact(kvs[2].mod_revision)  # lagging compactor: an older target
        await three.close()
        fresh = EtcdStore([etcd.url], prefix=prefix)
        await fresh.start()
        assert fresh.compacted_revision == kvs[3].mod_revision
        await fresh.close()
    finally:
        await one.close()
        await two.close()


async def test_a_write_whose_answer_is_lost_is_not_sent_again(etcd: EtcdProcess, prefix: str) -> None:
    """A write sent to an endpoint that commits it but answers too late fails as 'outcome unknown' rather
    than being sent to the next endpoint (where a create would read 'exists' for its own success); a read
    moves on. An endpoint that refuses the connection (nothing sent) is skipped for writes too, and one
    that answers something other than etcd's JSON (a proxy's page) is skipped for reads."""
    session = aiohttp.ClientSession()

    async def late(request: web.Request) -> web.Response:
        path = "/" + request.match_info["tail"]
        async with session.post(etcd.url + path, data=await request.read()) as answer:
            data = await answer.read()
        await asyncio.sleep(2)
        return web.Response(body=data)

    async def not_etcd(request: web.Request) -> web.Response:
        return web.Response(status=404, text="404 page not found\n")

    app = web.Application()
    app.router.add_post("/late/{tail:.*}", late)
    app.router.add_post("/proxy/{tail:.*}", not_etcd)
    runner, base = await serve(app)
    refused = f"http://127.0.0.1:{free_port()}"
    try:
        slow = EtcdStore([base + "/late", etcd.url], prefix=prefix, request_timeout=0.5)
        await slow.start()  # a read: the late endpoint timed out, the next answered
        slow._current = 0
        with pytest.raises(EtcdOutcomeUnknown):
            await slow.create("/a", b"1")
        await asyncio.sleep(2)
        reader = EtcdStore([etcd.url], prefix=prefix)
        await reader.start()
        items, _ = await reader.snapshot()
        assert [(kv.key, kv.value) for kv in items] == [("/a", b"1")]  # committed once, as sent once
        await reader.close()
        await slow.close()
        skipping = EtcdStore([refused, base + "/proxy", etcd.url], prefix=prefix)
        await skipping.start()
        assert [kv.key for kv in await skipping.range_at("/", skipping.revision)] == ["/a"]
        skipping._current = 0
        created = await skipping.create("/b", b"2")  # refused first: nothing was sent, so tried again
        assert created.key == "/b"
        await skipping.close()
    finally:
        await session.close()
        await runner.cleanup()


async def test_a_write_cut_off_before_its_answer_is_sent_once_more_and_recognised(
    etcd: EtcdProcess, prefix: str
) -> None:
    """A connection that closes before the answer (a kept-alive connection etcd closed, etcd stopping) may
    or may not have carried the write: it is sent again, and a refusal that finds this very value is the
    first attempt's success, not 'exists' or 'conflict'."""
    session = aiohttp.ClientSession()
    forwarded: list[str] = []

    async def cut(request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"]
        async with session.post(etcd.url + path, data=await request.read()) as answer:
            await answer.read()
        forwarded.append(path)
        assert request.transport is not None
        request.transport.abort()  # applied, never answered
        return web.Response()

    app = web.Application()
    app.router.add_post("/cut/{tail:.*}", cut)
    runner, base = await serve(app)
    store = EtcdStore([base + "/cut", etcd.url], prefix=prefix)
    try:
        await store.start()  # a read: cut off twice, then the next endpoint
        store._current = 0
        created = await store.create("/c", b"v")
        assert (created.key, created.value) == ("/c", b"v")
        store._current = 0
        updated = await store.update("/c", b"w", created.mod_revision)
        assert (updated.value, updated.create_revision) == (b"w", created.create_revision)
        assert forwarded.count("/v3/kv/txn") == 4  # each write: sent, cut off, sent again, cut off
        items, _ = await store.snapshot()
        assert [(kv.key, kv.value, kv.mod_revision) for kv in items] == [("/c", b"w", updated.mod_revision)]
    finally:
        await store.close()
        await session.close()
        await runner.cleanup()


async def test_https_endpoints_are_verified_without_a_ca_file(tmp_path: Path) -> None:
    """No ``etcd_cafile``: an https endpoint must present a certificate the system trusts; a self-signed
    one is refused, never accepted unverified."""
    ca = tls.make_ca("not-trusted")
    serving = tls.issue_serving(ca, ["127.0.0.1", "localhost"])
    serving.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    answered: list[str] = []

    async def fake(request: web.Request) -> web.Response:
        answered.append(request.path)
        return web.json_response({"header": {"revision": "1"}})

    app = web.Application()
    app.router.add_post("/{tail:.*}", fake)
    runner, base = await serve(app, context)
    try:
        store = EtcdStore([base], prefix="/x")
        with pytest.raises(EtcdUnavailable, match="certificate verify failed"):
            await store.start()
        assert answered == []
        await store.close()
    finally:
        await runner.cleanup()


class SilentRelay:
    """A relay in front of etcd at ``<base>/frozen``: it forwards until ``frozen`` is set, then takes
    requests and answers nothing more on any connection, leaving them open (until the test ends)."""

    def __init__(self, etcd: EtcdProcess) -> None:
        self.etcd = etcd
        self.frozen, self.released = asyncio.Event(), asyncio.Event()
        self.watches = 0
        self.base = ""

    async def __aenter__(self) -> SilentRelay:
        self.session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_post("/frozen/{tail:.*}", self.relay)
        self.runner, base = await serve(app)
        self.base = base + "/frozen"
        return self

    async def __aexit__(self, *_: object) -> None:
        self.released.set()
        await self.session.close()
        await self.runner.cleanup()

    async def relay(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"]
        self.watches += path == "/v3/watch"
        if self.frozen.is_set():
            await self.released.wait()
            raise web.HTTPServiceUnavailable()
        async with self.session.post(self.etcd.url + path, data=await request.read()) as answer:
            response = web.StreamResponse(status=answer.status)
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                if self.frozen.is_set():
                    await self.released.wait()
                    break
                await response.write(chunk)
        return response


async def eventually(check: Callable[[], bool], seconds: float = 5) -> None:
    for _ in range(int(seconds / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    assert check()


@pytest.fixture
async def relayed(etcd: EtcdProcess, prefix: str) -> AsyncIterator[tuple[SilentRelay, EtcdStore, Cache]]:
    """A cache on a store whose first endpoint is a :class:`SilentRelay` (checking its watch every 0.3 s),
    and another store writing straight to etcd."""
    async with SilentRelay(etcd) as relay:
        other = EtcdStore([etcd.url], prefix=prefix)
        store = EtcdStore([relay.base, etcd.url], prefix=prefix, request_timeout=1, watch_check=0.3)
        cache = Cache(store, window=100)
        try:
            await other.start()
            await cache.start()
            yield relay, other, cache
        finally:
            await cache.store.close()
            await other.close()


async def test_a_watch_gone_silent_is_opened_again_and_a_quiet_one_is_kept(
    relayed: tuple[SilentRelay, EtcdStore, Cache],
) -> None:
    """A watch connection that stops answering without closing (a host gone, a dropped NAT entry) left the
    replica's cache stale for good. Now a quiet watch gets a mark, and one that does not answer it is
    opened again on the next endpoint; a healthy quiet watch stays open."""
    relay, other, cache = relayed
    first = await cache.create("/a", b"1")
    await asyncio.sleep(1.5)  # five quiet periods: marks answered, the same watch kept
    assert relay.watches == 1 and cache.store.problem() is None
    relay.frozen.set()
    written = await other.create("/b", b"2")  # straight to etcd: the frozen watch never tells
    await eventually(lambda: cache.get("/b") is not None)
    assert cache.get("/b") == written and cache.get("/a") == first
    assert cache.store.failure is None


async def test_a_reopened_watch_starts_past_the_marks_it_read(
    etcd: EtcdProcess, relayed: tuple[SilentRelay, EtcdStore, Cache]
) -> None:
    """On a quiet cluster the marks move etcd's revision on and a compaction may pass the last event: the
    watch reopened after silence starts past the last mark it read, not at that event (which would read as
    compacted and stop the process)."""
    relay, other, cache = relayed
    store = cache.store
    assert isinstance(store, EtcdStore)
    first = await cache.create("/a", b"1")
    await eventually(lambda: store._seen > first.mod_revision + 1)  # marks read past it
    async with aiohttp.ClientSession() as http:
        compacted = await http.post(etcd.url + "/v3/kv/compaction", json={"revision": store._seen})
        assert compacted.status == 200
    relay.frozen.set()
    written = await other.create("/b", b"2")
    await eventually(lambda: cache.get("/b") is not None)
    assert cache.get("/b") == written and store.failure is None

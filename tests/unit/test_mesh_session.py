"""The mesh end to end in one process: a coordinator on a real aiohttp server on 127.0.0.1, node
sessions, relayed and direct dials, and the failure cases (refused keys, restarts, silence, slow readers).

Timings are shrunk through ``MeshSettings``; waits are on events (netmaps, session state), not sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import pytest
import structlog
from aiohttp import web

from vplane.mesh import (
    Coordinator,
    Dialer,
    DialError,
    DirectListener,
    MeshSettings,
    NodeChange,
    NodeIdentity,
    NodeSession,
    RegistrationError,
    RegistrationForbidden,
    RegistrationRefused,
    Stream,
    invalid_access_key,
    same_label,
    stream_protocol_factory,
    tls_server_context,
)
from vplane.mesh.coordinator import AuthenticationError, VisibilityPolicy, all_peers
from vplane.mesh.frames import FrameType, control, decode_message, encode
from vplane.support import tls

SETTINGS = MeshSettings(
    dial_timeout_seconds=0.3,
    relay_open_timeout_seconds=2.0,
    connect_timeout_seconds=2.0,
    heartbeat_interval_seconds=0.1,
    session_silence_timeout_seconds=2.0,
    reconnect_backoff_min_seconds=0.02,
    reconnect_backoff_max_seconds=0.2,
    close_grace_seconds=0.2,
    hello_timeout_seconds=1.0,
    offline_timeout_seconds=5.0,
)
WAIT = 5.0

KEYS = {
    "key-a": NodeIdentity(
        "loft:vcluster:p-default:tenant-a", "vcluster", {"project": "default", "tenant": "a"}
    ),
    "key-b": NodeIdentity(
        "loft:vcluster:p-default:tenant-b", "vcluster", {"project": "default", "tenant": "b"}
    ),
    "key-c": NodeIdentity("loft:vcluster:p-other:tenant-c", "vcluster", {"project": "other", "tenant": "c"}),
}
REFUSED = {"key-disabled": "disabled", "key-expired": "expired"}


async def authenticate(key: str) -> NodeIdentity:
    if key in KEYS:
        return KEYS[key]
    if key in REFUSED:
        raise invalid_access_key(REFUSED[key])
    raise invalid_access_key("not found")


@dataclass
class Platform:
    """A coordinator mounted on an aiohttp app, restartable on the same port."""

    settings: MeshSettings = SETTINGS
    policy: VisibilityPolicy = all_peers
    auth: Callable[[str], Awaitable[NodeIdentity]] = authenticate
    port: int = 0
    changes: list[NodeChange] = field(default_factory=list)
    coordinator: Coordinator | None = None
    runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def coord(self) -> Coordinator:
        assert self.coordinator is not None
        return self.coordinator

    async def start(self) -> None:
        self.coordinator = Coordinator(
            self.auth, self.changes.append, visible_peers=self.policy, settings=self.settings, environ={}
        )
        app = web.Application()
        self.coordinator.setup(app)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


@dataclass
class Harness:
    platform: Platform
    stack: contextlib.AsyncExitStack

    async def node(
        self,
        key: str,
        hostname: str,
        *,
        serve: Callable[[], asyncio.BaseProtocol] | None = None,
        endpoints: list[str] | None = None,
        settings: MeshSettings = SETTINGS,
        ready: bool = True,
    ) -> NodeSession:
        node = NodeSession(
            self.platform.url,
            key,
            hostname=hostname,
            settings=settings,
            serve=serve,
            endpoints=endpoints or [],
            environ={},
        )
        self.stack.push_async_callback(node.close)
        await node.start()
        if ready:
            async with asyncio.timeout(WAIT):
                await node.wait_ready()
        return node

    async def http_app(self, routes: list[web.RouteDef]) -> web.AppRunner:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.add_routes(routes)
        runner = web.AppRunner(app)
        await runner.setup()
        self.stack.push_async_callback(runner.cleanup)
        return runner

    async def client(self, dialer: Dialer) -> aiohttp.ClientSession:
        http = aiohttp.ClientSession(connector=dialer.connector())
        self.stack.push_async_callback(http.close)
        return http


@pytest.fixture
async def mesh() -> AsyncIterator[Harness]:
    platform = Platform()
    await platform.start()
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(platform.stop)
        yield Harness(platform, stack)


async def until(predicate: Callable[[], bool], node: NodeSession) -> None:
    """Wait for a condition that a change of ``node`` (a netmap, the session going up or down) makes true."""
    async with asyncio.timeout(WAIT), contextlib.aclosing(node.subscribe()) as updates:
        async for _ in updates:
            if predicate():
                return
    assert predicate(), "the session ended before the condition held"


async def poll(predicate: Callable[[], bool]) -> None:
    """Wait for a condition no netmap announces (a refusal, a stream ending), checking every 10 ms."""
    async with asyncio.timeout(WAIT):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.01)


async def sees(node: NodeSession, peer: NodeSession) -> None:
    await until(lambda: peer.node_id in node.peers, node)


def hello_routes() -> list[web.RouteDef]:
    async def hello(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "remote": request.remote,
                "path": request.transport.get_extra_info("mesh_path") if request.transport else None,
            }
        )

    async def upload(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response({"received": len(body)})

    async def download(request: web.Request) -> web.Response:
        return web.Response(body=b"d" * int(request.query["size"]))

    return [web.get("/hello", hello), web.post("/upload", upload), web.get("/download", download)]


@dataclass
class TLSMaterial:
    ca: tls.CertPair
    serving: tls.CertPair


@pytest.fixture(scope="module")
def material() -> TLSMaterial:
    ca = tls.make_ca("mesh-test-ca")
    return TLSMaterial(ca, tls.issue_serving(ca, ["127.0.0.1"]))


# -- registration and netmaps ----------------------------------------------------------------------------


async def test_nodes_register_and_see_each_other(mesh: Harness) -> None:
    a = await mesh.node("key-a", "tenant-a-0")
    b = await mesh.node("key-b", "tenant-b-0")
    await sees(a, b)
    await sees(b, a)
    peer = a.peers[b.node_id or ""]
    assert peer.name == "tenant-b-0"
    assert peer.identity == "loft:vcluster:p-default:tenant-b"
    assert peer.labels["tenant"] == "b"
    assert a.node_id not in a.peers
    nodes = {n.id: n for n in mesh.platform.coord.nodes()}
    assert nodes[a.node_id or ""].online and nodes[b.node_id or ""].online
    assert nodes[a.node_id or ""].coordinator_id == mesh.platform.coord.instance_id
    assert [c.type for c in mesh.platform.changes] == ["online", "online"]


async def test_endpoint_changes_are_pushed(mesh: Harness) -> None:
    a = await mesh.node("key-a", "a")
    b = await mesh.node("key-b", "b")
    await sees(a, b)
    b.set_endpoints(["127.0.0.1:4443"])
    await until(lambda: a.peers[b.node_id or ""].endpoints == ("127.0.0.1:4443",), a)
    assert mesh.platform.changes[-1].type == "updated"


async def test_visibility_policy_limits_netmaps_and_the_relay() -> None:
    platform = Platform(policy=same_label("project"))
    await platform.start()
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(platform.stop)
        h = Harness(platform, stack)
        a = await h.node("key-a", "a")
        b = await h.node("key-b", "b")
        c = await h.node("key-c", "c", serve=stream_protocol_factory(echo))
        await sees(a, b)
        assert c.node_id not in a.peers and list(c.peers) == []
        with pytest.raises(DialError, match="unknown peer"):
            await a.open_relayed(c.node_id or "")


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "no auth key provided"),
        ("key-disabled", "invalid access key: disabled"),
        ("key-expired", "invalid access key: expired"),
        ("key-deleted", "invalid access key: not found"),
    ],
)
async def test_refused_keys_stop_the_session(mesh: Harness, key: str, message: str) -> None:
    node = await mesh.node(key, "x", ready=False)
    async with asyncio.timeout(WAIT):
        with pytest.raises(RegistrationError) as info:
            await node.wait_ready()
    assert str(info.value) == message
    assert node.state == "failed" and node.registrations == 0


async def test_revoked_key_disconnects_for_good(mesh: Harness) -> None:
    a = await mesh.node("key-a", "a")
    closed = mesh.platform.coord.disconnect(
        lambda n: n.identity.endswith("tenant-a"), "invalid access key: disabled"
    )
    assert closed == 1
    await until(lambda: a.state == "failed", a)
    assert str(a.failure) == "invalid access key: disabled"


async def _raise_outage() -> None:
    raise RuntimeError("platform API unavailable")


async def _hang() -> None:
    await asyncio.sleep(60)  # the platform's API took the request and never answered


@pytest.mark.parametrize(
    ("first_check", "update"),
    [
        pytest.param(_raise_outage, {}, id="outage"),
        pytest.param(_hang, {"authenticate_timeout_seconds": 0.2}, id="hung-check-cut"),
    ],
)
async def test_a_failed_authentication_is_retried(
    first_check: Callable[[], Awaitable[None]], update: dict[str, float]
) -> None:
    """The key check fails once (the platform's API is down, or hangs until authenticate_timeout_seconds):
    not the node's fault, so it is refused as unavailable and the node registers on its retry."""
    calls = 0

    async def fails_once(key: str) -> NodeIdentity:
        nonlocal calls
        calls += 1
        if calls == 1:
            await first_check()
        return await authenticate(key)

    platform = Platform(auth=fails_once, settings=SETTINGS.model_copy(update=update))
    await platform.start()
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(platform.stop)
        node = await Harness(platform, stack).node("key-a", "a")
        assert node.registrations == 1 and calls == 2


async def test_a_registration_refused_for_now_is_retried_until_allowed() -> None:
    """A good key the platform does not let in for now (a resource proxy target the tenant may not use):
    ERROR forbidden, which ``wait_ready`` reports, but the node keeps retrying, so granting the permission
    lets it in without a restart. Each side logs the refusal loudly once, then quietly while it lasts."""
    allowed = False
    refusals = 0

    async def forbidden_until_allowed(key: str) -> NodeIdentity:
        nonlocal refusals
        if not allowed:
            refusals += 1
            raise RegistrationForbidden(
                "resource proxy target is not allowed; check with: kubectl auth can-i"
            )
        return await authenticate(key)

    platform = Platform(auth=forbidden_until_allowed)
    await platform.start()
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(platform.stop)
        logs = stack.enter_context(structlog.testing.capture_logs())
        node = await Harness(platform, stack).node("key-a", "a", ready=False)
        async with asyncio.timeout(WAIT):
            with pytest.raises(RegistrationRefused, match="is not allowed; check with"):
                await node.wait_ready()
        assert node.state != "failed" and node.failure is None and node.registrations == 0
        await poll(lambda: refusals >= 4)
        for event in ("mesh registration rejected", "mesh registration rejected; retrying"):
            # the platform's warning and the node's error, once each, then info lines
            levels = [entry["log_level"] for entry in logs if entry["event"] == event]
            assert levels.count("info") >= 2 and len(levels) - levels.count("info") == 1, (event, levels)
        allowed = True
        await until(lambda: node.registrations == 1, node)
        async with asyncio.timeout(WAIT):
            await node.wait_ready()
        assert node.registrations == 1 and node.refused is None and node.state == "connected"


async def test_probe(mesh: Harness) -> None:
    node = NodeSession(mesh.platform.url, "key-a", hostname="a", settings=SETTINGS, environ={})
    mesh.stack.push_async_callback(node.close)
    assert await node.probe()
    async with aiohttp.ClientSession() as http, http.get(mesh.platform.url + "/derp/probe") as resp:
        assert resp.status == 200 and await resp.text() == "ok"
    dead = NodeSession("http://127.0.0.1:9", "key-a", hostname="a", settings=SETTINGS, environ={})
    mesh.stack.push_async_callback(dead.close)
    assert not await dead.probe()


# -- relayed and direct dials ------------------------------------------------------------------------------


async def echo(stream: Stream) -> None:
    while data := await stream.read(65536):
        await stream.write(data)


async def test_relayed_http_request(mesh: Harness) -> None:
    runner = await mesh.http_app(hello_routes())
    b = await mesh.node("key-b", "b", serve=runner.server)
    a = await mesh.node("key-a", "a")
    await sees(a, b)
    dialer = Dialer(a, environ={})
    http = await mesh.client(dialer)
    url = f"http://{b.node_id}"
    async with http.get(url + "/hello") as resp:
        assert resp.status == 200
        # The server learns the caller from the relay: the opener's node id, not an address.
        assert await resp.json() == {"remote": a.node_id, "path": "relay"}
    async with http.post(url + "/upload", data=io.BytesIO(b"u" * 1_500_000)) as resp:
        assert (await resp.json())["received"] == 1_500_000
    async with http.get(url + "/download", params={"size": "2000000"}) as resp:
        assert len(await resp.read()) == 2_000_000
    results = await asyncio.gather(*(http.get(url + "/hello") for _ in range(20)))
    for resp in results:
        assert resp.status == 200
        resp.release()
    assert set(dialer.paths_used) == {"relay"}


async def test_relayed_stream_echo_and_half_close(mesh: Harness) -> None:
    b = await mesh.node("key-b", "b", serve=stream_protocol_factory(echo))
    a = await mesh.node("key-a", "a")
    await sees(a, b)
    stream = await a.open_relayed(b.node_id or "")
    assert stream.path == "relay"
    await stream.write(b"ping")
    assert await stream.readexactly(4) == b"ping"
    await stream.write_eof()
    assert await stream.read() == b""  # the echo handler returned and closed its side
    await stream.close()


async def test_dial_to_an_unknown_peer_or_a_refusing_node(mesh: Harness) -> None:
    b = await mesh.node("key-b", "b")  # serves nothing
    a = await mesh.node("key-a", "a")
    await sees(a, b)
    dialer = Dialer(a, environ={})
    with pytest.raises(DialError, match="not in the netmap"):
        await dialer.dial("n-nobody")
    with pytest.raises(DialError, match="does not accept relayed streams"):
        await dialer.dial(b.node_id or "")


async def test_direct_dial_is_preferred(mesh: Harness, material: TLSMaterial) -> None:
    runner = await mesh.http_app(hello_routes())
    listener = DirectListener(runner.server, tls_server_context(material.serving))
    endpoints = await listener.start()
    mesh.stack.push_async_callback(listener.close)
    b = await mesh.node("key-b", "b", serve=runner.server, endpoints=endpoints)
    a = await mesh.node("key-a", "a")
    await sees(a, b)
    settings = SETTINGS.model_copy(update={"direct_ca_pem": material.ca.cert_pem.decode()})
    dialer = Dialer(a, settings, environ={})
    stream = await dialer.dial(b.node_id or "")
    assert stream.path == "direct"
    stream.abort()
    http = await mesh.client(dialer)
    async with http.get(f"http://{b.node_id}/hello") as resp:
        assert await resp.json() == {"remote": "127.0.0.1", "path": None}
    assert set(dialer.paths_used) == {"direct"}


async def test_racing_paths_that_both_connect_keep_one_and_close_the_other(
    mesh: Harness, material: TLSMaterial
) -> None:
    """No head start: every dial races both paths, which both connect; each stream is whole (its own reader,
    not the loser's), and each loser is closed rather than left open on the peer."""

    async def echo_until_reset(stream: Stream) -> None:
        with contextlib.suppress(ConnectionResetError):  # a losing relayed stream is reset by the dialer
            await echo(stream)

    factory = stream_protocol_factory(echo_until_reset)
    listener = DirectListener(factory, tls_server_context(material.serving))
    endpoints = await listener.start()
    mesh.stack.push_async_callback(listener.close)
    b = await mesh.node("key-b", "b", serve=factory, endpoints=endpoints)
    a = await mesh.node("key-a", "a")
    await sees(a, b)
    update = {"direct_ca_pem": material.ca.cert_pem.decode(), "direct_head_start_seconds": 0.0}
    dialer = Dialer(a, SETTINGS.model_copy(update=update), environ={})
    for n in range(10):
        stream = await dialer.dial(b.node_id or "")
        await stream.write(bytes([n]))
        assert await stream.readexactly(1) == bytes([n])
        await stream.close()
    assert sum(dialer.paths_used.values()) == 10, dialer.paths_used
    async with asyncio.timeout(WAIT):  # the relayed losers are gone from the peer's session too
        while a._conn is not None and (a._conn.transports or a._conn.pending):  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_direct_dialing_disabled_by_environment(mesh: Harness, material: TLSMaterial) -> None:
    runner = await mesh.http_app(hello_routes())
    listener = DirectListener(runner.server, tls_server_context(material.serving))
    endpoints = await listener.start()
    mesh.stack.push_async_callback(listener.close)
    b = await mesh.node("key-b", "b", serve=runner.server, endpoints=endpoints)
    a = await mesh.node("key-a", "a")
    await sees(a, b)
    settings = SETTINGS.model_copy(update={"direct_ca_pem": material.ca.cert_pem.decode()})
    dialer = Dialer(a, settings, environ={"TS_DEBUG_DIAL_DIRECT": "false"})
    http = await mesh.client(dialer)
    async with http.get(f"http://{b.node_id}/hello") as resp:
        assert (await resp.json())["path"] == "relay"
    assert set(dialer.paths_used) == {"relay"}


async def test_direct_dial_with_an_untrusted_certificate_falls_back(
    mesh: Harness, material: TLSMaterial
) -> None:
    other_ca = tls.make_ca("someone-else")
    runner = await mesh.http_app(hello_routes())
    listener = DirectListener(runner.server, tls_server_context(tls.issue_serving(other_ca, ["127.0.0.1"])))
    endpoints = await listener.start()
    mesh.stack.push_async_callback(listener.close)
    b = await mesh.node("key-b", "b", serve=runner.server, endpoints=endpoints)
    a = await mesh.node("key-a", "a")
    await sees(a, b)
    settings = SETTINGS.model_copy(update={"direct_ca_pem": material.ca.cert_pem.decode()})
    stream = await Dialer(a, settings, environ={}).dial(b.node_id or "")
    assert stream.path == "relay"
    await stream.close()


@pytest.mark.parametrize(
    "timing",
    [
        pytest.param({"dial_timeout_seconds": 0.3}, id="direct-timeout-before-head-start"),
        # The direct dial's own timeout far off (the caller's deadline would end it first): the relay,
        # raced beside it after the head start, connects and carries the stream.
        pytest.param({"dial_timeout_seconds": 60.0, "direct_head_start_seconds": 0.05}, id="relay-raced"),
    ],
)
async def test_dead_direct_endpoint_falls_back_to_the_relay(
    mesh: Harness, material: TLSMaterial, timing: dict[str, float]
) -> None:
    # A listener that accepts TCP and never answers the TLS handshake: the dial hangs until the timeout.
    accepted: list[asyncio.StreamWriter] = []
    release = asyncio.Event()

    async def black_hole(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        await release.wait()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()

    server = await asyncio.start_server(black_hole, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    b = await mesh.node("key-b", "b", serve=stream_protocol_factory(echo), endpoints=[f"127.0.0.1:{port}"])
    a = await mesh.node("key-a", "a")
    await sees(a, b)
    settings = SETTINGS.model_copy(update={"direct_ca_pem": material.ca.cert_pem.decode(), **timing})
    dialer = Dialer(a, settings, environ={})
    try:
        async with asyncio.timeout(10):  # a caller's own dial deadline, far shorter than 60 s
            first = await dialer.dial(b.node_id or "")
        assert first.path == "relay" and len(accepted) == 1
        await first.write(b"x")
        assert await first.readexactly(1) == b"x"
        await first.close()
        # The failed endpoint is remembered: the next dial goes straight to the relay.
        second = await dialer.dial(b.node_id or "")
        assert second.path == "relay" and len(accepted) == 1
        await second.close()
    finally:
        release.set()
        server.close()
        await server.wait_closed()


async def test_data_after_a_close_still_waiting_for_credit_ends_the_stream(mesh: Harness) -> None:
    """b closes with output still waiting for a's credit; a, which reads nothing, keeps sending. That data
    resets the stream (TCP's RST after close), and b's close completes instead of waiting for ever."""
    settings = SETTINGS.model_copy(update={"initial_window_bytes": 16 * 1024})
    closed = asyncio.Event()
    may_send = asyncio.Event()

    async def handler(stream: Stream) -> None:
        await stream.readexactly(1)
        stream.writer.write(b"o" * 100_000)  # far past a's window: most of it waits for credit
        stream.writer.close()
        may_send.set()
        with contextlib.suppress(ConnectionError):
            await stream.writer.wait_closed()
        closed.set()

    b = await mesh.node("key-b", "b", serve=stream_protocol_factory(handler), settings=settings)
    a = await mesh.node("key-a", "a", settings=settings)
    await sees(a, b)
    stream = await a.open_relayed(b.node_id or "")
    stream.writer.write(b"x")
    async with asyncio.timeout(WAIT):
        await may_send.wait()
    stream.writer.write(b"more")  # arrives at b after its close
    async with asyncio.timeout(WAIT):
        await closed.wait()
    stream.abort()


async def test_slow_reader_does_not_stall_another_stream(mesh: Harness) -> None:
    settings = SETTINGS.model_copy(
        update={"initial_window_bytes": 32 * 1024, "write_buffer_high_bytes": 16 * 1024}
    )
    slow_may_read = asyncio.Event()
    slow_got: list[int] = []

    async def handler(stream: Stream) -> None:
        kind = await stream.readexactly(4)
        if kind == b"slow":
            await slow_may_read.wait()
            total = 0
            while data := await stream.read(65536):
                total += len(data)
            slow_got.append(total)
            await stream.write(str(total).encode())
        else:
            await echo(stream)

    b = await mesh.node("key-b", "b", serve=stream_protocol_factory(handler), settings=settings)
    a = await mesh.node("key-a", "a", settings=settings)
    await sees(a, b)
    slow = await a.open_relayed(b.node_id or "")
    fast = await a.open_relayed(b.node_id or "")
    payload = b"s" * 1_000_000

    async def fill() -> None:
        await slow.write(b"slow" + payload)
        await slow.write_eof()

    filler = asyncio.create_task(fill())
    try:
        await fast.write(b"fast")
        chunk = b"f" * 100_000
        for _ in range(10):  # 1 MB through the other stream while the first is stuck
            await fast.write(chunk)
            assert await fast.readexactly(len(chunk)) == chunk
        # The slow stream's writer is still waiting for credit: what left it is bounded by the window
        # plus what the receiving StreamReader buffers before it pauses (2 x its 64 KiB limit).
        assert not filler.done()
        sent = 1_000_004 - slow.writer.transport.get_write_buffer_size()
        assert 0 < sent <= 32 * 1024 + 2 * 65536 + 65536
        slow_may_read.set()
        await filler
        assert int(await slow.read()) == 1_000_000
        assert slow_got == [1_000_000]
    finally:
        filler.cancel()
        await slow.close()
        await fast.close()


# -- failures: restarts, drops, silence ------------------------------------------------------------------


async def test_coordinator_restart_nodes_reconnect_by_themselves(mesh: Harness) -> None:
    runner = await mesh.http_app(hello_routes())
    b = await mesh.node("key-b", "b", serve=runner.server)
    a = await mesh.node("key-a", "a")
    await sees(a, b)
    first_instance = mesh.platform.coord.instance_id
    await mesh.platform.stop()
    await until(lambda: not a.netmap.session_up, a)
    assert a.netmap.session_down_since is not None
    assert b.node_id in a.peers  # the last netmap is kept; staleness is the caller's decision
    await mesh.platform.start()
    await until(lambda: a.registrations == 2 and a.connected and b.node_id in a.peers, a)
    await until(lambda: b.registrations == 2 and a.node_id in b.peers, b)
    assert a.coordinator_id == mesh.platform.coord.instance_id != first_instance
    http = await mesh.client(Dialer(a, environ={}))
    async with http.get(f"http://{b.node_id}/hello") as resp:
        assert resp.status == 200


async def test_session_drop_marks_offline_and_keeps_last_seen(mesh: Harness) -> None:
    a = await mesh.node("key-a", "a")
    b = await mesh.node("key-b", "b")
    await sees(a, b)
    b_id = b.node_id or ""
    await b.close()
    await until(lambda: b_id not in a.peers, a)
    info = mesh.platform.coord.node(b_id)
    assert info is not None and not info.online and info.last_seen > 0
    assert mesh.platform.changes[-1].type == "offline" and mesh.platform.changes[-1].node.id == b_id


async def test_heartbeat_timeout_marks_a_silent_node_offline() -> None:
    settings = SETTINGS.model_copy(update={"offline_timeout_seconds": 0.3})
    platform = Platform(settings=settings)
    await platform.start()
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(platform.stop)
        h = Harness(platform, stack)
        watcher = await h.node("key-a", "watcher")
        # A node that registers and then says nothing more (no heartbeats), over a raw WebSocket.
        http = aiohttp.ClientSession()
        stack.push_async_callback(http.close)
        ws = await http.ws_connect(platform.url + "/coordinator/session")
        stack.push_async_callback(ws.close)
        hello = {"key": "key-b", "hostname": "silent", "labels": {}, "endpoints": []}
        await ws.send_bytes(encode(control(FrameType.HELLO, hello)))
        registered = await ws.receive()
        assert registered.data[0] == FrameType.REGISTERED
        await until(lambda: any(p.name == "silent" for p in watcher.peers.values()), watcher)
        await until(lambda: not any(p.name == "silent" for p in watcher.peers.values()), watcher)
        [silent] = [n for n in platform.coord.nodes() if n.name == "silent"]
        assert not silent.online and silent.last_seen > 0
        assert [c.type for c in platform.changes if c.node.name == "silent"] == ["online", "offline"]
        # The healthy node, which heartbeats, stayed online throughout.
        assert platform.coord.node(watcher.node_id or "") is not None
        assert watcher.connected and watcher.registrations == 1


async def test_a_second_session_for_a_live_node_is_refused(mesh: Harness) -> None:
    """A second session for a node whose session is alive does not take over (it would receive the
    callers' streams meant for the first): it is refused, retries, and registers once the first ends."""
    first = await mesh.node("key-a", "same")
    second = await mesh.node("key-a", "same", ready=False)
    await poll(lambda: second.last_error is not None)
    assert 'node "same" of loft:vcluster:p-default:tenant-a already has a live session' in (
        second.last_error or ""
    )
    assert first.connected and first.registrations == 1 and second.registrations == 0
    [info] = mesh.platform.coord.nodes()
    assert info.online
    await first.close()
    await until(lambda: second.connected, second)
    assert second.node_id == first.node_id and second.last_error is None


async def test_the_resume_secret_lets_a_node_replace_its_own_stale_session(mesh: Harness) -> None:
    """A node that noticed its path die before the coordinator did comes back at once: the secret from its
    registration proves the session is its own. Without it the registration is refused."""
    http = aiohttp.ClientSession()
    mesh.stack.push_async_callback(http.close)
    hello = {"key": "key-a", "hostname": "h", "labels": {}, "endpoints": []}
    old = await http.ws_connect(mesh.platform.url + "/coordinator/session")
    mesh.stack.push_async_callback(old.close)
    await old.send_bytes(encode(control(FrameType.HELLO, hello)))
    [registered] = decode_message((await old.receive()).data)[:1]
    secret = registered.json()["resume"]
    for attempt, expected in ((hello, FrameType.ERROR), ({**hello, "resume": secret}, FrameType.REGISTERED)):
        new = await http.ws_connect(mesh.platform.url + "/coordinator/session")
        mesh.stack.push_async_callback(new.close)
        await new.send_bytes(encode(control(FrameType.HELLO, attempt)))
        [answer] = decode_message((await new.receive()).data)[:1]
        assert answer.type is expected
    assert answer.json()["resume"] != secret, "each registration gets a new secret"
    while (msg := await old.receive()).type == aiohttp.WSMsgType.BINARY:
        pass
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    [info] = mesh.platform.coord.nodes()
    assert info.online


# -- relayed streams end on both sides -------------------------------------------------------------------


async def test_closing_a_relayed_stream_ends_the_other_side_at_once(mesh: Harness) -> None:
    """A full close (the opener's ``close()``) reaches the acceptor as the end of the data and then the loss
    of the connection, even if it ignores the end of input, and frees the relay's slot at once."""
    lost: list[object] = []

    async def idle(stream: Stream) -> None:
        assert await stream.readexactly(2) == b"hi"
        await stream.writer.wait_closed()  # returns on connection_lost only
        lost.append(stream.reader.at_eof())

    b = await mesh.node("key-b", "b", serve=stream_protocol_factory(idle))
    a = await mesh.node("key-a", "a")
    await sees(a, b)
    stream = await a.open_relayed(b.node_id or "")
    await stream.write(b"hi")
    await stream.close()
    await poll(lambda: bool(lost) and not mesh.platform.coord.relayed_streams)
    assert lost == [True]


async def test_closing_with_unread_data_releases_a_peer_blocked_on_credit(mesh: Harness) -> None:
    """An opener that stops reading and closes resets the stream (TCP's RST), so a peer stuck writing into
    the window it never returns is released with an error instead of waiting forever."""
    settings = SETTINGS.model_copy(
        update={"initial_window_bytes": 16 * 1024, "write_buffer_high_bytes": 8192}
    )
    failed: list[BaseException] = []

    async def flood(stream: Stream) -> None:
        try:
            while True:
                await stream.write(b"x" * 4096)
        except (ConnectionError, RuntimeError) as exc:
            failed.append(exc)

    b = await mesh.node("key-b", "b", serve=stream_protocol_factory(flood), settings=settings)
    a = await mesh.node("key-a", "a", settings=settings)
    await sees(a, b)
    stream = await a.open_relayed(b.node_id or "")
    stream.writer.transport.pause_reading()
    await poll(lambda: bool(stream.writer.transport._recv_pending))  # type: ignore[attr-defined]
    await stream.close()
    await poll(lambda: bool(failed) and not mesh.platform.coord.relayed_streams)


async def test_a_lost_session_ends_its_relayed_streams_on_the_other_side(mesh: Harness) -> None:
    lost = asyncio.Event()

    async def idle(stream: Stream) -> None:
        with pytest.raises(ConnectionResetError, match="peer session closed"):
            await stream.writer.wait_closed()
        lost.set()

    b = await mesh.node("key-b", "b", serve=stream_protocol_factory(idle))
    a = await mesh.node("key-a", "a")
    await sees(a, b)
    stream = await a.open_relayed(b.node_id or "")
    await a.close()
    async with asyncio.timeout(WAIT):
        await lost.wait()
    await stream.close()


async def test_verbose_logs_follow_the_environment() -> None:
    async def never(key: str) -> NodeIdentity:
        raise AuthenticationError("unused")

    assert Coordinator(never, environ={"LOFT_LOG_TSNET_CONTROL_PLANE": "true"}).verbose
    assert not Coordinator(never, environ={"LOFT_LOG_TSNET_AGENT": "true"}).verbose
    assert NodeSession("http://x", "k", hostname="h", environ={"LOFT_LOG_TSNET_AGENT": "true"}).verbose
    # The platform's own node (its local client to the agents' tunnels) shares the control plane's switch.
    platform = SETTINGS.model_copy(update={"verbose_env": "LOFT_LOG_TSNET_CONTROL_PLANE"})
    on = {"LOFT_LOG_TSNET_CONTROL_PLANE": "true"}
    assert NodeSession("http://x", "k", hostname="h", settings=platform, environ=on).verbose
    session = NodeSession("http://x", "k", hostname="h", settings=platform, environ=on)
    assert Dialer(session, environ=on)._verbose
    off = {"LOFT_LOG_TSNET_AGENT": "true"}
    assert not NodeSession("http://x", "k", hostname="h", settings=platform, environ=off).verbose

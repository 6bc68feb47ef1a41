"""The node's side of the mesh: one long-lived session to the coordinator, relayed streams as asyncio
transports, and the TLS listener that serves direct dials.

Relayed streams are ``asyncio.Transport`` objects (``RelayTransport``) rather than a bespoke stream
type, because that is the interface both asyncio's streams and aiohttp's client and server protocols
plug into: ``loop.create_connection`` and ``loop.create_server`` take protocol factories, and so do
``NodeSession.open_relayed_protocol`` and ``NodeSession.serve``. The same aiohttp ``web.Server`` then
serves direct connections (through ``DirectListener``) and relayed ones, and an aiohttp client runs HTTP
over either path (``vplane.mesh.dialer.MeshConnector``). ``Stream`` is the reader/writer convenience on
top, for code that wants bytes rather than a protocol.

Backpressure follows asyncio's transport contract: a protocol that pauses reading stops the stream's
credit from being returned, so the sender runs out of window; a sender whose window is exhausted buffers
up to ``write_buffer_high_bytes`` and then pauses its protocol (``drain`` waits). The session's single
writer serves streams round-robin, one frame each per turn, so a stream with a lot to send does not
starve the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import ssl
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast

import aiohttp
import structlog

from vplane.mesh import frames
from vplane.mesh.backoff import Backoff
from vplane.mesh.frames import FrameType, Mux
from vplane.mesh.netmap import Assembler
from vplane.mesh.settings import MeshSettings, insecure_skip_verify, verbose
from vplane.support.tls import CertPair

SESSION_PATH = "/coordinator/session"
PROBE_PATH = "/derp/probe"
PROBE_FAILED = "Failed to reach the coordinator server. Make sure that the agent can reach the control-plane"
"""Spec §10.3: what the agent logs when ``/derp/probe`` does not answer 200."""

FINAL_CODES = frozenset({"unauthorized", "invalid"})
"""ERROR codes after which reconnecting cannot help (a refused key, a malformed registration)."""
FORBIDDEN = "forbidden"
"""The ERROR code of a known key the platform does not let in for now (a permission it lacks)."""

PathKind = Literal["direct", "relay"]
ProtocolFactory = Callable[[], asyncio.BaseProtocol]
P = TypeVar("P", bound=asyncio.BaseProtocol)

log = structlog.get_logger("vplane.mesh.node")


class MeshError(Exception):
    """Base of the mesh's own errors."""


class RegistrationError(MeshError):
    """The coordinator refused the access key (``no auth key provided``, ``invalid access key: ...``).
    Final: the session stops instead of retrying a key that will not work (except a refusal for now)."""


class RegistrationRefused(RegistrationError):
    """The coordinator knows the key but does not let the node in for now (``forbidden``: a permission the
    node lacks, such as a resource proxy's ``use`` of its target). Not final: the session keeps retrying
    with its reconnect backoff, so the operator granting the permission needs no restart."""


class SessionError(MeshError):
    """The session could not be established or broke; the node reconnects by itself."""


class DialError(MeshError, ConnectionError):
    """No path to the peer (an ``OSError``, so aiohttp reports it as a connection error)."""


class SessionDown(DialError):
    """No relayed stream can be opened: this node's session to the coordinator is not up (now)."""


def _rejection(event: frames.Rejected, what: str) -> MeshError:
    """The error an ERROR frame from the coordinator ends the session with (final, for now, or transient)."""
    if event.code in FINAL_CODES:
        return RegistrationError(event.message)
    if event.code == FORBIDDEN:
        return RegistrationRefused(event.message)
    return SessionError(f"{what}: {event.message}")


@dataclass(frozen=True, slots=True)
class Peer:
    """A node this node may see and dial, as the coordinator published it."""

    id: str
    name: str
    """The hostname the node registered with (a pod name for a tenant replica)."""
    identity: str
    """The platform identity behind its access key, e.g. ``loft:vcluster:p-default:tenant-a``."""
    kind: str
    labels: Mapping[str, str]
    endpoints: tuple[str, ...]
    """Direct endpoints, ``host:port`` of TLS listeners."""
    instance: str = ""
    """The peer process's own random id: a restarted peer has a new one, a reconnected one does not."""

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> Peer:
        labels = body.get("labels")
        endpoints = body.get("endpoints")
        return cls(
            id=str(body.get("id", "")),
            name=str(body.get("name", "")),
            identity=str(body.get("identity", "")),
            kind=str(body.get("kind", "")),
            labels=MappingProxyType(
                {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
            ),
            endpoints=tuple(str(e) for e in endpoints) if isinstance(endpoints, list) else (),
            instance=str(body.get("instance", "")),
        )


@dataclass(frozen=True, slots=True)
class Netmap:
    """What a subscriber sees: the current peers and whether the subscription is live.

    ``received_at`` and ``session_down_since`` are readings of the session's clock (monotonic), so a
    peer cache can compute staleness from when the subscription dropped (spec §3.1), not from the last
    publication.
    """

    peers: Mapping[str, Peer]
    seq: int
    """Publications received over the session's lifetime; 0 before the first."""
    received_at: float | None
    session_up: bool
    session_down_since: float | None
    omitted: int = 0
    """Peers this node may see but was not sent, because it accepts no more (``max_netmap_peers``)."""


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"endpoint {endpoint!r} is not host:port")
    value = int(port)
    if not 0 < value < 65536:
        raise ValueError(f"endpoint {endpoint!r} has an invalid port")
    return host.strip("[]"), value


def _checked_endpoints(endpoints: Sequence[str]) -> list[str]:
    for endpoint in endpoints:
        split_endpoint(endpoint)
    return list(endpoints)


def join_endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# -- relayed streams as asyncio transports -----------------------------------------------------------


class RelayTransport(asyncio.Transport):
    """One relayed stream seen as an asyncio transport (see the module docstring for the flow control)."""

    def __init__(self, conn: _Connection, stream_id: int, peer_id: str, extra: dict[str, Any]) -> None:
        super().__init__(extra)
        self._conn = conn
        self.stream_id = stream_id
        self.peer_id = peer_id
        self._protocol: asyncio.BaseProtocol | None = None
        self._send_buf = bytearray()
        self._high = conn.settings.write_buffer_high_bytes
        self._low = self._high // 4
        self._write_paused = False
        self._eof_requested = False
        self._eof_sent = False
        self._closing = False
        self._lost = False
        self._reading = True
        self._recv_pending: deque[bytes] = deque()
        self._recv_eof_pending = False
        self._delivering = False

    # -- asyncio.Transport --------------------------------------------------------------------------

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._protocol is not None
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def is_closing(self) -> bool:
        return self._closing or self._lost

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._eof_requested and not self._closing:
            raise RuntimeError("write() after write_eof()")
        if self._closing or self._lost or not data:
            return
        self._send_buf += data
        self._conn.schedule(self)
        if not self._write_paused and len(self._send_buf) > self._high:
            self._write_paused = True
            self._call_protocol("pause_writing")

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def write_eof(self) -> None:
        if self._eof_requested:
            return
        self._eof_requested = True
        self._conn.schedule(self)

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        """A full close, as closing a socket: send what is buffered, then CLOSE and RESET (``Mux.finish_stream``)
        so the other side ends at once rather than when it next writes. Closing with received data still
        unread resets at once instead (TCP's RST), so a peer blocked on the credit we hold is released."""
        if self._closing or self._lost:
            return
        if self._recv_pending:
            self._abort("closed with unread data")
            return
        self._closing = True
        self._eof_requested = True
        if self._eof_sent:
            self._conn.finish(self.stream_id)
            self._lose(None)
        else:
            self._conn.schedule(self)

    def abort(self) -> None:
        self._abort("aborted by the peer's application")

    def _abort(self, reason: str) -> None:
        if self._lost:
            return
        self._conn.reset(self.stream_id, reason)
        self._send_buf.clear()
        self._lose(None)

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        if self._reading:
            return
        self._reading = True
        if self._recv_pending or self._recv_eof_pending:
            self._conn.loop.call_soon(self._deliver_pending)

    def is_reading(self) -> bool:
        return self._reading and not self._lost

    def get_write_buffer_size(self) -> int:
        return len(self._send_buf)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = 4 * low if low is not None else self._conn.settings.write_buffer_high_bytes
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low

    # -- driven by the session ----------------------------------------------------------------------

    def _call_protocol(self, name: str, *args: Any) -> Any:
        protocol = self._protocol
        if protocol is None:
            return None
        try:
            return getattr(protocol, name)(*args)
        except Exception:
            log.exception("mesh stream protocol failed", method=name, stream=self.stream_id)
            self.abort()
            return None

    def _lose(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._send_buf.clear()
        self._recv_pending.clear()
        if self._protocol is not None:
            self._conn.loop.call_soon(self._call_protocol, "connection_lost", exc)

    def _has_work(self) -> bool:
        return bool(self._send_buf) or (self._eof_requested and not self._eof_sent)

    def _flush_into(self, mux: Mux) -> bool:
        """Move one frame's worth into the mux; True if more could go right away."""
        if self._lost or not mux.has_stream(self.stream_id):
            return False
        buf = self._send_buf
        if buf:
            n = min(len(buf), mux.send_window(self.stream_id), mux.max_frame_size)
            if n:
                chunk = bytes(buf[:n])
                del buf[:n]
                mux.send_data(self.stream_id, chunk)
                if self._write_paused and len(buf) <= self._low:
                    self._write_paused = False
                    self._call_protocol("resume_writing")
        if not buf and self._eof_requested and not self._eof_sent:
            self._eof_sent = True
            if self._closing:
                mux.finish_stream(self.stream_id)
                self._lose(None)
            else:
                mux.close_stream(self.stream_id)
            return False
        return bool(buf) and mux.send_window(self.stream_id) > 0

    def _feed(self, data: bytes) -> None:
        if self._lost:
            return
        if not self._reading or self._recv_pending or self._delivering:
            self._recv_pending.append(data)
            return
        self._deliver(data)

    def _deliver(self, data: bytes) -> None:
        self._call_protocol("data_received", data)
        self._conn.acknowledge(self.stream_id, len(data))

    def _feed_eof(self) -> None:
        if self._lost:
            return
        if not self._reading or self._recv_pending:
            self._recv_eof_pending = True
            return
        self._deliver_eof()

    def _deliver_eof(self) -> None:
        self._recv_eof_pending = False
        keep_open = self._call_protocol("eof_received")
        if not keep_open:
            self.close()

    def _remote_gone(self) -> None:
        """The other side closed for good after sending everything (CLOSE, then RESET): hand over what it
        sent, even while reading is paused, since nothing more can come, then the end and the loss."""
        if self._lost:
            return
        self._reading = True
        self._deliver_pending()
        if not self._lost:
            self._lose(None)

    def _deliver_pending(self) -> None:
        self._delivering = True
        try:
            while self._recv_pending and self._reading and not self._lost:
                self._deliver(self._recv_pending.popleft())
        finally:
            self._delivering = False
        if self._recv_eof_pending and not self._recv_pending and self._reading and not self._lost:
            self._deliver_eof()


@dataclass(slots=True)
class _PendingOpen:
    peer_id: str
    factory: ProtocolFactory
    future: asyncio.Future[tuple[RelayTransport, asyncio.BaseProtocol]]


class _Connection:
    """One WebSocket to the coordinator and the streams multiplexed over it."""

    def __init__(self, session: NodeSession, ws: aiohttp.ClientWebSocketResponse, mux: Mux) -> None:
        self.session = session
        self.settings = session.settings
        self.loop = asyncio.get_running_loop()
        self.ws = ws
        self.mux = mux
        self.node_id = ""
        self.transports: dict[int, RelayTransport] = {}
        self.pending: dict[int, _PendingOpen] = {}
        self.ready: deque[int] = deque()
        self.ready_set: set[int] = set()
        self.wake = asyncio.Event()
        self.closed = False
        self.batch_bytes = 4 * self.settings.max_frame_bytes

    # -- output -------------------------------------------------------------------------------------

    def kick(self) -> None:
        if not self.closed:
            self.wake.set()

    def schedule(self, transport: RelayTransport) -> None:
        sid = transport.stream_id
        if sid not in self.ready_set and transport._has_work():
            self.ready_set.add(sid)
            self.ready.append(sid)
        self.kick()

    def acknowledge(self, stream_id: int, consumed: int) -> None:
        before = self.mux.pending_bytes
        self.mux.acknowledge(stream_id, consumed)
        if self.mux.pending_bytes != before:
            self.kick()

    def reset(self, stream_id: int, reason: str) -> None:
        self.mux.reset_stream(stream_id, reason)
        self.transports.pop(stream_id, None)
        self.kick()

    def finish(self, stream_id: int) -> None:
        """Full close of a stream whose CLOSE is already sent: RESET unless the other side closed too."""
        if self.mux.has_stream(stream_id):
            self.mux.reset_stream(stream_id, frames.CLOSED_BY_PEER)
        self.transports.pop(stream_id, None)
        self.kick()

    def _pump(self) -> None:
        mux = self.mux
        while self.ready and mux.pending_bytes < self.batch_bytes:
            sid = self.ready.popleft()
            self.ready_set.discard(sid)
            transport = self.transports.get(sid)
            if transport is None:
                continue
            more = transport._flush_into(mux)
            if not mux.has_stream(sid):
                self.transports.pop(sid, None)
            elif more:
                self.ready_set.add(sid)
                self.ready.append(sid)

    async def writer(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while True:
                self._pump()
                data = self.mux.data_to_send()
                if not data:
                    break
                if self.session.verbose:
                    log.info("mesh frames sent", bytes=len(data), node=self.node_id)
                await self.ws.send_bytes(data)

    # -- input --------------------------------------------------------------------------------------

    def handle(self, events: list[frames.Event]) -> None:
        session = self.session
        for event in events:
            if session.verbose:
                log.info("mesh frame received", frame=type(event).__name__, node=self.node_id)
            if isinstance(event, frames.DataReceived):
                transport = self.transports.get(event.stream_id)
                if transport is None:
                    self.reset(event.stream_id, "stream closed")
                elif transport._closing:
                    # Data after our full close (a peer still uploading): reset, and the transport is lost
                    # too, so whoever waits for it to close is not left waiting.
                    transport._abort("stream closed")
                else:
                    transport._feed(event.data)
            elif isinstance(event, frames.WindowOpened):
                transport = self.transports.get(event.stream_id)
                if transport is not None:
                    self.schedule(transport)
            elif isinstance(event, frames.StreamEnded):
                transport = self.transports.get(event.stream_id)
                if transport is not None:
                    # Both sides closed: the stream is done. (Gone from the mux without our CLOSE means a
                    # RESET follows in this batch; its handler still needs the transport.)
                    if transport._eof_sent and not self.mux.has_stream(event.stream_id):
                        self.transports.pop(event.stream_id, None)
                    transport._feed_eof()
            elif isinstance(event, frames.StreamReset):
                transport = self.transports.pop(event.stream_id, None)
                if transport is not None and event.after_close:
                    transport._remote_gone()
                elif transport is not None:
                    transport._lose(ConnectionResetError(f"mesh stream reset: {event.reason}"))
                self.ready_set.discard(event.stream_id)
                pending = self.pending.pop(event.stream_id, None)
                if pending is not None and not pending.future.done():
                    pending.future.set_exception(DialError(f"relay stream reset: {event.reason}"))
            elif isinstance(event, frames.StreamAccepted):
                self._accepted(event.stream_id)
            elif isinstance(event, frames.StreamRejected):
                pending = self.pending.pop(event.stream_id, None)
                if pending is not None and not pending.future.done():
                    pending.future.set_exception(
                        DialError(f"relay to peer {pending.peer_id} refused: {event.reason}")
                    )
            elif isinstance(event, frames.StreamOpened):
                self._incoming(event)
            elif isinstance(event, frames.NetmapReceived):
                session._netmap_received(event.body)
            elif isinstance(event, frames.Rejected):
                raise _rejection(event, "coordinator closed the session")
            elif isinstance(event, frames.Registered):
                raise frames.ProtocolError("REGISTERED twice on one session")
            # HeartbeatReceived: hearing anything is what the watchdog needs.
        self.kick()

    def _accepted(self, stream_id: int) -> None:
        pending = self.pending.pop(stream_id, None)
        if pending is None:
            return
        if pending.future.done():  # the dial gave up meanwhile
            self.reset(stream_id, "dial abandoned")
            return
        transport = self._make_transport(stream_id, pending.peer_id, {})
        protocol = pending.factory()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        pending.future.set_result((transport, protocol))

    def _incoming(self, event: frames.StreamOpened) -> None:
        factory = self.session._serve
        if factory is None:
            self.mux.reject_stream(event.stream_id, "the node does not accept relayed streams")
            return
        self.mux.accept_stream(event.stream_id)
        transport = self._make_transport(event.stream_id, event.source, event.peer)
        try:
            protocol = factory()
        except Exception:
            log.exception("mesh stream handler failed to start", peer=event.source)
            self.reset(event.stream_id, "handler failed")
            return
        transport.set_protocol(protocol)
        protocol.connection_made(transport)

    def _make_transport(self, stream_id: int, peer_id: str, peer: Mapping[str, Any]) -> RelayTransport:
        extra: dict[str, Any] = {
            "peername": (peer_id, 0),
            "sockname": (self.node_id, 0),
            "mesh_path": "relay",
            "mesh_peer": peer_id,
            "mesh_peer_info": dict(peer),
            "mesh_stream_id": stream_id,
        }
        transport = RelayTransport(self, stream_id, peer_id, extra)
        self.transports[stream_id] = transport
        return transport

    def open(self, peer_id: str, factory: ProtocolFactory) -> tuple[int, _PendingOpen]:
        stream_id = self.mux.open_stream(peer_id)
        pending = _PendingOpen(peer_id, factory, self.loop.create_future())
        self.pending[stream_id] = pending
        self.kick()
        return stream_id, pending

    def teardown(self, reason: str) -> None:
        self.closed = True
        self.mux.forget_all()
        for transport in self.transports.values():
            transport._lose(ConnectionResetError(reason))
        self.transports.clear()
        for pending in self.pending.values():
            if not pending.future.done():
                pending.future.set_exception(DialError(reason))
        self.pending.clear()
        self.ready.clear()
        self.ready_set.clear()


# -- the session -----------------------------------------------------------------------------------


class NodeSession:
    """A node's registration with the coordinator and its one long-lived session.

    ``start()`` connects in the background and keeps reconnecting (exponential backoff with jitter)
    until ``close()``; only a refused access key stops it (``wait_ready`` then raises
    ``RegistrationError``). Peers arrive as netmaps: read ``peers``/``netmap`` or iterate
    ``subscribe()``. Incoming relayed streams go to the protocol factory given to ``serve`` (the same
    kind of factory ``loop.create_server`` takes, e.g. an aiohttp ``web.Server``).
    """

    def __init__(
        self,
        url: str,
        access_key: str,
        *,
        hostname: str,
        labels: Mapping[str, str] | None = None,
        endpoints: Sequence[str] = (),
        settings: MeshSettings | None = None,
        ssl_context: ssl.SSLContext | None = None,
        serve: ProtocolFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] | None = None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.url = url.rstrip("/")
        self.access_key = access_key
        self.hostname = hostname
        self.labels = dict(labels or {})
        self._endpoints = _checked_endpoints(endpoints)
        self.settings = settings or MeshSettings()
        self._ssl: ssl.SSLContext | bool = (
            False if insecure_skip_verify(self.settings, environ) else (ssl_context or True)
        )
        self._serve = serve
        self._clock = clock
        self._rand = rand
        self.verbose = verbose(self.settings, self.settings.verbose_env, environ)
        self.node_id: str | None = None
        self.instance = secrets.token_hex(8)
        """This process's id among the node's registrations (peers tell a restart from a reconnect)."""
        self.coordinator_id: str | None = None
        self.state: Literal["idle", "connecting", "connected", "disconnected", "failed", "closed"] = "idle"
        self.failure: RegistrationError | None = None
        self.refused: RegistrationRefused | None = None
        """The coordinator's refusal for now, while it lasts (the session retries; None once registered)."""
        self.last_error: str | None = None
        """Why the latest attempt to connect or stay connected failed (None once registered again), e.g. the
        coordinator refusing a second session for this node while the first is alive."""
        self.registrations = 0
        """Successful registrations so far (1 + reconnects), for tests and status."""
        self._resume = ""
        """The coordinator's secret for our current registration: presented when we reconnect, it lets the
        new session replace one the coordinator has not yet noticed is dead."""
        self._assembler: Assembler[Peer] = Assembler(self._parse_peer, self.settings.max_netmap_peers)
        self._netmap = Netmap(MappingProxyType({}), 0, None, False, None)
        self._changed = asyncio.Event()
        self._stopped = asyncio.Event()
        self._http: aiohttp.ClientSession | None = None
        self._conn: _Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._attempt_registered = False

    # -- public API ---------------------------------------------------------------------------------

    @property
    def ws_url(self) -> str:
        base = self.url
        if base.startswith("https://"):
            base = "wss://" + base[len("https://") :]
        elif base.startswith("http://"):
            base = "ws://" + base[len("http://") :]
        return base + SESSION_PATH

    @property
    def endpoints(self) -> list[str]:
        return list(self._endpoints)

    @property
    def connected(self) -> bool:
        return self.state == "connected"

    @property
    def netmap(self) -> Netmap:
        return self._netmap

    @property
    def peers(self) -> Mapping[str, Peer]:
        return self._netmap.peers

    def serve(self, protocol_factory: ProtocolFactory | None) -> None:
        """Serve incoming relayed streams with protocols from this factory (None: refuse them)."""
        self._serve = protocol_factory

    def serve_streams(self, handler: Callable[[Stream], Awaitable[None]]) -> None:
        self._serve = stream_protocol_factory(handler)

    async def start(self) -> None:
        if self._task is not None:
            return
        self._task = asyncio.create_task(self._run(), name=f"mesh-session-{self.hostname}")

    async def wait_ready(self) -> Netmap:
        """Wait for registration and the first netmap; ``RegistrationError`` if the key is refused (the
        session stopped), ``RegistrationRefused`` while the platform refuses it for now (the session keeps
        retrying). Bound it with ``asyncio.timeout``: while the platform is unreachable it keeps waiting."""
        while True:
            if self.failure is not None:
                raise self.failure
            if self.refused is not None:
                raise self.refused
            if self.state == "connected" and self._netmap.seq > 0:
                return self._netmap
            if self.state == "closed":
                raise SessionError("the session is closed")
            await self._changed_wait()

    async def __aenter__(self) -> NodeSession:
        await self.start()
        async with asyncio.timeout(self.settings.connect_timeout_seconds):
            await self.wait_ready()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closing = True
        self._stopped.set()
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.ws.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self.state != "failed":
            self.state = "closed"
        self._set_session_up(False)
        self._publish()

    async def subscribe(self) -> AsyncIterator[Netmap]:
        """The current netmap at once, then each change (new publication, session up or down).

        A slow consumer skips intermediate snapshots rather than queueing them: it always gets the latest.
        """
        seen: Netmap | None = None
        while True:
            current = self._netmap
            if current is not seen:
                seen = current
                yield current
                continue
            if self.state in ("closed", "failed"):
                return
            await self._changed_wait()

    def set_endpoints(self, endpoints: Sequence[str]) -> None:
        """Publish new direct endpoints (e.g. after the listener moved)."""
        self._endpoints = _checked_endpoints(endpoints)
        conn = self._conn
        if conn is not None and not conn.closed:
            conn.mux.send_control(FrameType.ENDPOINTS, {"endpoints": self._endpoints})
            conn.kick()

    async def open_relayed_protocol(
        self, peer_id: str, protocol_factory: Callable[[], P]
    ) -> tuple[RelayTransport, P]:
        """Open a relayed stream to ``peer_id`` and attach a protocol to it (like ``create_connection``)."""
        conn = self._conn
        if conn is None or conn.closed or self.state != "connected":
            raise SessionDown("the mesh session to the coordinator is down")
        stream_id, pending = conn.open(peer_id, protocol_factory)
        try:
            async with asyncio.timeout(self.settings.relay_open_timeout_seconds):
                transport, protocol = await asyncio.shield(pending.future)
        except TimeoutError:
            conn.pending.pop(stream_id, None)
            future = pending.future
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result()[0].abort()  # accepted in the very turn the wait ran out: not left open
            else:
                conn.reset(stream_id, "dial timed out")
            raise DialError(f"relay to peer {peer_id} timed out") from None
        except asyncio.CancelledError:
            conn.pending.pop(stream_id, None)
            future = pending.future
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result()[0].abort()
            else:
                future.cancel()
                conn.reset(stream_id, "dial abandoned")
            raise
        return transport, cast(P, protocol)

    async def open_relayed(self, peer_id: str) -> Stream:
        """A relayed stream to ``peer_id`` with a reader/writer API."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        transport, protocol = await self.open_relayed_protocol(
            peer_id, lambda: asyncio.StreamReaderProtocol(reader, loop=loop)
        )
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        return Stream(reader, writer, peer_id=peer_id, path="relay")

    async def probe(self) -> bool:
        """``GET /derp/probe`` on the platform: what an agent checks before starting its tunnel."""
        try:
            async with self._client().get(
                self.url + PROBE_PATH,
                ssl=self._ssl,
                timeout=aiohttp.ClientTimeout(total=self.settings.connect_timeout_seconds),
            ) as resp:
                ok = resp.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.error(PROBE_FAILED, url=self.url, error=str(exc))
            return False
        if not ok:
            log.error(PROBE_FAILED, url=self.url, status=resp.status)
        return ok

    # -- internals ----------------------------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession()
        return self._http

    async def _changed_wait(self) -> None:
        await self._changed.wait()

    def _publish(self) -> None:
        event = self._changed
        self._changed = asyncio.Event()
        event.set()

    def _set_session_up(self, up: bool) -> None:
        current = self._netmap
        if current.session_up == up:
            return
        self._netmap = Netmap(
            current.peers,
            current.seq,
            current.received_at,
            up,
            None if up else self._clock(),
            current.omitted,
        )
        self._publish()

    def _parse_peer(self, item: Mapping[str, Any]) -> tuple[str, Peer] | None:
        peer = Peer.from_wire(item)
        if not peer.id or peer.id == self.node_id:
            return None
        return peer.id, peer

    def _netmap_received(self, body: Mapping[str, Any]) -> None:
        """A complete netmap (``peers``) replaces ours; an incremental one (``upsert``, ``remove``) edits it;
        either may come in pages (``vplane.mesh.netmap``), published once the last one is in."""
        current = self._netmap
        assembled = self._assembler.feed(body, current.peers)
        if assembled is None:
            return
        peers, omitted = assembled
        if omitted and omitted != current.omitted:
            log.warning(
                "mesh netmap capped: peers left out",
                node=self.node_id,
                omitted=omitted,
                limit=self.settings.max_netmap_peers,
            )
        self._netmap = Netmap(MappingProxyType(peers), current.seq + 1, self._clock(), True, None, omitted)
        if self.verbose:
            log.info("mesh netmap received", node=self.node_id, peers=len(peers), complete="peers" in body)
        self._publish()

    async def _run(self) -> None:
        s = self.settings
        backoff = Backoff(
            s.reconnect_backoff_min_seconds,
            s.reconnect_backoff_max_seconds,
            s.reconnect_backoff_factor,
            s.reconnect_jitter,
            self._rand,
        )
        failures = 0
        while not self._closing:
            self._attempt_registered = False
            refusal: RegistrationRefused | None = None
            try:
                await self._session_once()
                error: str | None = None
            except RegistrationRefused as exc:
                refusal = exc
                error = str(exc)
            except RegistrationError as exc:
                self.failure = exc
                self.state = "failed"
                log.error("mesh registration rejected", url=self.url, error=str(exc))
                self._set_session_up(False)
                self._publish()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            if self._stopped.is_set():
                break
            newly_refused = refusal is not None and self.refused is None
            self.refused = refusal  # a later failure of another kind says nothing of the refusal
            self.state = "disconnected"
            self.last_error = error
            self._set_session_up(False)
            self._publish()
            if self._attempt_registered:
                backoff.reset()
                failures = 0
            failures += 1
            delay = backoff.next()
            # One warning per outage, then quieter lines: disconnected nodes should not spam.
            # A refusal is an error when it starts (whatever failed before it), then quiet while it lasts.
            if refusal is not None:
                log_fn = log.error if newly_refused else log.info
            else:
                log_fn = log.warning if failures == 1 else log.info
            log_fn(
                "mesh registration rejected; retrying" if refusal else "mesh session lost; reconnecting",
                url=self.url,
                error=error,
                delay=round(delay, 3),
                attempt=failures,
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stopped.wait()

    async def _session_once(self) -> None:
        s = self.settings
        self.state = "connecting"
        async with asyncio.timeout(s.connect_timeout_seconds):
            ws = await self._client().ws_connect(
                self.ws_url,
                ssl=self._ssl,
                autoping=True,
                heartbeat=None,
                max_msg_size=s.max_message_bytes,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=s.close_grace_seconds),
            )
        transport = _ws_transport(ws)
        tasks: list[asyncio.Task[None]] = []
        conn: _Connection | None = None
        try:
            mux = Mux(
                initial_window=s.initial_window_bytes,
                max_frame_size=s.max_frame_bytes,
                max_control_size=s.max_control_frame_bytes,
            )
            mux.send_control(
                FrameType.HELLO,
                {
                    "version": frames.PROTOCOL_VERSION,
                    "key": self.access_key,
                    "hostname": self.hostname,
                    "labels": self.labels,
                    "endpoints": self._endpoints,
                    "max_frame_bytes": s.max_frame_bytes,
                    "max_control_frame_bytes": s.max_control_frame_bytes,
                    "max_netmap_peers": s.max_netmap_peers,
                    "instance": self.instance,
                    **({"resume": self._resume} if self._resume else {}),
                },
            )
            await ws.send_bytes(mux.data_to_send())
            async with asyncio.timeout(s.connect_timeout_seconds):
                msg = await ws.receive()
            if msg.type != aiohttp.WSMsgType.BINARY:
                raise SessionError(f"coordinator closed the session before registering ({msg.type.name})")
            events = mux.receive(msg.data)
            if not events or not isinstance(events[0], frames.Registered | frames.Rejected):
                raise frames.ProtocolError("the coordinator's first frame is not REGISTERED")
            first = events[0]
            if isinstance(first, frames.Rejected):
                raise _rejection(first, "coordinator refused the session")
            conn = _Connection(self, ws, mux)
            conn.node_id = first.node_id
            self.node_id = first.node_id
            self.coordinator_id = first.coordinator_id
            resume = first.body.get("resume")
            self._resume = resume if isinstance(resume, str) else ""
            self.last_error = None
            self.refused = None
            self._assembler.reset()
            self._conn = conn
            self._attempt_registered = True
            self.registrations += 1
            self.state = "connected"
            log.info(
                "mesh session registered",
                node=first.node_id,
                coordinator=first.coordinator_id,
                url=self.url,
                registrations=self.registrations,
            )
            heard = [self._clock()]
            conn.handle(events[1:])
            self._set_session_up(True)
            self._publish()
            tasks = [
                asyncio.create_task(self._reader(conn, heard), name="mesh-reader"),
                asyncio.create_task(conn.writer(), name="mesh-writer"),
                asyncio.create_task(self._heartbeat(conn, heard), name="mesh-heartbeat"),
            ]
            # Whichever ends first ends the session: the reader on a close or a protocol error, the
            # writer on a send failure, the heartbeat when the coordinator has gone silent.
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception()
                if exc is not None:
                    raise exc
            raise SessionError("the coordinator has been silent too long")
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if conn is not None:
                conn.teardown("the mesh session to the coordinator was lost")
            if self._conn is conn:
                self._conn = None
            with contextlib.suppress(Exception):
                async with asyncio.timeout(s.close_grace_seconds):
                    await ws.close()
            # The WebSocket close handshake is done; aiohttp would still wait (up to 30 s) for the
            # platform's TLS close_notify, which a closed session has no use for, and which would leave
            # the socket open past close().
            if transport is not None:
                transport.abort()

    async def _reader(self, conn: _Connection, heard: list[float]) -> None:
        ws, mux = conn.ws, conn.mux
        while True:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.BINARY:
                heard[0] = self._clock()
                conn.handle(mux.receive(msg.data))
            elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
                raise SessionError(f"coordinator closed the session (code {ws.close_code})")
            elif msg.type == aiohttp.WSMsgType.ERROR:
                raise SessionError(f"session error: {ws.exception()}")
            else:
                raise frames.ProtocolError(f"unexpected {msg.type.name} message")

    async def _heartbeat(self, conn: _Connection, heard: list[float]) -> None:
        """Send heartbeats; drop the session when the coordinator has been silent too long."""
        s = self.settings
        interval = min(s.heartbeat_interval_seconds, s.session_silence_timeout_seconds / 3)
        while True:
            await asyncio.sleep(interval)
            silent = self._clock() - heard[0]
            if silent > s.session_silence_timeout_seconds:
                log.warning("mesh session silent; reconnecting", node=conn.node_id, silent=round(silent, 3))
                return
            conn.mux.send_control(FrameType.HEARTBEAT)
            conn.kick()


def _ws_transport(ws: aiohttp.ClientWebSocketResponse) -> asyncio.Transport | None:
    """The transport under a client WebSocket (aiohttp keeps its connection on ``_conn``)."""
    transport = getattr(getattr(ws, "_conn", None), "transport", None)
    return transport if isinstance(transport, asyncio.Transport) else None


# -- reader/writer streams ---------------------------------------------------------------------------


class Stream:
    """A dialed or accepted connection with an asyncio-streams API, on either path.

    ``write`` waits for room (relayed: until the peer grants credit), so a writer is paced by its reader.
    """

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, peer_id: str, path: PathKind
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.peer_id = peer_id
        self.path: PathKind = path

    async def read(self, n: int = -1) -> bytes:
        return await self.reader.read(n)

    async def readexactly(self, n: int) -> bytes:
        return await self.reader.readexactly(n)

    async def readline(self) -> bytes:
        return await self.reader.readline()

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def write_eof(self) -> None:
        if self.writer.can_write_eof():
            self.writer.write_eof()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()

    def abort(self) -> None:
        self.writer.transport.abort()

    async def __aenter__(self) -> Stream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def stream_protocol_factory(handler: Callable[[Stream], Awaitable[None]]) -> ProtocolFactory:
    """A protocol factory that hands each connection (relayed or direct) to ``handler`` as a ``Stream``;
    the stream is closed when the handler returns."""

    def factory() -> asyncio.BaseProtocol:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)

        async def connected(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            peer = w.get_extra_info("mesh_peer")
            if peer is None:
                peername = w.get_extra_info("peername")
                peer = str(peername[0]) if isinstance(peername, tuple) and peername else ""
            path: PathKind = "relay" if w.get_extra_info("mesh_path") == "relay" else "direct"
            stream = Stream(r, w, peer_id=str(peer), path=path)
            try:
                await handler(stream)
            except Exception:
                log.exception("mesh stream handler failed", peer=peer)
            finally:
                await stream.close()

        return asyncio.StreamReaderProtocol(reader, connected, loop=loop)

    return factory


# -- direct paths: the listener ----------------------------------------------------------------------


def tls_server_context(pair: CertPair) -> ssl.SSLContext:
    """A serving context for a direct listener from PEM material (``ssl`` loads chains only from files)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="vplane-mesh-") as tmp:
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        pair.write(cert, key)
        ctx.load_cert_chain(cert, key)
    return ctx


@dataclass
class DirectListener:
    """The TLS server a node runs for direct dials; publish ``endpoints`` with the session.

    Serves the same protocol factory as ``NodeSession.serve``, so a peer gets the same service whichever
    path its dial took. ``advertise_host`` is the address peers should dial (required when binding a
    wildcard address).
    """

    protocol_factory: ProtocolFactory
    ssl_context: ssl.SSLContext
    host: str = "127.0.0.1"
    port: int = 0
    advertise_host: str | None = None
    _server: asyncio.Server | None = field(default=None, init=False, repr=False)

    async def start(self) -> list[str]:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self.protocol_factory, self.host, self.port, ssl=self.ssl_context
        )
        return self.endpoints

    @property
    def endpoints(self) -> list[str]:
        if self._server is None:
            return []
        host = self.advertise_host or self.host
        if host in ("0.0.0.0", "::", ""):
            raise ValueError("a listener on a wildcard address needs advertise_host")
        ports = sorted({sock.getsockname()[1] for sock in self._server.sockets})
        return [join_endpoint(host, port) for port in ports]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

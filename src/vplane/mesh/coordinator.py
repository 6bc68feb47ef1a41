"""The coordinator: the platform's side of the mesh, as a library the platform mounts on its aiohttp app.

It registers nodes (access key checked by the platform's ``authenticate``), keeps the node registry
(online, ``lastSeen``, direct endpoints, owning coordinator instance), computes each node's peers with
the platform's visibility policy and pushes them as netmaps, and relays streams between sessions (the
DERP analogue). The relay is ``frames.Relay``: it never queues more for a stream than the receiving
side granted, and each session has its own writer, so a slow node stalls only the streams to it, never
the coordinator's reading of other sessions.

What it does not do: relay between coordinator instances (Tailscale's DERP ``--mesh-with``); in HA each
node's streams reach only nodes on the same coordinator instance. The registry is in memory; the
platform persists what it needs (NetworkPeer status) from ``on_change`` and ``nodes()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import inspect
import re
import secrets
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import orjson
import structlog
from aiohttp import WSCloseCode, WSMsgType, web

from vplane.kube import validation
from vplane.mesh import frames, netmap
from vplane.mesh.frames import Frame, FrameType, ProtocolError, Relay
from vplane.mesh.session import FORBIDDEN, PROBE_PATH, SESSION_PATH, split_endpoint
from vplane.mesh.settings import CONTROL_PLANE_LOG_ENV, MeshSettings, verbose

log = structlog.get_logger("vplane.mesh.coordinator")

NO_AUTH_KEY = "no auth key provided"
"""Spec §10.3: the platform's answer to a registration without a key."""
RESERVED_LABEL_DOMAINS = ("loft.sh", "vplane.io")
"""Label keys under these prefixes (and their subdomains) come from the platform only (``NodeIdentity``);
a node that sends one is refused, so no node can pass itself off as a tenant or key it is not."""
MAX_ENDPOINT_LENGTH = 261
"""``[<253-character host>]:65535``."""
MIN_ANNOUNCED_FRAME = 1024
MIN_ANNOUNCED_CONTROL = 64 * 1024
"""The smallest frame limits a node may announce (``MeshSettings``' own lower bounds)."""

# Frames that may overtake queued stream data: credit and session housekeeping. Stream frames keep their
# order (OPEN_OK before DATA before CLOSE).
_PRIORITY = frozenset({FrameType.WINDOW_UPDATE, FrameType.REGISTERED})
_PONG = frames.encode(Frame(FrameType.HEARTBEAT))


_MAX_REFUSALS = 4096


class AuthenticationError(Exception):
    """Raised by ``authenticate``: the key is refused and the node should stop trying. The message goes
    to the node verbatim. Any other exception means "cannot tell now" and the node retries."""


class RegistrationForbidden(Exception):
    """Raised by ``authenticate``: the key is good but the node may not join for now (it lacks a permission
    that can be granted). The message goes to the node verbatim (ERROR ``forbidden``), and the node keeps
    retrying with backoff rather than stopping as for a refused key."""


def invalid_access_key(reason: str) -> AuthenticationError:
    """``invalid access key: <reason>``; reasons the platform uses: ``not found`` (deleted or unknown),
    ``disabled``, ``expired``."""
    return AuthenticationError(f"invalid access key: {reason}")


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """What the platform knows about the holder of an access key."""

    name: str
    """e.g. ``loft:vcluster:p-default:tenant-a`` or ``loft:cluster:edge-1``."""
    kind: str = ""
    """e.g. ``vcluster`` or ``agent``."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Set by the platform (tenant, project, ...); a node's own labels never override these."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    id: str
    name: str
    identity: str
    kind: str
    labels: Mapping[str, str]
    endpoints: tuple[str, ...]
    online: bool
    last_seen: float
    """Wall-clock seconds (``time.time()``) of the last frame from the node."""
    connected_at: float | None
    coordinator_id: str
    """The coordinator instance that owns (or last owned) the node's session."""


@dataclass(frozen=True, slots=True)
class NodeChange:
    type: Literal["online", "updated", "offline", "removed"]
    node: NodeInfo


VisibilityPolicy = Callable[[NodeInfo, Sequence[NodeInfo]], Iterable[NodeInfo]]
"""``(node, online nodes) -> the nodes it may see and dial``; the node itself is dropped from the answer.
Called for every online node on every change, so keep it cheap."""
ChangeCallback = Callable[[NodeChange], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class Groups:
    """Where a node stands in a policy stated as groups (``GroupVisibility``)."""

    member_of: frozenset[str] = frozenset()
    """Nodes that see one of these groups see this node."""
    sees: frozenset[str] = frozenset()


NO_GROUPS = Groups()
EVERYONE = "*"


class GroupVisibility:
    """A visibility policy stated as groups: a node sees the online nodes that are members of a group it
    sees. It is the same callable as any ``VisibilityPolicy``, but it lets the coordinator index sessions by
    group, so a node joining, leaving or changing costs the netmaps of the sessions that see one of its
    groups only, not a pass over every online node (at 5,000 agents that pass cost 30 ms per join).

    ``groups`` may read only what is fixed for a session (its identity, kind and labels): it is asked once
    per registration.
    """

    __slots__ = ("groups",)

    def __init__(self, groups: Callable[[NodeInfo], Groups]) -> None:
        self.groups = groups

    def __call__(self, node: NodeInfo, candidates: Sequence[NodeInfo]) -> list[NodeInfo]:
        sees = self.groups(node).sees
        if not sees:
            return []
        return [c for c in candidates if not sees.isdisjoint(self.groups(c).member_of)]


_EVERYONE = Groups(frozenset({EVERYONE}), frozenset({EVERYONE}))
all_peers = GroupVisibility(lambda node: _EVERYONE)
"""Everyone sees everyone (a single-tenant mesh, tests)."""


def same_label(key: str) -> GroupVisibility:
    """Nodes see the nodes that carry the same value of label ``key`` (e.g. a project)."""

    def groups(node: NodeInfo) -> Groups:
        value = node.labels.get(key)
        if value is None:
            return NO_GROUPS
        group = frozenset({f"{key}={value}"})
        return Groups(group, group)

    return GroupVisibility(groups)


def node_id_for(identity: str, hostname: str) -> str:
    """Stable across reconnects and DNS-label safe, so it can be a URL host over the mesh."""
    digest = hashlib.sha256(f"{identity}\x00{hostname}".encode()).hexdigest()
    return "n" + digest[:20]


class _Record:
    __slots__ = (
        "id",
        "name",
        "identity",
        "kind",
        "labels",
        "endpoints",
        "last_seen",
        "offline_since",
        "connected_at",
        "coordinator_id",
        "session",
        "resume",
        "instance",
        "groups",
        "_info",
        "_wire",
    )

    def __init__(self, node_id: str, name: str, identity: NodeIdentity, coordinator_id: str) -> None:
        self.id = node_id
        self.name = name
        self.identity = identity.name
        self.kind = identity.kind
        self.labels: Mapping[str, str] = MappingProxyType({})
        self.endpoints: tuple[str, ...] = ()
        self.last_seen = 0.0
        self.offline_since = 0.0
        self.connected_at: float | None = None
        self.coordinator_id = coordinator_id
        self.session: _Session | None = None
        self.resume = ""
        self.instance = ""
        """The node process's own random id (from HELLO): a restarted node is a new instance, a node that
        reconnects over a new path is not (peers that track health per endpoint tell them apart)."""
        """Secret given to the node's current session; presenting it lets a reconnect replace a session
        the coordinator still thinks is live (the node noticed a dead path first)."""
        self.groups = NO_GROUPS
        """Its place in a ``GroupVisibility`` policy, from its latest registration."""
        self._info: NodeInfo | None = None
        self._wire: bytes | None = None

    def changed(self) -> None:
        self._info = None
        self._wire = None

    def info(self) -> NodeInfo:
        if self._info is None or self._info.last_seen != self.last_seen:
            self._info = NodeInfo(
                id=self.id,
                name=self.name,
                identity=self.identity,
                kind=self.kind,
                labels=self.labels,
                endpoints=self.endpoints,
                online=self.session is not None,
                last_seen=self.last_seen,
                connected_at=self.connected_at,
                coordinator_id=self.coordinator_id,
            )
        return self._info

    def wire(self) -> bytes:
        """This node as a netmap entry (no online flag or lastSeen: only real changes cause pushes)."""
        if self._wire is None:
            self._wire = orjson.dumps(
                {
                    "id": self.id,
                    "name": self.name,
                    "identity": self.identity,
                    "kind": self.kind,
                    "labels": dict(self.labels),
                    "endpoints": list(self.endpoints),
                    "instance": self.instance,
                }
            )
        return self._wire


async def _close_quietly(ws: web.WebSocketResponse, message: str) -> None:
    with contextlib.suppress(Exception):
        await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=message.encode())


class _Session:
    """One node's WebSocket and its single writer.

    Outgoing frames wait in two queues: ``priority`` (credit, heartbeat answers) may overtake ``ordered``
    (stream frames, whose order matters: OPEN_OK before DATA before CLOSE). Only the newest netmap is kept
    and at most one heartbeat answer is pending, so a node that reads slowly cannot make these pile up;
    relayed data and stream control frames are bounded by ``max_queued``. Every message fits the node's
    announced limits: relayed DATA is split to its frame size and a message never exceeds what its
    WebSocket accepts.
    """

    __slots__ = (
        "ws",
        "record",
        "priority",
        "ordered",
        "netmap",
        "pong",
        "busy",
        "wake",
        "last_heard",
        "peers_sent",
        "netmap_seq",
        "closed",
        "batch_bytes",
        "limits",
        "max_message",
        "omitted_sent",
        "queued",
        "max_queued",
        "overflowed",
    )

    def __init__(
        self,
        ws: web.WebSocketResponse,
        record: _Record,
        now: float,
        batch_bytes: int,
        limits: _Limits,
        max_queued: int,
    ) -> None:
        self.ws = ws
        self.record = record
        self.queued = 0
        """Bytes in ``priority`` and ``ordered``."""
        self.max_queued = max_queued
        self.overflowed: asyncio.Task[None] | None = None
        """The close of a session that stopped reading (its queue went past ``max_queued``)."""
        self.priority: deque[bytes] = deque()
        self.ordered: deque[bytes] = deque()
        self.netmap: deque[bytes] = deque()
        """Pages of the newest netmap not yet written."""
        self.pong = False
        self.busy = False
        """The writer is sending (a heartbeat answer then waits for it)."""
        self.wake = asyncio.Event()
        self.last_heard = now
        self.peers_sent: dict[str, bytes] | None = None
        """The peers (id -> netmap entry) as the node will have them once its queued netmap arrives: also
        the peers it may open relayed streams to."""
        self.netmap_seq = 0
        self.closed = False
        self.batch_bytes = batch_bytes
        self.limits = limits
        self.max_message = limits.max_message_bytes
        self.omitted_sent = 0

    def send(self, raw: bytes) -> None:
        if self.closed or self.overflowed is not None:
            return
        self.queued += len(raw)
        if self.queued > self.max_queued:
            # It does not read what it asked for: close it rather than hold its frames without bound (its
            # streams are reset on the other side when the reader sees the close and unregisters it).
            log.warning(
                "mesh session closed: it does not read its frames",
                node=self.record.id,
                queued=self.queued,
                limit=self.max_queued,
            )
            self.priority.clear()
            self.ordered.clear()
            self.queued = 0
            self.overflowed = asyncio.ensure_future(_close_quietly(self.ws, "outbound queue over limit"))
            return
        if raw[0] == FrameType.DATA and len(raw) - frames.HEADER_SIZE > self.limits.max_frame_bytes:
            # Relayed from a node with larger frames than this one accepts: same bytes, smaller frames
            # (credit counts bytes, so flow control is unchanged).
            step = self.limits.max_frame_bytes
            stream_id = int.from_bytes(raw[1:5], "big")
            for start in range(frames.HEADER_SIZE, len(raw), step):
                self.ordered.append(frames.encode_parts(FrameType.DATA, stream_id, raw[start : start + step]))
            self.wake.set()
            return
        (self.priority if raw[0] in _PRIORITY else self.ordered).append(raw)
        self.wake.set()

    def send_netmap(self, pages: list[bytes]) -> None:
        if not self.closed:
            self.netmap.clear()
            self.netmap.extend(pages)
            self.wake.set()

    async def answer_heartbeat(self) -> None:
        """Answer the node's heartbeat. When the writer has nothing to do (the common case: an idle session),
        the reader writes the answer itself, which spares a task switch per heartbeat (at 5,000 agents,
        500 a second); otherwise the writer sends it with what it has queued, ahead of stream frames."""
        if self.closed:
            return
        if self.busy or self.priority or self.ordered or self.netmap:
            self.pong = True
            self.wake.set()
            return
        with contextlib.suppress(ConnectionResetError):  # the reader sees the close next
            await self.ws.send_bytes(_PONG)

    async def writer(self) -> None:
        ws, priority, ordered, pages = self.ws, self.priority, self.ordered, self.netmap
        limit = self.max_message
        while True:
            self.busy = False
            await self.wake.wait()
            self.wake.clear()
            self.busy = True
            while priority or ordered or pages or self.pong:
                parts: list[bytes] = []
                size = 0
                # Each part fits a message on its own; a part that would overflow this one waits for the next.
                while priority and (not parts or size + len(priority[0]) <= limit):
                    part = priority.popleft()
                    parts.append(part)
                    size += len(part)
                queued = size
                if self.pong and size + len(_PONG) <= limit:
                    self.pong = False
                    parts.append(_PONG)
                    size += len(_PONG)
                while pages and (not parts or size + len(pages[0]) <= limit):
                    part = pages.popleft()
                    parts.append(part)
                    size += len(part)
                while ordered and size < self.batch_bytes and (not parts or size + len(ordered[0]) <= limit):
                    part = ordered.popleft()
                    parts.append(part)
                    size += len(part)
                    queued += len(part)
                self.queued = max(0, self.queued - queued)
                await ws.send_bytes(b"".join(parts))


class Coordinator:
    """Registration, netmaps and the relay. Mount with ``setup(app)`` (or add the two handlers and call
    ``start``/``close`` yourself)."""

    def __init__(
        self,
        authenticate: Callable[[str], Awaitable[NodeIdentity]],
        on_change: ChangeCallback | None = None,
        *,
        visible_peers: VisibilityPolicy = all_peers,
        settings: MeshSettings | None = None,
        instance_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._authenticate = authenticate
        self._on_change = on_change
        self._policy = visible_peers
        self.settings = settings or MeshSettings()
        self.instance_id = instance_id or uuid.uuid4().hex[:12]
        self._clock = clock
        self._wall = wall_clock
        self.verbose = verbose(self.settings, CONTROL_PLANE_LOG_ENV, environ)
        self._records: dict[str, _Record] = {}
        self._sessions: set[_Session] = set()
        self._relay: Relay[_Session] = Relay(
            max_streams_per_session=self.settings.max_streams_per_session,
            max_streams_per_pair=self.settings.max_streams_per_pair,
        )
        self._by_identity: dict[str, set[str]] = {}
        """Node ids (online or not yet forgotten) per identity, for ``max_nodes_per_identity``."""
        self._netmap_pending = False
        self._groups = visible_peers.groups if isinstance(visible_peers, GroupVisibility) else None
        """With a ``GroupVisibility`` policy: netmaps are updated for the sessions a change concerns."""
        self._members: dict[str, dict[str, _Record]] = {}
        """Online nodes by group they are members of (join order)."""
        self._viewers: dict[str, dict[_Session, None]] = {}
        """Sessions by group they see."""
        self._dirty: dict[str, frozenset[str]] = {}
        """Nodes changed since the last push -> the groups they were or are members of."""
        self._fresh: dict[_Session, None] = {}
        """Sessions that have not had a netmap yet."""
        self._recompute = False
        """Every netmap is recomputed at the next push (``refresh``)."""
        self._sweeper: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._refusals: dict[str, str] = {}
        """The last ``forbidden`` answer per node hostname: a node retries until it is allowed, and only a
        new or changed refusal is a warning (bounded: forgotten wholesale past ``_MAX_REFUSALS``)."""

    # -- mounting -----------------------------------------------------------------------------------

    def setup(self, app: web.Application) -> None:
        app.router.add_get(SESSION_PATH, self.handle_session)
        app.router.add_get(PROBE_PATH, self.handle_probe)

        async def on_startup(_: web.Application) -> None:
            await self.start()

        async def on_shutdown(_: web.Application) -> None:
            await self.close()

        app.on_startup.append(on_startup)
        app.on_shutdown.append(on_shutdown)

    async def start(self) -> None:
        self._closing = False
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="mesh-coordinator-sweeper")

    async def close(self) -> None:
        """Close every session (nodes reconnect, to this or another instance) and stop the sweeper."""
        self._closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        sessions = list(self._sessions)
        for session in sessions:
            self._unregister(session, "coordinator shutting down")
        await asyncio.gather(
            *(self._close_ws(s.ws, WSCloseCode.GOING_AWAY, "coordinator shutting down") for s in sessions),
            return_exceptions=True,
        )
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    # -- the registry -------------------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        return [r.info() for r in self._records.values()]

    def node(self, node_id: str) -> NodeInfo | None:
        record = self._records.get(node_id)
        return record.info() if record is not None else None

    @property
    def relayed_streams(self) -> int:
        return len(self._relay)

    def refresh(self) -> None:
        """Recompute every netmap, e.g. after the inputs of the visibility policy changed."""
        self._recompute = True
        self._schedule_netmaps()

    def disconnect(self, predicate: Callable[[NodeInfo], bool], reason: str) -> int:
        """Refuse the sessions of matching nodes with a final ``unauthorized`` error (e.g. their access key
        was deleted); returns how many were closed."""
        closing = [s for s in self._sessions if predicate(s.record.info())]
        for session in closing:
            self._unregister(session, reason)
            self._spawn(self._refuse(session.ws, "unauthorized", reason))
        return len(closing)

    # -- HTTP handlers ------------------------------------------------------------------------------

    async def handle_probe(self, request: web.Request) -> web.Response:
        """``GET /derp/probe``: agents check the platform is reachable before they start (spec §10.3)."""
        return web.Response(text="ok")

    async def handle_session(self, request: web.Request) -> web.WebSocketResponse:
        s = self.settings
        if self._sweeper is None and not self._closing:
            await self.start()
        ws = web.WebSocketResponse(
            autoping=True,
            heartbeat=None,
            compress=False,
            max_msg_size=s.max_message_bytes,
            timeout=s.close_grace_seconds,
        )
        await ws.prepare(request)
        if self._closing:
            await self._close_ws(ws, WSCloseCode.GOING_AWAY, "coordinator shutting down")
            return ws
        session = await self._handshake(ws, request)
        if session is None:
            return ws
        writer = asyncio.create_task(session.writer(), name=f"mesh-session-writer-{session.record.id}")
        writer.add_done_callback(lambda t: self._writer_done(t, session))
        try:
            await self._serve(session)
        except ProtocolError as exc:
            log.warning("mesh session protocol error", node=session.record.id, error=str(exc))
        finally:
            self._unregister(session, "session closed")
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer
            await self._close_ws(ws, WSCloseCode.GOING_AWAY, "session closed")
        return ws

    async def _reject(
        self, ws: web.WebSocketResponse, code: str, message: str, *, quiet: bool = False, **fields: Any
    ) -> None:
        """Log the rejection (``quiet``: at info, a refusal the node has had before) and refuse."""
        (log.info if quiet else log.warning)("mesh registration rejected", code=code, error=message, **fields)
        await self._refuse(ws, code, message)

    async def _refuse(self, ws: web.WebSocketResponse, code: str, message: str) -> None:
        """Send ERROR and close; the node gives up on ``unauthorized`` and ``invalid`` (retries ``forbidden``)."""
        with contextlib.suppress(Exception):
            await ws.send_bytes(
                frames.encode(frames.control(FrameType.ERROR, {"code": code, "message": message}))
            )
        await self._close_ws(ws, WSCloseCode.POLICY_VIOLATION, message)

    async def _refuse_for_now(
        self, ws: web.WebSocketResponse, message: str, remote: str | None, hostname: str
    ) -> None:
        """ERROR ``forbidden``: logged as a warning when it is new or changed for this node, at info while
        the node keeps retrying into the same refusal (every few seconds until it is allowed)."""
        again = self._refusals.get(hostname) == message
        if not again:
            if len(self._refusals) >= _MAX_REFUSALS:
                self._refusals.clear()
            self._refusals[hostname] = message
        await self._reject(ws, FORBIDDEN, message, quiet=again, remote=remote, hostname=hostname)

    async def _handshake(self, ws: web.WebSocketResponse, request: web.Request) -> _Session | None:
        s = self.settings
        remote = request.remote
        try:
            async with asyncio.timeout(s.hello_timeout_seconds):
                msg = await ws.receive()
        except TimeoutError:
            await self._reject(ws, "timeout", "no HELLO within the hello timeout", remote=remote)
            return None
        if msg.type != WSMsgType.BINARY:
            await self._close_ws(ws, WSCloseCode.PROTOCOL_ERROR, "expected HELLO")
            return None
        try:
            received = frames.decode_message(msg.data, s.max_frame_bytes, s.max_control_frame_bytes)
            if len(received) != 1 or received[0].type is not FrameType.HELLO:
                raise ProtocolError("the first message must be exactly one HELLO frame")
            body = received[0].json()
            hostname, labels, endpoints = _hello_fields(body, s)
            limits = _Limits.announced(body, s)
        except ProtocolError as exc:
            await self._reject(ws, "invalid", str(exc), remote=remote)
            return None
        key = body.get("key")
        if not isinstance(key, str) or not key:
            await self._reject(ws, "unauthorized", NO_AUTH_KEY, remote=remote, hostname=hostname)
            return None
        try:
            async with asyncio.timeout(s.authenticate_timeout_seconds):
                identity = await self._authenticate(key)
        except AuthenticationError as exc:
            await self._reject(ws, "unauthorized", str(exc), remote=remote, hostname=hostname)
            return None
        except RegistrationForbidden as exc:
            await self._refuse_for_now(ws, str(exc), remote, hostname)
            return None
        except Exception:
            # Not the node's fault (the platform's API is down, say): it retries with backoff.
            log.exception("mesh authentication failed", remote=remote)
            await self._reject(
                ws, "unavailable", "cannot verify the access key now; retry later", remote=remote
            )
            return None
        self._refusals.pop(hostname, None)
        if self._closing or ws.closed:
            return None
        resume = body.get("resume")
        refusal = self._admit(identity, hostname, resume if isinstance(resume, str) else "")
        if refusal is not None:
            code, message = refusal
            await self._reject(ws, code, message, remote=remote, hostname=hostname, identity=identity.name)
            return None
        instance = body.get("instance")
        instance = instance if isinstance(instance, str) and INSTANCE.fullmatch(instance) else ""
        return self._register(ws, identity, hostname, labels, endpoints, remote, limits, instance)

    def _admit(self, identity: NodeIdentity, hostname: str, resume: str) -> tuple[str, str] | None:
        """Whether this registration may proceed: (code, message) when it may not (the node retries).

        A node that already has a live session keeps it: a second registration for the same node is
        refused until the first ends, unless it presents the first session's resume secret (the same
        process reconnecting over a new path after it noticed the old one die). Taking over silently would
        let any holder of the key intercept the traffic meant for the node. A new node of an identity
        that is at ``max_nodes_per_identity`` replaces that identity's longest-offline node; when they are
        all online it is refused.
        """
        s = self.settings
        node_id = node_id_for(identity.name, hostname)
        record = self._records.get(node_id)
        if record is not None:
            if record.session is None or (resume and hmac.compare_digest(resume, record.resume)):
                return None
            return (
                "conflict",
                f'node "{hostname}" of {identity.name} already has a live session; a second session is '
                f"refused until the first ends (or is silent for {s.offline_timeout_seconds:g}s)",
            )
        known = self._by_identity.get(identity.name, set())
        if len(known) < s.max_nodes_per_identity:
            return None
        offline = [self._records[n] for n in known if self._records[n].session is None]
        if not offline:
            return (
                "limit",
                f"{identity.name} already has {len(known)} nodes online; at most "
                f"{s.max_nodes_per_identity} nodes per identity",
            )
        oldest = min(offline, key=lambda r: r.offline_since)
        log.info("mesh node forgotten to make room for a new node of its identity", node=oldest.id)
        self._forget(oldest)
        return None

    def _forget(self, record: _Record) -> None:
        del self._records[record.id]
        known = self._by_identity.get(record.identity)
        if known is not None:
            known.discard(record.id)
            if not known:
                del self._by_identity[record.identity]
        self._notify("removed", record)

    def _register(
        self,
        ws: web.WebSocketResponse,
        identity: NodeIdentity,
        hostname: str,
        labels: dict[str, str],
        endpoints: tuple[str, ...],
        remote: str | None,
        limits: _Limits,
        instance: str = "",
    ) -> _Session:
        node_id = node_id_for(identity.name, hostname)
        now, wall = self._clock(), self._wall()
        record = self._records.get(node_id)
        if record is None:
            record = _Record(node_id, hostname, identity, self.instance_id)
            self._records[node_id] = record
            self._by_identity.setdefault(identity.name, set()).add(node_id)
        previous = record.session
        if previous is not None:
            # Only with the resume secret (``_admit``): the old session is a path the node gave up on.
            log.warning("mesh node resumed on a new session; closing its older one", node=node_id)
            self._unregister(previous, "replaced by a newer session", notify=False)
            self._spawn(
                self._close_ws(previous.ws, WSCloseCode.POLICY_VIOLATION, "replaced by a newer session")
            )
        record.identity = identity.name
        record.kind = identity.kind
        record.labels = MappingProxyType({**labels, **identity.labels})
        record.endpoints = endpoints
        record.instance = instance
        record.coordinator_id = self.instance_id
        record.last_seen = wall
        record.connected_at = wall
        record.resume = secrets.token_urlsafe(32)
        session = _Session(
            ws, record, now, 4 * self.settings.max_frame_bytes, limits, self.settings.max_session_queue_bytes
        )
        record.session = session
        record.changed()
        self._sessions.add(session)
        self._index(session)
        session.send(
            frames.encode(
                frames.control(
                    FrameType.REGISTERED,
                    {
                        "node_id": node_id,
                        "coordinator_id": self.instance_id,
                        "version": frames.PROTOCOL_VERSION,
                        "resume": record.resume,
                    },
                )
            )
        )
        log.info(
            "mesh node online",
            node=node_id,
            name=hostname,
            identity=identity.name,
            endpoints=list(endpoints),
            remote=remote,
        )
        self._notify("online", record)
        self._schedule_netmaps()
        return session

    def _unregister(self, session: _Session, reason: str, *, notify: bool = True) -> None:
        if session.closed:
            return
        session.closed = True
        session.priority.clear()
        session.ordered.clear()
        session.netmap.clear()
        session.wake.set()
        self._sessions.discard(session)
        self._route(self._relay.drop(session, "peer session closed"))
        self._unindex(session)
        record = session.record
        if record.session is session:
            record.session = None
            record.last_seen = self._wall()
            record.offline_since = self._clock()
            record.changed()
            log.info("mesh node offline", node=record.id, reason=reason)
            if notify:
                self._notify("offline", record)
            self._schedule_netmaps()

    # -- serving a session --------------------------------------------------------------------------

    async def _serve(self, session: _Session) -> None:
        s = self.settings
        ws = session.ws
        record = session.record
        heartbeat = False
        while True:
            msg = await ws.receive()
            if msg.type != WSMsgType.BINARY:
                if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                    return
                raise ProtocolError(f"unexpected {msg.type.name} message")
            if session.closed:
                return
            session.last_heard = self._clock()
            record.last_seen = self._wall()
            for frame in frames.decode_message(msg.data, s.max_frame_bytes, s.max_control_frame_bytes):
                if self.verbose:
                    log.info(
                        "mesh frame",
                        node=record.id,
                        type=frame.type.name,
                        stream=frame.stream_id,
                        bytes=len(frame.payload),
                    )
                if frame.type is FrameType.HEARTBEAT:
                    heartbeat = True
                else:
                    self._dispatch(session, frame)
            if heartbeat:
                heartbeat = False
                await session.answer_heartbeat()

    def _dispatch(self, session: _Session, frame: Frame) -> None:
        ftype = frame.type
        if ftype is FrameType.HEARTBEAT:
            session.pong = True
            session.wake.set()
        elif ftype is FrameType.OPEN:
            self._open(session, frame)
        elif ftype is FrameType.ENDPOINTS:
            _, _, endpoints = _hello_fields(
                {**frame.json(), "hostname": session.record.name, "labels": {}}, self.settings
            )
            record = session.record
            if endpoints != record.endpoints:
                record.endpoints = endpoints
                record.changed()
                self._changed(record)
                log.info("mesh node endpoints changed", node=record.id, endpoints=list(endpoints))
                self._notify("updated", record)
                self._schedule_netmaps()
        elif ftype in frames.SESSION_FRAMES:
            raise ProtocolError(f"unexpected {ftype.name} from a node")
        else:
            self._route(self._relay.receive(session, frame))

    def _open(self, session: _Session, frame: Frame) -> None:
        body = frame.json()
        target = body.get("target")
        window = body.get("window")
        if not isinstance(window, int) or isinstance(window, bool) or not 0 <= window <= frames.MAX_WINDOW:
            raise ProtocolError("OPEN without a valid window")
        if frame.stream_id % 2 == 0:
            raise ProtocolError(f"OPEN with even stream id {frame.stream_id}; nodes use odd ids")
        record = self._records.get(target) if isinstance(target, str) else None
        # Unknown and not-visible look the same to the opener: the policy is not to be probed.
        if record is None or session.peers_sent is None or target not in session.peers_sent:
            routes = Relay.refuse(session, frame.stream_id, f"unknown peer {target}")
        elif record.session is None:
            routes = Relay.refuse(session, frame.stream_id, f"peer {target} is offline")
        else:
            source = session.record
            announce = {
                "source": source.id,
                "peer": {
                    "name": source.name,
                    "identity": source.identity,
                    "kind": source.kind,
                    "labels": dict(source.labels),
                },
            }
            routes = self._relay.open(session, frame.stream_id, window, record.session, announce)
            if self.verbose:
                log.info("mesh relay open", source=source.id, target=target, stream=frame.stream_id)
        self._route(routes)

    def _route(self, routes: list[frames.Route]) -> None:
        for target, raw in routes:
            target.send(raw)

    def _writer_done(self, task: asyncio.Task[None], session: _Session) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and not session.closed:
            # The node cannot be written to: treat it as gone, and let the handler's read end.
            log.info("mesh session write failed", node=session.record.id, error=repr(exc))
            self._unregister(session, "write failed")
            self._spawn(self._close_ws(session.ws, WSCloseCode.GOING_AWAY, "write failed"))

    # -- netmaps ------------------------------------------------------------------------------------

    def _changed(self, record: _Record, groups: frozenset[str] = frozenset()) -> None:
        """``record`` joined, left or changed: the sessions that see one of its groups get a netmap."""
        if self._groups is not None:
            self._dirty[record.id] = (
                self._dirty.get(record.id, frozenset()) | record.groups.member_of | groups
            )

    def _index(self, session: _Session) -> None:
        """A session registered: file it (and its node) under its groups."""
        if self._groups is None:
            return
        record = session.record
        before = record.groups.member_of
        try:
            record.groups = self._groups(record.info())
        except Exception:
            log.exception("mesh visibility policy failed", node=record.id)
            record.groups = NO_GROUPS
        for group in record.groups.member_of:
            self._members.setdefault(group, {})[record.id] = record
        for group in record.groups.sees:
            self._viewers.setdefault(group, {})[session] = None
        self._fresh[session] = None
        self._changed(record, before)

    def _unindex(self, session: _Session) -> None:
        if self._groups is None:
            return
        record = session.record
        self._fresh.pop(session, None)
        for group in record.groups.sees:
            viewers = self._viewers.get(group)
            if viewers is not None:
                viewers.pop(session, None)
                if not viewers:
                    del self._viewers[group]
        if record.session is session:
            for group in record.groups.member_of:
                members = self._members.get(group)
                if members is not None:
                    members.pop(record.id, None)
                    if not members:
                        del self._members[group]
            self._changed(record)

    def _schedule_netmaps(self) -> None:
        if self._netmap_pending or self._closing:
            return
        self._netmap_pending = True
        loop = asyncio.get_running_loop()
        delay = self.settings.netmap_coalesce_seconds
        if delay > 0:
            loop.call_later(delay, self._push_netmaps)
        else:
            loop.call_soon(self._push_netmaps)

    def _push_netmaps(self) -> None:
        """Send each online node what changed in its peer list.

        The first netmap of a session is complete; later ones carry only ``upsert`` and ``remove`` (as
        Tailscale's incremental map responses do), so a join costs each subscriber one entry rather than
        the whole list. A node whose previous netmap is still unsent gets a complete one instead, which
        replaces it: netmaps never pile up behind a slow reader.

        A node gets at most as many peers as it accepts (``omitted`` says how many it did not get), in
        pages that each fit its largest control frame (``vplane.mesh.netmap``).

        With a ``GroupVisibility`` policy only the sessions that see a changed node's group are visited;
        with any other policy every online session's peers are computed again.
        """
        self._netmap_pending = False
        if self._groups is None:
            pushed, nodes = self._push_every_netmap()
        else:
            if self._recompute:
                # The policy's inputs changed: every session is filed again, and gets its whole list.
                self._recompute = False
                for session in list(self._sessions):
                    self._unindex(session)
                    self._index(session)
            pushed, nodes = self._push_changed_netmaps()
        if self.verbose:
            log.info("mesh netmaps pushed", nodes=nodes, pushed=pushed)

    def _push_every_netmap(self) -> tuple[int, int]:
        online = [r for r in self._records.values() if r.session is not None]
        infos = [r.info() for r in online]
        by_id = {r.id: r for r in online}
        pushed = 0
        for record, info in zip(online, infos, strict=True):
            session = record.session
            assert session is not None
            try:
                visible = self._policy(info, infos)
                everyone = {v.id: by_id[v.id].wire() for v in visible if v.id != info.id and v.id in by_id}
            except Exception:
                log.exception("mesh visibility policy failed", node=info.id)
                continue
            pushed += self._deliver(session, everyone)
        return pushed, len(online)

    def _visible_by_group(self, session: _Session) -> dict[str, bytes]:
        own = session.record.id
        everyone: dict[str, bytes] = {}
        for group in session.record.groups.sees:
            for peer_id, record in self._members.get(group, {}).items():
                if peer_id != own and peer_id not in everyone:
                    everyone[peer_id] = record.wire()
        return everyone

    def _push_changed_netmaps(self) -> tuple[int, int]:
        dirty, self._dirty = self._dirty, {}
        fresh, self._fresh = self._fresh, {}
        affected: dict[_Session, list[str]] = {}
        for node_id, groups in dirty.items():
            for group in groups:
                for viewer in self._viewers.get(group, ()):
                    if viewer not in fresh:
                        affected.setdefault(viewer, []).append(node_id)
        pushed = 0
        for session in fresh:
            if not session.closed:
                pushed += self._deliver(session, self._visible_by_group(session))
        for session, node_ids in affected.items():
            if session.closed or session.peers_sent is None:
                continue
            old = session.peers_sent
            own = session.record.id
            sees = session.record.groups.sees
            upserts: dict[str, bytes] = {}
            removes: list[str] = []
            for node_id in dict.fromkeys(node_ids):
                if node_id == own:
                    continue
                record = self._records.get(node_id)
                if (
                    record is not None
                    and record.session is not None
                    and not sees.isdisjoint(record.groups.member_of)
                ):
                    wire = record.wire()
                    if old.get(node_id) != wire:
                        upserts[node_id] = wire
                elif node_id in old:
                    removes.append(node_id)
            if not upserts and not removes:
                continue
            added = sum(1 for node_id in upserts if node_id not in old)
            if session.omitted_sent or len(old) + added - len(removes) > session.limits.max_netmap_peers:
                # At or over the node's peer cap: which peers it keeps is decided on the whole list.
                pushed += self._deliver(session, self._visible_by_group(session))
            else:
                pushed += self._deliver_changes(session, upserts, removes)
        return pushed, len(self._sessions)

    def _deliver(self, session: _Session, everyone: dict[str, bytes]) -> int:
        """Queue the netmap that brings ``session`` from what it was sent to ``everyone`` (its visible peers,
        in policy order); 1 if one was queued."""
        info = session.record
        old = session.peers_sent
        new, omitted = netmap.cap_peers(everyone, old, session.limits.max_netmap_peers)
        upserts: dict[str, bytes] = {}
        removes: list[str] = []
        if old is not None:
            upserts = {peer_id: wire for peer_id, wire in new.items() if old.get(peer_id) != wire}
            removes = [peer_id for peer_id in old if peer_id not in new]
            if not upserts and not removes and omitted == session.omitted_sent:
                return 0
        complete = old is None or bool(session.netmap) or len(upserts) + len(removes) > len(new)
        self._send(session, new, upserts, removes, omitted, complete)
        if omitted and omitted != session.omitted_sent:
            log.warning(
                "mesh netmap capped at the node's peer limit",
                node=info.id,
                limit=session.limits.max_netmap_peers,
                omitted=omitted,
            )
        session.omitted_sent = omitted
        return 1

    def _deliver_changes(self, session: _Session, upserts: dict[str, bytes], removes: list[str]) -> int:
        """The same for a change known entry by entry, the node below its cap: no pass over its peers."""
        new = session.peers_sent
        assert new is not None
        for peer_id in removes:
            del new[peer_id]
        new.update(upserts)
        complete = bool(session.netmap) or len(upserts) + len(removes) > len(new)
        self._send(session, new, upserts, removes, 0, complete)
        return 1

    def _send(
        self,
        session: _Session,
        new: dict[str, bytes],
        upserts: dict[str, bytes],
        removes: list[str],
        omitted: int,
        complete: bool,
    ) -> None:
        session.netmap_seq += 1
        pages = netmap.paginate(
            session.netmap_seq,
            complete=complete,
            entries=new if complete else upserts,
            removes=() if complete else removes,
            omitted=omitted,
            budget=session.limits.max_control_frame_bytes,
        )
        if pages.dropped and not complete:
            # The node may hold an older version of a peer left out now: replace its map whole.
            pages = netmap.paginate(
                session.netmap_seq,
                complete=True,
                entries=new,
                omitted=omitted,
                budget=session.limits.max_control_frame_bytes,
            )
        for peer_id in pages.dropped:
            log.warning(
                "mesh peer entry larger than a node's netmap page; left out",
                node=session.record.id,
                peer=peer_id,
            )
            new.pop(peer_id, None)
        session.peers_sent = new
        session.send_netmap([frames.encode_parts(FrameType.NETMAP, 0, p) for p in pages.payloads])

    # -- housekeeping -------------------------------------------------------------------------------

    async def _sweep(self) -> None:
        s = self.settings
        period = max(0.01, s.offline_timeout_seconds / 4)
        while True:
            await asyncio.sleep(period)
            now = self._clock()
            for session in list(self._sessions):
                silent = now - session.last_heard
                if silent > s.offline_timeout_seconds:
                    log.warning(
                        "mesh node silent past the offline timeout; closing its session",
                        node=session.record.id,
                        silent=round(silent, 3),
                    )
                    self._unregister(session, "heartbeat timeout")
                    self._spawn(self._close_ws(session.ws, WSCloseCode.GOING_AWAY, "heartbeat timeout"))
            for node_id, record in list(self._records.items()):
                if record.session is None and now - record.offline_since > s.gc_after_seconds:
                    log.info("mesh node forgotten after being offline", node=node_id)
                    self._forget(record)

    def _notify(self, change: Literal["online", "updated", "offline", "removed"], record: _Record) -> None:
        if self._on_change is None:
            return
        try:
            result = self._on_change(NodeChange(change, record.info()))
        except Exception:
            log.exception("mesh on_change callback failed", node=record.id)
            return
        if inspect.isawaitable(result):
            self._spawn(result)

    def _spawn(self, awaitable: Awaitable[Any]) -> None:
        async def run() -> None:
            try:
                await awaitable
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("mesh coordinator background task failed")

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _close_ws(self, ws: web.WebSocketResponse, code: int, message: str) -> None:
        if ws.closed:
            return
        with contextlib.suppress(Exception):
            await ws.close(code=code, message=message.encode()[:120])


@dataclass(frozen=True, slots=True)
class _Limits:
    """What a node accepts, from its HELLO (a node that announces nothing gets the coordinator's own
    limits, which is what every node accepted before nodes announced them); never above our own."""

    max_frame_bytes: int
    max_control_frame_bytes: int
    max_netmap_peers: int

    @property
    def max_message_bytes(self) -> int:
        """The node's largest WebSocket message (``MeshSettings.max_message_bytes`` for its limits)."""
        return 4 * (self.max_frame_bytes + 16) + self.max_control_frame_bytes + 64

    @classmethod
    def announced(cls, body: Mapping[str, Any], settings: MeshSettings) -> _Limits:
        def value(key: str, own: int, floor: int) -> int:
            raw = body.get(key, own)
            if not isinstance(raw, int) or isinstance(raw, bool) or raw < floor:
                raise ProtocolError(f"{key} must be an integer of at least {floor}")
            return min(raw, own)

        return cls(
            value("max_frame_bytes", settings.max_frame_bytes, MIN_ANNOUNCED_FRAME),
            value("max_control_frame_bytes", settings.max_control_frame_bytes, MIN_ANNOUNCED_CONTROL),
            value("max_netmap_peers", settings.max_netmap_peers, 0),
        )


def label_errors(labels: Mapping[str, str], max_labels: int) -> list[str]:
    """Kubernetes' label rules, a count limit, and the reserved prefixes (``RESERVED_LABEL_DOMAINS``)."""
    if len(labels) > max_labels:
        return [f"too many labels: {len(labels)} (at most {max_labels})"]
    problems: list[str] = []
    for key, value in labels.items():
        problems += [f"invalid label key {key!r}: {msg}" for msg in validation.qualified_name(key)]
        problems += [f"invalid value for label {key!r}: {msg}" for msg in validation.label_value(value)]
        prefix = key.partition("/")[0] if "/" in key else ""
        if any(prefix == d or prefix.endswith("." + d) for d in RESERVED_LABEL_DOMAINS):
            problems.append(
                f"label {key!r} is reserved: keys under "
                + ", ".join(f"{d}/" for d in RESERVED_LABEL_DOMAINS)
                + " are set by the platform only"
            )
    return problems


INSTANCE = re.compile(r"[A-Za-z0-9-]{1,64}")


def _hello_fields(
    body: Mapping[str, Any], settings: MeshSettings
) -> tuple[str, dict[str, str], tuple[str, ...]]:
    hostname = body.get("hostname")
    if not isinstance(hostname, str) or not hostname or len(hostname) > 253:
        raise ProtocolError("HELLO without a valid hostname")
    raw_labels = body.get("labels", {})
    if not isinstance(raw_labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw_labels.items()
    ):
        raise ProtocolError("labels must map strings to strings")
    problems = label_errors(raw_labels, settings.max_node_labels)
    if problems:
        raise ProtocolError("; ".join(problems[:5]))
    raw_endpoints = body.get("endpoints", [])
    if not isinstance(raw_endpoints, list) or not all(isinstance(e, str) for e in raw_endpoints):
        raise ProtocolError("endpoints must be a list of host:port strings")
    if len(raw_endpoints) > settings.max_node_endpoints:
        raise ProtocolError(
            f"too many endpoints: {len(raw_endpoints)} (at most {settings.max_node_endpoints})"
        )
    for endpoint in raw_endpoints:
        if len(endpoint) > MAX_ENDPOINT_LENGTH:
            raise ProtocolError(f"endpoint longer than {MAX_ENDPOINT_LENGTH} characters")
        try:
            split_endpoint(endpoint)
        except ValueError as exc:
            raise ProtocolError(str(exc)) from None
    return hostname, dict(raw_labels), tuple(raw_endpoints)

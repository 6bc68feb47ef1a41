"""HTTP/1.1 serving that slow, idle and vanished clients cannot exhaust.

aiohttp's low-level server bounds none of this by itself: its only timer is the keep-alive one (armed
once when a connection opens, then after each response), so a client that trickles header bytes, or a
body, or that stops reading a response, holds its connection and everything buffered for it; and the
listener accepts without limit until the process runs out of descriptors.

**Mechanism.** :class:`GuardedRequestHandler` subclasses aiohttp's ``RequestHandler`` (the asyncio
protocol of one connection). It sees every byte received (``data_received``), each request start (the
server's request factory) and end (the handler returning), and asyncio's flow-control callbacks
(``pause_reading``/``resume_reading`` when the server is not taking the body, ``pause_writing``/
``resume_writing`` when the client is not taking the response). It feeds these to the pure
:class:`ConnectionDeadlines` and keeps one timer per connection, armed lazily at the earliest deadline: a
deadline that moves later is noticed when the timer fires, so a keep-alive request costs no timer work.
When a deadline passes the transport is *aborted*: ``close()`` would first wait for a client that reads
nothing to take what is buffered for it.

- **Request headers** (``header_timeout``, kube-apiserver's ``ReadHeaderTimeout`` of 32 s) run from the
  connection's start and, on a kept-alive connection, from the first byte of the next request; the TLS
  handshake gets the same bound (Go's ``tlsHandshakeTimeout`` is the read-header timeout). An idle
  kept-alive connection is not under it (aiohttp's keep-alive timer closes those), nor is a request
  whose headers have arrived (a watch streams for as long as it likes).
- **Request bodies** must keep arriving at ``body_min_rate`` bytes/s on average once ``body_grace``
  has passed (Apache ``mod_reqtimeout``'s rule); time during which the server itself stopped reading
  (its buffer is full until the handler consumes it) does not count against the client.
- **Responses**: a client that takes no bytes for ``send_timeout`` while the server has more than the
  transport's buffer for it is dropped (nginx's ``send_timeout``), so an unread response is never held
  in memory for longer than that.
- **Connections** are counted from ``accept()`` by :class:`GuardedSite` against :class:`ConnectionSlots`,
  so connections still in their TLS handshake count too (they hold descriptors just the same); over the
  limit a connection is reset at once rather than left in the backlog.

:func:`on_connection_lost` lets a long-running handler (a watch, a relay) end the moment its client goes,
instead of at its next write.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import resource
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = structlog.get_logger("vplane.http")

INF = math.inf

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
RequestFactory = Callable[[Any, Any, Any, Any, Any], web.BaseRequest]

HEADER_TIMEOUT = "request header timeout"
BODY_TOO_SLOW = "request body too slow"
SEND_TIMEOUT = "response not read"


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout: float
    """Seconds to receive a request's headers (and a connection's TLS handshake)."""
    body_grace: float
    """Seconds a request body may take before the minimum rate applies."""
    body_min_rate: float
    """Bytes per second a request body must average after the grace period (0: no minimum)."""
    send_timeout: float
    """Seconds a client may take no response bytes while the server waits to send more (0: forever)."""


class ConnectionDeadlines:
    """Which deadline one connection is under, and whether it has passed (pure; times are the caller's)."""

    __slots__ = (
        "limits",
        "header_until",
        "in_body",
        "body_since",
        "body_bytes",
        "read_paused_at",
        "send_until",
    )

    def __init__(self, limits: ConnectionLimits, now: float) -> None:
        self.limits = limits
        self.header_until = now + limits.header_timeout
        """The first request's headers are due from the start, as Go's server does."""
        self.in_body = False
        self.body_since = 0.0
        self.body_bytes = 0
        self.read_paused_at: float | None = None
        self.send_until = INF

    # -- events --------------------------------------------------------------------------------------

    def request_bytes(self, now: float) -> bool:
        """Bytes arrived while no request is being handled: a request has begun. True if that starts
        the header deadline (a trickled request keeps the deadline of its first byte)."""
        if self.header_until != INF:
            return False
        self.header_until = now + self.limits.header_timeout
        return True

    def request_started(self, now: float, has_body: bool) -> None:
        """A request's headers are complete and its handler runs; its body, if any, is now timed."""
        self.header_until = INF
        if has_body and self.limits.body_min_rate > 0:
            self.in_body = True
            self.body_since = now
            self.body_bytes = 0
            self.read_paused_at = None

    def body_received(self, count: int) -> None:
        self.body_bytes += count

    def body_done(self) -> None:
        self.in_body = False

    def reading_paused(self, now: float) -> None:
        """The server stopped reading (its buffer is full); the client cannot send meanwhile."""
        if self.read_paused_at is None:
            self.read_paused_at = now

    def reading_resumed(self, now: float) -> None:
        if self.read_paused_at is not None:
            self.body_since += now - self.read_paused_at
            self.read_paused_at = None

    def writing_paused(self, now: float) -> None:
        """The transport's buffer for the client is full: the client has to take bytes to go on."""
        if self.limits.send_timeout > 0 and self.send_until == INF:
            self.send_until = now + self.limits.send_timeout

    def writing_resumed(self) -> None:
        self.send_until = INF

    # -- decisions -----------------------------------------------------------------------------------

    def body_until(self) -> float:
        if not self.in_body or self.read_paused_at is not None:
            return INF
        limits = self.limits
        return self.body_since + limits.body_grace + self.body_bytes / limits.body_min_rate

    def next_deadline(self) -> float:
        return min(self.header_until, self.body_until(), self.send_until)

    def expired(self, now: float) -> str | None:
        """Why the connection must be dropped now, or None."""
        if now >= self.header_until:
            return HEADER_TIMEOUT
        if now >= self.body_until():
            return BODY_TOO_SLOW
        if now >= self.send_until:
            return SEND_TIMEOUT
        return None


class GuardedRequestHandler(RequestHandler):
    """aiohttp's connection protocol with the deadlines above and connection-lost callbacks."""

    __slots__ = ("_limits", "_deadlines", "_timer", "_timer_at", "_busy", "_payload", "_lost_callbacks")

    def __init__(self, manager: web.Server, *, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._limits = limits
        self._deadlines: ConnectionDeadlines | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = INF
        self._busy = False
        self._payload: Any = None
        """The request body still arriving (aiohttp's StreamReader), or None."""
        self._lost_callbacks: list[Callable[[], None]] | None = []

    # -- asyncio protocol ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._deadlines = ConnectionDeadlines(self._limits, self._loop.time())
        self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._payload = None
        super().connection_lost(exc)
        callbacks, self._lost_callbacks = self._lost_callbacks, None
        for callback in callbacks or ():
            try:
                callback()
            except Exception:
                log.exception("connection-lost callback failed")

    def data_received(self, data: bytes) -> None:
        # The hot path: kept to attribute checks (a keep-alive request costs one clock read here).
        deadlines = self._deadlines
        payload = self._payload
        if payload is not None:
            deadlines.body_received(len(data))  # type: ignore[union-attr]
        elif not self._busy and data and deadlines is not None and deadlines.header_until == INF:
            deadlines.request_bytes(self._loop.time())
            if deadlines.header_until < self._timer_at:
                self._arm()
        super().data_received(data)
        if payload is not None and payload.is_eof():
            self._payload = None
            deadlines.body_done()  # type: ignore[union-attr]

    def pause_reading(self) -> None:
        super().pause_reading()
        if self._deadlines is not None:
            self._deadlines.reading_paused(self._loop.time())

    def resume_reading(self, resume_parser: bool = True) -> None:
        if self._deadlines is not None:
            self._deadlines.reading_resumed(self._loop.time())
            self._arm()
        super().resume_reading(resume_parser)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._deadlines is not None:
            self._deadlines.writing_paused(self._loop.time())
            self._arm()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._deadlines is not None:
            self._deadlines.writing_resumed()

    # -- requests (called by GuardedServer) ----------------------------------------------------------

    def request_started(self, payload: Any) -> None:
        self._busy = True
        deadlines = self._deadlines
        if deadlines is None:
            return
        if payload.is_eof():  # no body, or all of it came with the headers
            deadlines.header_until = INF
            return
        deadlines.request_started(self._loop.time(), True)
        if deadlines.in_body:
            self._payload = payload
            self._arm()

    def request_finished(self) -> None:
        """The handler returned: a body it did not read is aiohttp's to drain (for ``lingering_time``)."""
        self._busy = False
        if self._payload is not None:
            self._payload = None
            if self._deadlines is not None:
                self._deadlines.body_done()

    def add_lost_callback(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` once when the connection goes (at once if it has); returns an unsubscribe."""
        callbacks = self._lost_callbacks
        if callbacks is None or self.transport is None:
            callback()
            return _nothing
        callbacks.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                callbacks.remove(callback)

        return unsubscribe

    # -- the timer -----------------------------------------------------------------------------------

    def _arm(self) -> None:
        deadlines = self._deadlines
        if deadlines is None:
            return
        when = deadlines.next_deadline()
        if when >= self._timer_at:
            return  # the pending timer fires first and re-arms for whatever is due then
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = INF
        deadlines = self._deadlines
        if deadlines is None or self.transport is None:
            return
        payload = self._payload
        if payload is not None and payload.is_eof():
            self._payload = None
            deadlines.body_done()
        reason = deadlines.expired(self._loop.time())
        if reason is None:
            self._arm()
            return
        peer = self.transport.get_extra_info("peername")
        log.debug("dropping connection", reason=reason, peer=str(peer))
        abort(self.transport)


def _nothing() -> None:
    return None


def abort(transport: asyncio.BaseTransport | None) -> None:
    """Drop a connection without flushing what is buffered for it (a stuck client never takes it)."""
    if transport is None:
        return
    try:
        transport.abort()  # type: ignore[attr-defined]
    except (AttributeError, NotImplementedError):
        transport.close()


def on_connection_lost(request: web.BaseRequest, callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` when the request's client connection goes; returns an unsubscribe.

    Works on connections served by :class:`GuardedServer`; elsewhere nothing is watched and the caller
    notices the loss at its next write, as before."""
    protocol = request.protocol
    if isinstance(protocol, GuardedRequestHandler):
        return protocol.add_lost_callback(callback)
    return _nothing


class GuardedServer(web.Server):
    """aiohttp's low-level server whose connections are :class:`GuardedRequestHandler`\\ s."""

    def __init__(
        self,
        handler: Handler,
        *,
        limits: ConnectionLimits,
        request_factory: RequestFactory | None = None,
        **kwargs: Any,
    ) -> None:
        async def guarded(request: web.BaseRequest) -> web.StreamResponse:
            try:
                return await handler(request)
            finally:
                protocol = request.protocol
                if isinstance(protocol, GuardedRequestHandler):
                    protocol.request_finished()

        super().__init__(guarded, request_factory=request_factory, **kwargs)
        self._limits = limits
        inner = self.request_factory

        def factory(message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> web.BaseRequest:
            if isinstance(protocol, GuardedRequestHandler):
                protocol.request_started(payload)
            return inner(message, payload, protocol, writer, task)

        self.request_factory = factory

    def __call__(self) -> GuardedRequestHandler:
        return GuardedRequestHandler(self, loop=self._loop, limits=self._limits, **self._kwargs)


# -- connection limit ------------------------------------------------------------------------------------


class ConnectionSlots:
    """How many connections are open against a limit (pure)."""

    __slots__ = ("limit", "open", "refused")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.refused = 0

    def acquire(self) -> bool:
        if self.open >= self.limit:
            self.refused += 1
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1


class GuardedSite(web.BaseSite):
    """A TLS site whose connections are counted against :class:`ConnectionSlots` from accept on, and
    whose TLS handshakes are under the header deadline (Go bounds the handshake by ``ReadHeaderTimeout``).

    It accepts itself (``loop.sock_accept``) and hands each connection to the loop with
    ``loop.connect_accepted_socket``, which returns once the handshake is done or raises when it fails:
    so a slot is taken for every descriptor, handshakes in progress included, and given back exactly once,
    whether the handshake fails or the served connection ends later. (A protocol factory alone cannot do
    this: the loop never tells the HTTP protocol about a handshake that failed.) Over the limit a
    connection is reset at once rather than left in the backlog."""

    __slots__ = (
        "_host",
        "_port",
        "slots",
        "ssl_context",
        "handshake_timeout",
        "_listeners",
        "_tasks",
        "_warned_at",
    )

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext,
        handshake_timeout: float,
        slots: ConnectionSlots,
        backlog: int = 1024,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host, self._port = host, port
        self.slots = slots
        self.ssl_context = ssl_context
        self.handshake_timeout = handshake_timeout
        self._listeners: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._warned_at = -INF

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port (the one asked for, unless that was 0)."""
        return int(self._listeners[0].getsockname()[1]) if self._listeners else self._port

    async def start(self) -> None:
        await super().start()
        self._listeners = _listen(self._host, self._port, self._backlog)
        for listener in self._listeners:
            self._spawn(self._accept(listener))

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for listener in self._listeners:
            listener.close()
        await super().stop()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:  # out of descriptors or memory: let some go before trying again
                log.warning("accept failed", error=str(exc))
                await asyncio.sleep(0.1)
                continue
            if not self.slots.acquire():
                _reset(conn)
                self._refused()
                continue
            self._spawn(self._serve(conn))

    async def _serve(self, conn: socket.socket) -> None:
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.slots.release()

        server = self._runner.server
        assert isinstance(server, GuardedServer)
        made: list[GuardedRequestHandler] = []

        def factory() -> GuardedRequestHandler:
            made.append(server())
            return made[-1]

        try:
            # (uvloop returns its TLS protocol here, not ours: ours is taken from the factory)
            await asyncio.get_running_loop().connect_accepted_socket(
                factory, conn, ssl=self.ssl_context, ssl_handshake_timeout=self.handshake_timeout
            )
        except BaseException as exc:
            conn.close()  # the loop closed its transport already; this covers failures before it had one
            release()
            if isinstance(exc, asyncio.CancelledError):
                raise
            log.debug("TLS handshake failed", error=str(exc) or type(exc).__name__)
            return
        made[0].add_lost_callback(release)

    def _refused(self) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._warned_at >= 10.0:
            self._warned_at = now
            log.warning(
                "connection refused: too many open connections",
                limit=self.slots.limit,
                refused_total=self.slots.refused,
            )


def _reset(conn: socket.socket) -> None:
    """Close with a reset: the client learns at once, and no TIME_WAIT is left here."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def _listen(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets on every address ``host`` resolves to, as ``loop.create_server`` would bind."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    listeners: list[socket.socket] = []
    seen: set[tuple[int, Any]] = set()
    try:
        for family, type_, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, type_, proto)
            listeners.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(listeners) > 1:  # the port the first address got, for every address
                address = (address[0], listeners[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for listener in listeners:
            listener.close()
        raise
    return listeners


def raise_open_file_limit() -> int:
    """Raise the soft descriptor limit to the hard one, as every Go program does since Go 1.19 (so
    kube-apiserver runs with it), and return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft

"""HTTP to the target's control-plane replicas over peer dials, with dial accounting.

The transport seam is one function, :data:`Dial`: connect a protocol to a peer by node id (the mesh's
``Dialer.dial_protocol`` in a tenant: direct TLS first, then the platform relay). This module speaks
HTTP/1.1 over it with aiohttp's response protocol and parser: keep-alive connections are reused per
tracked host and all of a host's connections are dropped when it is quarantined or leaves the peer list
(its next request then really dials, which is what the half-open trial must do).

Every attempted dial is bounded by the dial timeout and its outcome is reported to the peer cache; the
reason of a failed dial (``timeout``, ``canceled``, ``peer_departed``, ``ts_server_unavailable``,
``deadline``, ``error``) becomes the request's reason (spec §7).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.streams import StreamReader
from multidict import CIMultiDictProxy

from vplane.proxy.peers import Host, PeerCache, Selection

ProtocolFactory = Callable[[], ResponseHandler]


Dial = Callable[[str, ProtocolFactory], Awaitable[tuple[asyncio.BaseTransport, ResponseHandler]]]
"""Connect a protocol to a peer by node id: the transport seam (the mesh dialer in a tenant)."""


class TransportUnavailable(ConnectionError):
    """The local side of the platform network is down: no peer was contacted (``ts_server_unavailable``).
    The seam raises it (or a subclass) when it cannot even try."""


class PeerGone(ConnectionError):
    """The peer left the peer list while (or before) it was dialled (``peer_departed``)."""


class DialFailed(ConnectionError):
    """A dial failed; ``reason`` is the outcome label it carries."""

    def __init__(self, reason: str, host: Host, cause: BaseException | None) -> None:
        detail = f"{type(cause).__name__}: {cause}" if cause is not None else reason
        super().__init__(f"dial {host.name} ({host.peer_id}): {detail}")
        self.reason = reason
        self.host = host
        self.cause = cause


@dataclass
class DialObserver:
    """Where a dial's outcome goes: the peer cache's events and the dial metrics (set by the proxy)."""

    on_success: Callable[[Host, bool, float], None]
    on_failure: Callable[[Host, bool, str, float, BaseException | None], None]
    """(host, trial, reason, seconds, cause)."""


_selection: contextvars.ContextVar[Selection | None] = contextvars.ContextVar("proxy_selection", default=None)
_deadline: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("proxy_deadline", default=None)

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
"""Methods retried once on a fresh connection when a kept-alive one turns out closed (RFC 9112 §9.3.1)."""
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class UpstreamResponse:
    """The target's answer: status, headers and the body as a stream. Releasing it (``release``, ``read``
    or leaving ``async with``) hands the connection back for reuse once the body was read to its end;
    otherwise the connection is closed."""

    __slots__ = ("_release", "content", "headers", "status")

    def __init__(
        self,
        status: int,
        headers: CIMultiDictProxy[str],
        content: StreamReader,
        release: Callable[[], None] | None,
    ) -> None:
        self.status = status
        self.headers = headers
        self.content = content
        self._release = release

    @property
    def content_length(self) -> int | None:
        value = self.headers.get("Content-Length")
        return int(value) if value is not None and value.isdigit() else None

    async def read(self) -> bytes:
        try:
            if self.content.is_eof():  # all of it has arrived (a small answer): no waiting, no joining
                return self.content.read_nowait()
            return await self.content.read()
        finally:
            self.release()

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def __del__(self) -> None:
        # A response dropped unreleased (a path that forgot it) must not keep its connection and slot.
        if self._release is not None:
            with contextlib.suppress(RuntimeError):  # no running loop any more: nothing to hand back to
                self.release()

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class _Connections:
    """One host's connections: idle ones kept alive (newest last), busy ones, the optional cap."""

    __slots__ = ("busy", "closed", "idle", "slots")

    def __init__(self, limit: int) -> None:
        self.idle: list[tuple[ResponseHandler, float]] = []
        self.busy: set[ResponseHandler] = set()
        self.slots = asyncio.Semaphore(limit) if limit else None
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for protocol, _ in self.idle:
            protocol.close()
        for protocol in self.busy:
            protocol.close()
        self.idle.clear()
        self.busy.clear()


class HostPool:
    """HTTP/1.1 to each tracked host over connections the dial seam makes, kept alive per host; all of a
    host's connections are closed when it fails or leaves.

    The exchange is aiohttp's own response protocol and parser (``ResponseHandler``) driven directly:
    the request is written as one buffer and the response read from the protocol's queue. aiohttp's
    ``ClientSession`` costs about as much again per request (cookie jar, tracing, middleware, request
    and response objects), a quarter of a proxied GET's time in the client replica."""

    def __init__(
        self,
        cache: PeerCache,
        dial: Dial,
        observer: DialObserver,
        *,
        dial_timeout: Callable[[], float],
        clock: Callable[[], float] = time.monotonic,
        connections_per_host: int = 0,
        keepalive_timeout: float = 30.0,
        authority: str = "localhost",
    ) -> None:
        self._cache = cache
        self._dial = dial
        self._observer = observer
        self._dial_timeout = dial_timeout
        self._clock = clock
        self._limit = connections_per_host
        self._keepalive = keepalive_timeout
        self._host_header = f"\r\nHost: {authority}"
        self._hosts: dict[str, _Connections] = {}
        self._sweeper: asyncio.TimerHandle | None = None

    # -- requests ----------------------------------------------------------------------------------

    async def request(
        self,
        host: Host,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | None,
    ) -> UpstreamResponse:
        """Send one request to ``host`` (dialling it when no kept-alive connection is free). A failed dial
        raises :class:`DialFailed`; a broken exchange raises aiohttp's client errors."""
        head = self._head(method, target, headers, body)
        conns = self._hosts.get(host.key)
        if conns is None:
            conns = self._hosts[host.key] = _Connections(self._limit)
        if conns.slots is not None:
            await conns.slots.acquire()
        try:
            retry = method in IDEMPOTENT
            while True:
                protocol = self._idle(conns)
                reused = protocol is not None
                if protocol is None:
                    protocol = await self.dial(host, self._factory)
                    if conns.closed:  # quarantined or gone while dialling: not kept for later
                        conns = _Connections(0)
                        conns.closed = True
                conns.busy.add(protocol)
                try:
                    return await self._exchange(conns, protocol, method, head, body)
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                    # A host quarantined meanwhile (its connections closed) gets no dial outside its trial.
                    if not (reused and retry) or conns.closed:
                        raise
                    retry = False
        except BaseException:
            if conns.slots is not None:
                conns.slots.release()
            raise

    @staticmethod
    def _factory() -> ResponseHandler:
        return ResponseHandler(asyncio.get_running_loop())

    def _head(
        self, method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes | None
    ) -> bytes:
        lines = [method, " ", target, " HTTP/1.1", self._host_header]
        for name, value in headers:
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                raise ValueError(f"invalid header {name!r}")
            lines += ("\r\n", name, ": ", value)
        if body is not None:
            lines.append(f"\r\nContent-Length: {len(body)}")
        elif method in _BODY_METHODS:
            lines.append("\r\nContent-Length: 0")
        lines.append("\r\n\r\n")
        return "".join(lines).encode("utf-8", "surrogateescape")

    async def _exchange(
        self, conns: _Connections, protocol: ResponseHandler, method: str, head: bytes, body: bytes | None
    ) -> UpstreamResponse:
        try:
            transport = protocol.transport
            if transport is None or transport.is_closing():
                raise aiohttp.ServerDisconnectedError()
            protocol.set_response_params(
                skip_payload=method == "HEAD",
                read_until_eof=True,
                auto_decompress=False,
            )
            transport.write(head + body if body else head)
            while True:
                message, payload = await protocol.read()
                if not 100 <= message.code < 200 or message.code == 101:
                    break
        except BaseException:
            conns.busy.discard(protocol)
            protocol.close()
            raise
        return UpstreamResponse(
            message.code, message.headers, payload, lambda: self._release(conns, protocol)
        )

    def _idle(self, conns: _Connections) -> ResponseHandler | None:
        deadline = asyncio.get_running_loop().time() - self._keepalive
        while conns.idle:
            protocol, since = conns.idle.pop()
            if since >= deadline and protocol.is_connected() and not protocol.should_close:
                return protocol
            protocol.close()
        return None

    def _release(self, conns: _Connections, protocol: ResponseHandler) -> None:
        conns.busy.discard(protocol)
        if conns.slots is not None:
            conns.slots.release()
        if conns.closed or protocol.should_close or not protocol.is_connected():
            protocol.close()
            return
        loop = asyncio.get_running_loop()
        conns.idle.append((protocol, loop.time()))
        if self._sweeper is None:
            self._sweeper = loop.call_later(self._keepalive, self._sweep)

    def _sweep(self) -> None:
        """Close connections idle for longer than the keep-alive time."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() - self._keepalive
        remaining = False
        for conns in self._hosts.values():
            expired = [p for p, since in conns.idle if since < deadline]
            if expired:
                conns.idle = [(p, since) for p, since in conns.idle if since >= deadline]
                for protocol in expired:
                    protocol.close()
            remaining = remaining or bool(conns.idle)
        if remaining:
            self._sweeper = loop.call_later(self._keepalive, self._sweep)

    # -- hosts -------------------------------------------------------------------------------------

    def drop(self, host: Host) -> None:
        """Close the host's connections (quarantined): its next request dials afresh."""
        conns = self._hosts.pop(host.key, None)
        if conns is not None:
            conns.close()

    def prune(self) -> None:
        """Close the connections of hosts that left the peer list."""
        live = {h.key for h in self._cache.hosts()}
        for key in [k for k in self._hosts if k not in live]:
            self._hosts.pop(key).close()

    async def close(self) -> None:
        for conns in self._hosts.values():
            conns.close()
        self._hosts.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    async def dial(self, host: Host, factory: ProtocolFactory) -> ResponseHandler:
        selection = _selection.get()
        trial = selection is not None and selection.trial and selection.host.key == host.key
        if selection is not None and selection.host.key == host.key:
            selection.dialled = True
        started = self._clock()
        timeout = self._dial_timeout()
        try:
            async with asyncio.timeout(timeout):
                _, protocol = await self._dial(host.peer_id, factory)
        except TimeoutError as exc:
            # The caller's 503 and the log carry the cause's text: a bare TimeoutError has none.
            cause = TimeoutError(f"dial {host.name}: i/o timeout after {timeout:g}s")
            raise self._failed(host, trial, "timeout", started, cause) from exc
        except asyncio.CancelledError:
            deadline = _deadline.get()
            reason = "deadline" if deadline is not None and deadline.expired else "canceled"
            self._observer.on_failure(host, trial, reason, self._clock() - started, None)
            raise
        except TransportUnavailable as exc:
            raise self._failed(host, trial, "ts_server_unavailable", started, exc) from exc
        except PeerGone as exc:
            raise self._failed(host, trial, "peer_departed", started, exc) from exc
        except (OSError, aiohttp.ClientError, ValueError) as exc:
            reason = "error" if self._cache.has(host) else "peer_departed"
            raise self._failed(host, trial, reason, started, exc) from exc
        self._observer.on_success(host, trial, self._clock() - started)
        return protocol

    def _failed(
        self, host: Host, trial: bool, reason: str, started: float, cause: BaseException
    ) -> DialFailed:
        self._observer.on_failure(host, trial, reason, self._clock() - started, cause)
        return DialFailed(reason, host, cause)


class DeadlineExceeded(Exception):
    """The request's own end-to-end deadline fired (reason ``deadline``)."""


class Deadline:
    """The non-watch request cap: cancels the request's task when it fires and turns that cancellation
    into :class:`DeadlineExceeded`, while a dial interrupted by it can tell (``expired``) that this was the
    deadline and not the caller going away."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.expired = False
        self._task: asyncio.Task[Any] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._token: contextvars.Token[Deadline | None] | None = None

    async def __aenter__(self) -> Deadline:
        self._token = _deadline.set(self)
        if self.seconds is not None:
            self._task = asyncio.current_task()
            self._handle = asyncio.get_running_loop().call_later(self.seconds, self._fire)
        return self

    def _fire(self) -> None:
        self.expired = True
        if self._task is not None:
            self._task.cancel()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self._token is not None:
            _deadline.reset(self._token)
        if self.expired and exc_type is asyncio.CancelledError and self._task is not None:
            if self._task.uncancel() == 0:
                raise DeadlineExceeded() from exc


def bind_selection(selection: Selection | None) -> contextvars.Token[Selection | None]:
    """Make the request's selection visible to the connector (same task, so the contextvar carries)."""
    return _selection.set(selection)


def reset_selection(token: contextvars.Token[Selection | None]) -> None:
    _selection.reset(token)

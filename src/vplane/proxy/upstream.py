"""HTTP to the target's control-plane replicas over peer dials, with dial accounting.

The transport seam is one function, :data:`Dial`: connect a protocol to a peer by node id (the mesh's
``Dialer.dial_protocol`` in a tenant: direct TLS first, then the platform relay). This module runs
aiohttp's HTTP client over it: one client session per tracked host, whose connector dials that host, so
keep-alive connections are reused per host and all of a host's connections are dropped when it is
quarantined or leaves the peer list (its next request then really dials, which is what the half-open
trial must do).

Every attempted dial is bounded by the dial timeout and its outcome is reported to the peer cache; the
reason of a failed dial (``timeout``, ``canceled``, ``peer_departed``, ``ts_server_unavailable``,
``deadline``, ``error``) becomes the request's reason (spec §7).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.tracing import Trace

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


class _HostConnector(aiohttp.BaseConnector):
    def __init__(self, pool: HostPool, host: Host, *, limit: int, keepalive_timeout: float) -> None:
        super().__init__(limit=limit, keepalive_timeout=keepalive_timeout)
        self._pool = pool
        self._host = host

    async def _create_connection(
        self,
        req: aiohttp.ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 (aiohttp's signature)
    ) -> ResponseHandler:
        try:
            return await self._pool.dial(self._host, self._factory)
        except DialFailed as exc:
            raise aiohttp.ClientConnectorError(req.connection_key, exc) from exc


class HostPool:
    """Client sessions per tracked host, created on first use and closed when the host goes or fails."""

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
    ) -> None:
        self._cache = cache
        self._dial = dial
        self._observer = observer
        self._dial_timeout = dial_timeout
        self._clock = clock
        self._limit = connections_per_host
        self._keepalive = keepalive_timeout
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def session(self, host: Host) -> aiohttp.ClientSession:
        session = self._sessions.get(host.key)
        if session is None or session.closed:
            connector = _HostConnector(self, host, limit=self._limit, keepalive_timeout=self._keepalive)
            session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
            self._sessions[host.key] = session
        return session

    def drop(self, host: Host) -> None:
        """Close the host's connections (quarantined): its next request dials afresh."""
        session = self._sessions.pop(host.key, None)
        if session is not None:
            self._close_later(session)

    def prune(self) -> None:
        """Close sessions of hosts that left the peer list."""
        live = {h.key for h in self._cache.hosts()}
        for key in [k for k in self._sessions if k not in live]:
            self._close_later(self._sessions.pop(key))

    def _close_later(self, session: aiohttp.ClientSession) -> None:
        task = asyncio.get_running_loop().create_task(session.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        for session in list(self._sessions.values()):
            await session.close()
        self._sessions.clear()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def dial(self, host: Host, factory: ProtocolFactory) -> ResponseHandler:
        selection = _selection.get()
        trial = selection is not None and selection.trial and selection.host.key == host.key
        if selection is not None and selection.host.key == host.key:
            selection.dialled = True
        started = self._clock()
        try:
            async with asyncio.timeout(self._dial_timeout()):
                _, protocol = await self._dial(host.peer_id, factory)
        except TimeoutError as exc:
            raise self._failed(host, trial, "timeout", started, exc) from exc
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


def dial_failure(exc: BaseException) -> DialFailed | None:
    """The dial failure behind an aiohttp connection error, if that is what it was."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DialFailed):
            return current
        current = current.__cause__ or current.__context__
    return None

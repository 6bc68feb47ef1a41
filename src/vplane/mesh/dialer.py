"""Dialing a peer: the direct path first (TCP + TLS to an endpoint it published), then the relay.

A direct dial that has not connected after ``direct_head_start_seconds`` gets a relayed one raced beside
it; whichever connects first is used and the other closed (the direct endpoint then counts as failed).

A direct dial is bounded by ``dial_timeout_seconds`` (5 s, spec §3.1) across all of the peer's endpoints
and verifies the peer's certificate against the CA in the settings; without a CA no direct dial is
attempted (never unverified TLS). An endpoint that failed is skipped for ``direct_retry_after_seconds``,
so a peer behind a firewall costs one timeout rather than one per request. ``TS_DEBUG_DIAL_DIRECT=false``
(or ``dial_direct=False``) sends every dial over the relay.

``MeshConnector`` runs aiohttp's HTTP client over dials: it is a ``BaseConnector`` whose
``_create_connection`` (aiohttp's documented extension point for non-TCP transports, used by its own
Unix-socket and named-pipe connectors) dials the peer and attaches aiohttp's response protocol to the
resulting transport, so pooling, keep-alive and timeouts are aiohttp's own. URLs are ``http://``: the mesh
provides the encryption (TLS on direct paths, the session's TLS on relayed ones).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp
import structlog
from aiohttp.client_proto import ResponseHandler
from aiohttp.tracing import Trace

from vplane.mesh.backoff import DirectPathMemory
from vplane.mesh.session import (
    DialError,
    NodeSession,
    PathKind,
    Peer,
    RelayTransport,
    SessionDown,
    Stream,
    split_endpoint,
)
from vplane.mesh.settings import MeshSettings, direct_dialing_enabled, verbose
from vplane.support.tls import client_context

P = TypeVar("P", bound=asyncio.BaseProtocol)

log = structlog.get_logger("vplane.mesh.dialer")


class Dialer:
    """Dials peers of one ``NodeSession``."""

    def __init__(
        self,
        session: NodeSession,
        settings: MeshSettings | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.session = session
        self.settings = settings or session.settings
        self.direct_enabled = direct_dialing_enabled(self.settings, environ)
        if ssl_context is None and self.settings.direct_ca_pem:
            ssl_context = client_context(self.settings.direct_ca_pem.encode())
        self._ssl = ssl_context
        self._memory = DirectPathMemory(self.settings.direct_retry_after_seconds, clock)
        self._verbose = verbose(self.settings, self.settings.verbose_env, environ)
        self.paths_used: collections.Counter[str] = collections.Counter()
        """Dials per path. For tests and benchmarks only: no metric distinguishes paths (spec §3.1)."""

    def peer(self, peer: str | Peer) -> Peer:
        if isinstance(peer, Peer):
            return peer
        found = self.session.peers.get(peer)
        if found is None:
            raise DialError(f"peer {peer} is not in the netmap")
        return found

    async def dial_protocol(
        self, peer: str | Peer, protocol_factory: Callable[[], P]
    ) -> tuple[asyncio.Transport, P, PathKind]:
        """Connect ``protocol_factory()`` to the peer (like ``loop.create_connection``); returns the path.
        Racing the paths may call the factory twice: the loser's protocol is closed, never returned."""
        target = self.peer(peer)
        if self.direct_enabled and self._ssl is not None and target.endpoints:
            raced = await self._race(target, protocol_factory)
            if raced is not None:
                return raced
        relay_transport, protocol = await self.session.open_relayed_protocol(target.id, protocol_factory)
        self.paths_used["relay"] += 1
        return relay_transport, protocol, "relay"

    async def _race(
        self, target: Peer, protocol_factory: Callable[[], P]
    ) -> tuple[asyncio.Transport, P, PathKind] | None:
        """The direct path, with the relay raced beside it once the head start is over; None: neither
        connected (the caller dials the relay)."""
        attempt: list[str] = []
        direct = asyncio.ensure_future(self._dial_direct(target, protocol_factory, attempt))
        relay: asyncio.Future[tuple[RelayTransport, P]] | None = None
        winner: asyncio.Future[Any] | None = None
        try:
            await asyncio.wait({direct}, timeout=self.settings.direct_head_start_seconds)
            if not direct.done():
                relay = asyncio.ensure_future(self.session.open_relayed_protocol(target.id, protocol_factory))
                while not (_connected(direct) or _connected(relay) or (direct.done() and relay.done())):
                    running = [task for task in (direct, relay) if not task.done()]
                    await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                if not _connected(direct) and _connected(relay):
                    winner = relay
                    if not direct.done() and attempt:
                        self._direct_failed(target, attempt[-1], TimeoutError("the relay connected first"))
                    relay_transport, protocol = relay.result()
                    self.paths_used["relay"] += 1
                    return relay_transport, protocol, "relay"
            connected = direct.result()
            if connected is None:
                if relay is not None and not isinstance(relay.exception(), SessionDown):
                    relay.result()  # both paths failed: the relay's error is the dial's
                # No relay tried yet, or the session was down then: the caller dials the relay now.
                return None
            winner = direct
            self.paths_used["direct"] += 1
            return connected[0], connected[1], "direct"
        finally:
            for task in (direct, relay):
                if task is None or task is winner:
                    continue
                if not task.done():
                    task.cancel()
                elif _connected(task) and (late := task.result()) is not None:
                    late[0].close()  # connected too late: the other path carries the connection

    async def dial(self, peer: str | Peer) -> Stream:
        """A connection to the peer with a reader/writer API; ``.path`` says which path it took."""
        loop = asyncio.get_running_loop()
        readers: dict[asyncio.BaseProtocol, asyncio.StreamReader] = {}

        def factory() -> asyncio.StreamReaderProtocol:
            # One reader per protocol: the path that loses a race closes its own, not the winner's.
            reader = asyncio.StreamReader(loop=loop)
            protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
            readers[protocol] = reader
            return protocol

        transport, protocol, path = await self.dial_protocol(peer, factory)
        reader = readers[protocol]
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        return Stream(reader, writer, peer_id=self.peer(peer).id, path=path)

    def connector(
        self,
        *,
        resolve: Callable[[str], str | Awaitable[str]] | None = None,
        limit: int = 100,
        keepalive_timeout: float = 15.0,
    ) -> MeshConnector:
        return MeshConnector(self, resolve=resolve, limit=limit, keepalive_timeout=keepalive_timeout)

    async def _dial_direct(
        self, peer: Peer, protocol_factory: Callable[[], P], attempt: list[str]
    ) -> tuple[asyncio.Transport, P] | None:
        loop = asyncio.get_running_loop()
        timeout = self.settings.dial_timeout_seconds
        candidates = [e for e in peer.endpoints if self._memory.should_try(e)]
        if not candidates:
            return None
        current = candidates[0]
        try:
            async with asyncio.timeout(timeout):
                for endpoint in candidates:
                    current = endpoint
                    attempt.append(endpoint)
                    try:
                        host, port = split_endpoint(endpoint)
                        transport, protocol = await loop.create_connection(
                            protocol_factory,
                            host,
                            port,
                            ssl=self._ssl,
                            server_hostname=host,
                            ssl_handshake_timeout=timeout,
                        )
                    except (OSError, ValueError) as exc:
                        self._direct_failed(peer, endpoint, exc)
                        continue
                    self._memory.succeeded(endpoint)
                    if self._verbose:
                        log.info("mesh direct dial", peer=peer.id, endpoint=endpoint)
                    return transport, protocol
        except TimeoutError:
            self._direct_failed(peer, current, TimeoutError(f"no answer within {timeout}s"))
        return None

    def _direct_failed(self, peer: Peer, endpoint: str, exc: BaseException) -> None:
        self._memory.failed(endpoint)
        log.info(
            "mesh direct dial failed; using the relay",
            peer=peer.id,
            endpoint=endpoint,
            error=f"{type(exc).__name__}: {exc}",
            retry_after=self.settings.direct_retry_after_seconds,
        )


def _connected(task: asyncio.Future[Any] | None) -> bool:
    """The dial ``task`` has ended with a connection."""
    return (
        task is not None
        and task.done()
        and not task.cancelled()
        and task.exception() is None
        and (task.result() is not None)
    )


class MeshConnector(aiohttp.BaseConnector):
    """aiohttp connector whose connections are mesh dials (see the module docstring).

    The URL host names the peer: by default it is the peer's node id (``http://n0123.../path``);
    ``resolve`` maps any other host name to a node id (e.g. ``kube.<name>.<project>.vcluster.invalid``
    to one of the target's replicas).
    """

    def __init__(
        self,
        dialer: Dialer,
        *,
        resolve: Callable[[str], str | Awaitable[str]] | None = None,
        limit: int = 100,
        keepalive_timeout: float = 15.0,
    ) -> None:
        super().__init__(limit=limit, keepalive_timeout=keepalive_timeout)
        self._dialer = dialer
        self._resolve = resolve

    async def _create_connection(
        self,
        req: aiohttp.ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 (aiohttp's signature)
    ) -> ResponseHandler:
        if req.url.scheme not in ("http", "ws"):
            raise aiohttp.ClientConnectorError(
                req.connection_key, DialError("use http:// over the mesh; the mesh encrypts the path")
            )
        host = req.url.raw_host or ""
        peer_id: str = host
        if self._resolve is not None:
            resolved = self._resolve(host)
            peer_id = await resolved if isinstance(resolved, Awaitable) else resolved
        try:
            _, protocol, _ = await self._dialer.dial_protocol(peer_id, self._factory)
        except OSError as exc:
            raise aiohttp.ClientConnectorError(req.connection_key, exc) from exc
        return protocol

"""The resource proxies of one client replica: one per proxied group/version, fed from the platform.

Two seams connect it to the rest of the replica, so the proxy depends on neither the mesh nor the API
server: a :data:`PeerFeed` (snapshots of the target's control-plane replicas as the platform publishes
them, and whether that subscription is live) and the :class:`~vplane.proxy.upstream.Dial` function.

Each proxy is an aiohttp handler. The client's aggregator calls it in-process for the address its
Service names (``localhost:9100 + n``), so every replica reaches its own proxy and tenants on one machine
never compete for a port (docs/resource-proxy.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import structlog
from aiohttp import web

from vplane.kube.proxyconfig import ProxyTarget
from vplane.proxy.handler import NamespaceExists, ResourceProxy
from vplane.proxy.metrics import CacheView, ProxyMetrics
from vplane.proxy.peers import Host
from vplane.proxy.settings import ProxySettings
from vplane.proxy.upstream import Dial
from vplane.support.tasks import cancel_and_wait

log = structlog.get_logger("vplane.proxy")


@dataclass(frozen=True)
class PeerSnapshot:
    """What the platform's peer subscription says now."""

    live: bool
    """The subscription to the platform is up."""
    seq: int
    """Publications so far; a new value is a fresh list (0: none received yet)."""
    peers: tuple[PeerInfo, ...]


@dataclass(frozen=True)
class PeerInfo:
    peer_id: str
    name: str
    labels: dict[str, str]
    endpoints: tuple[str, ...]
    instance: str = ""
    """The peer process's own id: a restarted replica is a new host even on the same endpoints."""


PeerFeed = Callable[[], AsyncIterator[PeerSnapshot]]

TENANT_LABEL = "vplane.io/tenant"
PROJECT_LABEL = "vplane.io/project"


def target_hosts(snapshot: PeerSnapshot, target: ProxyTarget) -> list[Host]:
    """The target's control-plane replicas in a snapshot; a replica that re-registered is a new host."""
    hosts = []
    for peer in snapshot.peers:
        if peer.labels.get(TENANT_LABEL) != target.target_name:
            continue
        if peer.labels.get(PROJECT_LABEL) != target.target_project:
            continue
        key = "|".join((peer.peer_id, peer.instance, *peer.endpoints))
        hosts.append(Host(peer.peer_id, peer.name, key))
    return hosts


class ProxyRunner:
    def __init__(
        self,
        targets: list[ProxyTarget],
        *,
        client_name: str,
        client_project: str,
        access_key: Callable[[], str],
        dial: Dial,
        feed: PeerFeed,
        namespace_exists: NamespaceExists,
        settings: ProxySettings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings or ProxySettings()
        self.targets = targets
        self.metrics = ProxyMetrics(self._views)
        self.proxies = [
            ResourceProxy(
                target,
                client_name=client_name,
                client_project=client_project,
                access_key=access_key,
                dial=dial,
                namespace_exists=namespace_exists,
                metrics=self.metrics,
                settings=self.settings,
                clock=clock,
            )
            for target in targets
        ]
        self._feed = feed
        self._clock = clock
        self._tasks: list[asyncio.Task[None]] = []

    def _views(self) -> list[CacheView]:
        return [CacheView(p.label, p.target.group_version, p.cache) for p in self.proxies]

    def handlers(self) -> dict[int, Callable[[web.BaseRequest], object]]:
        """Each proxy's handler by the port its Service names."""
        return {p.target.port: p.handle for p in self.proxies}

    def proxy_for(self, port: int) -> ResourceProxy | None:
        return next((p for p in self.proxies if p.target.port == port), None)

    async def start(self) -> None:
        for proxy in self.proxies:
            proxy.log.info("Starting proxy server", port=proxy.target.port, access=proxy.target.access)
        for proxy in self.proxies:
            proxy.log.info("Starting target transport", host=proxy.placeholder)
        self._tasks.append(asyncio.create_task(self._follow(), name="proxy-peer-feed"))
        for proxy in self.proxies:
            self._tasks.append(asyncio.create_task(self._startup(proxy), name="proxy-startup"))

    async def _follow(self) -> None:
        """Feed every proxy's peer cache from the platform subscription."""
        seen = -1
        watchdog: asyncio.Task[None] | None = None
        async for snapshot in self._feed():
            if snapshot.live and snapshot.seq == 0:
                continue  # registered, but no list received yet: not an (empty) peer list
            if snapshot.live and snapshot.seq != seen:
                seen = snapshot.seq
                for proxy in self.proxies:
                    proxy.publish(target_hosts(snapshot, proxy.target))
                if watchdog is not None:
                    watchdog.cancel()
                    watchdog = None
            elif not snapshot.live:
                for proxy in self.proxies:
                    proxy.cache.subscription_down()
                if watchdog is None or watchdog.done():
                    watchdog = asyncio.create_task(self._stale_watch())
            else:
                for proxy in self.proxies:
                    proxy.cache.subscription_up()

    async def _stale_watch(self) -> None:
        """Say once, per proxy, when the cached list has aged out after the subscription dropped.

        It keeps looking after the tolerance until a fresh list cancels it: a subscription that comes back
        without a list and drops again restarts the tolerance (``PeerCache.subscription_down``), and a
        single look at the first drop's deadline would then miss the outage for good."""
        await asyncio.sleep(self.settings.peers.stale_after_seconds)
        pending = [p for p in self.proxies if p.cache.received]
        while pending:
            for proxy in [p for p in pending if p.cache.stale()]:
                pending.remove(proxy)
                age = proxy.cache.list_age()
                proxy.log.error(
                    "peer watch subscription is down and no fresh netmap is available; requests to the "
                    "target fail with 503 until it recovers",
                    lastNetmapAge=f"{age:.0f}s" if age is not None else "never",
                )
            if pending:
                await asyncio.sleep(min(1.0, self.settings.peers.stale_after_seconds / 4))

    async def _startup(self, proxy: ResourceProxy) -> None:
        """Wait for the first peer list (up to a minute), then probe the target once."""
        try:
            async with asyncio.timeout(self.settings.peers.startup_sync_seconds):
                await proxy.first_list.wait()
        except TimeoutError:
            proxy.log.warning(
                "peer cache did not sync in time for the startup probe, requests fail with 503 until the "
                "first netmap arrives",
                waited=f"{self.settings.peers.startup_sync_seconds:g}s",
            )
            return
        if await proxy.probe():
            proxy.log.debug("Connected to target")
        else:
            proxy.log.warning("initial probe of proxy target failed, requests will keep retrying")

    def metrics_response(self) -> web.Response:
        return web.Response(
            body=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        for proxy in self.proxies:
            with contextlib.suppress(Exception):
                await proxy.pool.close()

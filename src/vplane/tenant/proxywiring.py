"""The resource proxy in a client tenant replica: its seams wired to this replica's mesh node and API
server, its metrics route, and the leader's registration of the objects that route requests to it.

Every replica runs its own proxies and peer caches (spec §2.2: a symptom can be replica-local); only the
elected leader writes the APIService, the Service and the deletion protection, retrying with upstream's
back-off (1 s x 1.5, capped at 1 min, unbounded) and re-applying them every ``resync`` so a deleted or
edited object comes back while its group/version stays configured. A group/version removed from the
config is left alone (the runbook's decommission steps remove it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import structlog
from aiohttp.client_proto import ResponseHandler

from vplane.controllers.client import KubeClient, Resource
from vplane.kube import errors
from vplane.kube.proxyconfig import ProxyTarget
from vplane.mesh.dialer import Dialer
from vplane.mesh.session import DialError, NodeSession
from vplane.proxy import objects
from vplane.proxy.handler import NamespaceExists
from vplane.proxy.runner import PeerInfo, PeerSnapshot, ProxyRunner
from vplane.proxy.settings import ProxySettings
from vplane.proxy.upstream import Dial, PeerGone, ProtocolFactory, TransportUnavailable

log = structlog.get_logger("vplane.tenant.proxy")

SERVICES = Resource("v1", "Service", "services", True)
APISERVICES = Resource("apiregistration.k8s.io/v1", "APIService", "apiservices", False)
POLICIES = Resource(
    "admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", False
)
BINDINGS = Resource(
    "admissionregistration.k8s.io/v1",
    "ValidatingAdmissionPolicyBinding",
    "validatingadmissionpolicybindings",
    False,
)
METRICS_PATH = "/metrics/syncer"


def mesh_dial(node: NodeSession, dialer: Dialer) -> Dial:
    """The proxy's dial seam over this replica's mesh node (direct first, then the relay)."""

    async def dial(peer_id: str, factory: ProtocolFactory) -> tuple[asyncio.BaseTransport, ResponseHandler]:
        if peer_id not in node.peers:
            raise PeerGone(f"peer {peer_id} left the peer list")
        try:
            transport, protocol, _ = await dialer.dial_protocol(peer_id, factory)
        except DialError as exc:
            if peer_id not in node.peers:
                raise PeerGone(str(exc)) from exc
            if not node.connected:
                raise TransportUnavailable(str(exc)) from exc
            raise
        return transport, protocol

    return dial


def mesh_feed(node: NodeSession) -> Callable[[], AsyncIterator[PeerSnapshot]]:
    async def feed() -> AsyncIterator[PeerSnapshot]:
        async for netmap in node.subscribe():
            yield PeerSnapshot(
                live=netmap.session_up,
                seq=netmap.seq,
                peers=tuple(
                    PeerInfo(p.id, p.name, dict(p.labels), tuple(p.endpoints), p.instance)
                    for p in netmap.peers.values()
                ),
            )

    return feed


class TenantProxy:
    def __init__(
        self,
        targets: list[ProxyTarget],
        *,
        client_name: str,
        client_project: str,
        access_key: Callable[[], str],
        node: NodeSession,
        dialer: Dialer,
        namespace_exists: NamespaceExists,
        settings: ProxySettings,
        resync_seconds: float = 60.0,
    ) -> None:
        self.targets = targets
        self.settings = settings
        self.resync_seconds = resync_seconds
        self.runner = ProxyRunner(
            targets,
            client_name=client_name,
            client_project=client_project,
            access_key=access_key,
            dial=mesh_dial(node, dialer),
            feed=mesh_feed(node),
            namespace_exists=namespace_exists,
            settings=settings,
        )
        self.registered = asyncio.Event()
        """Set after the leader's first successful registration (tests and `vplane up` wait on it)."""

    async def start(self) -> None:
        await self.runner.start()

    async def stop(self) -> None:
        await self.runner.stop()

    async def register_forever(self, client: KubeClient) -> None:
        """The leader's job: keep the protection, Services and APIServices in place."""
        delay = self.settings.registration_backoff_initial_seconds
        while True:
            try:
                await self.register(client)
            except (errors.StatusError, OSError) as exc:
                log.error("error creating api service", error=str(exc), retryIn=f"{delay:g}s")
                await asyncio.sleep(delay)
                delay = min(
                    delay * self.settings.registration_backoff_factor,
                    self.settings.registration_backoff_max_seconds,
                )
                continue
            delay = self.settings.registration_backoff_initial_seconds
            self.registered.set()
            await asyncio.sleep(self.resync_seconds)

    async def register(self, client: KubeClient) -> None:
        manager = objects.FIELD_MANAGER
        await client.apply(POLICIES, objects.protection_policy(), field_manager=manager, force=True)
        await client.apply(BINDINGS, objects.protection_binding(), field_manager=manager, force=True)
        for target in self.targets:
            await client.apply(SERVICES, objects.service(target), field_manager=manager, force=True)
            await client.apply(APISERVICES, objects.apiservice(target), field_manager=manager, force=True)

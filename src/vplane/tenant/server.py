"""One replica of a tenant control plane.

It is a vplane API server on the tenant's shared store, that accepts platform access keys (reviewed by
the platform), joins the platform's mesh as a node, and takes part in leader election with the other
replicas: the leader runs the controllers that must run once per tenant.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import structlog
from aiohttp import web

from vplane.apiserver.context import RequestContext
from vplane.apiserver.server import APIServer
from vplane.apiserver.settings import APIServerSettings
from vplane.controllers.client import KubeClient
from vplane.controllers.embedded import ManagedRun, ManagedScheduler
from vplane.controllers.kcm.settings import ControllerManagerSettings
from vplane.controllers.leaderelection import LeaderElector
from vplane.controllers.scheduler.settings import SchedulerSettings
from vplane.kube import errors
from vplane.kube import tenantconfig as tenant_config
from vplane.kube.accesskeys import ADMINS_GROUP
from vplane.mesh.dialer import Dialer
from vplane.mesh.session import (
    DirectListener,
    NodeSession,
    RegistrationError,
    RegistrationRefused,
    tls_server_context,
)
from vplane.mesh.settings import MeshSettings
from vplane.proxy.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from vplane.proxy.settings import ProxySettings
from vplane.support import tls
from vplane.support.tasks import cancel_and_wait
from vplane.tenant.identity import PlatformTokenReviewer
from vplane.tenant.proxywiring import METRICS_PATH, TenantProxy
from vplane.tenant.settings import TenantSettings

log = structlog.get_logger("vplane.tenant")


def _own_address(settings: TenantSettings) -> dict[str, object]:
    """A replica serving on an address of its own (its pod IP) names it in a serving certificate of its own:
    replicas share the directory, and the platform's tenant path verifies the address it dials."""
    names = APIServerSettings.model_fields["server_names"].get_default(call_default_factory=True)
    if settings.listen_host in names or settings.listen_host in ("", "0.0.0.0", "::"):
        return {}
    return {
        "server_names": [*names, settings.listen_host],
        "serving_cert_name": f"serving-{settings.replica}",
    }


class TenantNode(Protocol):
    """The tenant's node (``vplane.runtime.NodeRuntime`` behind a lock on its data directory, made by the CLI:
    the tenant layer does not import the runtime)."""

    async def start(self) -> None: ...

    async def stop(self, *, keep_pods: bool = False) -> None: ...

    def force_stop(self) -> None: ...


TenantNodeFactory = Callable[[Path, tls.CertPair], TenantNode]
"""Makes the tenant's node from this replica's admin kubeconfig and the tenant's cluster CA (which signs the
kubelet's serving certificate)."""


class TenantServer:
    def __init__(self, settings: TenantSettings) -> None:
        self.settings = settings
        self.node_factory: TenantNodeFactory | None = None
        """Makes the tenant's node, run while this replica leads (set by the CLI, which knows the runtime;
        None or ``node_enabled`` off: no node, pods stay Pending)."""
        self._node: TenantNode | None = None
        self._stopping = False
        overrides = dict(settings.apiserver)
        api_settings = APIServerSettings.model_validate(
            {
                "data_dir": settings.data_dir,
                "listen_host": settings.listen_host,
                "listen_port": settings.listen_port,
                "shared_store": True,
                "kubeconfig_name": f"kubeconfig-{settings.replica}.yaml",
                **_own_address(settings),
                # The tenant's cluster-admin registers APIServices but has no rights on the platform: it
                # must not point this process at loopback services, other tenants or the platform
                # (vplane.apiserver.aggregation). Backends this process serves itself are allowed through
                # self.api.aggregator.allow_backend.
                "aggregation_restrict_backends": True,
                **overrides,
            }
        )
        self.api = APIServer(api_settings)
        self.access_key = settings.access_key_file.read_text().strip()
        self.reviewer = PlatformTokenReviewer(
            settings.platform_url,
            settings.platform_ca.read_bytes(),
            self.access_key,
            ttl=settings.token_review_ttl_seconds,
            max_entries=settings.token_review_cache_max_entries,
            max_token_bytes=settings.token_max_bytes,
        )
        self.api.token_authenticators.append(self.reviewer)
        values = settings.config_file.read_text() if settings.config_file is not None else ""
        self.config = tenant_config.parse(values, field="vcluster.yaml")
        self.proxy: TenantProxy | None = None
        self.api.extra_routes[METRICS_PATH] = self._metrics
        self.node: NodeSession | None = None
        self.listener: DirectListener | None = None
        self.elector: LeaderElector | None = None
        self.client: KubeClient | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def url(self) -> str:
        return self.api.url

    async def start(self) -> None:
        await self._deny_platform_addresses()
        await self.api.start()
        # /readyz fails its informer-sync check until this replica has joined the mesh and started its proxies: a pod's
        # readiness probe reads it, as the process placement waits for start() to return.
        self.api.ready = False
        await self._bootstrap()
        await self._join_mesh()
        await self._start_proxy()
        self.client = KubeClient.from_kubeconfig(self.api.kubeconfig_path, field_manager="vplane-tenant")
        self.elector = LeaderElector(
            self.client,
            namespace="kube-system",
            name=self.settings.lease_name,
            identity=self.settings.identity,
            settings=self.settings.leader_election,
            on_started_leading=self._lead,
            on_new_leader=lambda leader: log.info("new leader", leader=leader, tenant=self.settings.name),
        )
        self._tasks.append(asyncio.create_task(self._campaign()))
        self.api.ready = True
        log.info(
            "tenant control plane serving",
            tenant=self.settings.name,
            project=self.settings.project,
            replica=self.settings.replica,
            url=self.url,
        )

    async def _deny_platform_addresses(self) -> None:
        """The platform's addresses are never aggregation backends, wherever the platform runs (on this host
        they are refused anyway, as this host's addresses)."""
        host = urllib.parse.urlsplit(self.settings.platform_url).hostname or ""
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            log.warning("cannot resolve the platform's address", host=host, error=str(exc))
            return
        for address in {str(info[4][0]) for info in infos}:
            with contextlib.suppress(ValueError):  # a scoped IPv6 address: link-local, refused anyway
                self.api.aggregator.policy.deny(address)

    async def _join_mesh(self) -> None:
        """Register with the platform's coordinator as a node and serve this API on the mesh: direct dials
        reach a TLS listener with the platform-issued mesh certificate, relayed streams reach the same API."""
        settings = self.settings
        directory = settings.data_dir
        mesh_settings = MeshSettings.model_validate(
            {
                **(
                    {"direct_ca_pem": (directory / "mesh-ca.crt").read_text()}
                    if (directory / "mesh-ca.crt").exists()
                    else {}
                ),
                **settings.mesh,
            }
        )
        endpoints: list[str] = []
        pair = await self._mesh_pair()
        if pair is not None:
            self.listener = DirectListener(
                self.api.web_server, tls_server_context(pair), host=settings.listen_host
            )
            endpoints = await self.listener.start()
        self.node = NodeSession(
            settings.platform_url,
            self.access_key,
            hostname=settings.identity,
            # The platform sets vplane.io/tenant and vplane.io/project from the access key (nodes may not
            # send labels under its reserved prefixes), so no node can claim to be another tenant.
            labels={"replica": str(settings.replica)},
            endpoints=endpoints,
            settings=mesh_settings,
            ssl_context=tls.client_context(settings.platform_ca.read_bytes()),
            serve=self.api.web_server,
        )
        await self.node.probe()
        await self.node.start()
        try:
            async with asyncio.timeout(settings.mesh_ready_timeout_seconds):
                await self.node.wait_ready()
        except TimeoutError:
            log.warning("no netmap from the platform yet; serving anyway", tenant=settings.name)
        except RegistrationError as exc:
            # A refusal for now (a proxy target it may not use) is retried by the session: granting the
            # permission lets the tenant in without a restart.
            retrying = isinstance(exc, RegistrationRefused)
            log.error(
                "the platform refused this tenant's registration",
                tenant=settings.name,
                error=str(exc),
                retrying=retrying,
            )

    async def _mesh_pair(self) -> tls.CertPair | None:
        """The certificate the direct mesh listener serves: the tenant's (it names loopback) when this replica
        listens there; on a pod IP, the one the platform issues for this replica's address
        (``mesh-<replica>.crt``, written when the platform sees the pod's IP), waited for a while. Without it
        direct dials fail verification and peers use the relay."""
        directory, host = self.settings.data_dir, self.settings.listen_host
        shared = (directory / "mesh.crt", directory / "mesh.key")
        own = (
            directory / f"mesh-{self.settings.replica}.crt",
            directory / f"mesh-{self.settings.replica}.key",
        )
        deadline = asyncio.get_running_loop().time() + self.settings.mesh_cert_wait_seconds
        while True:
            for cert, key in (shared, own):
                with contextlib.suppress(OSError, ValueError):
                    if host in tls.certificate_names(cert.read_bytes()):
                        return tls.CertPair.read(cert, key)
            if not shared[0].exists():
                return None  # no mesh CA: no direct listener
            if asyncio.get_running_loop().time() >= deadline:
                log.warning(
                    "no mesh certificate for this replica's address; peers will reach it through the relay",
                    tenant=self.settings.name,
                    address=host,
                )
                return tls.CertPair.read(*shared)
            await asyncio.sleep(0.1)

    async def _start_proxy(self) -> None:
        """The resource proxy, when ``experimental.proxy.customResources`` enables a group/version: every
        replica runs its own (spec §2.2); the aggregator hands it requests in-process."""
        targets = self.config.proxy_targets(self.settings.project)
        if not targets or self.node is None:
            return
        namespaces = self.api.registry.get("", "v1", "namespaces")
        assert namespaces is not None

        async def namespace_exists(name: str) -> bool:
            return self.api.objects.get_kv(namespaces, "", name) is not None  # every proxied write asks

        self.proxy = TenantProxy(
            targets,
            client_name=self.settings.name,
            client_project=self.settings.project,
            access_key=lambda: self.access_key,
            node=self.node,
            dialer=Dialer(self.node),
            namespace_exists=namespace_exists,
            settings=ProxySettings.model_validate(self.settings.proxy),
            resync_seconds=self.settings.proxy_registration_resync_seconds,
        )
        for proxy in self.proxy.runner.proxies:
            self.api.aggregator.serve_locally("localhost", proxy.target.port, proxy)
        await self.proxy.start()

    async def _metrics(self, request: web.Request, ctx: RequestContext) -> web.StreamResponse:
        """``/metrics/syncer``: the resource proxy's series (none when no proxy runs)."""
        body = self.proxy.runner.metrics.render() if self.proxy is not None else b""
        return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def _bootstrap(self) -> None:
        """Platform administrators administer every tenant cluster."""
        ctx: RequestContext = self.api.system_context()
        rtype = self.api.registry.get("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
        assert rtype is not None
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "loft-admins"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": ADMINS_GROUP}],
        }
        if self.api.objects.get(rtype, "", "loft-admins") is None:
            with contextlib.suppress(errors.StatusError):
                await self.api.objects.create(ctx, rtype, "", binding)

    async def _campaign(self) -> None:
        assert self.elector is not None
        while True:
            try:
                await self.elector.run()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("leader election failed; retrying", tenant=self.settings.name)
            await asyncio.sleep(self.settings.leader_election.retry_period)

    async def _lead(self) -> None:
        """Work only the leader does: the controller manager and the scheduler (as kube-controller-manager
        and kube-scheduler run once per cluster), the ``kubernetes`` endpoints and the resource proxy's
        APIService registration. The elector cancels this when leadership is lost, and the controllers
        stop with it."""
        log.info("became leader", tenant=self.settings.name, identity=self.settings.identity)
        api = self.api.settings
        started: list[ManagedRun | ManagedScheduler] = []
        tasks: list[asyncio.Task[None]] = []
        try:
            if api.endpoint_reconciler_type == "lease":
                # The `kubernetes` endpoints name the leader: replicas listen on ports of their own.
                tasks.append(asyncio.create_task(self.api.kubernetes_service.run()))
            if api.controller_manager:
                run = ManagedRun(
                    self.api.kubeconfig_path,
                    ControllerManagerSettings.model_validate(api.controller_manager_settings),
                    root_ca=self.api.ca.cert_pem if self.api.ca is not None else None,
                )
                started.append(run)
                await run.start()
            if api.scheduler:
                scheduler = ManagedScheduler(
                    self.api.kubeconfig_path, SchedulerSettings.model_validate(api.scheduler_settings)
                )
                started.append(scheduler)
                await scheduler.start()
            if self.node_factory is not None and self.settings.node_enabled:
                tasks.append(asyncio.create_task(self._run_node()))
            if self.proxy is not None and self.client is not None:
                await self.proxy.register_forever(self.client)
            await asyncio.Event().wait()
        finally:
            await cancel_and_wait(tasks)
            for part in reversed(started):
                await part.stop()

    async def _run_node(self) -> None:
        """The tenant's node, while this replica leads. One Node per tenant, whichever replica leads: its name
        and data directory are the tenant's, so a new leader's runtime adopts the pods the previous one left
        (its shims keep them running). Leadership lost: the node is handed over with its pods running. This
        replica stopping: its pods are stopped (a stopped tenant runs nothing; they start again with it)."""
        assert self.node_factory is not None and self.api.ca is not None
        node: TenantNode | None = None
        try:
            while True:
                node = self._node = self.node_factory(self.api.kubeconfig_path, self.api.ca)
                try:
                    await node.start()
                    break
                except Exception:
                    log.exception("the tenant's node did not start; retrying", tenant=self.settings.name)
                    await node.stop(keep_pods=True)
                    node = self._node = None
                    await asyncio.sleep(self.settings.node_start_retry_seconds)
            log.info("tenant node running", tenant=self.settings.name, node=self.settings.node_display_name)
            await asyncio.Event().wait()
        finally:
            if node is not None:
                await node.stop(keep_pods=not self._stopping)
            self._node = None

    def force_stop(self) -> None:
        """A second Ctrl-C: kill the node's pods at once."""
        if self._node is not None:
            self._node.force_stop()

    async def stop(self) -> None:
        self._stopping = True  # the node, if this replica leads, stops its pods rather than handing them over
        await cancel_and_wait(self._tasks)
        if self.proxy is not None:
            await self.proxy.stop()
        if self.node is not None:
            await self.node.close()
        if self.listener is not None:
            await self.listener.close()
        if self.client is not None:
            await self.client.close()
        await self.reviewer.close()
        await self.api.stop()

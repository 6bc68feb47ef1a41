"""What the platform process mounts for connected clusters: routes, the local mesh node, the loop."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import yaml
from aiohttp import web

import vplane
from vplane.controllers.client import KubeClient
from vplane.kube import accesskeys, errors
from vplane.kube.accesskeys import GROUP, KeyRejected
from vplane.kube.objects import Obj
from vplane.mesh.coordinator import Coordinator, NodeIdentity, NodeInfo
from vplane.mesh.settings import CONTROL_PLANE_LOG_ENV, MeshSettings
from vplane.platform.admission import ConnectedClusterLimit
from vplane.platform.clusters import status as st
from vplane.platform.clusters import values as av
from vplane.platform.clusters.controller import ClusterController, ClusterDeps
from vplane.platform.clusters.gateway import PREFIX as GATEWAY_PREFIX
from vplane.platform.clusters.gateway import Gateway
from vplane.platform.clusters.localclient import PLATFORM_KIND, LocalClient, is_platform_identity
from vplane.platform.clusters.upgrade import UpgradeBridge
from vplane.platform.settings import PlatformSettings
from vplane.support import tls
from vplane.support.tasks import cancel_and_wait

if TYPE_CHECKING:
    from vplane.apiserver.context import RequestContext
    from vplane.apiserver.registry import ResourceType
    from vplane.apiserver.server import APIServer
    from vplane.kube.requestinfo import RequestInfo
    from vplane.platform.identity import AccessKeyIndex

log = structlog.get_logger("vplane.platform.clusters")

AGENT_VALUES_PREFIX = "/clusters/agent-values/"
"""``GET /clusters/agent-values/<cluster>?token=<agent token>``: the agent's Helm values (spec §10.3)."""


def with_platform_kind(
    authenticate: Callable[[str], Awaitable[NodeIdentity]], keys: AccessKeyIndex
) -> Callable[[str], Awaitable[NodeIdentity]]:
    """The coordinator's authentication, with the platform's own mesh node given kind ``platform`` (it may
    see every agent); every other node keeps the kind the platform's authentication gives it."""

    async def authenticate_node(token: str) -> NodeIdentity:
        node = await authenticate(token)
        identity = keys.check(token)  # accepted just above
        if is_platform_identity(identity.user, identity.key_type, identity.key_name):
            return dataclasses.replace(node, kind=PLATFORM_KIND)
        return node

    return authenticate_node


class ConnectedClusters:
    def __init__(
        self, api: APIServer, keys: AccessKeyIndex, coordinator: Coordinator, settings: PlatformSettings
    ) -> None:
        self.api = api
        self.keys = keys
        self.coordinator = coordinator
        self.settings = settings
        self.local: LocalClient | None = None
        self.gateway: Gateway | None = None
        self.controller: ClusterController | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # Issue 11 item 4 (platform replicas) replaces these two with every replica's view.
        self.nodes: Callable[[], Sequence[NodeInfo]] = coordinator.nodes
        self.reconciles: Callable[[Sequence[NodeInfo]], bool] = lambda sessions: True
        api.admission.add(ConnectedClusterLimit(api, settings.connected_cluster_limit))
        api.subresource_handlers[(GROUP, "clusters", "diagnostics")] = self.diagnostics

    def routes(self) -> dict[str, Any]:
        return {GATEWAY_PREFIX: self._gateway, AGENT_VALUES_PREFIX: self.agent_values}

    async def agent_key(self, cluster: str, uid: str) -> Obj:
        """The same key the Cluster ``accesskey`` subresource hands out (reused, never rotated here)."""
        return await self.keys.ensure_cluster_key(cluster, uid)

    async def start(self, management: KubeClient, local_kubeconfig: Path) -> None:
        api = self.api
        assert api.ca is not None
        settings = self.settings
        self.local = LocalClient(
            api.url,
            tls.client_context(api.ca.cert_pem),
            self.keys.ensure_key,
            hostname=f"platform-{settings.instance_id}",
            # The platform's own node logs with the control plane's switch (LOFT_LOG_TSNET_CONTROL_PLANE).
            settings=MeshSettings.model_validate({**settings.mesh, "verbose_env": CONTROL_PLANE_LOG_ENV}),
            retry_seconds=settings.local_client_retry_seconds,
            on_change=self._local_changed,
        )
        self.gateway = Gateway(self.local, self.coordinator.nodes)
        await self.local.start(settings.local_client_ready_timeout_seconds)
        self.controller = ClusterController(
            ClusterDeps(
                management=management,
                settings=settings,
                local=self.local,
                gateway=self.gateway,
                nodes=self.nodes,
                reconciles=self.reconciles,
                holds=lambda node: node.coordinator_id == self.coordinator.instance_id,
                platform_url=api.url,
                ca_pem=api.ca.cert_pem,
                agent_key=self.agent_key,
                local_kubeconfig=local_kubeconfig,
                version=vplane.__version__,
                data_dir=settings.data_dir,
            ),
            apply_release=UpgradeBridge(settings),
        )
        self._tasks.append(asyncio.create_task(self.controller.controller.run(), name="clusters-controller"))

    def _local_changed(self) -> None:
        if self.controller is not None:
            self.controller.local_client_changed()

    def requeue_all(self) -> None:
        self._local_changed()

    def node_changed(self, node: NodeInfo) -> None:
        if self.controller is not None:
            self.controller.node_changed(node)

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        if self.controller is not None:
            await self.controller.close()
        if self.local is not None:
            await self.local.close()

    # -- routes -------------------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if self.gateway is None:
            from vplane.apiserver.server import status_response

            return status_response(errors.service_unavailable("the platform is starting", 1))
        return await self.gateway.handle(request)

    async def diagnostics(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        """``GET clusters/<name>/diagnostics`` (RBAC: ``get`` on ``clusters/diagnostics``, administrators by
        default): the agent's sessions, pods, logs, bridge and Helm history, read through the platform's own
        connection to the cluster."""
        from vplane.apiserver.handlers import object_response, response_format

        if request.method != "GET":
            raise errors.method_not_allowed()
        self.api.objects.must_get(rtype, "", info.name)
        if self.controller is None:
            raise errors.service_unavailable("the platform is starting", 1)
        body = {
            "apiVersion": f"{GROUP}/v1",
            "kind": "ClusterDiagnostics",
            "metadata": {"name": info.name},
            **await self.controller.diagnose(info.name),
        }
        return object_response(body, response_format(request), 200, ctx)

    async def agent_values(self, request: web.Request) -> web.StreamResponse:
        """The agent's Helm values but its connection values, for the connect command: the platform's
        ``agent_values`` merged with the Cluster's ``loft.sh/agent-values``. Only the cluster's own agent
        key (or an administrator's key) may read them."""
        from vplane.apiserver.server import status_response

        try:
            name = request.path[len(AGENT_VALUES_PREFIX) :].strip("/")
            header = request.headers.get("Authorization", "")
            token = request.query.get("token") or (header[7:] if header.lower().startswith("bearer ") else "")
            try:
                identity = self.keys.check(token)
            except KeyRejected:
                raise errors.unauthorized() from None
            if (
                identity.user != accesskeys.agent_subject(name)
                and accesskeys.ADMINS_GROUP not in identity.groups
            ):
                raise errors.forbidden(
                    "clusters", GROUP, name, "this access key may not read the cluster's agent values"
                )
            rtype = self.api.registry.get(GROUP, "v1", "clusters")
            assert rtype is not None
            cluster = self.api.objects.get(rtype, "", name)
            if cluster is None:
                raise errors.not_found("clusters", name, GROUP)
            annotations = (cluster.get("metadata") or {}).get("annotations") or {}
            try:
                values = av.extra_values(
                    {}, self.settings.agent_values, annotations.get(st.AGENT_VALUES_ANNOTATION)
                )
            except av.AgentValuesInvalid as exc:
                raise errors.bad_request(str(exc)) from None
        except errors.StatusError as exc:
            return status_response(exc)
        return web.Response(text=yaml.safe_dump(values, sort_keys=True), content_type="application/yaml")

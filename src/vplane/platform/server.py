"""The platform process: a vplane API server serving ``management.loft.sh/v1``, the mesh coordinator and
relay (``/coordinator/session``, ``/derp/probe``), access keys and identities, and the controllers that
turn Projects and VirtualClusterInstances into namespaces and running tenant control planes.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from vplane.apiserver import timeutil
from vplane.apiserver.context import UserInfo
from vplane.apiserver.objects import DeleteOptions
from vplane.apiserver.server import APIServer, write_kubeconfig
from vplane.apiserver.settings import APIServerSettings
from vplane.controllers.client import KubeClient, Resource
from vplane.controllers.embedded import ManagedRun, ManagedScheduler
from vplane.controllers.kcm.settings import ControllerManagerSettings
from vplane.controllers.scheduler.settings import SchedulerSettings
from vplane.kube import accesskeys, errors
from vplane.kube.accesskeys import API_VERSION, GROUP, KeyRejected
from vplane.kube.objects import Obj
from vplane.mesh.coordinator import (
    NO_GROUPS,
    AuthenticationError,
    Coordinator,
    Groups,
    GroupVisibility,
    NodeChange,
    NodeIdentity,
    NodeInfo,
    RegistrationForbidden,
)
from vplane.mesh.settings import MeshSettings
from vplane.platform import kinds, replicas
from vplane.platform.admission import PlatformAdmission
from vplane.platform.clusters.localclient import PLATFORM_KIND
from vplane.platform.clusters.tenants import ConnectedTenants, ControllerAccess, MeshTenantProxy
from vplane.platform.clusters.wiring import ConnectedClusters, with_platform_kind
from vplane.platform.controllers import ProjectController, VirtualClusterController
from vplane.platform.identity import AccessKeyIndex
from vplane.platform.placement import HostNode, HostNodeFactory, TenantPlacement
from vplane.platform.proxyaccess import ProxyTargetAccess
from vplane.platform.replicas import Replicas
from vplane.platform.settings import PlatformSettings
from vplane.platform.tenantpods import TenantPods
from vplane.platform.tenantproxy import PREFIX, TenantProxy
from vplane.platform.tenants import TenantSupervisor
from vplane.support import tls
from vplane.support.files import private_dir
from vplane.support.tasks import cancel_and_wait

log = structlog.get_logger("vplane.platform")

ADMIN_USER = "admin"
ADMIN_KEY_NAME = "admin"
ACCESS_KEY_UID_LABEL = "vplane.io/access-key-uid"
"""Set on every mesh node by the platform: the UID of the key it registered with, so revoking a key ends
exactly its sessions."""
VCIS = Resource(API_VERSION, "VirtualClusterInstance", "virtualclusterinstances", True)


class Platform:
    def __init__(self, settings: PlatformSettings, host_node: HostNodeFactory | None = None) -> None:
        """``host_node`` makes the node the ``pods`` placement runs tenants on (the CLI passes one)."""
        if settings.tenant_placement == "pods" and host_node is None:
            raise ValueError("tenant_placement=pods needs a node runtime for the platform's cluster")
        self.settings = settings
        self.host_node_factory = host_node
        self.host_node: HostNode | None = None
        self._host_parts: list[ManagedRun | ManagedScheduler] = []
        self.data_dir = settings.data_dir
        self.shared_dir = settings.shared_dir or settings.data_dir
        """Where the store, the PKI and the mesh CA live: shared by every replica when there are several."""
        replica: dict[str, object] = {}
        if settings.shared_dir is not None:
            replica = {"shared_store": True, "kubeconfig_name": f"kubeconfig-{settings.instance_id}.yaml"}
        api_settings = APIServerSettings.model_validate(
            {
                "data_dir": self.shared_dir / "api",
                "listen_host": settings.listen_host,
                "listen_port": settings.listen_port,
                **replica,
                **settings.apiserver,
            }
        )
        self.api = APIServer(api_settings)
        for rtype in kinds.management_types():
            self.api.registry.add(rtype)
        self.keys = AccessKeyIndex(self.api)
        self.api.subresource_handlers[(GROUP, "virtualclusterinstances", "accesskey")] = (
            self.keys.vci_accesskey
        )
        self.api.subresource_handlers[(GROUP, "clusters", "accesskey")] = self.keys.cluster_accesskey
        self.api.admission.add(PlatformAdmission(self.api))
        self.proxy_access = ProxyTargetAccess(self.api, settings.project_namespace_prefix)
        self.api.admission.add(self.proxy_access)
        self.api.path_prefixes.append("/kubernetes/management")
        self.coordinator = Coordinator(
            with_platform_kind(self._authenticate_node, self.keys),
            self._on_node_change,
            visible_peers=_visible_peers,
            settings=MeshSettings.model_validate(settings.mesh),
            instance_id=settings.instance_id,
        )
        self.keys.on_revoked.append(self._disconnect_key)
        self.api.public_routes["/coordinator/session"] = self.coordinator.handle_session
        self.api.public_routes["/derp/probe"] = self.coordinator.handle_probe
        self.clusters = ConnectedClusters(self.api, self.keys, self.coordinator, settings)
        self.api.public_routes.update(self.clusters.routes())
        self.placement: TenantPlacement | None = None
        self.replicas = Replicas(
            self.api,
            settings.instance_id,
            local_nodes=self.coordinator.nodes,
            write_peer=self._record_peer,
            heartbeat_seconds=settings.replica_heartbeat_seconds,
            offline_after_seconds=settings.replica_offline_after_seconds,
            gc_after_seconds=self.coordinator.settings.gc_after_seconds,
            url=lambda: self.api.url,
        )
        # The Cluster loop reads online-ness as every replica sees it, and acts only on the clusters this
        # replica should (the one holding the agent's tunnel).
        self.clusters.nodes = self.replicas.nodes
        self.clusters.reconciles = self.replicas.reconciles
        self.replicas.on_lost.append(self.clusters.node_changed)
        self.replicas.on_replicas_changed.append(self.clusters.requeue_all)
        self.tenant_proxy: TenantProxy | None = None
        self.client: KubeClient | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._relays: set[asyncio.Task[Any]] = set()
        """Requests being relayed to tenant clusters (watches stay open): stopping cancels them, as their
        handlers outlive a client that went away and aiohttp would wait for them."""
        self.admin_key = ""

    @property
    def url(self) -> str:
        return self.api.url

    @property
    def management_kubeconfig(self) -> Path:
        return self.data_dir / "management.yaml"

    @property
    def ca_path(self) -> Path:
        return self.shared_dir / "api" / "pki" / "ca.crt"

    async def start(self) -> None:
        if self.settings.shared_dir is not None:
            # Replicas starting together take turns: the first creates the PKI, tokens, mesh CA and bootstrap
            # objects, the next read them (its store catches up on the first one's rows when it opens).
            await asyncio.to_thread(private_dir, self.shared_dir)
            lock = await asyncio.to_thread(replicas.startup_lock, self.shared_dir)
            try:
                mesh_ca = await self._start_store()
            finally:
                lock.release()
        else:
            mesh_ca = await self._start_store()
        await self.coordinator.start()
        await self.replicas.start()
        assert self.api.ca is not None
        write_kubeconfig(
            self.management_kubeconfig,
            self.url,
            self.api.ca.cert_pem,
            self.admin_key,
            "management",
        )
        self.client = KubeClient.from_kubeconfig(self.management_kubeconfig, field_manager="vplane-platform")
        await self.clusters.start(self.client, self.management_kubeconfig)
        projects = ProjectController(self.client, self.settings)
        self._tasks.append(asyncio.create_task(projects.controller.run()))
        if self.settings.tenant_controllers:
            placement: TenantPlacement
            if self.settings.tenant_placement == "pods":
                await self._start_host_cluster()
                pods = TenantPods(self.settings, self.client, self.url, self.ca_path, mesh_ca)
                await pods.start()
                placement = pods
            else:
                placement = TenantSupervisor(self.settings, self.url, self.ca_path, mesh_ca)
            self.placement = placement
            # Issue 11 item 6: tenants whose spec.clusterRef.cluster names a connected cluster run there.
            assert self.clusters.controller is not None and self.clusters.local is not None
            cluster_loop = self.clusters.controller
            connected = ConnectedTenants(
                self.settings,
                ControllerAccess(cluster_loop.client_for),
                self.coordinator.nodes,
                self.url,
                self.ca_path,
                placement.changed,
            )
            cluster_loop.informer.add_handlers(
                on_add=lambda _obj: placement.changed.set(),
                on_update=lambda _old, _new: placement.changed.set(),
                on_delete=lambda _obj: placement.changed.set(),
            )
            self.tenant_proxy = MeshTenantProxy(
                lambda ns, name: connected.get(ns, name) or placement.get(ns, name),
                lambda ns, name: placement.directory(ns, name) / "pki" / "ca.crt",
                self.settings.project_namespace_prefix,
                self.api.authenticate,
                self.settings.tenant_upgrade_timeout_seconds,
                connected=connected,
                mesh_http=self.clusters.local.http,
                mesh_dial=self.clusters.local.dial,
            )
            self.api.public_routes[PREFIX] = self._relay
            vcis = VirtualClusterController(
                self.client,
                self.settings,
                placement,
                self.keys.ensure_vci_key,
                self.keys.revoke_vci_keys,
                connected=connected,
                clusters=cluster_loop.informer.get,
            )
            self._tasks += [
                asyncio.create_task(vcis.controller.run()),
                asyncio.create_task(vcis.watch_placement()),
            ]
        log.info(
            "platform serving",
            url=self.url,
            kubeconfig=str(self.management_kubeconfig),
            instance=self.settings.instance_id,
        )

    async def _start_host_cluster(self) -> None:
        """The platform's own cluster, where the ``pods`` placement runs tenants: this API server with a
        controller manager and a scheduler over loopback (as ``vplane cluster start`` runs them, each when its
        API server setting enables it) and one node runtime."""
        assert self.api.ca is not None and self.host_node_factory is not None
        api = self.api.settings
        if api.controller_manager:
            run = ManagedRun(
                self.management_kubeconfig,
                ControllerManagerSettings.model_validate(api.controller_manager_settings),
                root_ca=self.api.ca.cert_pem,
            )
            self._host_parts.append(run)
            await run.start()
        if api.scheduler:
            scheduler = ManagedScheduler(
                self.management_kubeconfig, SchedulerSettings.model_validate(api.scheduler_settings)
            )
            self._host_parts.append(scheduler)
            await scheduler.start()
        self.host_node = self.host_node_factory(self.management_kubeconfig, self.api.ca)
        await self.host_node.start()
        log.info("platform cluster node running", kubeconfig=str(self.management_kubeconfig))

    async def _start_store(self) -> tls.CertPair:
        """The API server on its store, the access-key index, the platform's own objects, the mesh CA."""
        await self.api.start()
        self.keys.load()
        await self._bootstrap()
        return await asyncio.to_thread(_mesh_ca, self.shared_dir / "mesh")

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        assert self.tenant_proxy is not None
        task = asyncio.current_task()
        if task is not None:
            self._relays.add(task)
        try:
            return await self.tenant_proxy.handle(request)
        finally:
            if task is not None:
                self._relays.discard(task)

    async def stop(self) -> None:
        """Stop within a few seconds whatever is open: controllers, relayed requests (watches), tenant
        replicas (saying which ones it waits for), the mesh, the API server."""
        if self.placement is not None:
            self.placement.begin_shutdown()  # replicas exiting from now on are expected, not restarted
        await cancel_and_wait(self._tasks)
        await self.clusters.stop()
        if self._relays:
            log.info("stopping: closing relayed requests to tenant clusters", requests=len(self._relays))
            await cancel_and_wait(list(self._relays))
        if self.tenant_proxy is not None:
            await self.tenant_proxy.close()
        if self.placement is not None:
            await self.placement.close()
        if self.host_node is not None:
            await self.host_node.stop()  # stops its pods (the tenants' replicas) and records how they ended
        for part in reversed(self._host_parts):
            await part.stop()
        await self.coordinator.close()
        await self.replicas.stop()
        if self.client is not None:
            await self.client.close()
        await self.api.stop()

    def force_stop(self) -> None:
        """The second Ctrl-C: kill the tenant replicas now (their stores are durable), wait for nothing."""
        if self.placement is not None:
            self.placement.kill_all()
        if self.host_node is not None:
            self.host_node.force_stop()

    # -- bootstrap -------------------------------------------------------------------------------

    async def _bootstrap(self) -> None:
        """The admin user, its access key, and the platform's own RBAC."""
        api = self.api
        ctx = api.system_context()
        users = api.registry.get(GROUP, "v1", "users")
        keys = api.registry.get(GROUP, "v1", "accesskeys")
        crbs = api.registry.get("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
        assert users is not None and keys is not None and crbs is not None
        if api.objects.get(users, "", ADMIN_USER) is None:
            await api.objects.create(
                ctx,
                users,
                "",
                {
                    "apiVersion": API_VERSION,
                    "kind": "User",
                    "metadata": {"name": ADMIN_USER},
                    "spec": {
                        "username": ADMIN_USER,
                        "displayName": "Administrator",
                        "groups": [accesskeys.ADMINS_GROUP],
                    },
                },
            )
        key = api.objects.get(keys, "", ADMIN_KEY_NAME)
        if key is None:
            key = await api.objects.create(
                ctx,
                keys,
                "",
                accesskeys.key_object(
                    ADMIN_KEY_NAME,
                    accesskeys.TYPE_USER,
                    user=ADMIN_USER,
                    display_name="admin (created by vplane)",
                ),
            )
        self.admin_key = key["spec"]["key"]
        for name, role, group in (
            ("loft-admins", "cluster-admin", accesskeys.ADMINS_GROUP),
            ("loft-vclusters-auth-delegator", "system:auth-delegator", accesskeys.VCLUSTERS_GROUP),
        ):
            if api.objects.get(crbs, "", name) is None:
                await api.objects.create(
                    ctx,
                    crbs,
                    "",
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "ClusterRoleBinding",
                        "metadata": {"name": name},
                        "roleRef": {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": "ClusterRole",
                            "name": role,
                        },
                        "subjects": [
                            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
                        ],
                    },
                )

    # -- mesh ------------------------------------------------------------------------------------

    def _disconnect_key(self, key: Obj) -> None:
        """A key that stopped working (deleted, disabled, its instance deleted) ends the sessions it opened,
        and only those: another key of the same subject (a recreated instance's) keeps its own; an expired
        key's sessions end at reconnect."""
        uid = str((key.get("metadata") or {}).get("uid", ""))
        if uid:
            self.coordinator.disconnect(
                lambda node: node.labels.get(ACCESS_KEY_UID_LABEL) == uid, "access key revoked"
            )

    async def _authenticate_node(self, token: str) -> NodeIdentity:
        try:
            identity = self.keys.check(token)
        except KeyRejected as exc:
            raise AuthenticationError(str(exc)) from None
        if not identity.has_role(accesskeys.ROLE_NETWORK_PEER):
            raise AuthenticationError(
                "invalid access key: its scope does not allow joining the platform network"
            )
        key = self.keys.by_name.get(identity.key_name) or {}
        labels = dict((key.get("metadata") or {}).get("labels") or {})
        labels[ACCESS_KEY_UID_LABEL] = str((key.get("metadata") or {}).get("uid", ""))
        kind = "vcluster" if identity.key_type == accesskeys.TYPE_VCLUSTER else "agent"
        instance, namespace = (
            labels.get("loft.sh/virtualcluster-instance"),
            labels.get("loft.sh/project-namespace"),
        )
        if kind == "vcluster" and instance and namespace:
            # Set here, never by the node (the coordinator refuses node labels under vplane.io/).
            labels["vplane.io/tenant"] = instance
            labels["vplane.io/project"] = namespace.removeprefix(self.settings.project_namespace_prefix)
            user = UserInfo(identity.user, identity.key_name, (*identity.groups, "system:authenticated"))
            refusal = await self.proxy_access.registration_refusal(user, namespace, instance)
            if refusal is not None:
                # Its key is good; the permission may be granted, and the tenant keeps trying until it is.
                raise RegistrationForbidden(refusal)
        return NodeIdentity(identity.user, kind, labels)

    async def _on_node_change(self, change: NodeChange) -> None:
        """Mirror each mesh node as a NetworkPeer (online, lastSeen, the replica holding its session)."""
        node = change.node
        self.clusters.node_changed(node)
        if node.kind == PLATFORM_KIND:
            return  # the platform's own node (how it reaches agent tunnels) is no peer to list
        await self._record_peer(node, change.type)

    async def _record_peer(self, node: NodeInfo, change: str = "online") -> None:
        """Write the node's NetworkPeer as this replica's coordinator sees it. A session that ended or a node
        forgotten here never overwrites a peer another replica holds now (the agent moved there)."""
        api = self.api
        rtype = api.registry.get(GROUP, "v1", "networkpeers")
        assert rtype is not None
        ctx = api.system_context()
        current = api.objects.get(rtype, "", node.id)
        taken = current is not None and replicas.peer_state(current).holder != node.coordinator_id
        if change in ("offline", "removed") and taken:
            return
        if change == "removed":
            if current is not None:
                with contextlib.suppress(errors.StatusError):  # changed meanwhile: kept
                    options = DeleteOptions(
                        "Background", None, "", str(current["metadata"]["resourceVersion"])
                    )
                    await api.objects.delete(ctx, rtype, "", node.id, options)
            return
        desired = _network_peer(node)
        try:
            if current is None:
                current = await api.objects.create(
                    ctx, rtype, "", {k: v for k, v in desired.items() if k != "status"}
                )
            elif (
                current.get("spec") != desired["spec"]
                or (current["metadata"].get("annotations") or {}) != desired["metadata"]["annotations"]
            ):

                def mutate(obj: Obj) -> Obj:
                    if not node.online and replicas.peer_state(obj).holder != node.coordinator_id:
                        return obj
                    obj["spec"] = desired["spec"]
                    obj["metadata"]["annotations"] = desired["metadata"]["annotations"]
                    obj["metadata"]["labels"] = desired["metadata"]["labels"]
                    return obj

                current = await api.objects.guaranteed_update(ctx, rtype, "", node.id, mutate)
            if (current.get("status") or {}) != desired["status"]:

                def set_status(obj: Obj) -> Obj:
                    if not node.online and replicas.peer_state(obj).holder != node.coordinator_id:
                        return obj  # taken by another replica between our read and this write
                    obj["status"] = desired["status"]
                    return obj

                await api.objects.guaranteed_update(ctx, rtype, "", node.id, set_status, subresource="status")
        except errors.StatusError as exc:
            log.warning("could not record network peer", node=node.id, error=exc.message)


def _mesh_ca(directory: Path) -> tls.CertPair:
    cert, key = directory / "ca.crt", directory / "ca.key"
    if cert.exists():
        return tls.CertPair.read(cert, key)
    pair = tls.make_ca(tls.unique_ca_name("vplane-mesh-ca"))
    pair.write(cert, key)
    return pair


def _peer_groups(node: NodeInfo) -> Groups:
    """Tenant control planes see every tenant control plane (which targets a tenant may use is checked by
    platform RBAC when it registers a proxy target); agents see no one (they only talk to the platform); the
    platform's own node sees every agent (it reaches their tunnels) and every tenant control plane (it reaches
    tenants on connected clusters through the mesh, issue 11 item 6), and is seen by no one."""
    if node.kind == PLATFORM_KIND:
        return Groups(sees=AGENTS | TENANTS)
    if node.kind == "vcluster":
        return Groups(TENANTS, TENANTS)
    if node.kind == "agent":
        return Groups(member_of=AGENTS)
    return NO_GROUPS


AGENTS = frozenset({"agent"})
TENANTS = frozenset({"vcluster"})
_visible_peers = GroupVisibility(_peer_groups)


def _network_peer(node: NodeInfo) -> Obj:
    annotations = replicas.peer_annotations(node)
    labels = {k: v for k, v in node.labels.items() if "/" in k}
    status: Obj = {"online": node.online}
    if not node.online:
        status["lastSeen"] = timeutil.rfc3339(node.last_seen)
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPeer",
        "metadata": {"name": node.id, "annotations": annotations, "labels": labels},
        "spec": {"endpoints": list(node.endpoints), "addresses": [], "allowedIPs": []},
        "status": status,
    }

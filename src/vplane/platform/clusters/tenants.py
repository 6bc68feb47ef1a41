"""Issue 11 item 6: tenant control planes on connected clusters (``spec.clusterRef.cluster``).

The platform lays a tenant out on a connected cluster as the ``pods`` placement does on its own
(:mod:`vplane.platform.tenantpods`: namespace ``vcluster-<name>``, StatefulSet ``<name>`` with label
``app=vcluster``, Services ``<name>`` and ``<name>-headless``), applied through the same connection the
Cluster loop uses (the gateway through the agent's tunnel, with the agent's service-account permissions, or
the ``spec.config`` kubeconfig). What differs, because the cluster is somewhere else:

- **Files** come in a Secret ``<name>-platform`` (keys ``access-key``, ``vcluster.yaml``, ``platform-ca.crt``)
  mounted as volume ``platform``, not from the platform's disk.
- **The store** (SQLite in shared mode, the tenant's PKI) lives on the connected cluster, in a
  PersistentVolumeClaim ``data-<name>`` that every replica mounts (vplane's node runtime keeps a claim's
  directory after its pods; a real cluster provisions it): the tenant keeps running, and keeps its data,
  while the platform is away.
- **The endpoint**: replicas join the platform's mesh themselves (``--platform-url``), so the platform reaches
  a replica through its own mesh node and the coordinator's relay (``http://<mesh node>/...``, the tenant's
  API served on relayed streams), not through the agent: kubectl through the platform keeps working while
  the agent is cut. No direct mesh listener (no mesh certificate is shipped): peers use the relay.

While the cluster cannot be reached nothing is deleted and the replicas last seen stay the instance's (its
pods keep running); :mod:`.tenantstatus` says what the instance shows.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import structlog

from vplane.controllers.client import NAMESPACES, KubeClient, Resource, TransportError
from vplane.kube import errors
from vplane.kube.objects import Obj
from vplane.mesh.coordinator import NodeInfo
from vplane.mesh.session import Stream
from vplane.platform.clusters import status as st
from vplane.platform.clusters.localclient import Unavailable
from vplane.platform.placement import CONFIG_FILE, Replica, Tenant, TenantSpec, tenant_args
from vplane.platform.settings import PlatformSettings
from vplane.platform.tenantnet import TenantNetwork, tenant_network
from vplane.platform.tenantpods import (
    FIELD_MANAGER,
    OWNER_ANNOTATION,
    PODS,
    SERVICES,
    STATEFULSETS,
    PodParams,
    follow_pods,
    host_namespace,
    manifests,
    owner,
)
from vplane.platform.tenantproxy import Connect, TenantProxy
from vplane.platform.tenants import recorded_ports
from vplane.support.files import private_dir

log = structlog.get_logger("vplane.platform.clusters.tenants")

SECRETS = Resource("v1", "Secret", "secrets", True)
CLAIMS = Resource("v1", "PersistentVolumeClaim", "persistentvolumeclaims", True)
FILES_VOLUME = "platform"
ACCESS_KEY_KEY = "access-key"
PLATFORM_CA_KEY = "platform-ca.crt"
TENANT_LABEL = "vplane.io/tenant"
PROJECT_LABEL = "vplane.io/project"
REPLICA_LABEL = "replica"


class ClusterUnreachable(Exception):
    """The connected cluster cannot be reached now (no client, no online agent session, a failed request); the
    message says why, without the cluster's name."""


class ClusterAccess(Protocol):
    async def client(self, cluster: str) -> KubeClient:
        """A client for the cluster's API (raises :class:`ClusterUnreachable`)."""
        ...


# -- pure: what the connected cluster should hold ------------------------------------------------------


def files_secret_name(name: str) -> str:
    return f"{name}-platform"


def claim_name(name: str) -> str:
    return f"data-{name}"


def remote_manifests(
    spec: TenantSpec, params: PodParams, namespace: str, platform_ca: bytes, storage: str
) -> tuple[Obj, list[Obj]]:
    """The ``pods`` placement's layout moved to ``namespace``, its ``hostPath`` data replaced by the claim,
    plus the files Secret and the claim."""
    ns, objects = manifests(spec, params)
    ns["metadata"]["name"] = namespace
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    pod["volumes"] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": claim_name(spec.name)}},
        {"name": FILES_VOLUME, "secret": {"secretName": files_secret_name(spec.name), "defaultMode": 0o400}},
    ]
    container = pod["containers"][0]
    container["volumeMounts"] = [
        *container["volumeMounts"],
        {"name": FILES_VOLUME, "mountPath": "/etc/vplane/platform", "readOnly": True},
    ]
    labels = dict(sts["metadata"]["labels"])
    secret: Obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": files_secret_name(spec.name), "namespace": namespace, "labels": labels},
        "type": "Opaque",
        "data": {
            ACCESS_KEY_KEY: base64.b64encode(spec.access_key.encode()).decode(),
            CONFIG_FILE: base64.b64encode(spec.values.encode()).decode(),
            PLATFORM_CA_KEY: base64.b64encode(platform_ca).decode(),
        },
    }
    claim: Obj = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim_name(spec.name), "namespace": namespace, "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
    }
    return ns, [secret, claim, *objects]


def remote_args(
    spec: TenantSpec,
    settings: PlatformSettings,
    port: int,
    platform_url: str,
    network: TenantNetwork | None = None,
) -> list[str]:
    """``tenant start`` reading its data from the claim and its files from the Secret's volume."""
    data, files = "$(VPLANE_MOUNT_DATA)", f"$(VPLANE_MOUNT_{FILES_VOLUME.upper()})"
    args = tenant_args(
        spec,
        settings,
        data_dir=data,
        replica="$(VPLANE_REPLICA)",
        listen=f"$(POD_IP):{port}",
        platform_url=platform_url,
        platform_ca=f"{files}/{PLATFORM_CA_KEY}",
        network=network,
    )
    out = []
    for arg in args:
        if arg == f"{data}/{ACCESS_KEY_KEY}":
            arg = f"{files}/{ACCESS_KEY_KEY}"
        elif arg == f"config_file={data}/{CONFIG_FILE}":
            arg = f"config_file={files}/{CONFIG_FILE}"
        out.append(arg)
    return out


def mesh_nodes(nodes: Sequence[NodeInfo], name: str, project: str) -> dict[int, str]:
    """Replica index -> the id of its online mesh node (the platform labels tenant nodes from their key)."""
    found: dict[int, tuple[float, str]] = {}
    for node in nodes:
        labels = node.labels
        if node.kind != "vcluster" or not node.online:
            continue
        if labels.get(TENANT_LABEL) != name or labels.get(PROJECT_LABEL) != project:
            continue
        try:
            index = int(labels.get(REPLICA_LABEL, ""))
        except ValueError:
            continue
        when = node.connected_at or 0.0
        if index not in found or when > found[index][0]:
            found[index] = (when, node.id)
    return {i: node_id for i, (_, node_id) in found.items()}


def _digest(objects: list[Any]) -> str:
    return hashlib.sha256(json.dumps(objects, sort_keys=True).encode()).hexdigest()


@dataclass
class _Placed:
    cluster: str
    namespace: str
    port: int


# -- the placement -------------------------------------------------------------------------------------


class ConnectedTenants:
    """Tenants on connected clusters: ``ensure``/``remove`` through the cluster's connection."""

    def __init__(
        self,
        settings: PlatformSettings,
        access: ClusterAccess,
        nodes: Callable[[], Sequence[NodeInfo]],
        platform_url: str,
        platform_ca: Path,
        changed: asyncio.Event,
    ) -> None:
        self.settings = settings
        self.access = access
        self.nodes = nodes
        self.platform_url = platform_url
        self.platform_ca = platform_ca
        self.changed = changed
        self.root = settings.data_dir / "tenants"
        self.tenants: dict[tuple[str, str], Tenant] = {}
        self._placed: dict[tuple[str, str], _Placed] = {}
        self._applied: dict[tuple[str, str], str] = {}

    def get(self, namespace: str, name: str) -> Tenant | None:
        return self.tenants.get((namespace, name))

    def node_for(self, namespace: str, name: str, index: int) -> str | None:
        tenant = self.tenants.get((namespace, name))
        if tenant is None:
            return None
        project = namespace.removeprefix(self.settings.project_namespace_prefix)
        return mesh_nodes(self.nodes(), name, project).get(index)

    def _port(self, spec: TenantSpec) -> int:
        """Kept on the platform's side (``ports.json``), so re-applying never moves the replicas."""
        return self.settings.tenant_pod_port or recorded_ports(self.root / spec.namespace / spec.name, 1)[0]

    async def ensure(self, spec: TenantSpec) -> Tenant:
        """Apply the tenant's objects on ``spec.cluster`` (when they changed) and read its pods. Raises
        :class:`ClusterUnreachable` when the cluster cannot be reached: the last replicas seen stay."""
        key = spec.key
        tenant = self.tenants.get(key)
        if tenant is None:
            tenant = Tenant(spec, self.root / spec.namespace / spec.name)
            self.tenants[key] = tenant
        tenant.spec = spec
        namespace = spec.host_namespace or host_namespace(spec.name)
        port = await asyncio.to_thread(self._port, spec)
        if self.settings.tenant_node and tenant.network is None:
            # The tenant's node gets ranges of its own, as on the platform's cluster: the connected cluster's
            # own node (and its other tenants) use the default ones on that machine.
            directory = self.root / spec.namespace / spec.name
            await asyncio.to_thread(private_dir, directory)
            tenant.network = await asyncio.to_thread(tenant_network, self.settings, self.root, directory)
        self._placed[key] = _Placed(spec.cluster, namespace, port)
        ca = await asyncio.to_thread(self.platform_ca.read_bytes)
        params = PodParams(
            image=self.settings.tenant_image,
            port=port,
            service_port=self.settings.tenant_service_port,
            directory="",
            args=tuple(remote_args(spec, self.settings, port, self.platform_url, tenant.network)),
            env=(*spec.env, ("PYTHONUNBUFFERED", "1")),
            readiness_period_seconds=self.settings.tenant_readiness_period_seconds,
            termination_grace_seconds=max(1, round(self.settings.tenant_stop_timeout_seconds)),
        )
        ns, objects = remote_manifests(spec, params, namespace, ca, self.settings.connected_tenant_storage)
        client = await self.access.client(spec.cluster)
        try:
            wanted = _digest([spec.cluster, ns, *objects])
            if self._applied.get(key) != wanted:
                if not await self._apply(tenant, client, ns, objects):
                    return tenant
                self._applied[key] = wanted
                log.info(
                    "tenant applied on connected cluster",
                    tenant=spec.name,
                    cluster=spec.cluster,
                    namespace=namespace,
                    replicas=spec.replicas,
                )
            pods = await client.list(
                PODS, namespace=namespace, label_selector={"app": "vcluster", "release": spec.name}
            )
        except (errors.StatusError, TransportError) as exc:
            if isinstance(exc, errors.StatusError) and exc.code not in (502, 503, 504):
                raise
            raise ClusterUnreachable(st.describe(exc)) from None
        follow_pods(tenant, pods.items, port, self.settings.tenant_ready_timeout_seconds)
        return tenant

    async def _apply(self, tenant: Tenant, client: KubeClient, namespace: Obj, objects: list[Obj]) -> bool:
        ns_name = namespace["metadata"]["name"]
        wanted_owner = namespace["metadata"]["annotations"][OWNER_ANNOTATION]
        try:
            current = await client.get(NAMESPACES, ns_name)
        except errors.StatusError as exc:
            if exc.code != 404:
                raise
            current = await client.create(NAMESPACES, namespace)
        meta = current.get("metadata") or {}
        current_owner = (meta.get("annotations") or {}).get(OWNER_ANNOTATION)
        if current_owner != wanted_owner:
            other = f" to tenant cluster {current_owner}" if current_owner else " to something else"
            tenant.failed = f'namespace "{ns_name}" of cluster "{tenant.spec.cluster}" belongs{other}'
            return False
        if meta.get("deletionTimestamp"):
            raise errors.service_unavailable(f'namespace "{ns_name}" is still being deleted', 1)
        resources = {
            "Secret": SECRETS,
            "PersistentVolumeClaim": CLAIMS,
            "Service": SERVICES,
            "StatefulSet": STATEFULSETS,
        }
        for obj in objects:
            if obj["kind"] == "PersistentVolumeClaim":
                # A claim's spec is immutable once bound: create it once, never re-apply it.
                try:
                    await client.get(CLAIMS, obj["metadata"]["name"], namespace=ns_name)
                    continue
                except errors.StatusError as exc:
                    if exc.code != 404:
                        raise
            await client.apply(resources[obj["kind"]], obj, field_manager=FIELD_MANAGER, force=True)
        return True

    async def remove(self, cluster: str, namespace: str, name: str, host_ns: str = "") -> None:
        """Delete the tenant's namespace on the cluster (if it is this instance's); its claim's data goes with
        it where the cluster deletes claims' volumes. Raises :class:`ClusterUnreachable` while it cannot."""
        key = (namespace, name)
        placed = self._placed.get(key)
        ns_name = placed.namespace if placed is not None else (host_ns or host_namespace(name))
        client = await self.access.client(cluster)
        try:
            try:
                current = await client.get(NAMESPACES, ns_name)
            except errors.StatusError as exc:
                if exc.code != 404:
                    raise
                current = None
            if current is not None:
                annotations = (current.get("metadata") or {}).get("annotations") or {}
                if annotations.get(OWNER_ANNOTATION) == owner(namespace, name):
                    if not (current.get("metadata") or {}).get("deletionTimestamp"):
                        await client.delete(NAMESPACES, ns_name)
                        log.info(
                            "deleting tenant namespace on connected cluster", tenant=name, cluster=cluster
                        )
        except (errors.StatusError, TransportError) as exc:
            if isinstance(exc, errors.StatusError) and exc.code not in (502, 503, 504):
                raise
            raise ClusterUnreachable(st.describe(exc)) from None
        self.tenants.pop(key, None)
        self._placed.pop(key, None)
        self._applied.pop(key, None)

    def adopt(self, spec: TenantSpec) -> None:
        """An instance this process has not placed yet (it restarted) whose cluster is away: its replicas are
        those holding a mesh session, so the tenant path reaches them until the cluster is back."""
        tenant = self.tenants.get(spec.key)
        if tenant is not None and tenant.replicas:
            return
        tenant = Tenant(spec, self.root / spec.namespace / spec.name)
        project = spec.namespace.removeprefix(self.settings.project_namespace_prefix)
        tenant.replicas = {
            index: Replica(index, 0, host=node, ready=True)
            for index, node in mesh_nodes(self.nodes(), spec.name, project).items()
        }
        self.tenants[spec.key] = tenant

    def forget(self, namespace: str, name: str) -> None:
        self.tenants.pop((namespace, name), None)
        self._placed.pop((namespace, name), None)
        self._applied.pop((namespace, name), None)


# -- the tenant path ---------------------------------------------------------------------------------


class MeshTenantProxy(TenantProxy):
    """The platform's tenant path, reaching tenants on connected clusters through its own mesh node: requests
    as HTTP over a mesh dial, upgrades (exec, attach, port-forward) as bytes over one."""

    def __init__(
        self,
        *args: Any,
        connected: ConnectedTenants,
        mesh_http: Callable[[], aiohttp.ClientSession],
        mesh_dial: Callable[[str], Awaitable[Stream]],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.connected = connected
        self.mesh_http = mesh_http
        self.mesh_dial = mesh_dial

    def _node(self, namespace: str, name: str, replica: Replica) -> str:
        node = self.connected.node_for(namespace, name, replica.index)
        if node is None:
            raise errors.service_unavailable(
                f'replica {replica.index} of tenant cluster "{name}" has no mesh session with the platform', 1
            )
        return node

    def _route(
        self, namespace: str, name: str, replica: Replica, target: str
    ) -> tuple[aiohttp.ClientSession, str]:
        if self.connected.get(namespace, name) is None:
            return super()._route(namespace, name, replica, target)
        node = self._node(namespace, name, replica)
        try:
            http = self.mesh_http()
        except Exception as exc:
            raise errors.service_unavailable(f"the platform's mesh client is unavailable: {exc}", 1) from None
        return http, f"http://{node}{target[len(replica.url) :]}"

    def _upgrade_dial(self, namespace: str, name: str, replica: Replica) -> tuple[str, Connect]:
        """The replica's mesh node (it serves its API on the mesh, plain HTTP in the mesh's encryption), as
        for requests; a dial that fails is the tenant being unreachable (503)."""
        if self.connected.get(namespace, name) is None:
            return super()._upgrade_dial(namespace, name, replica)
        node = self._node(namespace, name, replica)
        timeout = self.upgrade_timeout

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            try:
                stream = await asyncio.wait_for(self.mesh_dial(node), timeout)
            except Unavailable as exc:
                raise ConnectionError(f"the platform's mesh client is unavailable: {exc}") from None
            return stream.reader, stream.writer

        return node, connect


class ControllerAccess:
    """:class:`ClusterAccess` through the Cluster loop's own clients (the tunnel's gateway or ``spec.config``)."""

    def __init__(self, client_for: Callable[[str], Awaitable[KubeClient]]) -> None:
        self.client_for = client_for

    async def client(self, cluster: str) -> KubeClient:
        try:
            return await self.client_for(cluster)
        except LookupError as exc:
            raise ClusterUnreachable(str(exc)) from None

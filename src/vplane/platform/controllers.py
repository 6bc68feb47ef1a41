"""The platform's controllers. They reach the management API over HTTP with the platform's own
kubeconfig (like any controller, per the design principle), through :mod:`vplane.controllers`.

- Projects: each Project owns a namespace ``p-<name>``.
- VirtualClusterInstances: each one runs as tenant control-plane replicas (the placement: processes or
  pods, see :mod:`vplane.platform.placement`), with the replica count from its vcluster.yaml; status says
  whether it is ready; deletion stops the replicas, removes their data and revokes the instance's access
  key, behind a finalizer. Each instance (each UID)
  gets a key of its own, so a new instance of a deleted one's name never inherits its key.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from vplane.controllers.client import NAMESPACES, KubeClient, Resource
from vplane.controllers.informer import Informer, split_key
from vplane.controllers.reconciler import Controller
from vplane.kube import errors
from vplane.kube import tenantconfig as tenant_config
from vplane.kube.accesskeys import API_VERSION, project_namespace
from vplane.kube.objects import Obj
from vplane.platform.clusters import tenantstatus as ts
from vplane.platform.clusters.tenants import ClusterUnreachable, ConnectedTenants
from vplane.platform.placement import TenantPlacement, TenantSpec
from vplane.platform.settings import PlatformSettings

log = structlog.get_logger("vplane.platform.controllers")

PROJECTS = Resource(API_VERSION, "Project", "projects", False)
VCIS = Resource(API_VERSION, "VirtualClusterInstance", "virtualclusterinstances", True)
CLEANUP_FINALIZER = "loft.sh/cleanup"
PROJECT_LABEL = "loft.sh/project"


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ProjectController:
    def __init__(self, client: KubeClient, settings: PlatformSettings) -> None:
        self.client = client
        self.settings = settings
        self.informer = Informer(client, PROJECTS)
        self.controller = Controller("projects", self.informer, self.reconcile)

    async def reconcile(self, key: str) -> float | None:
        _, name = split_key(key)
        project = self.informer.get(key)
        ns_name = project_namespace(name, self.settings.project_namespace_prefix)
        if project is None:
            with contextlib.suppress(errors.StatusError):
                await self.client.delete(NAMESPACES, ns_name)
            return None
        try:
            await self.client.get(NAMESPACES, ns_name)
        except errors.StatusError as exc:
            if exc.code != 404:
                raise
            await self.client.create(
                NAMESPACES,
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns_name, "labels": {PROJECT_LABEL: name}},
                },
            )
        if (project.get("status") or {}).get("namespace") != ns_name:
            await self.client.patch(PROJECTS, name, {"status": {"namespace": ns_name}}, subresource="status")
        return None


class VirtualClusterController:
    def __init__(
        self,
        client: KubeClient,
        settings: PlatformSettings,
        placement: TenantPlacement,
        access_key: Callable[[Obj], Awaitable[Obj]],
        revoke_keys: Callable[[str, str], Awaitable[list[str]]],
        connected: ConnectedTenants | None = None,
        clusters: Callable[[str], Obj | None] = lambda _name: None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.placement = placement
        self.access_key = access_key
        """The key of an instance (minted for its UID on first use)."""
        self.revoke_keys = revoke_keys
        """Delete every key of ``(namespace, name)``: the instance is gone."""
        self.connected = connected
        """Issue 11 item 6: instances whose ``spec.clusterRef.cluster`` names a connected cluster run there."""
        self.clusters = clusters
        """The Cluster object of a name (None: no such Cluster)."""
        self.informer = Informer(client, VCIS)
        self.controller = Controller("virtualclusterinstances", self.informer, self.reconcile, workers=2)

    async def watch_placement(self) -> None:
        """Replica readiness changes outside the API: requeue every instance when it does."""
        while True:
            await self.placement.changed.wait()
            self.placement.changed.clear()
            pending = self.informer.keys()
            for key in pending:
                self.controller.enqueue(key)

    async def reconcile(self, key: str) -> float | None:
        namespace, name = split_key(key)
        assert namespace is not None
        vci = self.informer.get(key)
        if vci is None:
            await self.placement.remove(namespace, name)
            if self.connected is not None:
                self.connected.forget(namespace, name)
            await self.revoke_keys(namespace, name)
            return None
        meta = vci["metadata"]
        if meta.get("deletionTimestamp"):
            waiting = await self._remove_connected(vci, namespace, name)
            if waiting is not None:
                return waiting
            await self.placement.remove(namespace, name)
            await self.revoke_keys(namespace, name)
            if CLEANUP_FINALIZER in (meta.get("finalizers") or []):
                finalizers = [f for f in meta["finalizers"] if f != CLEANUP_FINALIZER]
                await self.client.patch(
                    VCIS,
                    name,
                    {
                        "metadata": {
                            "finalizers": finalizers or None,
                            "resourceVersion": meta["resourceVersion"],
                        }
                    },
                    namespace=namespace,
                )
            return None
        if CLEANUP_FINALIZER not in (meta.get("finalizers") or []):
            finalizers = [*(meta.get("finalizers") or []), CLEANUP_FINALIZER]
            await self.client.patch(
                VCIS,
                name,
                {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}},
                namespace=namespace,
            )
            return None
        project = (meta.get("labels") or {}).get(PROJECT_LABEL) or _project_of(namespace, self.settings)
        values = ((vci.get("spec") or {}).get("template") or {}).get("helmRelease", {}).get("values")
        try:
            config = tenant_config.parse(values)
        except tenant_config.ConfigInvalid as exc:
            await self._status(vci, "Failed", "InvalidConfig", str(exc), [])
            return None
        route = ts.Route("local")
        if self.connected is not None:
            route = ts.route(vci, self.clusters(ts.cluster_ref(vci)[0] or ts.deployed_on(vci)))
            if route.kind != "local" and route.kind != "connected":
                if route.kind == "unmanaged":
                    self.connected.adopt(TenantSpec(project, namespace, name, config.replicas, "", ""))
                return await self._connected_waiting(vci, route)
        access_key = await self.access_key(vci)
        spec = TenantSpec(
            project, namespace, name, config.replicas, str(access_key["spec"]["key"]), values or ""
        )
        if route.kind == "connected":
            assert self.connected is not None
            if ts.deployed_on(vci) != route.cluster:
                # Recorded before anything is applied there: deletion must know where to clean up.
                await self.client.patch(
                    VCIS,
                    name,
                    {"metadata": {"annotations": {ts.DEPLOYED_ANNOTATION: route.cluster}}},
                    namespace=namespace,
                )
                return None  # the annotated object comes back as an event
            spec = dataclasses.replace(spec, cluster=route.cluster, host_namespace=route.namespace)
            try:
                tenant = await self.connected.ensure(spec)
            except ClusterUnreachable as exc:
                return await self._connected_waiting(
                    vci,
                    ts.unmanaged(
                        route.cluster, route.namespace, f'cluster "{route.cluster}" is offline ({exc})'
                    ),
                )
        else:
            tenant = await self.placement.ensure(spec)
        ready = tenant.ready_replicas
        if tenant.failed:
            phase, reason, message = "Failed", "ReplicaNotReady", tenant.failed
        elif ready == config.replicas:
            phase, reason, message = "Ready", "", ""
        else:
            phase, reason, message = "Pending", "Starting", f"{ready}/{config.replicas} replicas ready"
        await self._status(
            vci,
            phase,
            reason,
            message,
            tenant.endpoints(),
            ready,
            config.replicas,
            extra=ts.condition_updates(route),
        )
        if route.kind == "connected":
            # Pods on a connected cluster are not watched: their readiness is read again periodically.
            s = self.settings
            return s.cluster_resync_seconds if phase == "Ready" else s.connected_tenant_requeue_seconds
        return None if phase == "Ready" else 1.0

    # -- issue 11 item 6: instances on connected clusters ------------------------------------------

    async def _connected_waiting(self, vci: Obj, route: ts.Route) -> float:
        """The cluster is missing, not initialized or offline: say so (an unmanaged instance keeps what it
        last said about its replicas) and look again later (or when a Cluster changes)."""
        status = vci.get("status") or {}
        if route.kind == "unmanaged":
            endpoints = list(status.get("endpoints") or [])
            ready, replicas = int(status.get("readyReplicas") or 0), int(status.get("replicas") or 0)
        else:
            endpoints, ready, replicas = [], 0, 0
        await self._status(
            vci,
            route.phase,
            route.reason,
            route.message,
            endpoints,
            ready,
            replicas,
            extra=ts.condition_updates(route),
        )
        return self.settings.connected_tenant_requeue_seconds

    async def _remove_connected(self, vci: Obj, namespace: str, name: str) -> float | None:
        """Delete what the instance has on its connected cluster; a requeue delay while the cluster cannot be
        reached (the finalizer stays), None when done or when it has nothing there."""
        cluster = ts.deployed_on(vci)
        if self.connected is None or not cluster:
            return None
        if self.clusters(cluster) is None:
            log.warning(
                "the connected cluster of a deleted tenant cluster is gone; its objects there stay",
                tenant=name,
                cluster=cluster,
            )
            self.connected.forget(namespace, name)
            return None
        try:
            await self.connected.remove(cluster, namespace, name, ts.cluster_ref(vci)[1])
        except ClusterUnreachable as exc:
            log.info(
                "waiting for the connected cluster to delete a tenant cluster", tenant=name, error=str(exc)
            )
            return self.settings.connected_tenant_requeue_seconds
        return None

    async def _status(
        self,
        vci: Obj,
        phase: str,
        reason: str,
        message: str,
        endpoints: list[str],
        ready: int = 0,
        replicas: int = 0,
        extra: dict[str, tuple[str, str, str]] | None = None,
    ) -> None:
        status = dict(vci.get("status") or {})
        ready_status = "True" if phase == "Ready" else "False"
        updates = {"VirtualClusterReady": (ready_status, reason, message), **(extra or {})}
        new: dict[str, Any] = {
            "phase": phase,
            "reason": reason,
            "message": message,
            "conditions": ts.conditions(list(status.get("conditions") or []), updates, _now()),
            "endpoints": endpoints,
            "readyReplicas": ready,
            "replicas": replicas,
        }
        if {k: status.get(k) for k in new} == new:
            return
        meta = vci["metadata"]
        await self.client.patch(
            VCIS, meta["name"], {"status": new}, namespace=meta["namespace"], subresource="status"
        )


def _project_of(namespace: str, settings: PlatformSettings) -> str:
    prefix = settings.project_namespace_prefix
    return namespace[len(prefix) :] if namespace.startswith(prefix) else namespace


async def run_all(*runners: Awaitable[None]) -> None:
    await asyncio.gather(*runners)

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
    ) -> None:
        self.client = client
        self.settings = settings
        self.placement = placement
        self.access_key = access_key
        """The key of an instance (minted for its UID on first use)."""
        self.revoke_keys = revoke_keys
        """Delete every key of ``(namespace, name)``: the instance is gone."""
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
            await self.revoke_keys(namespace, name)
            return None
        meta = vci["metadata"]
        if meta.get("deletionTimestamp"):
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
        access_key = await self.access_key(vci)
        tenant = await self.placement.ensure(
            TenantSpec(
                project, namespace, name, config.replicas, str(access_key["spec"]["key"]), values or ""
            )
        )
        ready = tenant.ready_replicas
        if tenant.failed:
            phase, reason, message = "Failed", "ReplicaNotReady", tenant.failed
        elif ready == config.replicas:
            phase, reason, message = "Ready", "", ""
        else:
            phase, reason, message = "Pending", "Starting", f"{ready}/{config.replicas} replicas ready"
        await self._status(vci, phase, reason, message, tenant.endpoints(), ready, config.replicas)
        return None if phase == "Ready" else 1.0

    async def _status(
        self,
        vci: Obj,
        phase: str,
        reason: str,
        message: str,
        endpoints: list[str],
        ready: int = 0,
        replicas: int = 0,
    ) -> None:
        status = dict(vci.get("status") or {})
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        ready_status = "True" if phase == "Ready" else "False"
        previous = conditions.get("VirtualClusterReady")
        conditions["VirtualClusterReady"] = {
            "type": "VirtualClusterReady",
            "status": ready_status,
            "lastTransitionTime": previous["lastTransitionTime"]
            if previous and previous.get("status") == ready_status
            else _now(),
            "reason": reason,
            "message": message,
        }
        new: dict[str, Any] = {
            "phase": phase,
            "reason": reason,
            "message": message,
            "conditions": list(conditions.values()),
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

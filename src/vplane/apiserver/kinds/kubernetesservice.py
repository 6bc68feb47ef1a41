"""The ``default/kubernetes`` Service, its endpoints and the ServiceCIDR ``kubernetes``, kept by the API
server itself as kube-apiserver's bootstrap controllers keep them:

- the ServiceCIDR ``kubernetes`` with ``service_cluster_ip_range``, its ``Ready`` condition set by the
  ``kubernetes-service-cidr-controller`` (upstream's default ServiceCIDR controller);
- the Service ``kubernetes`` (ClusterIP the range's first address, port 443 ``https`` to this server's
  port), created when missing, its ports set right again at start (this server's port may have changed);
- its Endpoints and EndpointSlice ``kubernetes``: this server's address and port (upstream's master
  endpoints reconciler, ``--endpoint-reconciler-type=lease``, every 10 s). Upstream lists every live
  apiserver by IP with one port; vplane replicas on a shared store differ by port, so the endpoints name
  one of them: the process that embeds the replicas runs :meth:`KubernetesService.run` on the replica it
  elects (a tenant's leader), and a lone server runs it itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import ipaddress
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from vplane.apiserver import timeutil
from vplane.apiserver.context import RequestContext
from vplane.apiserver.kinds.serviceips import FIELD_MANAGER, ServiceAllocator
from vplane.apiserver.objects import DeleteOptions
from vplane.apiserver.registry import ResourceType
from vplane.kube import errors, services
from vplane.kube.objects import Obj

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer

log = structlog.get_logger("vplane.apiserver.kubernetesservice")

SERVICE_CIDR_CONTROLLER = "kubernetes-service-cidr-controller"


def advertise_address(configured: str, listen_host: str) -> str:
    """The address the endpoints give: the configured one, else the listen address when it is a specific IP,
    else loopback of the listen address's family."""
    if configured:
        return configured
    try:
        address = ipaddress.ip_address(listen_host)
    except ValueError:
        return "127.0.0.1"
    if address.is_unspecified:
        return "::1" if address.version == 6 else "127.0.0.1"
    return str(address)


class KubernetesService:
    def __init__(self, server: APIServer, allocator: ServiceAllocator) -> None:
        self.server = server
        self.allocator = allocator
        registry = server.registry
        found = (
            registry.get("", "v1", "services"),
            registry.get("", "v1", "endpoints"),
            registry.get("discovery.k8s.io", "v1", "endpointslices"),
            registry.get("networking.k8s.io", "v1", "servicecidrs"),
        )
        assert all(t is not None for t in found)
        self.services, self.endpoints, self.slices, self.cidrs = [t for t in found if t is not None]

    def context(self, manager: str = FIELD_MANAGER) -> RequestContext:
        return dataclasses.replace(self.server.system_context(), field_manager=manager)

    @property
    def address(self) -> str:
        settings = self.server.settings
        return advertise_address(settings.advertise_address, settings.listen_host)

    async def start(self) -> None:
        """At start (once this server has its port): the ServiceCIDR and the Service, its ports set right."""
        await self.sync_service_cidr()
        await self.sync_service(reconcile=True)

    async def run(self) -> None:
        """Keep the ServiceCIDR, the Service and its endpoints, every ``endpoint_reconciler_interval_seconds``
        (until cancelled)."""
        while True:
            try:
                await self.sync_service_cidr()
                await self.sync_service(reconcile=False)
                if self.server.settings.endpoint_reconciler_type == "lease":
                    await self.sync_endpoints()
            except Exception:
                log.exception("cannot keep the kubernetes Service")
            await asyncio.sleep(self.server.settings.endpoint_reconciler_interval_seconds)

    # -- the ServiceCIDR ------------------------------------------------------------------------------

    async def sync_service_cidr(self) -> None:
        objects = self.server.objects
        cidr = self.allocator.ip_range.cidr
        current = objects.get(self.cidrs, "", services.KUBERNETES)
        if current is None:
            log.info("creating the default ServiceCIDR", cidrs=[cidr])
            try:
                current = await objects.create(
                    self.context(), self.cidrs, "", services.default_service_cidr(cidr)
                )
            except errors.StatusError as exc:
                if exc.reason != "AlreadyExists":
                    log.warning("cannot create the default ServiceCIDR", error=exc.message)
                return
        if (current.get("metadata") or {}).get("deletionTimestamp"):
            return
        if list((current.get("spec") or {}).get("cidrs") or []) != [cidr]:
            return  # configured otherwise: upstream reports it and leaves it alone
        if _ready_known(current):
            return
        wanted = services.service_cidr_ready(timeutil.rfc3339(self.server.clock()))

        def mutate(obj: Obj) -> Obj:
            if _ready_known(obj):
                # The ServiceCIDR controller wrote its condition since the read: it stands (upstream sets
                # this one only where there is none), rather than the two writers trading messages.
                return obj
            status = obj.setdefault("status", {})
            others = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
            status["conditions"] = [*others, wanted]
            return obj

        with contextlib.suppress(errors.StatusError):
            await objects.guaranteed_update(
                self.context(SERVICE_CIDR_CONTROLLER),
                self.cidrs,
                "",
                services.KUBERNETES,
                mutate,
                subresource="status",
            )

    # -- the Service ----------------------------------------------------------------------------------

    async def sync_service(self, *, reconcile: bool) -> None:
        """Create the Service when it is missing; with ``reconcile``, also put its ports and type right
        (upstream does so only at start too: the Service is the cluster's to change otherwise)."""
        objects = self.server.objects
        port = self.server.port
        current = objects.get(self.services, services.DEFAULT_NAMESPACE, services.KUBERNETES)
        if current is None:
            body = services.kubernetes_service(self.allocator.ip_range.service_ip, port)
            try:
                await objects.create(self.context(), self.services, services.DEFAULT_NAMESPACE, body)
            except errors.StatusError as exc:
                if exc.reason != "AlreadyExists":
                    log.warning("cannot create the kubernetes Service", error=exc.message)
            return
        spec = current.get("spec") or {}
        wanted = [services.kubernetes_service_port(port)]
        if not reconcile or (spec.get("ports") == wanted and spec.get("type") == services.CLUSTER_IP):
            return

        def mutate(obj: Obj) -> Obj:
            obj["spec"]["ports"] = copy.deepcopy(wanted)
            obj["spec"]["type"] = services.CLUSTER_IP
            return obj

        try:
            await objects.guaranteed_update(
                self.context(), self.services, services.DEFAULT_NAMESPACE, services.KUBERNETES, mutate
            )
        except errors.StatusError as exc:
            log.warning("cannot reset the kubernetes Service", error=exc.message)

    # -- its endpoints --------------------------------------------------------------------------------

    async def sync_endpoints(self) -> None:
        """The Endpoints and EndpointSlice ``kubernetes`` name this server (written only when they differ)."""
        address, port = self.address, self.server.port
        await self._sync(
            self.endpoints, services.master_endpoints(address, port), services.endpoints_differ, ("subsets",)
        )
        desired = services.master_endpoint_slice(address, port)
        current = self.server.objects.get(self.slices, services.DEFAULT_NAMESPACE, services.KUBERNETES)
        if current is not None and current.get("addressType") != desired["addressType"]:
            # The address type cannot change: the slice is made again (as upstream's adapter does).
            with contextlib.suppress(errors.StatusError):
                await self.server.objects.delete(
                    self.context(),
                    self.slices,
                    services.DEFAULT_NAMESPACE,
                    services.KUBERNETES,
                    DeleteOptions(),
                )
        await self._sync(self.slices, desired, services.endpoint_slice_differs, ("endpoints", "ports"))

    async def _sync(
        self,
        rtype: ResourceType,
        desired: Obj,
        differs: Callable[[Obj, Obj], bool],
        fields: tuple[str, ...],
    ) -> None:
        objects = self.server.objects
        namespace, name = services.DEFAULT_NAMESPACE, services.KUBERNETES
        current = objects.get(rtype, namespace, name)
        if current is None:
            try:
                await objects.create(self.context(), rtype, namespace, copy.deepcopy(desired))
            except errors.StatusError as exc:
                if exc.reason != "AlreadyExists":
                    log.warning("cannot create the kubernetes endpoints", kind=rtype.kind, error=exc.message)
            return
        if not differs(current, desired):
            return

        def mutate(obj: Obj) -> Obj:
            for field in fields:
                obj[field] = copy.deepcopy(desired[field])
            labels = obj["metadata"].setdefault("labels", {})
            labels.update(desired["metadata"]["labels"])
            return obj

        try:
            await objects.guaranteed_update(self.context(), rtype, namespace, name, mutate)
        except errors.StatusError as exc:
            log.warning("cannot update the kubernetes endpoints", kind=rtype.kind, error=exc.message)


def _ready_known(cidr: Obj) -> bool:
    """Whether the ServiceCIDR has a Ready condition that is True or False (not missing or Unknown)."""
    conditions = [c for c in (cidr.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    return ready is not None and ready.get("status") != "Unknown"

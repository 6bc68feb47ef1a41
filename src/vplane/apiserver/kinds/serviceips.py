"""ClusterIP and node port allocation for Services, as kube-apiserver's Service storage does it.

A Service gets its ClusterIP (``spec.clusterIP``/``clusterIPs``, with ``ipFamilies`` and
``ipFamilyPolicy``) and its node ports when it is created, through the store hooks of
:class:`~vplane.apiserver.registry.StoreHooks`: after mutating admission, before validating admission
and the write. Addresses come from ``service_cluster_ip_range`` (:mod:`vplane.kube.serviceip` says in
which order), ports from ``service_node_port_range``.

Allocations are records in the store, so replicas sharing a store agree: creating one is a
compare-and-swap on a key that does not exist yet, and the loser of a race takes the next free value.

- A ClusterIP is an IPAddress object named by the address (upstream 1.33+, the ``MultiCIDRServiceAllocator``),
  labelled ``ipaddress.kubernetes.io/managed-by: ipallocator.k8s.io``, its ``parentRef`` the Service.
- A node port is a key ``/ranges/servicenodeports/<port>`` outside every resource's prefix (upstream keeps
  its node port bitmap under ``/registry/ranges/servicenodeports`` too, out of the API).

A failed or refused write gives back what was allocated for it; a deleted Service gives back what it held.
:meth:`ServiceAllocator.repair`, at start and every ``service_ip_repair_interval_seconds``, writes the
records that are missing (Services stored before the API server allocated, or a crash between a record and
its Service), removes the ones no Service holds, and gives a ClusterIP to Services stored without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

import orjson
import structlog

from vplane.apiserver import codec, timeutil
from vplane.apiserver.context import RequestContext
from vplane.apiserver.objects import DeleteOptions
from vplane.apiserver.registry import Finish, ResourceType
from vplane.kube import errors, serviceip, services
from vplane.kube.objects import Obj
from vplane.storage.interface import KeyExistsError, KeyNotFoundError, RevisionMismatchError

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer

log = structlog.get_logger("vplane.apiserver.serviceips")

NODE_PORT_PREFIX = "/ranges/servicenodeports/"
FIELD_MANAGER = "kube-apiserver"
"""The manager of what the API server writes itself (upstream writes through a loopback client whose
user agent is ``kube-apiserver/...``)."""


def _d(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


async def _nothing(_ok: bool) -> None:
    return None


class ServiceAllocator:
    """The Service kind's store hooks: allocation at create and update, release at delete, and repair."""

    def __init__(self, server: APIServer) -> None:
        self.server = server
        settings = server.settings
        self.ip_range = serviceip.IPRange.parse(settings.service_cluster_ip_range)
        self.port_range = serviceip.PortRange.parse(settings.service_node_port_range)
        self.rand: Callable[[int], int] = random.Random().randrange
        """Where dynamic allocation starts in each part of a range (tests make it deterministic)."""
        found = (
            server.registry.get("", "v1", "services"),
            server.registry.get("networking.k8s.io", "v1", "ipaddresses"),
        )
        assert found[0] is not None and found[1] is not None
        self.services: ResourceType = found[0]
        self.ipaddresses: ResourceType = found[1]

    def attach(self) -> None:
        self.services.store_hooks = self

    @property
    def families(self) -> list[str]:
        return [self.ip_range.family]

    def context(self) -> RequestContext:
        return dataclasses.replace(self.server.system_context(), field_manager=FIELD_MANAGER)

    # -- store hooks ----------------------------------------------------------------------------------

    async def begin_create(self, ctx: RequestContext, obj: Obj) -> Finish:
        spec, name = self._spec(obj), str(obj["metadata"].get("name", ""))
        causes = services.init_ip_families(spec, None, self.families)
        if causes:
            raise errors.invalid("Service", name, causes)
        ips: list[str] = []
        ports: list[int] = []
        try:
            if services.needs_cluster_ip(spec) and not services.is_headless(spec):
                ips.append(await self._allocate_ip(ctx, obj))
            ports = await self._allocate_node_ports(ctx, obj, None)
        except BaseException:
            await self._give_back(ctx, obj, ips, ports)
            raise
        return self._finish(ctx, obj, ips, ports, obj, [], [])

    async def begin_update(self, ctx: RequestContext, obj: Obj, old: Obj) -> Finish:
        spec, old_spec, name = self._spec(obj), self._spec(old), str(obj["metadata"].get("name", ""))
        causes = services.init_ip_families(spec, old_spec, self.families)
        if causes:
            raise errors.invalid("Service", name, causes)
        wanted, released_ips = services.ip_wanted_on_update(spec, old_spec)
        ips: list[str] = []
        ports: list[int] = []
        try:
            if wanted:
                ips.append(await self._allocate_ip(ctx, obj))
            ports = await self._allocate_node_ports(ctx, obj, old_spec)
        except BaseException:
            await self._give_back(ctx, obj, ips, ports)
            raise
        kept = set(services.node_ports(spec))
        released_ports = [p for p in services.node_ports(old_spec) if p not in kept]
        return self._finish(ctx, obj, ips, ports, old, released_ips, released_ports)

    async def after_delete(self, ctx: RequestContext, obj: Obj) -> None:
        spec = self._spec(obj)
        await self._give_back(ctx, obj, services.cluster_ips(spec), services.node_ports(spec))

    def _finish(
        self,
        ctx: RequestContext,
        obj: Obj,
        ips: list[str],
        ports: list[int],
        old: Obj,
        released_ips: list[str],
        released_ports: list[int],
    ) -> Finish:
        """Stored: what the write dropped goes back; refused: what it allocated goes back."""
        if ctx.dry_run or not (ips or ports or released_ips or released_ports):
            return _nothing

        async def finish(ok: bool) -> None:
            if ok:
                await self._give_back(ctx, old, released_ips, released_ports)
            else:
                await self._give_back(ctx, obj, ips, ports)

        return finish

    @staticmethod
    def _spec(obj: Obj) -> Obj:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            spec = obj["spec"] = {}
        return spec

    # -- ClusterIPs -----------------------------------------------------------------------------------

    def ipaddress_kv_exists(self, ip: str) -> bool:
        return self.server.cache.get(self.ipaddresses.key("", ip)) is not None

    async def _allocate_ip(self, ctx: RequestContext, obj: Obj) -> str:
        """The Service's primary ClusterIP: the requested one if it is free and in range, else the next free."""
        spec, meta = self._spec(obj), obj["metadata"]
        name = str(meta.get("name", ""))
        requested = str((spec.get("clusterIPs") or [""])[0] or "")
        if requested:
            reason = self.ip_range.check_requested(requested)
            if reason is not None:
                raise errors.cluster_ip_not_allocated(name, spec.get("clusterIPs") or [], requested, reason)
            if not ctx.dry_run and not await self._record_ip(requested, meta):
                raise errors.cluster_ip_not_allocated(
                    name, spec.get("clusterIPs") or [], requested, serviceip.IP_ALLOCATED
                )
            ip = requested
        elif ctx.dry_run:
            # Upstream's dry-run allocator does not look for a free address: it answers the range's own.
            ip = str(self.ip_range.network.network_address)
        else:
            ip = await self._next_free_ip(meta)
        spec["clusterIP"] = ip
        spec["clusterIPs"] = [ip, *(spec.get("clusterIPs") or [])[1:]]
        return ip

    async def _next_free_ip(self, meta: Obj) -> str:
        for candidate in self.ip_range.dynamic_order(self.rand):
            if self.ipaddress_kv_exists(candidate):
                continue
            if await self._record_ip(candidate, meta):
                return candidate
        raise errors.allocation_failed("serviceIP", serviceip.RANGE_FULL)

    async def _record_ip(self, ip: str, meta: Obj) -> bool:
        """Create the IPAddress for ``ip``; False when it exists (someone holds the address)."""
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        body: Obj = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "IPAddress",
            "metadata": {
                "name": ip,
                "labels": {
                    serviceip.FAMILY_LABEL: serviceip.family_of(ip),
                    serviceip.MANAGED_BY_LABEL: serviceip.IP_ALLOCATOR,
                },
            },
            "spec": {"parentRef": {"resource": "services", "namespace": namespace, "name": name}},
        }
        try:
            await self.server.objects.create_stored(self.context(), self.ipaddresses, "", body)
        except errors.StatusError as exc:
            if exc.reason == "AlreadyExists":
                return False
            raise
        return True

    async def _release_ip(self, ip: str, owner: str) -> None:
        kv = self.server.cache.get(self.ipaddresses.key("", ip))
        if kv is None or self._ip_owner(codec.decode_kv(kv)) != owner:
            return
        try:
            await self.server.objects.delete(self.context(), self.ipaddresses, "", ip, DeleteOptions())
        except errors.StatusError as exc:
            if exc.code != 404:
                log.warning("cannot release a ClusterIP", ip=ip, service=owner, error=exc.message)

    @staticmethod
    def _ip_owner(ipaddress: Obj) -> str:
        """``namespace/name`` of the Service an IPAddress the allocator manages names; empty otherwise."""
        labels = _d(_d(ipaddress.get("metadata")).get("labels"))
        ref = _d(_d(ipaddress.get("spec")).get("parentRef"))
        if (
            labels.get(serviceip.MANAGED_BY_LABEL) != serviceip.IP_ALLOCATOR
            or ref.get("resource") != "services"
        ):
            return ""
        if ref.get("group"):
            return ""
        return f"{ref.get('namespace', '')}/{ref.get('name', '')}"

    # -- node ports -----------------------------------------------------------------------------------

    async def _allocate_node_ports(self, ctx: RequestContext, obj: Obj, old: Obj | None) -> list[int]:
        """Node ports for a NodePort or LoadBalancer Service (upstream's ``initNodePorts`` on create and
        ``updateNodePorts`` on update): requested ones checked and recorded, missing ones allocated (on
        create, ports that share a port number share a node port). Answers the ports it recorded."""
        spec, meta = self._spec(obj), obj["metadata"]
        name = str(meta.get("name", ""))
        held = set(services.node_ports(old)) if old is not None else set()
        taken: list[int] = []  # node ports this request took, recorded unless it is a dry run
        try:
            if services.needs_node_port(spec):
                allocate = (
                    spec.get("type") == services.NODE_PORT
                    or spec.get("allocateLoadBalancerNodePorts") is not False
                )
                by_port: dict[object, int] = {}
                for i, port in enumerate(spec.get("ports") or []):
                    if not isinstance(port, dict):
                        continue
                    value = port.get("nodePort")
                    if isinstance(value, int) and value:
                        if value not in held and value not in taken:
                            await self._take_port(ctx, meta, value, taken, name=name, index=i)
                    elif not allocate:
                        continue
                    elif old is None and port.get("port") in by_port:
                        value = port["nodePort"] = by_port[port.get("port")]
                    else:
                        value = port["nodePort"] = await self._next_free_port(ctx, meta, taken)
                    by_port.setdefault(port.get("port"), value)
            if services.needs_health_check(spec) and not (
                old is not None and services.needs_health_check(old)
            ):
                value = spec.get("healthCheckNodePort")
                if isinstance(value, int) and value:
                    await self._take_port(ctx, meta, value, taken, name="", index=-1)
                else:
                    spec["healthCheckNodePort"] = await self._next_free_port(ctx, meta, taken)
        except BaseException:
            if not ctx.dry_run:
                await self._release_ports(taken, self._owner(meta))
            raise
        return [] if ctx.dry_run else taken

    async def _take_port(
        self, ctx: RequestContext, meta: Obj, port: int, taken: list[int], *, name: str, index: int
    ) -> None:
        """A requested node port: in range and free (``index`` -1: the health check port)."""
        reason = self.port_range.check_requested(port)
        if reason is None and not ctx.dry_run and not await self._record_port(port, meta):
            reason = serviceip.PORT_ALLOCATED
        if reason is not None:
            if index < 0:
                raise errors.health_check_node_port_not_allocated(port, reason)
            raise errors.node_port_not_allocated(name, index, port, reason)
        taken.append(port)

    async def _next_free_port(self, ctx: RequestContext, meta: Obj, taken: list[int]) -> int:
        """A free node port, recorded for the Service (a dry run only looks for one)."""
        for candidate in self.port_range.dynamic_order(self.rand):
            if candidate in taken or self.server.cache.get(f"{NODE_PORT_PREFIX}{candidate}") is not None:
                continue
            if ctx.dry_run or await self._record_port(candidate, meta):
                taken.append(candidate)
                return candidate
        raise errors.allocation_failed("nodePort", serviceip.RANGE_FULL)

    def _owner(self, meta: Obj) -> str:
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    async def _record_port(self, port: int, meta: Obj, created: float | None = None) -> bool:
        value = orjson.dumps(
            {
                "owner": self._owner(meta),
                "created": timeutil.rfc3339(self.server.clock() if created is None else created),
            }
        )
        try:
            await self.server.cache.create(f"{NODE_PORT_PREFIX}{port}", value)
        except KeyExistsError:
            return False
        return True

    async def _release_ports(self, ports: list[int], owner: str) -> None:
        for port in ports:
            key = f"{NODE_PORT_PREFIX}{port}"
            kv = self.server.cache.get(key)
            if kv is None or self._port_record(kv.value).owner != owner:
                continue
            with contextlib.suppress(KeyNotFoundError, RevisionMismatchError):
                await self.server.cache.delete(key, kv.mod_revision)

    @staticmethod
    def _port_record(value: bytes) -> serviceip.Record:
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            return serviceip.Record("", 0.0)
        doc = doc if isinstance(doc, dict) else {}
        return serviceip.Record(
            str(doc.get("owner", "")), timeutil.parse_time(str(doc.get("created", ""))) or 0.0
        )

    async def _give_back(self, ctx: RequestContext, obj: Obj, ips: list[str], ports: list[int]) -> None:
        """Release ``ips`` and ``ports`` if ``obj`` holds their records; never raises (repair settles)."""
        if ctx.dry_run or not (ips or ports):
            return
        owner = self._owner(obj.get("metadata") or {})
        try:
            for ip in ips:
                if self.ip_range.contains(ip):
                    await self._release_ip(ip, owner)
            await self._release_ports([p for p in ports if self.port_range.contains(p)], owner)
        except Exception:
            log.exception("cannot release a Service's allocations", service=owner, ips=ips, ports=ports)

    # -- repair ---------------------------------------------------------------------------------------

    async def repair(self) -> None:
        """Bring the records in line with the stored Services (see the module docstring)."""
        holders: list[serviceip.Holder] = []
        unallocated: list[tuple[str, str]] = []
        for service in self.server.objects.list(self.services):
            meta, spec = service["metadata"], self._spec(service)
            if meta.get("deletionTimestamp") is None and services.needs_cluster_ip(spec):
                if not services.cluster_ips(spec) and not services.is_headless(spec):
                    unallocated.append((str(meta.get("namespace", "")), str(meta["name"])))
            holders.append(
                serviceip.Holder(
                    str(meta.get("namespace", "")),
                    str(meta["name"]),
                    tuple(services.cluster_ips(spec)),
                    tuple(services.node_ports(spec)),
                )
            )
        ips: dict[str, serviceip.Record] = {}
        for obj in self.server.objects.list(self.ipaddresses):
            created = timeutil.parse_time(str(obj["metadata"].get("creationTimestamp", ""))) or 0.0
            ips[str(obj["metadata"]["name"])] = serviceip.Record(self._ip_owner(obj), created)
        ports: dict[int, serviceip.Record] = {}
        for kv in self.server.cache.iter_prefix(NODE_PORT_PREFIX):
            with contextlib.suppress(ValueError):
                ports[int(kv.key[len(NODE_PORT_PREFIX) :])] = self._port_record(kv.value)
        plan = serviceip.plan_repair(
            holders,
            ips,
            ports,
            ip_range=self.ip_range,
            port_range=self.port_range,
            now=self.server.clock(),
            orphan_age=self.server.settings.service_ip_repair_interval_seconds,
        )
        for conflict in plan.conflicts:
            log.warning("a Service holds an allocation recorded for another", allocation=conflict)
        try:
            for ip, holder in plan.create_ips:
                await self._record_ip(ip, {"namespace": holder.namespace, "name": holder.name})
            for ip in plan.delete_ips:
                await self._release_ip(ip, ips[ip].owner)
            for port, holder in plan.create_ports:
                await self._record_port(port, {"namespace": holder.namespace, "name": holder.name})
            for port in plan.delete_ports:
                await self._release_ports([port], ports[port].owner)
        except errors.StatusError as exc:
            log.warning("cannot repair the Service allocation records", error=exc.message)
        for namespace, name in unallocated:
            await self._allocate_stored(namespace, name)

    async def _allocate_stored(self, namespace: str, name: str) -> None:
        """A ClusterIP for a Service stored without one: an update that asks for a free address."""

        def mutate(service: Obj) -> Obj:
            spec = self._spec(service)
            if not services.cluster_ips(spec) and not services.is_headless(spec):
                ip = self.ip_range.next_free(self.ipaddress_kv_exists, self.rand)
                spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
            return service

        try:
            await self.server.objects.guaranteed_update(
                self.context(), self.services, namespace, name, mutate
            )
        except (errors.StatusError, serviceip.RangeFull) as exc:
            log.warning(
                "cannot give a stored Service a ClusterIP", service=f"{namespace}/{name}", error=str(exc)
            )

    async def repair_forever(self) -> None:
        while True:
            await asyncio.sleep(self.server.settings.service_ip_repair_interval_seconds)
            try:
                await self.repair()
            except Exception:
                log.exception("Service allocation repair failed")

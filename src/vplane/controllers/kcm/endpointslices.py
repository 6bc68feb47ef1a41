"""The EndpointSlice controller (upstream ``pkg/controller/endpointslice`` and ``k8s.io/endpointslice``).

For every Service with a selector (and not ``ExternalName``) it keeps ``discovery.k8s.io/v1``
EndpointSlices, one set per address type of the Service's IP families, holding an endpoint for each
selected pod that has an IP of that family and is not finished: its addresses, the ``ready`` (also true
for every pod when ``publishNotReadyAddresses``; never for a terminating pod otherwise), ``serving`` and
``terminating`` conditions, the pod as ``targetRef``, its node and the node's zone, and its hostname when
the pod names the Service as its subdomain. Endpoints are grouped by the ports that resolve for them, at
most ``max_endpoints_per_slice`` (100) in a slice.

Slices are named ``<service>-<random>``, owned by the Service (garbage collection removes them with it),
labelled with the Service's labels plus ``kubernetes.io/service-name``,
``endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io`` and, for a headless Service,
``service.kubernetes.io/headless``; a changed slice carries
``endpoints.kubernetes.io/last-change-trigger-time``. A Service without pods keeps one empty placeholder
slice, as upstream.

:func:`plan` is the pure reconciler: it keeps endpoints in the slice that holds them (an endpoint whose
conditions changed is rewritten in place), removes stale ones, fills slices being rewritten anyway before
others, and opens new slices last, so one pod's change rewrites one slice. The controller remembers the
generation of every slice it wrote and waits for its cache to show them before planning again (upstream's
``EndpointSliceTracker``): planning from a stale cache would open duplicate slices. Topology hints and
the mirroring of selector-less Services' custom Endpoints are not done.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from vplane.controllers.client import Resource
from vplane.controllers.informer import Informer
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.endpoints import (
    HEADLESS,
    TRIGGER_TIME,
    TriggerTimeTracker,
    is_service_ip_set,
    pod_ips,
    selecting_services,
    service_selects,
    services_after_pod_update,
    should_pod_be_in_endpoints,
)
from vplane.controllers.kcm.events import WARNING
from vplane.controllers.kcm.informers import Index
from vplane.controllers.kcm.replicaset import error_text, namespace_terminating
from vplane.controllers.kcm.resources import PODS, SERVICES
from vplane.controllers.kcm.timefmt import format_time_nano
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

ENDPOINTSLICES = Resource("discovery.k8s.io/v1", "EndpointSlice", "endpointslices", namespaced=True)
NODES = Resource("v1", "Node", "nodes", namespaced=False)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"
ZONE_LABEL = "topology.kubernetes.io/zone"
RESERVED_LABELS = frozenset({SERVICE_NAME_LABEL, MANAGED_BY_LABEL, HEADLESS})

PortKey = tuple[tuple[str, int, str, str], ...]


# -- pure decisions ----------------------------------------------------------------------------------------------


def address_types(service: Obj) -> list[str]:
    """``getAddressTypesForService``: the Service's IP families, else its cluster IP's family.

    Upstream falls back to both families for a headless Service without ``ipFamilies`` (written for API
    servers too old to default them); an API server that does not default them at all (vplane's, which
    allocates no cluster IPs) would then get an IPv6 slice for every Service, so IPv4 is assumed, as a
    single-stack cluster's server defaults."""
    spec = podutil.spec(service)
    found = []
    for family in spec.get("ipFamilies") or []:
        if family == "IPv4" and "IPv4" not in found:
            found.append("IPv4")
        elif family == "IPv6" and "IPv6" not in found:
            found.append("IPv6")
    if found:
        return found
    if is_service_ip_set(service) and ":" in str(spec.get("clusterIP")):
        return ["IPv6"]
    return ["IPv4"]


def endpoint_ports(service: Obj, pod: Obj) -> list[Obj]:
    """``getEndpointPorts``: each Service port that resolves on the pod (a headless Service may have none)."""
    out: list[Obj] = []
    for service_port in podutil.spec(service).get("ports") or []:
        number = podutil.find_port(pod, service_port)
        if number is None:
            continue
        port: Obj = {
            "name": str(service_port.get("name") or ""),
            "port": number,
            "protocol": service_port.get("protocol") or "TCP",
        }
        if service_port.get("appProtocol"):
            port["appProtocol"] = service_port["appProtocol"]
        out.append(port)
    return out


def port_key(ports: Iterable[Obj]) -> PortKey:
    return tuple(
        sorted(
            (
                str(p.get("name") or ""),
                int(p.get("port") or 0),
                str(p.get("protocol") or "TCP"),
                str(p.get("appProtocol") or ""),
            )
            for p in ports
        )
    )


def should_set_hostname(pod: Obj, service: Obj) -> bool:
    spec = podutil.spec(pod)
    return (
        bool(spec.get("hostname"))
        and spec.get("subdomain") == podutil.name_of(service)
        and podutil.namespace_of(service) == podutil.namespace_of(pod)
    )


def pod_to_endpoint(pod: Obj, service: Obj, address_type: str, zone: str | None) -> Obj:
    """``podToEndpoint``."""
    serving = podutil.is_pod_ready(pod)
    terminating = podutil.is_deleting(pod)
    ready = bool(podutil.spec(service).get("publishNotReadyAddresses")) or (serving and not terminating)
    addresses = [ip for ip in pod_ips(pod) if (":" in ip) == (address_type == "IPv6")]
    endpoint: Obj = {
        "addresses": addresses,
        "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
    }
    if should_set_hostname(pod, service):
        endpoint["hostname"] = podutil.spec(pod)["hostname"]
    endpoint["targetRef"] = {
        "kind": "Pod",
        "namespace": podutil.namespace_of(pod),
        "name": podutil.name_of(pod),
        "uid": podutil.uid_of(pod),
    }
    node = podutil.spec(pod).get("nodeName")
    if node:
        endpoint["nodeName"] = node
    if zone:
        endpoint["zone"] = zone
    return endpoint


def endpoint_key(endpoint: Obj) -> tuple[str, ...]:
    """What makes two endpoints the same endpoint (whose conditions may differ): its pod and addresses."""
    ref = endpoint.get("targetRef") or {}
    return (
        str(ref.get("uid") or ref.get("name") or ""),
        *sorted(str(a) for a in endpoint.get("addresses") or []),
    )


@dataclass
class Desired:
    ports: list[Obj]
    endpoints: dict[tuple[str, ...], Obj] = field(default_factory=dict)


def desired_endpoints(
    service: Obj, pods: Iterable[Obj], address_type: str, zones: dict[str, str] | None = None
) -> dict[PortKey, Desired]:
    """Every eligible pod's endpoint for one address type, grouped by the ports that resolve for it."""
    out: dict[PortKey, Desired] = {}
    zones = zones or {}
    for pod in pods:
        if not should_pod_be_in_endpoints(pod, include_terminating=True):
            continue
        zone = zones.get(str(podutil.spec(pod).get("nodeName") or ""))
        endpoint = pod_to_endpoint(pod, service, address_type, zone)
        if not endpoint["addresses"]:
            continue
        ports = endpoint_ports(service, pod)
        group = out.setdefault(port_key(ports), Desired(ports))
        group.endpoints[endpoint_key(endpoint)] = endpoint
    return out


def slice_labels(service: Obj) -> dict[str, str]:
    """``setEndpointSliceLabels``: the Service's labels (reserved keys aside) plus the reserved ones."""
    labels = {k: v for k, v in podutil.labels_of(service).items() if k not in RESERVED_LABELS}
    if not is_service_ip_set(service):
        labels[HEADLESS] = ""
    labels[SERVICE_NAME_LABEL] = podutil.name_of(service)
    labels[MANAGED_BY_LABEL] = CONTROLLER_NAME
    return labels


def slice_prefix(service_name: str) -> str:
    """``getEndpointSlicePrefix``: ``<service>-`` unless that is too long for a generated name."""
    prefix = f"{service_name}-"
    return prefix if len(prefix) <= 253 else service_name


def new_slice(service: Obj, address_type: str, ports: list[Obj], endpoints: list[Obj]) -> Obj:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "generateName": slice_prefix(podutil.name_of(service)),
            "namespace": podutil.namespace_of(service),
            "labels": slice_labels(service),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "name": podutil.name_of(service),
                    "uid": podutil.uid_of(service),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": ports,
    }


@dataclass
class Plan:
    create: list[Obj] = field(default_factory=list)
    update: list[Obj] = field(default_factory=list)
    delete: list[Obj] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def _endpoints_of(slice_: Obj) -> list[Obj]:
    value = slice_.get("endpoints")
    return value if isinstance(value, list) else []


def _sort_endpoints(endpoints: list[Obj]) -> list[Obj]:
    return sorted(endpoints, key=lambda e: ((e.get("targetRef") or {}).get("name") or "", endpoint_key(e)))


def _is_placeholder(slice_: Obj) -> bool:
    return not _endpoints_of(slice_) and not slice_.get("ports")


def plan_address_type(
    service: Obj,
    address_type: str,
    existing: Sequence[Obj],
    desired: dict[PortKey, Desired],
    max_per_slice: int,
) -> Plan:
    """``reconcileByAddressType``: what to create, rewrite and delete for one address type."""
    result = Plan()
    labels = slice_labels(service)
    unchanged: dict[PortKey, list[Obj]] = {}
    updating: dict[PortKey, list[Obj]] = {}
    placed: set[tuple[str, ...]] = set()
    for current in existing:
        key = port_key(current.get("ports") or [])
        wanted = desired.get(key)
        if wanted is None:
            result.delete.append(current)
            continue
        kept: list[Obj] = []
        changed = False
        for endpoint in _endpoints_of(current):
            ekey = endpoint_key(endpoint)
            if ekey in wanted.endpoints and ekey not in placed:
                placed.add(ekey)
                if wanted.endpoints[ekey] != endpoint:
                    changed = True
                kept.append(wanted.endpoints[ekey])
            else:
                changed = True
        if not kept:
            result.delete.append(current)
            continue
        if changed or podutil.labels_of(current) != labels:
            rewritten = copy.deepcopy(current)
            rewritten["endpoints"] = kept
            rewritten.setdefault("metadata", {})["labels"] = dict(labels)
            updating.setdefault(key, []).append(rewritten)
        else:
            unchanged.setdefault(key, []).append(current)
    for key, wanted in sorted(desired.items()):
        remaining = _sort_endpoints([e for k, e in wanted.endpoints.items() if k not in placed])
        # fill the slices that are being rewritten anyway, fullest first
        for rewritten in sorted(updating.get(key, []), key=lambda s: -len(_endpoints_of(s))):
            room = max_per_slice - len(_endpoints_of(rewritten))
            if room > 0 and remaining:
                rewritten["endpoints"] = _endpoints_of(rewritten) + remaining[:room]
                remaining = remaining[room:]
        while len(remaining) >= max_per_slice:
            result.create.append(new_slice(service, address_type, wanted.ports, remaining[:max_per_slice]))
            remaining = remaining[max_per_slice:]
        if remaining:
            # ``getSliceToFill``: the unchanged slice closest to full that still has room
            best: Obj | None = None
            closest = max_per_slice
            for candidate in unchanged.get(key, []):
                diff = max_per_slice - (len(remaining) + len(_endpoints_of(candidate)))
                if 0 <= diff < closest:
                    best, closest = candidate, diff
            if best is not None:
                unchanged[key].remove(best)
                filled = copy.deepcopy(best)
                filled["endpoints"] = _endpoints_of(best) + remaining
                updating.setdefault(key, []).append(filled)
            else:
                result.create.append(new_slice(service, address_type, wanted.ports, remaining))
    result.update = [s for slices in updating.values() for s in slices]
    if len(existing) == len(result.delete) and not result.create:
        # no slice would be left: keep (or make) one empty placeholder
        placeholder = new_slice(service, address_type, [], [])
        if len(result.delete) == 1 and _is_placeholder(result.delete[0]):
            if podutil.labels_of(result.delete[0]) != labels:
                rewritten = copy.deepcopy(result.delete[0])
                rewritten["metadata"]["labels"] = dict(labels)
                result.update.append(rewritten)
            result.delete = []
        else:
            result.create.append(placeholder)
    return result


def plan(
    service: Obj,
    pods: Sequence[Obj],
    existing: Sequence[Obj],
    max_per_slice: int,
    zones: dict[str, str] | None = None,
) -> Plan:
    """``reconcile``: the whole change for one Service, over its supported address types (slices of an
    address type it no longer has are deleted)."""
    wanted_types = address_types(service)
    result = Plan()
    for address_type in wanted_types:
        of_type = [s for s in existing if s.get("addressType") == address_type]
        desired = desired_endpoints(service, pods, address_type, zones)
        part = plan_address_type(service, address_type, of_type, desired, max_per_slice)
        result.create += part.create
        result.update += part.update
        result.delete += part.delete
    result.delete += [s for s in existing if s.get("addressType") not in wanted_types]
    return result


def owned_by(slice_: Obj, service: Obj) -> bool:
    return any(
        ref.get("uid") == podutil.uid_of(service)
        and ref.get("kind") == "Service"
        and ref.get("apiVersion") == "v1"
        for ref in podutil.meta(slice_).get("ownerReferences") or []
    )


def service_key_of(slice_: Obj) -> str | None:
    name = podutil.labels_of(slice_).get(SERVICE_NAME_LABEL)
    return f"{podutil.namespace_of(slice_)}/{name}" if name else None


class SliceTracker:
    """``EndpointSliceTracker``: the generation of each slice this controller wrote and the slices it
    deleted, per Service, until the cache shows them."""

    def __init__(self) -> None:
        self._written: dict[str, dict[str, int]] = {}
        self._deleted: dict[str, set[str]] = {}

    def wrote(self, service_key: str, slice_: Obj) -> None:
        generation = int(podutil.meta(slice_).get("generation") or 0)
        self._written.setdefault(service_key, {})[podutil.name_of(slice_)] = generation

    def deleted(self, service_key: str, name: str) -> None:
        self._deleted.setdefault(service_key, set()).add(name)
        self._written.get(service_key, {}).pop(name, None)

    def stale(self, service_key: str, cached: dict[str, Obj]) -> bool:
        """Whether the cache is behind this controller's own writes for the Service (forgets what it shows)."""
        written = self._written.get(service_key, {})
        for name, generation in list(written.items()):
            seen = cached.get(name)
            if seen is not None and int(podutil.meta(seen).get("generation") or 0) >= generation:
                del written[name]
        gone = self._deleted.get(service_key, set())
        for name in list(gone):
            if name not in cached:
                gone.discard(name)
        if not written:
            self._written.pop(service_key, None)
        if not gone:
            self._deleted.pop(service_key, None)
        return bool(written or gone)

    def forget(self, service_key: str) -> None:
        self._written.pop(service_key, None)
        self._deleted.pop(service_key, None)


# -- the controller -------------------------------------------------------------------------------------------------


class EndpointSliceController(ManagedController):
    name = "endpointslice-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        informers = ctx.informers
        self.services = informers.informer(SERVICES)
        self.pods = informers.informer(PODS)
        self.nodes = informers.informer(NODES)
        self.slices: Informer = informers.informer(ENDPOINTSLICES)
        self.services_by_namespace: Index = informers.namespace_index(SERVICES)
        self.pods_by_namespace: Index = informers.namespace_index(PODS)
        self.slices_by_service: Index = informers.index(ENDPOINTSLICES, "service", _managed_service_key)
        super().__init__(
            ctx,
            self.services,
            [self.pods, self.nodes, self.slices],
            ctx.settings.concurrent_service_endpoint_syncs,
        )
        self.triggers = TriggerTimeTracker()
        self.tracker = SliceTracker()
        self.max_per_slice = ctx.settings.max_endpoints_per_slice
        self.batch = ctx.settings.endpointslice_updates_batch_seconds
        self.pods.add_handlers(on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_added)
        self.slices.add_handlers(
            on_add=self._slice_changed,
            on_update=lambda old, new: self._slice_changed(new),
            on_delete=self._slice_changed,
        )

    def _services_of(self, pod: Obj) -> set[str]:
        return selecting_services(self.services_by_namespace, pod)

    def _pod_added(self, pod: Obj) -> None:
        for key in self._services_of(pod):
            self.enqueue_after(key, self.batch)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        for key in services_after_pod_update(old, new, self._services_of):
            self.enqueue_after(key, self.batch)

    def _slice_changed(self, slice_: Obj) -> None:
        """A managed slice changed or went: its Service is looked at again (someone else may have edited
        it; the controller's own writes are recognised and cost one cheap sync)."""
        if podutil.labels_of(slice_).get(MANAGED_BY_LABEL) != CONTROLLER_NAME:
            return
        key = service_key_of(slice_)
        if key is not None:
            self.enqueue(key)

    def _zones(self) -> dict[str, str]:
        zones: dict[str, str] = {}
        for node in self.nodes.objects():
            zone = podutil.labels_of(node).get(ZONE_LABEL)
            if zone:
                zones[podutil.name_of(node)] = zone
        return zones

    async def reconcile(self, key: str) -> float | None:
        namespace, _, name = key.partition("/")
        service = self.services.get(key)
        if service is None:
            self.triggers.forget(key)
            self.tracker.forget(key)
            return None  # its slices go with it (owner references)
        spec = podutil.spec(service)
        if spec.get("type") == "ExternalName" or not isinstance(spec.get("selector"), dict):
            return None
        cached = {podutil.name_of(s): s for s in self.slices_by_service.get(key)}
        if self.tracker.stale(key, cached):
            return 0.05  # our own writes are not in the cache yet: planning now would duplicate slices
        existing = [s for s in cached.values() if owned_by(s, service)]
        pods = [pod for pod in self.pods_by_namespace.get(namespace) if service_selects(service, pod)]
        trigger = self.triggers.compute(key, service, pods)
        change = plan(service, pods, existing, self.max_per_slice, self._zones())
        if change.empty:
            return None
        try:
            await self._apply(key, service, change, trigger)
        except StatusError as exc:
            if namespace_terminating(exc):
                return None
            self.recorder.event(
                service,
                WARNING,
                "FailedToUpdateEndpointSlices",
                f"Error updating Endpoint Slices for Service {namespace}/{name}: {error_text(exc)}",
            )
            raise
        return None

    async def _apply(self, key: str, service: Obj, change: Plan, trigger: float | None) -> None:
        """Creates first, then rewrites, then deletions (upstream's order: traffic never loses a path)."""
        namespace = podutil.namespace_of(service)
        for slice_ in (*change.create, *change.update):
            annotations = dict(podutil.annotations_of(slice_))
            if trigger is not None:
                annotations[TRIGGER_TIME] = format_time_nano(trigger)
            else:
                annotations.pop(TRIGGER_TIME, None)
            meta = slice_.setdefault("metadata", {})
            if annotations:
                meta["annotations"] = annotations
            else:
                meta.pop("annotations", None)
        for slice_ in change.create:
            created = await self.client.create(ENDPOINTSLICES, slice_, namespace=namespace)
            self.tracker.wrote(key, created)
        for slice_ in change.update:
            updated = await self.client.replace(ENDPOINTSLICES, slice_, namespace=namespace)
            self.tracker.wrote(key, updated)
        for slice_ in change.delete:
            try:
                await self.client.delete(ENDPOINTSLICES, podutil.name_of(slice_), namespace=namespace)
            except StatusError as exc:
                if exc.code != 404:
                    raise
            self.tracker.deleted(key, podutil.name_of(slice_))


def _managed_service_key(slice_: Obj) -> tuple[str, ...]:
    if podutil.labels_of(slice_).get(MANAGED_BY_LABEL) != CONTROLLER_NAME:
        return ()
    key = service_key_of(slice_)
    return (key,) if key is not None else ()

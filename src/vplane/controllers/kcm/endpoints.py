"""The Endpoints controller (upstream ``pkg/controller/endpoint``).

For every Service with a selector (and not ``ExternalName``) it selects the pods of the Service's
namespace, keeps those that have an IP and are not finished (nor being deleted, unless
``publishNotReadyAddresses``), and turns each (pod, service port) into an address, ready or not ready by
the pod's ``Ready`` condition, the port resolved by number or by the container port's name. Addresses are
repacked into subsets of identical port sets, at most ``endpoints_max_capacity`` of them kept (then
annotated ``endpoints.kubernetes.io/over-capacity: truncated``), and written to the Endpoints object of
the Service's name with the Service's labels (plus ``service.kubernetes.io/headless`` when it has no
cluster IP) and the ``endpoints.kubernetes.io/last-change-trigger-time`` annotation: the earliest pod
readiness change (or Service creation) this write reflects. Endpoints whose Service is gone are deleted.

What is computed once per Service (:class:`ServiceEndpoints`) is handed to each :class:`EndpointsWriter`;
the Endpoints writer is the one there is today, and an EndpointSlice writer plugs in beside it when the
``discovery.k8s.io`` kind is served.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from vplane.controllers.client import KubeAPI
from vplane.controllers.informer import Informer, object_key
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.events import WARNING, EventRecorder
from vplane.controllers.kcm.informers import Index
from vplane.controllers.kcm.replicaset import error_text, namespace_terminating
from vplane.controllers.kcm.resources import ENDPOINTS, PODS, SERVICES
from vplane.controllers.kcm.timefmt import format_time_nano, parse_time
from vplane.kube import labels as labelsel
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"
OVER_CAPACITY = "endpoints.kubernetes.io/over-capacity"
HEADLESS = "service.kubernetes.io/headless"
LEADER_ANNOTATION = "control-plane.alpha.kubernetes.io/leader"


# -- pure decisions ------------------------------------------------------------------------------------


def should_pod_be_in_endpoints(pod: Obj, include_terminating: bool) -> bool:
    if podutil.is_pod_terminal(pod):
        return False
    st = podutil.status(pod)
    if not st.get("podIP") and not st.get("podIPs"):
        return False
    if not include_terminating and podutil.is_deleting(pod):
        return False
    return True


def pod_ips(pod: Obj) -> list[str]:
    st = podutil.status(pod)
    ips = [
        str(entry.get("ip"))
        for entry in st.get("podIPs") or ()
        if isinstance(entry, dict) and entry.get("ip")
    ]
    if not ips and st.get("podIP"):
        ips = [str(st["podIP"])]
    return ips


def is_service_ip_set(service: Obj) -> bool:
    cluster_ip = podutil.spec(service).get("clusterIP") or ""
    return cluster_ip not in ("", "None")


def pod_address(service: Obj, pod: Obj) -> Obj | None:
    """``podToEndpointAddressForService``: the pod IP of the Service's family, with a reference to the pod."""
    svc = podutil.spec(service)
    families = svc.get("ipFamilies") or []
    if families:
        v6 = families[0] == "IPv6"
    elif is_service_ip_set(service):
        v6 = ":" in str(svc.get("clusterIP"))
    else:
        v6 = ":" in str(podutil.status(pod).get("podIP") or "")
    ip = next((candidate for candidate in pod_ips(pod) if (":" in candidate) == v6), None)
    if ip is None:
        return None
    address: Obj = {"ip": ip}
    node = podutil.spec(pod).get("nodeName")
    if node:
        address["nodeName"] = node
    address["targetRef"] = {
        "kind": "Pod",
        "namespace": podutil.namespace_of(pod),
        "name": podutil.name_of(pod),
        "uid": podutil.uid_of(pod),
    }
    pod_spec = podutil.spec(pod)
    if (
        pod_spec.get("hostname")
        and pod_spec.get("subdomain") == podutil.name_of(service)
        and podutil.namespace_of(service) == podutil.namespace_of(pod)
    ):
        address["hostname"] = pod_spec["hostname"]
    return address


def _port_key(port: Obj) -> tuple[Any, ...]:
    return (
        port.get("name") or "",
        port.get("port"),
        port.get("protocol") or "",
        port.get("appProtocol") or "",
    )


def _address_key(address: Obj) -> tuple[str, str]:
    return str(address.get("ip") or ""), str((address.get("targetRef") or {}).get("uid") or "")


def repack(entries: Sequence[tuple[Obj, Obj | None, bool]]) -> list[Obj]:
    """``RepackSubsets``: (address, port or None, ready) triples into subsets, one per distinct set of
    addresses; an address ready on a port is ready there even if also listed not ready. Addresses are
    sorted by IP then pod UID; ports and subsets in a fixed order (upstream orders them by hash)."""
    addresses: dict[tuple[str, str], Obj] = {}
    by_port: dict[tuple[Any, ...], tuple[Obj | None, dict[tuple[str, str], bool]]] = {}
    for address, port, ready in entries:
        key = _address_key(address)
        addresses.setdefault(key, address)
        pkey = _port_key(port) if port is not None else ("", -1, "", "")
        _, members = by_port.setdefault(pkey, (port, {}))
        if not members.get(key, False):
            members[key] = ready
    groups: dict[tuple[tuple[tuple[str, str], bool], ...], list[Obj]] = {}
    for port, members in by_port.values():
        group = tuple(sorted(members.items()))
        ports = groups.setdefault(group, [])
        if port is not None:
            ports.append(port)
    subsets: list[Obj] = []
    for group, ports in groups.items():
        subset: Obj = {}
        ready_addresses = [addresses[k] for k, is_ready in group if is_ready]
        not_ready_addresses = [addresses[k] for k, is_ready in group if not is_ready]
        if ready_addresses:
            subset["addresses"] = ready_addresses
        if not_ready_addresses:
            subset["notReadyAddresses"] = not_ready_addresses
        if ports:
            subset["ports"] = sorted(ports, key=_port_key)
        subsets.append(subset)
    subsets.sort(
        key=lambda s: [_address_key(a) for a in (*s.get("addresses", ()), *s.get("notReadyAddresses", ()))]
    )
    return subsets


def subsets_for(service: Obj, pods: Sequence[Obj]) -> tuple[list[Obj], int, int]:
    """(subsets, ready addresses, not-ready addresses) for the Service's selected pods."""
    svc = podutil.spec(service)
    publish_not_ready = bool(svc.get("publishNotReadyAddresses"))
    entries: list[tuple[Obj, Obj | None, bool]] = []
    ready_count = not_ready_count = 0
    ports = svc.get("ports") or []
    for pod in pods:
        if not should_pod_be_in_endpoints(pod, publish_not_ready):
            continue
        address = pod_address(service, pod)
        if address is None:
            continue
        ready = publish_not_ready or podutil.is_pod_ready(pod)
        if not ports:
            if svc.get("clusterIP") == "None":
                entries.append((address, None, ready))
                ready_count += ready
                not_ready_count += not ready
            continue
        for service_port in ports:
            number = podutil.find_port(pod, service_port)
            if number is None:
                continue
            port: Obj = {}
            if service_port.get("name"):
                port["name"] = service_port["name"]
            port["port"] = number
            port["protocol"] = service_port.get("protocol") or "TCP"
            if service_port.get("appProtocol"):
                port["appProtocol"] = service_port["appProtocol"]
            entries.append((address, port, ready))
            ready_count += ready
            not_ready_count += not ready
    return repack(entries), ready_count, not_ready_count


def truncate(subsets: list[Obj], max_capacity: int) -> bool:
    """``truncateEndpoints``: keep ready addresses first, spread the cut over subsets by proportion."""
    total_ready = sum(len(s.get("addresses") or ()) for s in subsets)
    total_not_ready = sum(len(s.get("notReadyAddresses") or ()) for s in subsets)
    if total_ready + total_not_ready <= max_capacity:
        return False
    truncate_ready = total_ready > max_capacity
    limit = max_capacity if truncate_ready else max_capacity - total_ready
    number_total = total_ready if truncate_ready else total_not_ready
    can_add = limit
    for subset in subsets:
        field = "addresses" if truncate_ready else "notReadyAddresses"
        in_subset = len(subset.get(field) or ())
        to_add = min(math.ceil(in_subset / number_total * limit) if number_total else 0, can_add)
        if truncate_ready:
            subset["addresses"] = list(subset.get("addresses") or ())[:to_add]
            subset.pop("notReadyAddresses", None)
            can_add -= len(subset["addresses"])
        else:
            subset["notReadyAddresses"] = list(subset.get("notReadyAddresses") or ())[:to_add]
            can_add -= len(subset["notReadyAddresses"])
        for key in ("addresses", "notReadyAddresses"):
            if key in subset and not subset[key]:
                del subset[key]
    return True


def pod_trigger_time(pod: Obj) -> float | None:
    cond = podutil.ready_condition(pod)
    return parse_time(cond.get("lastTransitionTime")) if cond is not None else None


@dataclass
class _TriggerState:
    pods: dict[str, float]
    service: float | None


class TriggerTimeTracker:
    """``TriggerTimeTracker``: the earliest change (a pod's readiness transition, or the Service's creation)
    not yet reflected in the Service's endpoints."""

    def __init__(self) -> None:
        self._states: dict[str, _TriggerState] = {}

    def compute(self, key: str, service: Obj, pods: Sequence[Obj]) -> float | None:
        state = self._states.get(key)
        known = state is not None
        last_pods = state.pods if state is not None else {}
        last_service = state.service if state is not None else None
        earliest: float | None = None
        now_pods: dict[str, float] = {}
        for pod in pods:
            trigger = pod_trigger_time(pod)
            if trigger is None:
                continue
            now_pods[podutil.name_of(pod)] = trigger
            previous = last_pods.get(podutil.name_of(pod))
            if previous is None or trigger > previous:
                earliest = trigger if earliest is None else min(earliest, trigger)
        created = parse_time(podutil.meta(service).get("creationTimestamp"))
        if created is not None and (last_service is None or created > last_service):
            earliest = created if earliest is None else min(earliest, created)
        self._states[key] = _TriggerState(now_pods, created)
        if not known:
            return created
        return earliest

    def forget(self, key: str) -> None:
        self._states.pop(key, None)


def pod_endpoints_changed(old: Obj, new: Obj) -> tuple[bool, bool]:
    """``podEndpointsChanged``: (the pod's endpoint changed, its labels or hostname changed)."""
    old_spec, new_spec = podutil.spec(old), podutil.spec(new)
    labels_changed = podutil.labels_of(old) != podutil.labels_of(new) or (
        old_spec.get("hostname") != new_spec.get("hostname")
        or old_spec.get("subdomain") != new_spec.get("subdomain")
    )
    if podutil.meta(old).get("deletionTimestamp") != podutil.meta(new).get("deletionTimestamp"):
        return True, labels_changed
    if podutil.is_pod_ready(old) != podutil.is_pod_ready(new):
        return True, labels_changed
    if pod_ips(old) != pod_ips(new):
        return True, labels_changed
    if podutil.is_pod_terminal(old) != podutil.is_pod_terminal(new):
        return True, labels_changed
    return False, labels_changed


def service_selects(service: Obj, pod: Obj) -> bool:
    """Services with no selector match nothing (not everything)."""
    selector = podutil.spec(service).get("selector")
    if not isinstance(selector, dict):
        return False
    return labelsel.exact(selector).matches(podutil.labels_of(pod))


def selecting_services(services_by_namespace: Index, pod: Obj) -> set[str]:
    """Keys of the Services in the pod's namespace whose selector matches it."""
    return {
        object_key(svc)
        for svc in services_by_namespace.get(podutil.namespace_of(pod))
        if service_selects(svc, pod)
    }


def services_after_pod_update(old: Obj, new: Obj, services_of: Callable[[Obj], set[str]]) -> set[str]:
    """The Services to sync after a pod update, as upstream's ``GetServicesToUpdateOnPodChange`` (shared by the
    Endpoints and EndpointSlice controllers): none for a resync or a change no endpoint shows; those of the
    new pod; with changed labels also those of the old one (all of them when the endpoint changed too, else
    only the Services that gained or lost the pod)."""
    if podutil.meta(old).get("resourceVersion") == podutil.meta(new).get("resourceVersion"):
        return set()
    pod_changed, labels_changed = pod_endpoints_changed(old, new)
    if not pod_changed and not labels_changed:
        return set()
    keys = services_of(new)
    if labels_changed:
        before = services_of(old)
        keys = keys | before if pod_changed else keys ^ before
    return keys


# -- writers -----------------------------------------------------------------------------------------------


@dataclass
class ServiceEndpoints:
    """What every writer is given for one Service."""

    service: Obj
    pods: list[Obj]
    """The pods the Service selects (before the per-writer eligibility checks)."""
    trigger_time: float | None


class EndpointsWriter(Protocol):
    async def write(self, desired: ServiceEndpoints) -> None: ...

    async def service_gone(self, namespace: str, name: str) -> None: ...


class CoreEndpointsWriter:
    """Keeps the core/v1 Endpoints object named after the Service."""

    def __init__(self, client: KubeAPI, cache: Informer, recorder: EventRecorder, max_capacity: int) -> None:
        self.client = client
        self.cache = cache
        self.recorder = recorder
        self.max_capacity = max_capacity

    async def write(self, desired: ServiceEndpoints) -> None:
        service = desired.service
        namespace, name = podutil.namespace_of(service), podutil.name_of(service)
        subsets, _, _ = subsets_for(service, desired.pods)
        current = self.cache.get(f"{namespace}/{name}")
        create = current is None
        service_labels = dict(podutil.labels_of(service))
        if current is not None:
            current_labels = {k: v for k, v in podutil.labels_of(current).items() if k != HEADLESS}
            capacity_ok = sum(
                len(s.get("addresses") or ()) + len(s.get("notReadyAddresses") or ())
                for s in _subsets_of(current)
            ) <= self.max_capacity and OVER_CAPACITY not in podutil.annotations_of(current)
            if _subsets_of(current) == subsets and current_labels == service_labels and capacity_ok:
                return
        new: Obj = (
            copy.deepcopy(current)
            if current is not None
            else {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": namespace}}
        )
        meta = new.setdefault("metadata", {})
        annotations = dict(meta.get("annotations") or {})
        if desired.trigger_time is not None:
            annotations[TRIGGER_TIME] = format_time_nano(desired.trigger_time)
        else:
            annotations.pop(TRIGGER_TIME, None)
        if truncate(subsets, self.max_capacity):
            annotations[OVER_CAPACITY] = "truncated"
        else:
            annotations.pop(OVER_CAPACITY, None)
        if annotations:
            meta["annotations"] = annotations
        else:
            meta.pop("annotations", None)
        labels = dict(service_labels)
        if not is_service_ip_set(service):
            labels[HEADLESS] = ""
        if labels:
            meta["labels"] = labels
        else:
            meta.pop("labels", None)
        if subsets:
            new["subsets"] = subsets
        else:
            new.pop("subsets", None)
        try:
            if create:
                await self.client.create(ENDPOINTS, new, namespace=namespace)
            else:
                await self.client.replace(ENDPOINTS, new, namespace=namespace)
        except StatusError as exc:
            if create and exc.code == 403 and namespace_terminating(exc):
                return
            if create:
                message = f"Failed to create endpoint for service {namespace}/{name}: {error_text(exc)}"
                self.recorder.event(new, WARNING, "FailedToCreateEndpoint", message)
            else:
                message = f"Failed to update endpoint {namespace}/{name}: {error_text(exc)}"
                self.recorder.event(new, WARNING, "FailedToUpdateEndpoint", message)
            raise

    async def service_gone(self, namespace: str, name: str) -> None:
        if self.cache.get(f"{namespace}/{name}") is None:
            return
        try:
            await self.client.delete(ENDPOINTS, name, namespace=namespace)
        except StatusError as exc:
            if exc.code != 404:
                raise


def _subsets_of(endpoints: Obj) -> list[Obj]:
    value = endpoints.get("subsets")
    return value if isinstance(value, list) else []


# -- the controller ------------------------------------------------------------------------------------------


class EndpointsController(ManagedController):
    name = "endpoint-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        informers = ctx.informers
        self.services = informers.informer(SERVICES)
        self.pods = informers.informer(PODS)
        self.endpoints = informers.informer(ENDPOINTS)
        self.services_by_namespace: Index = informers.namespace_index(SERVICES)
        self.pods_by_namespace: Index = informers.namespace_index(PODS)
        super().__init__(
            ctx, self.services, [self.pods, self.endpoints], ctx.settings.concurrent_endpoint_syncs
        )
        self.triggers = TriggerTimeTracker()
        self.writers: list[EndpointsWriter] = [
            CoreEndpointsWriter(
                ctx.client, self.endpoints, self.recorder, ctx.settings.endpoints_max_capacity
            )
        ]
        self.batch = ctx.settings.endpoint_updates_batch_seconds
        self.pods.add_handlers(on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_added)
        self.endpoints.add_handlers(on_delete=lambda ep: self.enqueue(object_key(ep)))

    def _services_of(self, pod: Obj) -> set[str]:
        return selecting_services(self.services_by_namespace, pod)

    def _pod_added(self, pod: Obj) -> None:
        for key in self._services_of(pod):
            self.enqueue_after(key, self.batch)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        for key in services_after_pod_update(old, new, self._services_of):
            self.enqueue_after(key, self.batch)

    async def started(self) -> None:
        """``checkLeftoverEndpoints``: Endpoints left from Services deleted while nothing was watching."""
        for ep in self.endpoints.objects():
            if LEADER_ANNOTATION not in podutil.annotations_of(ep):
                self.enqueue(object_key(ep))

    async def reconcile(self, key: str) -> float | None:
        namespace, _, name = key.partition("/")
        service = self.services.get(key)
        if service is None:
            for writer in self.writers:
                await writer.service_gone(namespace, name)
            self.triggers.forget(key)
            return None
        svc = podutil.spec(service)
        if svc.get("type") == "ExternalName" or not isinstance(svc.get("selector"), dict):
            return None
        pods = [pod for pod in self.pods_by_namespace.get(namespace) if service_selects(service, pod)]
        trigger = self.triggers.compute(key, service, pods)
        desired = ServiceEndpoints(service, pods, trigger)
        for writer in self.writers:
            await writer.write(desired)
        return None

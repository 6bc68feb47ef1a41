"""The ServiceCIDR controller (upstream ``pkg/controller/servicecidrs``, ``--controllers`` name
``service-cidr-controller``).

Every ServiceCIDR gets the ``networking.k8s.io/service-cidr-finalizer`` and a ``Ready`` condition
(``Kubernetes Service CIDR is ready``). A ServiceCIDR being deleted keeps its finalizer while an IPAddress
the API server allocated (``ipaddress.kubernetes.io/managed-by: ipallocator.k8s.io``) lies in its ranges
and in no other ServiceCIDR: its ``Ready`` turns False with reason ``Terminating`` until those addresses
go or another ServiceCIDR covers them. A range that another ServiceCIDR contains whole never blocks. Once
nothing blocks, the finalizer is removed after a grace period counted from the deletion (10 s upstream) so
allocators that still saw the range as usable are done with it. Decisions are pure; the clock is the
caller's.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from vplane.controllers.client import Resource
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.events import WARNING
from vplane.controllers.kcm.storageprotection import finalizer_patch, has_finalizer
from vplane.controllers.kcm.timefmt import format_time, parse_time
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

SERVICE_CIDRS = Resource("networking.k8s.io/v1", "ServiceCIDR", "servicecidrs", namespaced=False)
IP_ADDRESSES = Resource("networking.k8s.io/v1", "IPAddress", "ipaddresses", namespaced=False)

FINALIZER = "networking.k8s.io/service-cidr-finalizer"
CONTROLLER_NAME = "service-cidr-controller"
MANAGED_BY_LABEL = "ipaddress.kubernetes.io/managed-by"
IP_ALLOCATOR = "ipallocator.k8s.io"
READY_MESSAGE = "Kubernetes Service CIDR is ready"
TERMINATING_REASON = "Terminating"
TERMINATING_MESSAGE = (
    "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR"
)
WORKERS = 5
"""Upstream runs the controller with five workers."""

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


# -- pure decisions ------------------------------------------------------------------------------------------


def prefixes(cidr: Obj) -> list[Network]:
    """The ServiceCIDR's ranges; one that does not parse is skipped (validation refused it already)."""
    out: list[Network] = []
    for text in podutil.spec(cidr).get("cidrs") or ():
        try:
            out.append(ipaddress.ip_network(str(text), strict=False))
        except ValueError:
            continue
    return out


def _contains(outer: Network, inner: Network) -> bool:
    return outer.version == inner.version and inner.subnet_of(outer)  # type: ignore[arg-type]


def containing_prefix(cidrs: Iterable[Obj], prefix: Network) -> list[str]:
    """``ContainsPrefix``: the ServiceCIDRs one of whose ranges holds ``prefix`` whole (itself included)."""
    return [podutil.name_of(c) for c in cidrs if any(_contains(p, prefix) for p in prefixes(c))]


def containing_address(cidrs: Iterable[Obj], address: Address) -> list[str]:
    """``ContainsAddress``: the ServiceCIDRs one of whose ranges holds ``address``."""
    return [podutil.name_of(c) for c in cidrs if any(address in p for p in prefixes(c))]


def overlapping(cidrs: Iterable[Obj], cidr: Obj) -> list[str]:
    """``OverlapsPrefix`` over each range: the ServiceCIDRs whose deletion a new one may unblock."""
    mine = prefixes(cidr)
    return [
        podutil.name_of(c)
        for c in cidrs
        if any(p.version == q.version and p.overlaps(q) for p in prefixes(c) for q in mine)
    ]


def allocated(ip: Obj) -> Address | None:
    """The address of an IPAddress the API server's allocator holds; None for anyone else's."""
    if podutil.labels_of(ip).get(MANAGED_BY_LABEL) != IP_ALLOCATOR:
        return None
    try:
        return ipaddress.ip_address(podutil.name_of(ip))
    except ValueError:
        return None


def can_delete(cidr: Obj, cidrs: list[Obj], ips: Iterable[Obj]) -> bool:
    """``canDeleteCIDR``: yes when another ServiceCIDR holds each of its ranges whole, or when no allocated
    address in its ranges would be left in no ServiceCIDR but this one."""
    name = podutil.name_of(cidr)
    ranges = prefixes(cidr)
    if all(containing_prefix(cidrs, p) not in ([], [name]) for p in ranges):
        return True
    for ip in ips:
        address = allocated(ip)
        if address is None or not any(address in p for p in ranges):
            continue
        if containing_address(cidrs, address) == [name]:
            return False
    return True


@dataclass(frozen=True)
class Decision:
    finalizer: bool | None = None
    """True: add the finalizer; False: remove it; None: leave it."""
    ready: tuple[str, str, str] | None = None
    """(status, reason, message) for the ``Ready`` condition, when it must change."""
    retry_in: float | None = None


def _ready_is(cidr: Obj, status: str, reason: str, message: str) -> bool:
    for cond in podutil.status(cidr).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return (cond.get("status"), cond.get("reason") or "", cond.get("message")) == (
                status,
                reason,
                message,
            )
    return False


def decide(cidr: Obj, cidrs: list[Obj], ips: Iterable[Obj], now: float, grace: float) -> Decision:
    """``sync``: what to do with one ServiceCIDR. The condition is written only when it would change (upstream
    applies it on every sync, refreshing only its transition time)."""
    deleted = parse_time(podutil.meta(cidr).get("deletionTimestamp"))
    if deleted is None and not podutil.is_deleting(cidr):
        ready = None if _ready_is(cidr, "True", "", READY_MESSAGE) else ("True", "", READY_MESSAGE)
        return Decision(finalizer=None if has_finalizer(cidr, FINALIZER) else True, ready=ready)
    if not can_delete(cidr, cidrs, ips):
        blocked = ("False", TERMINATING_REASON, TERMINATING_MESSAGE)
        return Decision(ready=None if _ready_is(cidr, *blocked) else blocked)
    wait = grace - (now - deleted) if deleted is not None else 0.0
    if wait > 0:
        return Decision(retry_in=wait)
    return Decision(finalizer=False if has_finalizer(cidr, FINALIZER) else None)


# -- the controller ------------------------------------------------------------------------------------------


class ServiceCIDRController(ManagedController):
    name = CONTROLLER_NAME

    def __init__(self, ctx: ControllerContext) -> None:
        informers = ctx.informers
        self.cidrs = informers.informer(SERVICE_CIDRS)
        self.ips = informers.informer(IP_ADDRESSES)
        super().__init__(ctx, self.cidrs, [self.ips], WORKERS)
        self.grace = ctx.settings.service_cidr_deletion_grace_period_seconds
        self.cidrs.add_handlers(on_add=self._cidr_added)
        self.ips.add_handlers(on_add=self._ip_changed, on_delete=self._ip_changed)

    def _all(self) -> list[Obj]:
        return self.cidrs.objects()

    def _cidr_added(self, cidr: Obj) -> None:
        """A new range may cover addresses that blocked another ServiceCIDR's deletion."""
        for name in overlapping(self._all(), cidr):
            self.enqueue(name)

    def _ip_changed(self, ip: Obj) -> None:
        address = allocated(ip)
        if address is None:
            return
        for name in containing_address(self._all(), address):
            self.enqueue(name)

    async def reconcile(self, key: str) -> float | None:
        cidr = self.cidrs.get(key)
        if cidr is None:
            return None
        decision = decide(cidr, self._all(), self.ips.objects(), self.clock(), self.grace)
        name = podutil.name_of(cidr)
        try:
            if decision.finalizer is True:
                await self._patch(name, add=True)
            if decision.ready is not None:
                await self._ready(cidr, *decision.ready)
            if decision.finalizer is False:
                await self._patch(name, add=False)
        except StatusError as exc:
            if exc.code == 404:
                return None
            raise
        return decision.retry_in

    async def _patch(self, name: str, *, add: bool) -> None:
        await self.client.patch(
            SERVICE_CIDRS, name, finalizer_patch(FINALIZER, add=add), patch_type="strategic"
        )

    async def _ready(self, cidr: Obj, status: str, reason: str, message: str) -> None:
        condition: Obj = {
            "type": "Ready",
            "status": status,
            "lastTransitionTime": format_time(self.clock()),
            "reason": reason,
            "message": message,
        }
        try:
            await self.client.apply_status(
                SERVICE_CIDRS,
                {"metadata": {"name": podutil.name_of(cidr)}, "status": {"conditions": [condition]}},
                field_manager=CONTROLLER_NAME,
                force=True,
            )
        except StatusError as exc:
            if status == "True" and exc.code != 404:
                self.recorder.event(
                    cidr,
                    WARNING,
                    "KubernetesServiceCIDRError",
                    "The ServiceCIDR Status can not be set to Ready=True",
                )
            raise

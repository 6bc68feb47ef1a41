"""Service ClusterIP and NodePort ranges: which addresses and ports may be handed out, in which order, and
upstream's words when they cannot (pure; the API server's allocator does the I/O).

Upstream's rules (``pkg/registry/core/service/ipallocator`` and ``portallocator``, KEP-3070 and KEP-3668):

- An IPv4 range never hands out its network or broadcast address; an IPv6 range never its network address.
- The range is split at an offset, ``min(max(16, size / 16), 256)`` addresses from its start (none below
  17 addresses): dynamic allocation starts at a random point of the upper part and falls back to the lower
  part, so the lower part stays free for addresses users ask for. Node ports split the same way with
  ``min(max(16, size / 32), 128)``.
- The range's first address is the ``kubernetes`` Service's. Upstream only keeps it likely free (it sits in
  the lower part); dynamic allocation here never hands it out, so a recreated ``kubernetes`` Service always
  gets it back. A user may still ask for it by name, as upstream allows.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Rand = Callable[[int], int]
"""``rand(n)`` is a number in ``[0, n)``: where dynamic allocation starts in a part of a range."""

RANGE_FULL = "range is full"
IP_ALLOCATED = "provided IP is already allocated"
PORT_ALLOCATED = "provided port is already allocated"

MANAGED_BY_LABEL = "ipaddress.kubernetes.io/managed-by"
FAMILY_LABEL = "ipaddress.kubernetes.io/ip-family"
IP_ALLOCATOR = "ipallocator.k8s.io"
"""The ``managed-by`` value of the IPAddress objects the Service IP allocator writes."""


def ip_not_in_range(ip: str, cidr: str) -> str:
    """``ErrNotInRange`` of the IP allocator."""
    return f"the provided IP ({ip}) is not in the valid range. The range of valid IPs is {cidr}"


def port_not_in_range(ports: str) -> str:
    """``ErrNotInRange`` of the port allocator."""
    return f"provided port is not in the valid range. The range of valid ports is {ports}"


def family_of(ip: str) -> str:
    """``IPv4`` or ``IPv6`` (the Service ``ipFamilies`` spelling); ``""`` when ``ip`` is not an address."""
    try:
        return "IPv6" if ipaddress.ip_address(ip).version == 6 else "IPv4"
    except ValueError:
        return ""


def _split(size: int, step: int, most: int) -> int:
    """Upstream's ``calculateRangeOffset``: how many values at the start are kept for static requests."""
    if size <= 16:
        return 0
    return min(max(16, size // step), most)


def _walk(first: int, count: int, start: int) -> Iterator[int]:
    """``count`` values from ``first``, beginning at ``first + start`` and wrapping around."""
    for step in range(count):
        yield first + (start + step) % count


@dataclass(frozen=True)
class IPRange:
    """A Service IP range (``service_cluster_ip_range``, upstream's ``--service-cluster-ip-range``)."""

    network: IPNetwork

    @classmethod
    def parse(cls, cidr: str) -> IPRange:
        return cls(ipaddress.ip_network(cidr, strict=True))

    @property
    def cidr(self) -> str:
        return str(self.network)

    @property
    def family(self) -> str:
        return "IPv6" if self.network.version == 6 else "IPv4"

    @property
    def first(self) -> int:
        """The first address that may be handed out (the one after the network address)."""
        return int(self.network.network_address) + 1

    @property
    def last(self) -> int:
        """The last address that may be handed out (IPv4 keeps its broadcast address out)."""
        broadcast = int(self.network.broadcast_address)
        return broadcast - 1 if self.network.version == 4 else broadcast

    @property
    def size(self) -> int:
        return max(0, self.last - self.first + 1)

    @property
    def offset(self) -> int:
        return _split(self.network.num_addresses, 16, 256)

    @property
    def service_ip(self) -> str:
        """The ``kubernetes`` Service's address: the range's first usable one."""
        return self._text(self.first)

    def _text(self, value: int) -> str:
        return str(ipaddress.ip_address(value) if self.network.version == 4 else ipaddress.IPv6Address(value))

    def contains(self, ip: str) -> bool:
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return False
        return address.version == self.network.version and self.first <= int(address) <= self.last

    def dynamic_order(self, rand: Rand) -> Iterator[str]:
        """Every address dynamic allocation may hand out, in the order it tries them: the upper part from a
        random point, then the lower part from a random point; never the ``kubernetes`` address."""
        if self.size <= 1:
            return
        offset = min(self.offset, self.size)
        if not offset:  # a small range is one part: all of it but the first address
            parts = [(self.first + 1, self.size - 1)]
        else:
            parts = [(self.first + offset, self.size - offset), (self.first + 1, offset - 1)]
        for start, count in parts:
            if count > 0:
                for value in _walk(start, count, rand(count)):
                    yield self._text(value)

    def next_free(self, taken: Callable[[str], bool], rand: Rand) -> str:
        """The first address of :meth:`dynamic_order` not ``taken``; ``RangeFull`` when there is none."""
        for candidate in self.dynamic_order(rand):
            if not taken(candidate):
                return candidate
        raise RangeFull(RANGE_FULL)

    def check_requested(self, ip: str) -> str | None:
        """Why a requested address cannot be had from this range, or None."""
        if not self.contains(ip):
            return ip_not_in_range(ip, self.cidr)
        return None


class RangeFull(Exception):
    """No value of a range is free."""


@dataclass(frozen=True)
class PortRange:
    """A node port range (``service_node_port_range``, upstream's ``--service-node-port-range``)."""

    base: int
    size: int

    @classmethod
    def parse(cls, text: str) -> PortRange:
        """``30000-32767`` (both ends included) or a single port, as upstream's flag is written."""
        low, sep, high = text.strip().partition("-")
        try:
            first = int(low)
            end = int(high) if sep else first
        except ValueError:
            raise ValueError(f"invalid port range {text!r}") from None
        if not 0 < first <= end < 65536:
            raise ValueError(f"invalid port range {text!r}")
        return cls(first, end - first + 1)

    def __str__(self) -> str:
        return f"{self.base}-{self.base + self.size - 1}"

    @property
    def offset(self) -> int:
        return _split(self.size, 32, 128)

    def contains(self, port: int) -> bool:
        return self.base <= port < self.base + self.size

    def dynamic_order(self, rand: Rand) -> Iterator[int]:
        """Every port in the order dynamic allocation tries them: upper part first, each from a random point."""
        offset = min(self.offset, self.size)
        upper = self.size - offset
        if upper:
            yield from _walk(self.base + offset, upper, rand(upper))
        if offset:
            yield from _walk(self.base, offset, rand(offset))

    def next_free(self, taken: Callable[[int], bool], rand: Rand) -> int:
        for candidate in self.dynamic_order(rand):
            if not taken(candidate):
                return candidate
        raise RangeFull(RANGE_FULL)

    def check_requested(self, port: int) -> str | None:
        if not self.contains(port):
            return port_not_in_range(str(self))
        return None


# -- repair: allocation records against the Services that hold them ---------------------------------


@dataclass(frozen=True)
class Holder:
    """What one stored Service holds: its ClusterIPs and node ports."""

    namespace: str
    name: str
    ips: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Record:
    """An allocation record: an IPAddress object or a node port's key. ``owner`` is the Service it names
    (``namespace/name``; empty for an IPAddress the allocator does not manage, which is never removed)."""

    owner: str
    created: float


@dataclass
class RepairPlan:
    create_ips: list[tuple[str, Holder]]
    delete_ips: list[str]
    create_ports: list[tuple[int, Holder]]
    delete_ports: list[int]
    conflicts: list[str]
    """Addresses or ports recorded for one Service and held by another (upstream's repair warns of these)."""


def plan_repair(
    holders: list[Holder],
    ips: dict[str, Record],
    ports: dict[int, Record],
    *,
    ip_range: IPRange,
    port_range: PortRange,
    now: float,
    orphan_age: float,
) -> RepairPlan:
    """Records for what Services hold and lack one (Services stored before the API server allocated, or
    a crash between a record and its Service), and records no Service holds any more, once they are
    ``orphan_age`` old (younger ones may belong to a create still under way)."""
    plan = RepairPlan([], [], [], [], [])
    held_ips: dict[str, str] = {}
    held_ports: dict[int, str] = {}
    for holder in holders:
        for ip in holder.ips:
            if not ip_range.contains(ip) or ip in held_ips:
                continue
            held_ips[ip] = holder.key
            record = ips.get(ip)
            if record is None:
                plan.create_ips.append((ip, holder))
            elif record.owner != holder.key:
                plan.conflicts.append(f"{ip} ({holder.key}, recorded for {record.owner or 'another owner'})")
        for port in holder.ports:
            if not port_range.contains(port) or port in held_ports:
                continue
            held_ports[port] = holder.key
            port_record = ports.get(port)
            if port_record is None:
                plan.create_ports.append((port, holder))
            elif port_record.owner != holder.key:
                plan.conflicts.append(f"{port} ({holder.key}, recorded for {port_record.owner})")
    for ip, record in sorted(ips.items()):
        if record.owner and ip not in held_ips and now - record.created >= orphan_age:
            plan.delete_ips.append(ip)
    for port, record in sorted(ports.items()):
        if port not in held_ports and now - record.created >= orphan_age:
            plan.delete_ports.append(port)
    return plan

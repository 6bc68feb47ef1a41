"""Each tenant cluster's pod and Service ranges: distinct ranges of 127.0.0.0/8 per tenant, so the pods and
ClusterIPs of the clusters on one machine (the platform's own and every tenant's) do not collide.

A tenant gets a *slot*: the slot-th subnet of ``tenant_pod_cidr_pool`` (prefix ``tenant_pod_cidr_prefix``) for
its pods and the slot-th of ``tenant_service_cidr_pool`` for its Services. The platform picks the slot once,
when it first places the tenant, and records both ranges in the tenant's directory (``network.json``), so
every replica and every restart (of the replicas or of the platform) agrees; the replicas get them on their
command line (the API server's ``service_cluster_ip_range``, the node's ``pod_cidr``). Slots are looked for
from an offset derived from the platform's data directory, and a slot whose ranges something on this machine
already listens in is passed over, so two platforms on one machine rarely pick the same ranges (they cannot
see each other's records: that is not a guarantee).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from vplane.platform.settings import PlatformSettings
from vplane.support.files import write_private

NETWORK_FILE = "network.json"


@dataclass(frozen=True)
class TenantNetwork:
    pod_cidr: str
    service_cidr: str

    def to_json(self) -> str:
        return json.dumps({"podCIDR": self.pod_cidr, "serviceCIDR": self.service_cidr})

    @classmethod
    def from_json(cls, text: str) -> TenantNetwork | None:
        try:
            doc = json.loads(text)
            pod, service = str(doc["podCIDR"]), str(doc["serviceCIDR"])
            ipaddress.IPv4Network(pod)
            ipaddress.IPv4Network(service)
        except (ValueError, KeyError, TypeError):
            return None
        return cls(pod, service)


# -- pure ----------------------------------------------------------------------------------------------


def slot_count(pod_pool: str, pod_prefix: int, service_pool: str, service_prefix: int) -> int:
    pods, services = ipaddress.IPv4Network(pod_pool), ipaddress.IPv4Network(service_pool)
    return min(1 << (pod_prefix - pods.prefixlen), 1 << (service_prefix - services.prefixlen))


def slot_network(
    slot: int, pod_pool: str, pod_prefix: int, service_pool: str, service_prefix: int
) -> TenantNetwork:
    """The ranges of one slot."""

    def nth(pool: str, prefix: int) -> str:
        network = ipaddress.IPv4Network(pool)
        size = 1 << (32 - prefix)
        return str(ipaddress.IPv4Network((int(network.network_address) + slot * size, prefix)))

    return TenantNetwork(nth(pod_pool, pod_prefix), nth(service_pool, service_prefix))


def pick_slot(
    count: int, start: int, taken: Iterable[int], busy: Callable[[int], bool] = lambda _slot: False
) -> int | None:
    """The first slot from ``start`` (wrapping around) that no tenant holds and nothing on the machine uses;
    failing that, the first one no tenant holds; None when every slot is held."""
    held = set(taken)
    free = [(start + i) % count for i in range(count) if (start + i) % count not in held]
    for slot in free:
        if not busy(slot):
            return slot
    return free[0] if free else None


def start_offset(seed: str, count: int) -> int:
    return int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big") % count


def slot_of(network: TenantNetwork, pod_pool: str, pod_prefix: int) -> int | None:
    """Which slot a recorded pod range is (None: not one of the pool's subnets)."""
    pool, pods = ipaddress.IPv4Network(pod_pool), ipaddress.IPv4Network(network.pod_cidr)
    if pods.prefixlen != pod_prefix or not pods.subnet_of(pool):
        return None
    return (int(pods.network_address) - int(pool.network_address)) >> (32 - pod_prefix)


def listening_addresses(tables: Iterable[str]) -> set[ipaddress.IPv4Address]:
    """The local IPv4 addresses of listening TCP sockets in ``/proc/net/tcp``'s format."""
    found: set[ipaddress.IPv4Address] = set()
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 4 or fields[3] != "0A":  # TCP_LISTEN
                continue
            address = fields[1].partition(":")[0]
            try:
                found.add(ipaddress.IPv4Address(int.from_bytes(bytes.fromhex(address), "little")))
            except ValueError:
                continue
    return found


# -- the record ----------------------------------------------------------------------------------------


def _machine_listening() -> set[ipaddress.IPv4Address]:
    try:
        return listening_addresses([Path("/proc/net/tcp").read_text()])
    except OSError:
        return set()


def tenant_network(settings: PlatformSettings, root: Path, directory: Path) -> TenantNetwork:
    """The tenant's ranges: recorded in ``directory`` if they are, else a free slot's, recorded now. ``root``
    holds every tenant's directory (``<root>/<namespace>/<name>``): their records are the slots taken.
    Synchronous on purpose: no other placement runs between the look and the record."""
    path = directory / NETWORK_FILE
    pools = (
        settings.tenant_pod_cidr_pool,
        settings.tenant_pod_cidr_prefix,
        settings.tenant_service_cidr_pool,
        settings.tenant_service_cidr_prefix,
    )
    with_recorded = TenantNetwork.from_json(path.read_text()) if path.exists() else None
    if with_recorded is not None:
        return with_recorded
    taken = set()
    for other in root.glob(f"*/*/{NETWORK_FILE}"):
        if other == path:
            continue
        try:
            recorded = TenantNetwork.from_json(other.read_text())
        except OSError:
            continue
        slot = slot_of(recorded, pools[0], pools[1]) if recorded is not None else None
        if slot is not None:
            taken.add(slot)
    count = slot_count(*pools)
    listening = _machine_listening()

    def busy(slot: int) -> bool:
        network = slot_network(slot, *pools)
        ranges = (ipaddress.IPv4Network(network.pod_cidr), ipaddress.IPv4Network(network.service_cidr))
        return any(address in r for address in listening for r in ranges)

    slot = pick_slot(count, start_offset(str(settings.data_dir), count), taken, busy)
    if slot is None:
        raise RuntimeError(
            f"every tenant network range is in use ({count} tenants): widen tenant_pod_cidr_pool and "
            "tenant_service_cidr_pool"
        )
    network = slot_network(slot, *pools)
    write_private(path, network.to_json())
    return network

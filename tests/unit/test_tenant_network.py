"""Tenant nodes (issue 10): each tenant's pod and Service ranges (``vplane.platform.tenantnet``) and the
node's part of a replica's arguments."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from vplane.platform.placement import TenantSpec, node_args, tenant_args
from vplane.platform.settings import HOST_POD_CIDR, PlatformSettings
from vplane.platform.tenantnet import (
    NETWORK_FILE,
    TenantNetwork,
    listening_addresses,
    pick_slot,
    slot_count,
    slot_network,
    slot_of,
    start_offset,
    tenant_network,
)
from vplane.runtime.settings import RuntimeSettings

POOLS = ("127.16.0.0/12", 20, "127.112.0.0/12", 20)


def test_the_host_pod_range_the_platform_avoids_is_the_runtime_default() -> None:
    assert RuntimeSettings(data_dir=Path("/x")).pod_cidr == HOST_POD_CIDR


def test_slots_are_disjoint_ranges_inside_their_pools() -> None:
    count = slot_count(*POOLS)
    assert count == 256
    seen: list[ipaddress.IPv4Network] = []
    for slot in (0, 1, 17, count - 1):
        net = slot_network(slot, *POOLS)
        pods, services = ipaddress.IPv4Network(net.pod_cidr), ipaddress.IPv4Network(net.service_cidr)
        assert pods.subnet_of(ipaddress.IPv4Network(POOLS[0])) and pods.prefixlen == 20
        assert services.subnet_of(ipaddress.IPv4Network(POOLS[2])) and services.prefixlen == 20
        assert slot_of(net, POOLS[0], POOLS[1]) == slot
        for other in seen:
            assert not other.overlaps(pods) and not other.overlaps(services)
        seen += [pods, services]
    assert slot_network(0, *POOLS) == TenantNetwork("127.16.0.0/20", "127.112.0.0/20")
    assert slot_network(255, *POOLS) == TenantNetwork("127.31.240.0/20", "127.127.240.0/20")


def test_the_smaller_pool_bounds_the_slots() -> None:
    assert slot_count("127.16.0.0/12", 20, "127.112.0.0/16", 20) == 16


def test_pick_slot_skips_held_and_busy_slots_and_wraps() -> None:
    assert pick_slot(8, 6, taken={6}) == 7
    assert pick_slot(8, 7, taken={7}) == 0
    assert pick_slot(8, 0, taken=set(), busy=lambda s: s < 3) == 3
    # Every free slot busy: a free one all the same (busy is a hint about other platforms, not a record).
    assert pick_slot(4, 0, taken={0, 1}, busy=lambda _s: True) == 2
    assert pick_slot(2, 0, taken={0, 1}) is None


def test_start_offset_is_stable_and_in_range() -> None:
    assert start_offset("/data/a", 256) == 99  # the same in every process (no per-process hash seed)
    assert all(0 <= start_offset(f"/d/{i}", 256) < 256 for i in range(50))
    assert len({start_offset(f"/d/{i}", 256) for i in range(50)}) > 10


def test_listening_addresses_reads_proc_net_tcp() -> None:
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000  0 1\n"
        "   1: 0100107F:01BB 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000  0 2\n"
        "   2: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000  0 3\n"
    )
    assert listening_addresses([table]) == {
        ipaddress.IPv4Address("127.0.0.1"),
        ipaddress.IPv4Address("127.16.0.1"),
    }


def test_tenant_network_is_recorded_and_distinct_per_tenant(tmp_path: Path) -> None:
    settings = PlatformSettings(data_dir=tmp_path)
    root = tmp_path / "tenants"
    dirs = [root / "p-default" / name for name in ("a", "b", "c")]
    for d in dirs:
        d.mkdir(parents=True)
    networks = [tenant_network(settings, root, d) for d in dirs]
    assert len({n.pod_cidr for n in networks}) == 3 and len({n.service_cidr for n in networks}) == 3
    # Recorded: asked again (another replica's start, a platform restart), the same ranges.
    assert [tenant_network(settings, root, d) for d in dirs] == networks
    assert json.loads((dirs[0] / NETWORK_FILE).read_text()) == {
        "podCIDR": networks[0].pod_cidr,
        "serviceCIDR": networks[0].service_cidr,
    }
    # A removed tenant's slot is free again; the others keep theirs.
    (dirs[1] / NETWORK_FILE).unlink()
    again = tenant_network(settings, root, dirs[1])
    assert again not in (networks[0], networks[2])


def test_tenant_ranges_may_not_overlap_the_host_or_each_other(tmp_path: Path) -> None:
    for bad in (
        {"tenant_pod_cidr_pool": "10.0.0.0/12"},
        {"tenant_pod_cidr_pool": "127.0.0.0/12"},  # 127.0.0.1
        {"tenant_pod_cidr_pool": "127.8.0.0/13"},  # the host's pods, 127.10.0.0/16
        {"tenant_service_cidr_pool": "127.96.0.0/12"},  # the host's Services
        {"tenant_service_cidr_pool": "127.16.0.0/12"},  # the tenants' pods
        {"tenant_pod_cidr_pool": "127.16.0.0/24", "tenant_pod_cidr_prefix": 20},
        {"host_node": {"pod_cidr": "127.20.0.0/16"}},
        {"apiserver": {"service_cluster_ip_range": "127.120.0.0/16"}},
    ):
        with pytest.raises(ValidationError):
            PlatformSettings(data_dir=tmp_path, **bad)  # type: ignore[arg-type]
    PlatformSettings(data_dir=tmp_path, tenant_pod_cidr_pool="127.200.0.0/16", tenant_pod_cidr_prefix=24)


def test_node_args_pass_the_ranges_the_switch_and_the_settings(tmp_path: Path) -> None:
    network = TenantNetwork("127.16.16.0/20", "127.112.16.0/20")
    on = node_args(
        PlatformSettings(data_dir=tmp_path, tenant_node_settings={"pod_resync_seconds": 1}), network
    )
    assert on[on.index("--apiserver-set") + 1] == "service_cluster_ip_range=127.112.16.0/20"
    assert "node_pod_cidr=127.16.16.0/20" in on
    node = next(a for a in on if a.startswith("node="))
    # The node stops its pods within half the time the platform gives a replica to stop.
    assert json.loads(node.removeprefix("node=")) == {
        "stop_grace_period_seconds": 5.0,
        "pod_resync_seconds": 1,
    }
    assert node_args(PlatformSettings(data_dir=tmp_path, tenant_node=False), network) == [
        "--set",
        "node_enabled=false",
    ]
    # A replica's arguments carry them before tenant_apiserver, which may override the Service range.
    spec = TenantSpec("default", "p-default", "t", 1, "k" * 64)
    args = tenant_args(
        spec,
        PlatformSettings(data_dir=tmp_path, tenant_apiserver={"service_cluster_ip_range": "127.150.0.0/20"}),
        data_dir="/d",
        replica="0",
        listen="127.0.0.1:1",
        platform_url="https://127.0.0.1:2",
        platform_ca="/ca",
        network=network,
    )
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--apiserver-set"]
    assert sets == ["service_cluster_ip_range=127.112.16.0/20", "service_cluster_ip_range=127.150.0.0/20"]

"""Service IP and node port ranges: what may be handed out, in which order, upstream's words when nothing
can be, and the repair plan that lines records up with Services (vplane.kube.serviceip)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vplane.kube import serviceip
from vplane.kube.serviceip import Holder, IPRange, PortRange, RangeFull, Record


def first(n: int) -> int:
    """Dynamic allocation starting at the beginning of each part: first/next free."""
    return 0


def test_a_range_hands_out_neither_network_nor_broadcast_nor_the_kubernetes_address() -> None:
    r = IPRange.parse("127.96.0.0/29")  # 8 addresses: .0 network, .7 broadcast, .1 kubernetes
    assert r.size == 6 and r.offset == 0
    assert r.service_ip == "127.96.0.1"
    assert list(r.dynamic_order(first)) == [f"127.96.0.{i}" for i in range(2, 7)]
    assert not r.contains("127.96.0.0") and not r.contains("127.96.0.7")
    assert r.contains("127.96.0.1") and r.contains("127.96.0.6")


def test_an_ipv6_range_keeps_its_last_address() -> None:
    r = IPRange.parse("fd00::/125")
    assert r.family == "IPv6" and r.service_ip == "fd00::1"
    assert r.contains("fd00::7") and not r.contains("fd00::")
    assert list(r.dynamic_order(first))[-1] == "fd00::7"


def test_dynamic_allocation_prefers_the_upper_part_of_a_large_range() -> None:
    """KEP-3070: a /16 keeps its first 256 addresses for requested ones; dynamic ones come from above."""
    r = IPRange.parse("127.96.0.0/16")
    assert r.offset == 256
    assert r.next_free(lambda ip: False, first) == "127.96.1.1"
    order = list(r.dynamic_order(first))
    assert len(order) == r.size - 1 == 65533  # everything but the kubernetes address
    assert len(set(order)) == len(order)
    assert order[65533 - 255] == "127.96.0.2"  # then the lower part, without .1
    assert "127.96.0.1" not in order


def test_next_free_skips_taken_addresses_and_wraps() -> None:
    r = IPRange.parse("10.0.0.0/24")  # offset 16: upper part .17-.254, lower .2-.16
    taken = {"10.0.0.254", "10.0.0.17"}
    assert r.next_free(taken.__contains__, lambda n: n - 1) == "10.0.0.18"  # start at .254, wrap to .17, .18
    assert r.next_free(taken.__contains__, first) == "10.0.0.18"


def test_a_full_range_says_so_in_upstreams_words() -> None:
    r = IPRange.parse("127.96.0.0/30")  # .1 (kubernetes) and .2 usable
    assert r.next_free(lambda ip: False, first) == "127.96.0.2"
    with pytest.raises(RangeFull, match="^range is full$"):
        r.next_free(lambda ip: ip == "127.96.0.2", first)
    with pytest.raises(RangeFull):
        IPRange.parse("127.96.0.0/31").next_free(lambda ip: False, first)


def test_requested_addresses_are_checked_against_the_range() -> None:
    r = IPRange.parse("127.96.0.0/16")
    assert r.check_requested("127.96.0.1") is None  # a user may ask for it, as upstream allows
    assert r.check_requested("10.0.0.1") == (
        "the provided IP (10.0.0.1) is not in the valid range. The range of valid IPs is 127.96.0.0/16"
    )
    assert r.check_requested("127.96.255.255") is not None  # broadcast
    assert r.check_requested("fd00::1") is not None


@settings(deadline=None)  # up to 4,096 addresses a case: slow on a loaded machine, never wrong
@given(st.integers(min_value=20, max_value=30), st.randoms(use_true_random=False))
def test_dynamic_order_covers_each_usable_address_once(prefix: int, rng: random.Random) -> None:
    r = IPRange.parse(f"10.1.0.0/{prefix}")
    order = list(r.dynamic_order(rng.randrange))
    assert len(order) == len(set(order)) == r.size - 1
    assert all(r.contains(ip) and ip != r.service_ip for ip in order)


def test_node_ports_come_from_their_range_upper_part_first() -> None:
    ports = PortRange.parse("30000-32767")
    assert str(ports) == "30000-32767" and ports.size == 2768
    assert ports.offset == 86  # min(max(16, 2768 / 32), 128)
    assert ports.next_free(lambda p: False, first) == 30086
    assert ports.next_free(lambda p: p >= 30086, first) == 30000
    with pytest.raises(RangeFull, match="^range is full$"):
        ports.next_free(lambda p: True, first)
    assert ports.check_requested(80) == (
        "provided port is not in the valid range. The range of valid ports is 30000-32767"
    )
    assert ports.check_requested(32767) is None and ports.check_requested(32768) is not None
    small = PortRange.parse("30000-30003")
    assert small.offset == 0 and list(small.dynamic_order(first)) == [30000, 30001, 30002, 30003]
    for bad in ("", "80-70", "0-10", "a-b", "30000-70000"):
        with pytest.raises(ValueError):
            PortRange.parse(bad)


def test_repair_writes_missing_records_and_removes_old_orphans() -> None:
    r, ports = IPRange.parse("127.96.0.0/16"), PortRange.parse("30000-32767")
    web = Holder("ns", "web", ("127.96.0.5",), (30001,))
    legacy = Holder("ns", "legacy", ("127.96.9.9",), ())
    outside = Holder("ns", "outside", ("10.0.0.1",), (80,))
    ips = {
        "127.96.0.5": Record("ns/web", 0.0),
        "127.96.7.7": Record("ns/gone", 0.0),  # orphan, old: removed
        "127.96.8.8": Record("ns/new", 95.0),  # orphan, young: a create may be under way
        "127.96.6.6": Record("", 0.0),  # not the allocator's: never removed
    }
    port_records = {30001: Record("ns/web", 0.0), 30002: Record("ns/gone", 0.0), 30003: Record("ns/x", 99.0)}
    plan = serviceip.plan_repair(
        [web, legacy, outside], ips, port_records, ip_range=r, port_range=ports, now=100.0, orphan_age=10.0
    )
    assert plan.create_ips == [("127.96.9.9", legacy)]
    assert plan.delete_ips == ["127.96.7.7"]
    assert plan.create_ports == []
    assert plan.delete_ports == [30002]
    assert plan.conflicts == []


def test_repair_reports_an_address_recorded_for_another_service() -> None:
    plan = serviceip.plan_repair(
        [Holder("ns", "a", ("127.96.0.5",), (30001,))],
        {"127.96.0.5": Record("ns/b", 0.0)},
        {30001: Record("ns/b", 0.0)},
        ip_range=IPRange.parse("127.96.0.0/16"),
        port_range=PortRange.parse("30000-32767"),
        now=100.0,
        orphan_age=10.0,
    )
    assert plan.create_ips == [] and plan.delete_ips == [] and plan.delete_ports == []
    assert len(plan.conflicts) == 2

"""The ServiceCIDR controller's decisions (upstream ``servicecidrs_controller``): the finalizer added, the
Ready condition, deletion blocked by an allocated address no other ServiceCIDR covers, the grace period."""

from __future__ import annotations

import ipaddress
from typing import Any

from vplane.controllers.kcm.servicecidrs import (
    FINALIZER,
    READY_MESSAGE,
    TERMINATING_MESSAGE,
    Decision,
    can_delete,
    containing_address,
    containing_prefix,
    decide,
    overlapping,
    prefixes,
)

T0 = 1_700_000_000.0
T0_TEXT = "2023-11-14T22:13:20Z"


def cidr(
    name: str, *ranges: str, deleting: bool = False, finalizer: bool = True, ready: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = T0_TEXT
    obj: dict[str, Any] = {"metadata": meta, "spec": {"cidrs": list(ranges)}}
    if ready:
        obj["status"] = {
            "conditions": [{"type": "Ready", "status": "True", "reason": "", "message": READY_MESSAGE}]
        }
    return obj


def ip(address: str, managed: bool = True) -> dict[str, Any]:
    labels = {"ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"} if managed else {}
    return {"metadata": {"name": address, "labels": labels}, "spec": {"parentRef": {"resource": "services"}}}


def test_a_new_servicecidr_gets_the_finalizer_and_ready() -> None:
    fresh = cidr("extra", "10.1.0.0/24", finalizer=False)
    assert decide(fresh, [fresh], [], T0, 10) == Decision(finalizer=True, ready=("True", "", READY_MESSAGE))
    settled = cidr("extra", "10.1.0.0/24", ready=True)
    assert decide(settled, [settled], [], T0, 10) == Decision()


def test_an_allocated_address_only_it_covers_blocks_deletion() -> None:
    doomed = cidr("extra", "10.1.0.0/24", deleting=True)
    blocked = Decision(ready=("False", "Terminating", TERMINATING_MESSAGE))
    assert decide(doomed, [doomed], [ip("10.1.0.5")], T0 + 60, 10) == blocked
    # Addresses outside its range, or not the allocator's, do not count.
    assert can_delete(doomed, [doomed], [ip("10.2.0.5"), ip("10.1.0.6", managed=False)])
    # Another ServiceCIDR covering the address unblocks it; so does one holding the whole range.
    other = cidr("other", "10.1.0.0/25")
    assert can_delete(doomed, [doomed, other], [ip("10.1.0.5")])
    assert not can_delete(doomed, [doomed, other], [ip("10.1.0.200")])
    parent = cidr("parent", "10.0.0.0/8")
    assert can_delete(doomed, [doomed, parent], [ip("10.1.0.200")])
    # Already reported: nothing to write again.
    reported = {
        **doomed,
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "Terminating", "message": TERMINATING_MESSAGE}
            ]
        },
    }
    assert decide(reported, [reported], [ip("10.1.0.5")], T0 + 60, 10) == Decision()


def test_finalizer_removed_after_the_grace_period() -> None:
    doomed = cidr("extra", "10.1.0.0/24", deleting=True)
    assert decide(doomed, [doomed], [], T0 + 4, 10) == Decision(retry_in=6)
    assert decide(doomed, [doomed], [], T0 + 10, 10) == Decision(finalizer=False)
    gone = cidr("extra", "10.1.0.0/24", deleting=True, finalizer=False)
    assert decide(gone, [gone], [], T0 + 10, 10) == Decision()


def test_dual_stack_each_family_checked() -> None:
    dual = cidr("dual", "10.1.0.0/24", "fd00::/120", deleting=True)
    v4_parent = cidr("v4", "10.0.0.0/8")
    # The v6 range has no parent, so addresses decide: a v6 one only it covers blocks.
    assert not can_delete(dual, [dual, v4_parent], [ip("fd00::5")])
    assert can_delete(dual, [dual, v4_parent], [ip("10.1.0.5")])
    v6_parent = cidr("v6", "fd00::/64")
    assert can_delete(dual, [dual, v4_parent, v6_parent], [ip("fd00::5")])


def test_lookups() -> None:
    a, b = cidr("a", "10.0.0.0/16"), cidr("b", "10.0.1.0/24", "fd00::/64")
    assert [str(p) for p in prefixes(b)] == ["10.0.1.0/24", "fd00::/64"]
    assert containing_prefix([a, b], prefixes(b)[0]) == ["a", "b"]
    assert containing_prefix([a, b], prefixes(a)[0]) == ["a"]
    assert containing_address([a, b], ipaddress.ip_address("10.0.1.9")) == ["a", "b"]
    assert containing_address([a, b], ipaddress.ip_address("fd00::1")) == ["b"]
    assert overlapping([a, b], cidr("c", "10.0.0.0/8")) == ["a", "b"]
    assert overlapping([a, b], cidr("d", "192.168.0.0/24")) == []

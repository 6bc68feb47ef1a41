"""Platform replicas' decisions (issue 11 item 4), pure with injected clocks: who reports, what a sweep
writes, the online-ness every replica agrees on, and who reconciles a Cluster."""

from __future__ import annotations

import dataclasses

from vplane.mesh.coordinator import NodeInfo
from vplane.platform.replicas import (
    Liveness,
    PeerState,
    heard_since,
    merged_nodes,
    peer_annotations,
    peer_state,
    plan_sweep,
    reconciler,
)

OFFLINE_AFTER = 120.0
GC_AFTER = 900.0
WALL = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def node(node_id: str, holder: str, online: bool = True, connected_at: float | None = WALL - 60) -> NodeInfo:
    return NodeInfo(
        id=node_id,
        name=f"loft-{node_id}",
        identity="loft:cluster:edge",
        kind="agent",
        labels={},
        endpoints=(),
        online=online,
        last_seen=WALL - 5,
        connected_at=connected_at,
        coordinator_id=holder,
    )


def peer(node_id: str, holder: str, online: bool = True, last_seen: float | None = None) -> PeerState:
    return PeerState(node_id, holder, online, last_seen, identity="loft:cluster:edge", kind="agent")


def liveness_with(clock: Clock, **leases: str) -> Liveness:
    live = Liveness("a", OFFLINE_AFTER, clock)
    for holder, renew in leases.items():
        live.observe(holder, renew)
    return live


# -- liveness ---------------------------------------------------------------------------------------------


def test_a_replica_is_alive_while_its_lease_keeps_changing_by_our_own_clock() -> None:
    clock = Clock()
    live = liveness_with(clock, b="t1")
    clock.now += OFFLINE_AFTER
    assert live.alive("b")
    live.observe("b", "t1")  # seen again, unchanged: does not count as reporting
    clock.now += 1
    assert not live.alive("b")
    assert live.live() == ["a"]
    live.observe("b", "t2")  # it reports again (a paused process continued)
    assert live.alive("b") and live.live() == ["a", "b"]


def test_a_holder_without_a_lease_gets_the_offline_time_from_when_we_first_asked() -> None:
    clock = Clock()
    live = liveness_with(clock)
    assert live.alive("old")
    clock.now += OFFLINE_AFTER + 1
    assert not live.alive("old")
    assert live.alive("a")  # ourselves, always


def test_our_own_pause_is_no_evidence_against_the_others() -> None:
    clock = Clock()
    live = Liveness("a", OFFLINE_AFTER, clock, pause_after=30)
    live.observe("b", "t1")
    live.tick()
    assert not live.resumed_recently()
    clock.now += 10 * OFFLINE_AFTER  # we were stopped: b's renewals since are still on their way to us
    assert live.alive("b")
    assert live.resumed_recently()  # and what we know of the store is stale: act on nothing yet
    for _ in range(7):  # watching all along this time (ticks 20 s apart), and b did not report
        clock.now += 20
        live.tick()
    assert not live.alive("b")
    assert not live.resumed_recently()


# -- the sweep ----------------------------------------------------------------------------------------------


def test_sessions_of_a_replica_that_stopped_reporting_are_marked_offline_with_its_last_report() -> None:
    clock = Clock()
    live = liveness_with(clock, b="t1", c="t1")
    clock.now += OFFLINE_AFTER + 10
    live.observe("c", "t2")
    plan = plan_sweep(
        live,
        {},
        [peer("n1", "b"), peer("n2", "c"), peer("n3", "b", online=False, last_seen=WALL - 100)],
        wall_now=WALL,
        gc_after=GC_AFTER,
        settle=10,
    )
    assert [(p.id, seen) for p, seen in plan.mark_offline] == [("n1", WALL - OFFLINE_AFTER - 10)]
    assert plan.delete_peers == () and plan.reassert == () and plan.delete_leases == ()


def test_idle_tracking_of_a_gone_replica_is_collected_with_its_lease() -> None:
    clock = Clock()
    live = liveness_with(clock, b="t1")
    clock.now += GC_AFTER + 1
    old = peer("n1", "b", online=False, last_seen=WALL - GC_AFTER - 1)
    recent = peer("n2", "b", online=False, last_seen=WALL - 10)
    plan = plan_sweep(live, {}, [old, recent], wall_now=WALL, gc_after=GC_AFTER, settle=10)
    assert plan.delete_peers == (old,)
    assert plan.delete_leases == ("b",)


def test_our_own_stale_peers_are_marked_offline_then_collected_but_not_ones_our_coordinator_keeps() -> None:
    live = liveness_with(Clock())
    stale = peer("n1", "a")
    forgotten = peer("n2", "a", online=False, last_seen=WALL - GC_AFTER - 1)
    kept = peer("n3", "a", online=False, last_seen=WALL - GC_AFTER - 1)
    plan = plan_sweep(
        live,
        {"n3": node("n3", "a", online=False)},
        [stale, forgotten, kept],
        wall_now=WALL,
        gc_after=GC_AFTER,
        settle=10,
    )
    assert [(p.id, seen) for p, seen in plan.mark_offline] == [("n1", WALL)]
    assert plan.delete_peers == (forgotten,)


def test_our_sessions_are_reasserted_unless_a_live_replica_took_the_node() -> None:
    clock = Clock()
    live = liveness_with(clock, b="t1", c="t1")
    clock.now += OFFLINE_AFTER + 1
    live.observe("c", "t2")  # c reports, b does not
    local = {
        "marked": node("marked", "a"),  # others marked it offline while we were paused
        "was-b": node("was-b", "a"),  # the store says b, which stopped reporting
        "taken": node("taken", "a"),  # c holds it now: our session is the stale one
        "missing": node("missing", "a"),  # its write was lost
        "new": node("new", "a", connected_at=WALL - 1),  # its own write is still on its way
        "fine": node("fine", "a"),
    }
    peers = [
        peer("marked", "a", online=False, last_seen=WALL - 30),
        peer("was-b", "b"),
        peer("taken", "c"),
        peer("fine", "a"),
    ]
    plan = plan_sweep(live, local, peers, wall_now=WALL, gc_after=GC_AFTER, settle=10)
    assert sorted(plan.reassert) == ["marked", "missing", "was-b"]
    assert plan.mark_offline == ()


def test_the_platforms_own_node_is_never_written_as_a_peer() -> None:
    own = NodeInfo("p", "platform-a", "loft:platform", "platform", {}, (), True, WALL, WALL - 60, "a")
    plan = plan_sweep(liveness_with(Clock()), {"p": own}, [], wall_now=WALL, gc_after=GC_AFTER, settle=10)
    assert plan.reassert == ()


# -- the view and the owner -------------------------------------------------------------------------------------


def test_every_replica_sees_the_same_online_ness() -> None:
    clock = Clock()
    live_a = liveness_with(clock, b="t1")
    peers = {"n1": peer("n1", "a"), "n2": peer("n2", "b")}
    on_a = merged_nodes(live_a, [node("n1", "a")], peers)
    live_b = Liveness("b", OFFLINE_AFTER, clock)
    live_b.observe("a", "t1")
    on_b = merged_nodes(live_b, [node("n2", "b")], peers)
    assert {(n.id, n.online, n.coordinator_id) for n in on_a} == {
        (n.id, n.online, n.coordinator_id) for n in on_b
    }
    assert all(n.online for n in on_a)
    # b stops reporting: a reads its session offline before anyone wrote it so.
    clock.now += OFFLINE_AFTER + 1
    live_a.observe("b", "t1")
    assert {n.id: n.online for n in merged_nodes(live_a, [node("n1", "a")], peers)} == {
        "n1": True,
        "n2": False,
    }


def test_a_node_that_moved_reads_as_its_new_holder_says() -> None:
    live = liveness_with(Clock(), b="t1")
    moved = merged_nodes(live, [node("n1", "a", online=False)], {"n1": peer("n1", "b")})
    assert [(n.online, n.coordinator_id) for n in moved] == [(True, "b")]
    # We still think we hold it (this replica was paused), but a live replica holds a newer session.
    newer = PeerState("n1", "b", True, None, identity="loft:cluster:edge", kind="agent", connected_at=WALL)
    stale_here = merged_nodes(live, [node("n1", "a")], {"n1": newer})
    assert [(n.online, n.coordinator_id) for n in stale_here] == [(True, "b")]
    older = PeerState("n1", "b", True, None, connected_at=WALL - 120)
    assert [n.coordinator_id for n in merged_nodes(live, [node("n1", "a")], {"n1": older})] == ["a"]
    # A peer the store says we hold, that our coordinator does not know: stale, offline.
    stale = merged_nodes(live, [], {"n2": peer("n2", "a")})
    assert [n.online for n in stale] == [False]


def test_the_holder_of_an_online_session_reconciles_else_the_lowest_live_replica() -> None:
    assert (
        reconciler([node("n1", "c"), node("n2", "b"), node("n3", "a", online=False)], ["a", "b", "c"]) == "b"
    )
    assert reconciler([node("n1", "c", online=False)], ["a", "b"]) == "a"
    assert reconciler([], ["b"]) == "b"


def test_while_an_upgrade_bridge_is_online_its_holder_reconciles() -> None:
    """The upgrade goes through the bridge's session, which only its holder reaches (the relay does not
    cross replicas): a replica holding only the primary agent's would wait for the bridge for ever."""
    primary = node("n1", "a")
    bridge = dataclasses.replace(node("n2", "b"), labels={"agent-mode": "proxy-only"})
    assert reconciler([primary, bridge], ["a", "b"]) == "b"
    assert reconciler([primary, dataclasses.replace(bridge, online=False)], ["a", "b"]) == "a"
    # Seen from another replica: the bridge's own label travels on its NetworkPeer.
    obj = {"metadata": {"name": "n2", "annotations": peer_annotations(bridge), "labels": {}}}
    assert peer_state(obj).info(True).labels == {"agent-mode": "proxy-only"}


def test_after_a_pause_our_own_sessions_count_only_once_heard_from_again() -> None:
    """Replica a was paused while its agent moved to b: a's old session still reads online (its end not yet
    noticed) but was last heard before the resume, so b reconciles; a session a heard since counts again."""
    stale = node("n1", "a")  # last_seen WALL - 5
    moved = node("n2", "b")
    resumed = WALL - 1
    assert reconciler(heard_since([stale, moved], "a", resumed), ["a", "b"]) == "b"
    assert reconciler([stale, moved], ["a", "b"]) == "a"  # what a would have decided without the check
    fresh = dataclasses.replace(stale, last_seen=WALL)
    assert reconciler(heard_since([fresh, moved], "a", resumed), ["a", "b"]) == "a"
    # Other replicas' sessions are never filtered: their holders vouch for them.
    assert heard_since([moved], "a", WALL + 100) == [moved]


def test_a_network_peer_carries_what_another_replica_needs() -> None:
    n = node("n1", "a")
    obj = {
        "metadata": {"name": "n1", "resourceVersion": "7", "annotations": peer_annotations(n), "labels": {}},
        "spec": {"endpoints": ["10.0.0.1:8443"]},
        "status": {"online": True},
    }
    state = peer_state(obj)
    assert (state.holder, state.online, state.resource_version) == ("a", True, "7")
    info = state.info(True)
    assert (info.name, info.identity, info.kind, info.endpoints) == (
        "loft-n1",
        "loft:cluster:edge",
        "agent",
        ("10.0.0.1:8443",),
    )
    assert info.connected_at is not None and abs(info.connected_at - (WALL - 60)) < 1e-3
    assert obj["metadata"]["annotations"]["loft.sh/cluster-name"] == "edge"

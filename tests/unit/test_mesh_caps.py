"""The mesh's limits without I/O: per-pair relay streams, full close, netmap caps and pages, node labels,
announced limits, and the registration rules (second session, nodes per identity)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vplane.mesh import frames
from vplane.mesh.coordinator import Coordinator, NodeIdentity, _hello_fields, _Limits, label_errors
from vplane.mesh.frames import (
    Frame,
    FrameType,
    Mux,
    ProtocolError,
    Relay,
    StreamEnded,
    StreamReset,
    decode_message,
    encode,
)
from vplane.mesh.netmap import Assembler, cap_peers, paginate
from vplane.mesh.settings import MeshSettings

# -- the relay: streams per (opener, acceptor) pair -----------------------------------------------------


def reason(routes: list[frames.Route]) -> tuple[str, str]:
    [(target, raw)] = routes
    [frame] = decode_message(raw)
    return target, frame.json().get("reason", "") if frame.type is FrameType.OPEN_FAIL else frame.type.name


def test_one_opener_cannot_take_every_slot_of_a_peer() -> None:
    relay: Relay[str] = Relay(max_streams_per_session=4, max_streams_per_pair=2)
    assert reason(relay.open("a", 1, 10, "t", {}))[1] == "OPEN"
    assert reason(relay.open("a", 3, 10, "t", {}))[1] == "OPEN"
    assert reason(relay.open("a", 5, 10, "t", {})) == (
        "a",
        "too many streams to this peer (at most 2 per pair)",
    )
    assert relay.streams_between("a", "t") == 2
    # Another opener still reaches the peer, and the first may still open streams to someone else.
    assert reason(relay.open("b", 1, 10, "t", {}))[1] == "OPEN"
    assert reason(relay.open("a", 7, 10, "u", {}))[1] == "OPEN"
    # The per-session limit still holds for the acceptor as a whole.
    assert reason(relay.open("b", 3, 10, "t", {}))[1] == "OPEN"
    assert reason(relay.open("c", 1, 10, "t", {})) == ("c", "the peer has too many streams open")


def test_pair_slots_come_back_on_reset_close_and_drop() -> None:
    relay: Relay[str] = Relay(max_streams_per_pair=1)
    [(_, raw)] = relay.open("a", 1, 10, "t", {})
    tsid = decode_message(raw)[0].stream_id
    relay.receive("t", frames.control(FrameType.OPEN_OK, {"window": 10}, tsid))
    relay.receive("a", frames.control(FrameType.RESET, {"reason": "x"}, 1))
    assert relay.streams_between("a", "t") == 0
    [(_, raw)] = relay.open("a", 3, 10, "t", {})
    tsid = decode_message(raw)[0].stream_id
    relay.receive("t", frames.control(FrameType.OPEN_OK, {"window": 10}, tsid))
    relay.receive("a", Frame(FrameType.CLOSE, 3))
    relay.receive("t", Frame(FrameType.CLOSE, tsid))
    assert relay.streams_between("a", "t") == 0
    relay.open("a", 5, 10, "t", {})
    relay.drop("t")
    assert relay.streams_between("a", "t") == 0 and len(relay) == 0
    relay.open("a", 7, 10, "t", {})
    [(_, raw)] = relay.open("b", 1, 10, "t", {})
    relay.receive(
        "t", frames.control(FrameType.OPEN_FAIL, {"reason": "no"}, decode_message(raw)[0].stream_id)
    )
    assert relay.streams_between("b", "t") == 0 and relay.streams_between("a", "t") == 1


# -- full close: CLOSE then RESET ------------------------------------------------------------------------


def accepted_pair() -> tuple[Mux, Mux, int, int]:
    """Two muxes joined by a relay-free wire: ``a`` opened stream 1, ``b`` sees it as stream 2."""
    a, b = Mux(initial_window=100), Mux(initial_window=100)
    a.open_stream("b")
    a.data_to_send()
    b.receive(encode(frames.control(FrameType.OPEN, {"source": "a", "window": 100}, 2)))
    b.accept_stream(2)
    b.data_to_send()
    a.receive(encode(frames.control(FrameType.OPEN_OK, {"window": 100}, 1)))
    return a, b, 1, 2


def across(raw: bytes, sid: int) -> bytes:
    """Renumber frames as the relay would (a's stream 1 is b's stream 2 and back)."""
    return b"".join(encode(Frame(f.type, sid, f.payload)) for f in decode_message(raw))


def test_full_close_sends_close_then_reset_and_the_other_side_sees_both() -> None:
    a, b, asid, bsid = accepted_pair()
    a.send_data(asid, b"request")
    a.finish_stream(asid)
    out = a.data_to_send()
    assert [f.type for f in decode_message(out)] == [FrameType.DATA, FrameType.CLOSE, FrameType.RESET]
    assert not a.has_stream(asid), "a full close forgets the stream at once"
    events = b.receive(across(out, bsid))
    assert isinstance(events[1], StreamEnded)
    assert events[2] == StreamReset(bsid, frames.CLOSED_BY_PEER, remote=True, after_close=True)
    assert not b.has_stream(bsid)


def test_full_close_after_the_other_side_closed_is_just_close() -> None:
    a, b, asid, bsid = accepted_pair()
    b.close_stream(bsid)
    a.receive(across(b.data_to_send(), asid))
    a.finish_stream(asid)
    assert [f.type for f in decode_message(a.data_to_send())] == [FrameType.CLOSE]
    assert not a.has_stream(asid)


def test_a_reset_without_close_is_an_abort() -> None:
    a, b, asid, bsid = accepted_pair()
    a.reset_stream(asid, "gone")
    [event] = b.receive(across(a.data_to_send(), bsid))
    assert event == StreamReset(bsid, "gone", remote=True, after_close=False)


# -- netmaps: the peer cap and pages ---------------------------------------------------------------------


def entry(i: int, size: int = 50) -> tuple[str, bytes]:
    peer_id = f"n{i:04d}"
    return peer_id, orjson.dumps({"id": peer_id, "name": "x" * size})


def test_cap_keeps_the_peers_a_node_already_has() -> None:
    visible = dict(entry(i) for i in range(6))
    kept, omitted = cap_peers(visible, None, 3)
    assert list(kept) == ["n0000", "n0001", "n0002"] and omitted == 3
    previous = {"n0005": visible["n0005"], "n0001": visible["n0001"]}
    kept, omitted = cap_peers(visible, previous, 3)
    assert list(kept) == ["n0005", "n0001", "n0000"] and omitted == 3
    assert cap_peers(visible, None, 10) == (visible, 0)


def parse(item: Any) -> tuple[str, dict[str, Any]] | None:
    return (item["id"], item) if isinstance(item.get("id"), str) else None


@given(
    count=st.integers(0, 60),
    size=st.integers(0, 600),
    budget=st.integers(1024, 8192),
    removes=st.lists(st.sampled_from([f"old{i}" for i in range(20)]), unique=True, max_size=20),
    complete=st.booleans(),
)
def test_pages_fit_the_budget_and_reassemble(
    count: int, size: int, budget: int, removes: list[str], complete: bool
) -> None:
    entries = dict(entry(i, size) for i in range(count))
    pages = paginate(7, complete=complete, entries=entries, removes=removes, omitted=2, budget=budget)
    assert pages.dropped == []
    assert all(len(p) <= budget for p in pages.payloads)
    bodies = [orjson.loads(p) for p in pages.payloads]
    assert all(b["seq"] == 7 for b in bodies)
    assert [b.get("more", False) for b in bodies] == [True] * (len(bodies) - 1) + [False]
    current = {r: {"id": r} for r in removes} | {"kept": {"id": "kept"}}
    assembler: Assembler[dict[str, Any]] = Assembler(parse, max_peers=1000)
    results = [assembler.feed(b, current) for b in bodies]
    assert results[:-1] == [None] * (len(bodies) - 1)
    assert results[-1] is not None
    peers, omitted = results[-1]
    expected = {k: orjson.loads(v) for k, v in entries.items()}
    if not complete:
        expected = {"kept": {"id": "kept"}} | expected
    assert peers == expected and omitted == 2


def test_an_entry_that_cannot_fit_a_page_is_left_out_and_counted() -> None:
    entries = dict([entry(1, 10), entry(2, 5000), entry(3, 10)])
    pages = paginate(1, complete=True, entries=entries, budget=1024)
    assert pages.dropped == ["n0002"]
    [body] = [orjson.loads(p) for p in pages.payloads]
    assert [p["id"] for p in body["peers"]] == ["n0001", "n0003"] and body["omitted"] == 1


def test_the_assembler_keeps_at_most_its_peers_and_restarts_on_a_complete_page() -> None:
    assembler: Assembler[dict[str, Any]] = Assembler(parse, max_peers=2)
    body = {"seq": 1, "peers": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}
    result = assembler.feed(body, {})
    assert result is not None and list(result[0]) == ["a", "b"] and result[1] == 1
    # A netmap interrupted halfway is discarded when a complete one starts.
    assert assembler.feed({"seq": 2, "peers": [{"id": "x"}], "more": True}, {}) is None
    assert assembler.in_progress
    result = assembler.feed({"seq": 3, "peers": [{"id": "y"}]}, {})
    assert result == ({"y": {"id": "y"}}, 0)
    assembler.feed({"seq": 4, "upsert": [{"id": "z"}], "remove": [], "more": True}, {"y": {"id": "y"}})
    assembler.reset()
    assert not assembler.in_progress


# -- what a node may claim: labels, endpoints, announced limits ------------------------------------------

S = MeshSettings(max_node_labels=3, max_node_endpoints=1)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({"vplane.io/tenant": "other"}, "label 'vplane.io/tenant' is reserved"),
        ({"loft.sh/project": "x"}, "keys under loft.sh/, vplane.io/ are set by the platform only"),
        ({"platform.loft.sh/x": "y"}, "label 'platform.loft.sh/x' is reserved"),
        ({"a": "b" * 64}, "invalid value for label 'a': must be no more than 63 bytes"),
        ({"Bad Key": "v"}, "invalid label key 'Bad Key': name part must consist of alphanumeric"),
        ({"a": "1", "b": "2", "c": "3", "d": "4"}, "too many labels: 4 (at most 3)"),
    ],
)
def test_node_labels_follow_kubernetes_rules_and_stay_off_reserved_prefixes(
    labels: dict[str, str], message: str
) -> None:
    problems = label_errors(labels, 3)
    assert any(message in p for p in problems), problems
    with pytest.raises(ProtocolError):
        _hello_fields({"hostname": "h", "labels": labels}, S)


def test_valid_labels_and_endpoints_pass() -> None:
    assert label_errors({"replica": "0", "example.com/role": "db", "empty": ""}, 3) == []
    assert _hello_fields({"hostname": "h", "labels": {"a": "b"}, "endpoints": ["127.0.0.1:1"]}, S) == (
        "h",
        {"a": "b"},
        ("127.0.0.1:1",),
    )
    with pytest.raises(ProtocolError, match=r"too many endpoints: 2 \(at most 1\)"):
        _hello_fields({"hostname": "h", "endpoints": ["a:1", "b:2"]}, S)
    with pytest.raises(ProtocolError, match="endpoint longer than"):
        _hello_fields({"hostname": "h", "endpoints": ["a" * 300 + ":1"]}, S)


def test_announced_limits_never_exceed_ours_nor_go_below_the_floor() -> None:
    own = MeshSettings()
    assert _Limits.announced({}, own) == _Limits(65536, 4 * 1024 * 1024, 10_000)
    limits = _Limits.announced(
        {"max_frame_bytes": 2048, "max_control_frame_bytes": 2**40, "max_netmap_peers": 3}, own
    )
    assert limits == _Limits(2048, 4 * 1024 * 1024, 3)
    assert limits.max_message_bytes == MeshSettings(max_frame_bytes=2048).max_message_bytes
    for bad in ({"max_frame_bytes": 10}, {"max_control_frame_bytes": "big"}, {"max_netmap_peers": True}):
        with pytest.raises(ProtocolError):
            _Limits.announced(bad, own)


# -- registration rules ----------------------------------------------------------------------------------


async def never(key: str) -> NodeIdentity:
    raise AssertionError("unused")


class FakeWS:
    closed = False


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_live_node_keeps_its_session_unless_the_resume_secret_is_shown() -> None:
    clock = Clock()
    coord = Coordinator(never, settings=MeshSettings(max_nodes_per_identity=2), clock=clock, environ={})
    ident = NodeIdentity("loft:vcluster:p-a:t", "vcluster")
    assert coord._admit(ident, "h", "") is None
    first = coord._register(FakeWS(), ident, "h", {}, (), None, _Limits.announced({}, coord.settings))  # type: ignore[arg-type]
    refusal = coord._admit(ident, "h", "")
    assert refusal is not None and refusal[0] == "conflict"
    assert 'node "h" of loft:vcluster:p-a:t already has a live session' in refusal[1]
    assert coord._admit(ident, "h", "not-the-secret") == refusal
    assert coord._admit(ident, "h", first.record.resume) is None
    coord._unregister(first, "gone")
    assert coord._admit(ident, "h", "") is None


async def test_nodes_per_identity_evict_the_longest_offline_or_refuse() -> None:
    clock = Clock()
    coord = Coordinator(never, settings=MeshSettings(max_nodes_per_identity=2), clock=clock, environ={})
    ident = NodeIdentity("loft:vcluster:p-a:t", "vcluster")
    limits = _Limits.announced({}, coord.settings)
    sessions = [coord._register(FakeWS(), ident, h, {}, (), None, limits) for h in ("h1", "h2")]  # type: ignore[arg-type]
    refusal = coord._admit(ident, "h3", "")
    assert refusal == (
        "limit",
        "loft:vcluster:p-a:t already has 2 nodes online; at most 2 nodes per identity",
    )
    # Another identity is not affected, and a known node may always come back.
    assert coord._admit(NodeIdentity("other"), "h3", "") is None
    coord._unregister(sessions[1], "gone")
    clock.now += 1
    coord._unregister(sessions[0], "gone")
    assert coord._admit(ident, "h1", "") is None
    assert coord._admit(ident, "h3", "") is None  # h2, offline the longest, made room
    assert sorted(n.name for n in coord.nodes()) == ["h1"]
    for task in list(coord._background):
        task.cancel()

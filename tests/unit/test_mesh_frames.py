"""The mesh's sans-I/O layer: frame encoding, the node multiplexer, the relay table, backoff and settings."""

from __future__ import annotations

import struct
from typing import Any, cast

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vplane.mesh import frames
from vplane.mesh.backoff import Backoff, DirectPathMemory
from vplane.mesh.frames import (
    DataReceived,
    Frame,
    FrameDecoder,
    FrameType,
    Mux,
    ProtocolError,
    Relay,
    StreamAccepted,
    StreamEnded,
    StreamError,
    StreamOpened,
    StreamRejected,
    StreamReset,
    WindowOpened,
    decode_message,
    encode,
    encode_parts,
)
from vplane.mesh.settings import MeshSettings, direct_dialing_enabled, env_bool, insecure_skip_verify, verbose

# -- encoding ------------------------------------------------------------------------------------------

stream_ids = st.integers(min_value=1, max_value=frames.MAX_STREAM_ID)
json_keys = st.sampled_from(["window", "source", "target", "reason", "node_id", "peers", "peer"]) | st.text(
    max_size=4
)
json_values = (
    st.integers(min_value=-5, max_value=2**31 + 5)
    | st.text(max_size=8)
    | st.booleans()
    | st.lists(st.integers(min_value=0, max_value=9), max_size=3)
)
json_bodies = st.dictionaries(json_keys, json_values, max_size=4)


@st.composite
def valid_frames(draw: st.DrawFn, sids: st.SearchStrategy[int] = stream_ids) -> Frame:
    ftype = draw(st.sampled_from(list(FrameType)))
    sid = 0 if ftype in frames.SESSION_FRAMES else draw(sids)
    if ftype is FrameType.DATA:
        payload = draw(st.binary(max_size=256))
    elif ftype is FrameType.WINDOW_UPDATE:
        payload = struct.pack("!I", draw(st.integers(min_value=1, max_value=frames.MAX_WINDOW)))
    elif ftype in frames.EMPTY_FRAMES:
        payload = b""
    else:
        payload = orjson.dumps(draw(json_bodies))
    return Frame(ftype, sid, payload)


@given(st.lists(valid_frames(), max_size=8))
def test_frames_round_trip(items: list[Frame]) -> None:
    data = b"".join(encode(f) for f in items)
    assert decode_message(data) == items


@given(st.lists(valid_frames(), min_size=1, max_size=6), st.data())
def test_decoder_handles_any_split(items: list[Frame], data: st.DataObject) -> None:
    raw = b"".join(encode(f) for f in items)
    cuts = sorted(data.draw(st.lists(st.integers(min_value=0, max_value=len(raw)), max_size=6)))
    decoder = FrameDecoder()
    got: list[Frame] = []
    last = 0
    for cut in [*cuts, len(raw)]:
        got.extend(decoder.feed(raw[last:cut]))
        last = cut
    assert got == items
    assert decoder.buffered == 0


@given(st.binary(max_size=200))
def test_garbage_is_a_protocol_error_or_frames(raw: bytes) -> None:
    try:
        decode_message(raw, max_frame_size=64, max_control_size=64)
    except ProtocolError:
        pass


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (struct.pack("!BII", 99, 0, 0), "unknown frame type 99"),
        (struct.pack("!BII", FrameType.HEARTBEAT, 3, 0), "session frames use stream 0"),
        (struct.pack("!BII", FrameType.DATA, 0, 0), "without a stream id"),
        (struct.pack("!BII", FrameType.DATA, 1, 70_000) + b"x" * 70_000, "exceeds the 65536-byte limit"),
        (struct.pack("!BII", FrameType.WINDOW_UPDATE, 1, 4) + b"\0\0\0\0", "increment 0 out of range"),
        (struct.pack("!BII", FrameType.WINDOW_UPDATE, 1, 2) + b"\0\1", "expected 4"),
        (struct.pack("!BII", FrameType.CLOSE, 1, 1) + b"x", "with a 1-byte payload"),
        (struct.pack("!BII", FrameType.DATA, 1, 10) + b"abc", "truncated frame payload"),
        (b"\x0a\x00", "truncated frame header"),
    ],
)
def test_malformed_frames(raw: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode_message(raw)


def test_decoder_refuses_an_oversized_frame_before_its_payload_arrives() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    with pytest.raises(ProtocolError, match="exceeds"):
        decoder.feed(struct.pack("!BII", FrameType.DATA, 1, 10_000_000))


def test_json_payload_must_be_an_object() -> None:
    with pytest.raises(ProtocolError, match="not JSON"):
        Frame(FrameType.NETMAP, 0, b"{").json()
    with pytest.raises(ProtocolError, match="not a JSON object"):
        Frame(FrameType.NETMAP, 0, b"[]").json()


# -- the node multiplexer ------------------------------------------------------------------------------


def sent(mux: Mux) -> list[Frame]:
    return decode_message(mux.data_to_send())


def incoming_open(mux: Mux, sid: int = 2, window: int = 1000, source: str = "n-src") -> None:
    events = mux.receive(
        encode(
            frames.control(FrameType.OPEN, {"source": source, "window": window, "peer": {"name": "x"}}, sid)
        )
    )
    assert events == [StreamOpened(sid, source, {"name": "x"})]


def test_open_accept_and_send_within_the_window() -> None:
    mux = Mux(initial_window=1000, max_frame_size=100)
    sid = mux.open_stream("n-target")
    assert sid == 1
    [opened] = sent(mux)
    assert opened.type is FrameType.OPEN and opened.json() == {"target": "n-target", "window": 1000}
    with pytest.raises(StreamError):
        mux.send_data(sid, b"too early")
    assert mux.receive(encode(frames.control(FrameType.OPEN_OK, {"window": 250}, sid))) == [
        StreamAccepted(sid)
    ]
    assert mux.send_data(sid, b"x" * 400) == 250
    out = sent(mux)
    assert [len(f.payload) for f in out] == [100, 100, 50]
    assert mux.send_window(sid) == 0
    assert mux.send_data(sid, b"more") == 0


def test_a_blocked_stream_does_not_block_another() -> None:
    mux = Mux(initial_window=1000)
    incoming_open(mux, 2, window=10)
    incoming_open(mux, 4, window=1000)
    mux.accept_stream(2)
    mux.accept_stream(4)
    sent(mux)
    assert mux.send_data(2, b"x" * 50) == 10
    assert mux.send_data(2, b"x" * 40) == 0  # stalled: its reader granted no more
    assert mux.send_data(4, b"y" * 500) == 500  # the other stream is unaffected
    assert mux.receive(encode(frames.window_update(2, 30))) == [WindowOpened(2, 30)]
    assert mux.send_data(2, b"x" * 40) == 30


def test_credit_returns_as_data_is_consumed() -> None:
    mux = Mux(initial_window=100)
    incoming_open(mux)
    mux.accept_stream(2)
    sent(mux)
    assert mux.receive(encode(Frame(FrameType.DATA, 2, b"a" * 60))) == [DataReceived(2, b"a" * 60)]
    mux.acknowledge(2, 40)
    assert sent(mux) == []  # below half the window: batched
    mux.acknowledge(2, 20)
    assert sent(mux) == [frames.window_update(2, 60)]
    # With the credit back, a full window may arrive again.
    assert mux.receive(encode(Frame(FrameType.DATA, 2, b"b" * 100))) == [DataReceived(2, b"b" * 100)]


def test_data_beyond_the_window_resets_only_that_stream() -> None:
    mux = Mux(initial_window=100)
    incoming_open(mux, 2)
    incoming_open(mux, 4)
    mux.accept_stream(2)
    mux.accept_stream(4)
    sent(mux)
    events = mux.receive(encode(Frame(FrameType.DATA, 2, b"z" * 101)))
    assert events == [StreamReset(2, "flow control violation", remote=False)]
    [reset] = sent(mux)
    assert reset.type is FrameType.RESET and reset.stream_id == 2
    assert not mux.has_stream(2) and mux.has_stream(4)
    assert mux.receive(encode(Frame(FrameType.DATA, 4, b"ok"))) == [DataReceived(4, b"ok")]


def test_late_frames_for_a_forgotten_stream_are_ignored() -> None:
    mux = Mux()
    assert mux.receive(encode(Frame(FrameType.DATA, 7, b"late"))) == []
    assert mux.receive(encode(frames.window_update(9, 5))) == []


def test_half_close_in_both_directions_forgets_the_stream() -> None:
    mux = Mux()
    incoming_open(mux)
    mux.accept_stream(2)
    assert mux.receive(encode(Frame(FrameType.CLOSE, 2))) == [StreamEnded(2)]
    assert mux.has_stream(2)
    assert mux.send_data(2, b"reply") == 5  # half-closed: we may still send
    mux.close_stream(2)
    assert not mux.has_stream(2)
    assert [f.type for f in sent(mux)] == [FrameType.OPEN_OK, FrameType.DATA, FrameType.CLOSE]


def test_data_after_the_peer_closed_is_a_stream_error() -> None:
    mux = Mux()
    incoming_open(mux)
    mux.accept_stream(2)
    mux.receive(encode(Frame(FrameType.CLOSE, 2)))
    [event] = mux.receive(encode(Frame(FrameType.DATA, 2, b"x")))
    assert isinstance(event, StreamReset) and not event.remote


def test_reset_and_reject() -> None:
    mux = Mux()
    sid = mux.open_stream("n-x")
    reason = orjson.dumps({"reason": "unknown peer n-x"})
    assert mux.receive(encode(Frame(FrameType.OPEN_FAIL, sid, reason))) == [
        StreamRejected(sid, "unknown peer n-x")
    ]
    incoming_open(mux, 2)
    mux.reject_stream(2, "no handler")
    assert not mux.has_stream(2)
    incoming_open(mux, 4)
    mux.accept_stream(4)
    events = mux.receive(encode(frames.control(FrameType.RESET, {"reason": "peer gone"}, 4)))
    assert events == [StreamReset(4, "peer gone", remote=True)]


def test_session_level_violations_are_protocol_errors() -> None:
    mux = Mux()
    with pytest.raises(ProtocolError, match="odd stream id"):
        mux.receive(encode(frames.control(FrameType.OPEN, {"source": "a", "window": 1}, 3)))
    with pytest.raises(ProtocolError, match="unexpected HELLO"):
        mux.receive(encode(frames.control(FrameType.HELLO, {})))
    with pytest.raises(ProtocolError, match="valid window"):
        mux.receive(encode(frames.control(FrameType.OPEN, {"source": "a", "window": -1}, 2)))
    with pytest.raises(ProtocolError, match="not JSON"):
        mux.receive(encode(Frame(FrameType.NETMAP, 0, b"\xff")))


@settings(max_examples=200)
@given(st.lists(valid_frames(st.integers(min_value=1, max_value=6)), max_size=20))
def test_mux_survives_any_frame_sequence(items: list[Frame]) -> None:
    """Whatever the coordinator sends, the mux answers with events or a ProtocolError, never a crash."""
    mux = Mux(initial_window=64)
    mux.open_stream("n-a")
    mux.open_stream("n-b")
    for frame in items:
        try:
            events = mux.receive_frame(frame)
        except ProtocolError:
            return
        for event in events:
            if isinstance(event, StreamOpened):
                mux.accept_stream(event.stream_id)
            elif isinstance(event, DataReceived):
                mux.acknowledge(event.stream_id, len(event.data))
        for sid in mux.stream_ids():
            if mux.send_window(sid):
                mux.send_data(sid, b"x" * 10)
        decode_message(mux.data_to_send())


# -- the relay -----------------------------------------------------------------------------------------


class Mesh:
    """Two node multiplexers wired through a relay in memory: what the session glue does, minus sockets."""

    def __init__(self, window: int = 100) -> None:
        self.relay: Relay[str] = Relay(max_streams_per_session=4)
        self.nodes = {"a": Mux(initial_window=window), "b": Mux(initial_window=window)}
        self.events: dict[str, list[frames.Event]] = {"a": [], "b": []}

    def pump(self) -> None:
        moved = True
        while moved:
            moved = False
            for name, mux in self.nodes.items():
                data = mux.data_to_send()
                if not data:
                    continue
                moved = True
                for frame in decode_message(data):
                    if frame.type is FrameType.OPEN:
                        body = frame.json()
                        routes = self.relay.open(name, frame.stream_id, body["window"], "b", {"source": name})
                    else:
                        routes = self.relay.receive(name, frame)
                    for target, raw in routes:
                        self.events[target].extend(self.nodes[target].receive(raw))


def test_relay_pairs_streams_and_a_stalled_one_does_not_block_the_other() -> None:
    mesh = Mesh(window=100)
    a, b = mesh.nodes["a"], mesh.nodes["b"]
    slow, fast = a.open_stream("b"), a.open_stream("b")
    mesh.pump()
    opened = [e for e in mesh.events["b"] if isinstance(e, StreamOpened)]
    assert [e.source for e in opened] == ["a", "a"]
    for event in opened:
        b.accept_stream(event.stream_id)
    mesh.pump()
    slow_b, fast_b = opened[0].stream_id, opened[1].stream_id
    assert slow_b % 2 == 0 and fast_b % 2 == 0
    # The slow stream's reader consumes nothing: after one window its sender is stuck...
    assert a.send_data(slow, b"s" * 500) == 100
    assert a.send_data(slow, b"s") == 0
    # ...while the fast stream moves many windows' worth because its reader keeps consuming.
    moved = 0
    for _ in range(20):
        n = a.send_data(fast, b"f" * 100)
        mesh.pump()
        for event in mesh.events["b"]:
            if isinstance(event, DataReceived) and event.stream_id == fast_b:
                b.acknowledge(fast_b, len(event.data))
        mesh.events["b"].clear()
        mesh.pump()
        moved += n
    assert moved == 2000
    assert a.send_window(slow) == 0
    assert len(mesh.relay) == 2


def test_relay_enforces_credit() -> None:
    relay: Relay[str] = Relay()
    [(target, raw)] = relay.open("a", 1, 50, "b", {"source": "a"})
    assert target == "b"
    [opened] = decode_message(raw)
    assert opened.json() == {"source": "a", "window": 50}
    relay.receive("b", frames.control(FrameType.OPEN_OK, {"window": 10}, opened.stream_id))
    routes = relay.receive("a", Frame(FrameType.DATA, 1, b"x" * 11))
    assert sorted(t for t, _ in routes) == ["a", "b"]
    assert all(decode_message(r)[0].type is FrameType.RESET for _, r in routes)
    assert len(relay) == 0


def test_relay_forwards_credit_close_and_reset() -> None:
    relay: Relay[str] = Relay()
    [(_, raw)] = relay.open("a", 1, 50, "b", {})
    bsid = decode_message(raw)[0].stream_id
    [(t, r)] = relay.receive("b", frames.control(FrameType.OPEN_OK, {"window": 10}, bsid))
    assert t == "a" and decode_message(r)[0].json() == {"window": 10}
    relay.receive("a", Frame(FrameType.DATA, 1, b"x" * 10))
    [(t, r)] = relay.receive("b", frames.window_update(bsid, 10))
    assert t == "a" and decode_message(r) == [frames.window_update(1, 10)]
    assert relay.receive("a", Frame(FrameType.DATA, 1, b"y" * 10))  # credit restored
    relay.receive("a", Frame(FrameType.CLOSE, 1))
    assert len(relay) == 1
    [(t, r)] = relay.receive("b", Frame(FrameType.CLOSE, bsid))
    assert t == "a" and len(relay) == 0
    assert relay.receive("a", Frame(FrameType.DATA, 1, b"late")) == []


def test_relay_drop_resets_the_other_side_and_never_reuses_ids() -> None:
    relay: Relay[str] = Relay()
    [(_, raw)] = relay.open("a", 1, 50, "b", {})
    first = decode_message(raw)[0].stream_id
    [(t, r)] = relay.drop("a")
    assert t == "b" and decode_message(r)[0] == frames.control(
        FrameType.RESET, {"reason": "peer session closed"}, first
    )
    [(_, raw)] = relay.open("c", 1, 50, "b", {})
    assert decode_message(raw)[0].stream_id == first + 2


def test_relay_refuses_past_the_stream_limit_and_relays_refusals() -> None:
    relay: Relay[str] = Relay(max_streams_per_session=1)
    relay.open("a", 1, 50, "b", {})
    [(t, r)] = relay.open("a", 3, 50, "b", {})
    assert t == "a" and decode_message(r)[0].json() == {"reason": "too many streams on this session"}
    relay2: Relay[str] = Relay()
    [(_, raw)] = relay2.open("a", 1, 50, "b", {})
    bsid = decode_message(raw)[0].stream_id
    [(t, r)] = relay2.receive("b", frames.control(FrameType.OPEN_FAIL, {"reason": "no handler"}, bsid))
    assert t == "a" and decode_message(r)[0].json() == {"reason": "no handler"}
    with pytest.raises(ProtocolError, match="even stream id"):
        relay2.open("a", 2, 50, "b", {})


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"x", "reset by peer"),  # not JSON: the other node's session would end on it
        (b"[1]", "reset by peer"),
        (orjson.dumps({"reason": "r" * 5000}), "r" * frames.MAX_REASON_CHARS),
        (orjson.dumps({"reason": "gone"}), "gone"),
    ],
)
def test_the_relay_passes_on_a_reset_the_other_node_can_read(payload: bytes, reason: str) -> None:
    relay: Relay[str] = Relay()
    [(_, raw)] = relay.open("a", 1, 50, "b", {})
    bsid = decode_message(raw)[0].stream_id
    relay.receive("b", frames.control(FrameType.OPEN_OK, {"window": 10}, bsid))
    [(target, out)] = relay.receive("b", Frame(FrameType.RESET, bsid, payload))
    assert target == "a" and decode_message(out) == [frames.control(FrameType.RESET, {"reason": reason}, 1)]
    # And a node reads an unreadable reset as a reset, not as a broken session.
    mux = Mux()
    incoming_open(mux, 2)
    mux.accept_stream(2)
    assert mux.receive(encode(Frame(FrameType.RESET, 2, b"x"))) == [
        StreamReset(2, "reset by peer", remote=True)
    ]


# -- backoff, path memory, settings ---------------------------------------------------------------------


def test_backoff_grows_caps_jitters_and_resets() -> None:
    values = iter([0.5, 0.5, 0.5, 0.5, 1.0, 0.0])
    backoff = Backoff(1.0, 3.0, factor=2.0, jitter=0.2, rand=lambda: next(values))
    assert [backoff.next() for _ in range(4)] == [1.0, 2.0, 3.0, 3.0]
    assert backoff.next() == pytest.approx(3.6)
    backoff.reset()
    assert backoff.next() == pytest.approx(0.8)


def test_direct_path_memory_skips_failed_endpoints_for_a_while() -> None:
    now = [0.0]
    memory = DirectPathMemory(30.0, lambda: now[0])
    memory.failed("10.0.0.1:443")
    assert not memory.should_try("10.0.0.1:443")
    assert memory.should_try("10.0.0.2:443")
    now[0] = 30.0
    assert memory.should_try("10.0.0.1:443")


def test_environment_switches() -> None:
    assert env_bool("false", True) is False and env_bool("T", False) is True and env_bool("yes", True) is True
    s = MeshSettings()
    assert direct_dialing_enabled(s, {}) is True
    assert direct_dialing_enabled(s, {"TS_DEBUG_DIAL_DIRECT": "false"}) is False
    assert direct_dialing_enabled(MeshSettings(dial_direct=False), {}) is False
    assert insecure_skip_verify(s, {"TS_DEBUG_TLS_DIAL_INSECURE_SKIP_VERIFY": "true"}) is True
    assert verbose(s, "LOFT_LOG_TSNET_AGENT", {"LOFT_LOG_TSNET_AGENT": "1"}) is True
    assert verbose(s, "LOFT_LOG_TSNET_AGENT", {"LOFT_LOG_TSNET_CONTROL_PLANE": "1"}) is False
    assert s.dial_timeout_seconds == 5.0 and s.initial_window_bytes == 256 * 1024


class FakeWebSocket:
    """What a coordinator session needs of its WebSocket here: a close to observe."""

    def __init__(self) -> None:
        self.closed_with: tuple[int, bytes] | None = None

    async def close(self, *, code: int, message: bytes) -> None:
        self.closed_with = (code, message)


async def test_a_session_that_does_not_read_is_closed_past_its_queue_limit() -> None:
    """Credit does not bound what the coordinator holds for a node (a node grants its peers any window, and
    OPEN_FAIL answers take none): past ``max_session_queue_bytes`` the session is closed, not grown."""
    from aiohttp import WSCloseCode

    from vplane.mesh.coordinator import NodeIdentity, _Limits, _Record, _Session

    ws = FakeWebSocket()
    record = _Record("n1", "a", NodeIdentity("loft:vcluster:p:a", "vcluster", {}), "c1")
    session = _Session(cast(Any, ws), record, 0.0, 4096, _Limits(65536, 1 << 20, 100), max_queued=10_000)
    frame = encode_parts(FrameType.DATA, 1, b"x" * 1000)
    for _ in range(9):
        session.send(frame)
    assert session.overflowed is None and session.queued == 9 * len(frame)
    session.send(frame)  # past 10,000 bytes
    assert session.overflowed is not None
    await session.overflowed
    assert ws.closed_with == (WSCloseCode.POLICY_VIOLATION, b"outbound queue over limit")
    assert not session.ordered and session.queued == 0
    session.send(frame)  # nothing more is held for it
    assert not session.ordered

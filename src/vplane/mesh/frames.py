"""The session protocol without I/O: frame encoding, the node-side stream multiplexer, the relay table.

Wire format (ours; nothing upstream to match): every frame is a 9-byte header, ``type`` (u8),
``stream_id`` (u32), ``length`` (u32), all big-endian, then ``length`` bytes of payload. A WebSocket
message carries one or more whole frames, so writers batch small frames into one message. Payloads:

- DATA: raw bytes (at most ``max_frame_size``); WINDOW_UPDATE: a u32 increment; HEARTBEAT, CLOSE: empty;
- everything else: a JSON object (orjson), at most ``max_control_size``.

Session frames use stream id 0; stream frames a non-zero id. Nodes number the streams they open with
odd ids, the coordinator numbers the streams it opens towards a node with even ids (as HTTP/2 does for
client and server), so the two never collide on one session.

Flow control is HTTP/2's, per stream and per direction: OPEN carries the opener's receive window and
OPEN_OK the acceptor's; a side may send DATA only within the credit the other granted and gets more with
WINDOW_UPDATE as the receiver *consumes* data (not merely receives it). A stream whose reader stalls runs
out of credit and stops; the session and every other stream keep moving. The relay checks the same
credits, so it never queues more for a stream than the receiver granted.

Closing follows TCP. CLOSE is a half-close (``write_eof``: no more data from this side). A full close
(closing the socket) is CLOSE then RESET (``Mux.finish_stream``): the other side gets everything sent,
its end, then the loss (``StreamReset.after_close``), and the stream's slot is free at once on both nodes
and in the relay instead of lingering half-open until the other side happens to close or write. RESET
alone aborts (a close with data left unread, TCP's RST).

``Mux`` is the node's half (h2's ``H2Connection`` shape: feed bytes in, get events back, collect bytes
to send); ``Relay`` is the coordinator's stream table. Both are plain state machines, tested without
sockets.
"""

from __future__ import annotations

import struct
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Generic, TypeAlias, TypeVar

import orjson

HEADER = struct.Struct("!BII")
HEADER_SIZE = HEADER.size
INCREMENT = struct.Struct("!I")

PROTOCOL_VERSION = 1
INITIAL_WINDOW = 256 * 1024
"""Default per-stream receive window (``MeshSettings.initial_window_bytes``)."""
MAX_FRAME_SIZE = 64 * 1024
"""Default largest DATA payload (``MeshSettings.max_frame_bytes``)."""
MAX_CONTROL_SIZE = 4 * 1024 * 1024
"""Default largest JSON payload (``MeshSettings.max_control_frame_bytes``)."""
MAX_WINDOW = 2**31 - 1
"""Credit may never exceed this (HTTP/2's limit), so a buggy peer cannot wrap a counter."""
MAX_STREAM_ID = 2**32 - 1
CLOSED_BY_PEER = "closed by the peer"
"""RESET reason of a full close (CLOSE, then RESET)."""


class FrameType(IntEnum):
    HELLO = 1
    """node -> coordinator, first frame: access key, hostname, labels, endpoints."""
    REGISTERED = 2
    """coordinator -> node: the node id and the coordinator instance that owns the session."""
    ERROR = 3
    """coordinator -> node, then close: ``code`` (``unauthorized`` is final) and ``message``."""
    HEARTBEAT = 4
    """node -> coordinator, answered in kind."""
    NETMAP = 5
    """coordinator -> node: the peers this node may see and dial."""
    ENDPOINTS = 6
    """node -> coordinator: the node's direct endpoints changed."""
    OPEN = 7
    """Open a relayed stream: to the coordinator ``target`` and ``window``; to the acceptor ``source``,
    ``peer`` and ``window``."""
    OPEN_OK = 8
    OPEN_FAIL = 9
    DATA = 10
    WINDOW_UPDATE = 11
    CLOSE = 12
    """Half-close: the sender sends no more DATA on this stream."""
    RESET = 13
    """Abort the stream in both directions, with a ``reason``."""


SESSION_FRAMES = frozenset(
    {
        FrameType.HELLO,
        FrameType.REGISTERED,
        FrameType.ERROR,
        FrameType.HEARTBEAT,
        FrameType.NETMAP,
        FrameType.ENDPOINTS,
    }
)
EMPTY_FRAMES = frozenset({FrameType.HEARTBEAT, FrameType.CLOSE})
_TYPES = {int(t): t for t in FrameType}


class ProtocolError(Exception):
    """The other side broke the protocol; the session is closed (a stream-level fault resets only its
    stream and is reported as an event instead)."""


class StreamError(Exception):
    """A local call on a stream that cannot take it (unknown, not yet accepted, or closed)."""


@dataclass(frozen=True, slots=True)
class Frame:
    type: FrameType
    stream_id: int = 0
    payload: bytes = b""

    def json(self) -> dict[str, Any]:
        try:
            value = orjson.loads(self.payload)
        except orjson.JSONDecodeError as exc:
            raise ProtocolError(f"{self.type.name} payload is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ProtocolError(f"{self.type.name} payload is not a JSON object")
        return value

    @property
    def increment(self) -> int:
        return int(INCREMENT.unpack(self.payload)[0])


def encode(frame: Frame) -> bytes:
    return HEADER.pack(frame.type, frame.stream_id, len(frame.payload)) + frame.payload


def encode_parts(ftype: FrameType, stream_id: int, payload: bytes) -> bytes:
    return HEADER.pack(ftype, stream_id, len(payload)) + payload


def control(ftype: FrameType, body: Mapping[str, Any], stream_id: int = 0) -> Frame:
    return Frame(ftype, stream_id, orjson.dumps(body))


def window_update(stream_id: int, increment: int) -> Frame:
    return Frame(FrameType.WINDOW_UPDATE, stream_id, INCREMENT.pack(increment))


def _check_header(ftype_raw: int, stream_id: int, length: int, max_frame: int, max_control: int) -> FrameType:
    ftype = _TYPES.get(ftype_raw)
    if ftype is None:
        raise ProtocolError(f"unknown frame type {ftype_raw}")
    if ftype in SESSION_FRAMES:
        if stream_id != 0:
            raise ProtocolError(f"{ftype.name} on stream {stream_id}; session frames use stream 0")
    elif stream_id == 0:
        raise ProtocolError(f"{ftype.name} without a stream id")
    if ftype is FrameType.DATA:
        if length > max_frame:
            raise ProtocolError(f"DATA frame of {length} bytes exceeds the {max_frame}-byte limit")
    elif ftype is FrameType.WINDOW_UPDATE:
        if length != INCREMENT.size:
            raise ProtocolError(f"WINDOW_UPDATE payload of {length} bytes; expected 4")
    elif ftype in EMPTY_FRAMES:
        if length:
            raise ProtocolError(f"{ftype.name} frame with a {length}-byte payload")
    elif length > max_control:
        raise ProtocolError(f"{ftype.name} frame of {length} bytes exceeds the {max_control}-byte limit")
    return ftype


def _check_payload(frame: Frame) -> Frame:
    if frame.type is FrameType.WINDOW_UPDATE and not 0 < frame.increment <= MAX_WINDOW:
        raise ProtocolError(f"WINDOW_UPDATE increment {frame.increment} out of range")
    return frame


def decode_message(
    data: bytes, max_frame_size: int = MAX_FRAME_SIZE, max_control_size: int = MAX_CONTROL_SIZE
) -> list[Frame]:
    """The frames of one complete message; a truncated or oversized frame is a ``ProtocolError``."""
    frames: list[Frame] = []
    offset, end = 0, len(data)
    while offset < end:
        if end - offset < HEADER_SIZE:
            raise ProtocolError("truncated frame header")
        raw_type, stream_id, length = HEADER.unpack_from(data, offset)
        ftype = _check_header(raw_type, stream_id, length, max_frame_size, max_control_size)
        start = offset + HEADER_SIZE
        offset = start + length
        if offset > end:
            raise ProtocolError("truncated frame payload")
        frames.append(_check_payload(Frame(ftype, stream_id, data[start:offset])))
    return frames


class FrameDecoder:
    """Incremental decoding for a byte stream without message boundaries (frames split anywhere)."""

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE, max_control_size: int = MAX_CONTROL_SIZE):
        self._buf = bytearray()
        self._max_frame = max_frame_size
        self._max_control = max_control_size

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        while len(buf) >= HEADER_SIZE:
            raw_type, stream_id, length = HEADER.unpack_from(buf, 0)
            # Checked before the payload arrives, so an absurd length is refused, not buffered.
            ftype = _check_header(raw_type, stream_id, length, self._max_frame, self._max_control)
            if len(buf) < HEADER_SIZE + length:
                break
            payload = bytes(buf[HEADER_SIZE : HEADER_SIZE + length])
            del buf[: HEADER_SIZE + length]
            frames.append(_check_payload(Frame(ftype, stream_id, payload)))
        return frames


# -- events the node-side multiplexer reports ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Registered:
    node_id: str
    coordinator_id: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Rejected:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class HeartbeatReceived:
    pass


@dataclass(frozen=True, slots=True)
class NetmapReceived:
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StreamOpened:
    """The coordinator relays a stream another node opened to us; accept or reject it."""

    stream_id: int
    source: str
    peer: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StreamAccepted:
    stream_id: int


@dataclass(frozen=True, slots=True)
class StreamRejected:
    stream_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class DataReceived:
    stream_id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class WindowOpened:
    """Send credit arrived; a stream that was blocked may send again."""

    stream_id: int
    window: int


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The other side half-closed: no more data will arrive."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class StreamReset:
    stream_id: int
    reason: str
    remote: bool
    """False: we reset it ourselves because the other side broke the stream's rules."""
    after_close: bool = False
    """The other side had sent CLOSE first: it finished sending and then closed for good (a full close,
    TCP's FIN then RST), so what it sent is complete and should still reach the application."""


Event: TypeAlias = (
    Registered
    | Rejected
    | HeartbeatReceived
    | NetmapReceived
    | StreamOpened
    | StreamAccepted
    | StreamRejected
    | DataReceived
    | WindowOpened
    | StreamEnded
    | StreamReset
)


@dataclass(slots=True)
class _Stream:
    id: int
    peer: str
    accepted: bool
    send_window: int
    recv_window: int
    """Credit we granted and the other side has not used yet."""
    unacked: int = 0
    """Bytes consumed locally whose credit is not yet returned."""
    local_closed: bool = False
    remote_closed: bool = False


def _window_of(body: Mapping[str, Any], what: str) -> int:
    window = body.get("window")
    if not isinstance(window, int) or isinstance(window, bool) or not 0 <= window <= MAX_WINDOW:
        raise ProtocolError(f"{what} without a valid window")
    return window


def _text(body: Mapping[str, Any], key: str, default: str = "") -> str:
    value = body.get(key, default)
    return value if isinstance(value, str) else default


MAX_REASON_CHARS = 1024
"""A stream's reset or refusal reason as the relay passes it on: a peer's longer text is cut."""


def _reason(payload: bytes, default: str) -> str:
    """A RESET's reason: a peer's unreadable payload is no reason, not a broken session."""
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return default
    return _text(body, "reason", default)[:MAX_REASON_CHARS] if isinstance(body, dict) else default


class Mux:
    """The node's end of a session: session frames in and out, relayed streams with flow control.

    Feed received messages to ``receive`` and act on the returned events; call the stream methods to
    open, accept, send, acknowledge, close and reset; send whatever ``data_to_send`` returns. Sending is
    pulled by the caller (``send_data`` takes what credit allows and reports how much), so the caller
    decides the order streams are served in and a blocked stream simply takes nothing.
    """

    def __init__(
        self,
        *,
        initial_window: int = INITIAL_WINDOW,
        max_frame_size: int = MAX_FRAME_SIZE,
        max_control_size: int = MAX_CONTROL_SIZE,
    ) -> None:
        self.initial_window = initial_window
        self.max_frame_size = max_frame_size
        self.max_control_size = max_control_size
        self._streams: dict[int, _Stream] = {}
        self._next_id = 1
        self._out: list[bytes] = []
        self._out_bytes = 0
        # Return credit once half the window is consumed: fewer WINDOW_UPDATEs, and the sender still
        # has half a window in flight while the update travels.
        self._ack_threshold = max(1, initial_window // 2)

    # -- output -------------------------------------------------------------------------------------

    def _emit(self, frame: Frame) -> None:
        raw = encode(frame)
        self._out.append(raw)
        self._out_bytes += len(raw)

    @property
    def pending_bytes(self) -> int:
        return self._out_bytes

    def data_to_send(self) -> bytes:
        out = b"".join(self._out)
        self._out.clear()
        self._out_bytes = 0
        return out

    def send_control(self, ftype: FrameType, body: Mapping[str, Any] | None = None) -> None:
        if ftype not in SESSION_FRAMES:
            raise ValueError(f"{ftype.name} is not a session frame")
        if ftype in EMPTY_FRAMES:
            self._emit(Frame(ftype))
        else:
            self._emit(control(ftype, body or {}))

    # -- streams ------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._streams)

    def stream_ids(self) -> list[int]:
        return list(self._streams)

    def has_stream(self, stream_id: int) -> bool:
        return stream_id in self._streams

    def _get(self, stream_id: int) -> _Stream:
        stream = self._streams.get(stream_id)
        if stream is None:
            raise StreamError(f"stream {stream_id} is not open")
        return stream

    def open_stream(self, target: str) -> int:
        """Ask the coordinator for a stream to ``target``; no data flows until ``StreamAccepted``."""
        stream_id = self._next_id
        if stream_id > MAX_STREAM_ID:
            raise StreamError("stream ids exhausted on this session")
        self._next_id += 2
        self._streams[stream_id] = _Stream(
            stream_id, target, accepted=False, send_window=0, recv_window=self.initial_window
        )
        self._emit(control(FrameType.OPEN, {"target": target, "window": self.initial_window}, stream_id))
        return stream_id

    def accept_stream(self, stream_id: int) -> None:
        stream = self._get(stream_id)
        if stream.accepted:
            raise StreamError(f"stream {stream_id} is already accepted")
        stream.accepted = True
        stream.recv_window = self.initial_window
        self._emit(control(FrameType.OPEN_OK, {"window": self.initial_window}, stream_id))

    def reject_stream(self, stream_id: int, reason: str) -> None:
        stream = self._get(stream_id)
        if stream.accepted:
            raise StreamError(f"stream {stream_id} is already accepted")
        del self._streams[stream_id]
        self._emit(control(FrameType.OPEN_FAIL, {"reason": reason}, stream_id))

    def send_window(self, stream_id: int) -> int:
        stream = self._streams.get(stream_id)
        if stream is None or not stream.accepted or stream.local_closed:
            return 0
        return stream.send_window

    def send_data(self, stream_id: int, data: bytes | memoryview) -> int:
        """Frame as much of ``data`` as the stream's credit allows; returns the bytes taken."""
        stream = self._get(stream_id)
        if not stream.accepted:
            raise StreamError(f"stream {stream_id} is not accepted yet")
        if stream.local_closed:
            raise StreamError(f"stream {stream_id} is closed for sending")
        total = min(len(data), stream.send_window)
        view = memoryview(data)
        offset = 0
        while offset < total:
            chunk = bytes(view[offset : min(total, offset + self.max_frame_size)])
            self._emit(Frame(FrameType.DATA, stream_id, chunk))
            offset += len(chunk)
        stream.send_window -= total
        return total

    def acknowledge(self, stream_id: int, consumed: int) -> None:
        """The application consumed ``consumed`` bytes of this stream: return the credit (batched)."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.remote_closed or consumed <= 0:
            return
        stream.unacked += consumed
        if stream.unacked >= self._ack_threshold:
            stream.recv_window += stream.unacked
            self._emit(window_update(stream_id, stream.unacked))
            stream.unacked = 0

    def close_stream(self, stream_id: int) -> None:
        stream = self._get(stream_id)
        if stream.local_closed:
            return
        if not stream.accepted:
            raise StreamError(f"stream {stream_id} is not accepted yet")
        stream.local_closed = True
        self._emit(Frame(FrameType.CLOSE, stream_id))
        if stream.remote_closed:
            del self._streams[stream_id]

    def reset_stream(self, stream_id: int, reason: str) -> None:
        if self._streams.pop(stream_id, None) is not None:
            self._emit(control(FrameType.RESET, {"reason": reason}, stream_id))

    def finish_stream(self, stream_id: int) -> None:
        """A full close: CLOSE (everything we sent is complete), then, unless the other side has closed
        too, RESET, because we will read nothing more. Its credit and relay slot are released at once
        instead of when (if ever) the other side closes; it sees the data, its end, then the loss."""
        self.close_stream(stream_id)
        if stream_id in self._streams:
            self.reset_stream(stream_id, CLOSED_BY_PEER)

    def forget_all(self) -> list[int]:
        """The session is gone: every stream with it (nothing is sent)."""
        ids = list(self._streams)
        self._streams.clear()
        return ids

    # -- input --------------------------------------------------------------------------------------

    def receive(self, message: bytes) -> list[Event]:
        events: list[Event] = []
        for frame in decode_message(message, self.max_frame_size, self.max_control_size):
            events.extend(self.receive_frame(frame))
        return events

    def _violation(self, stream_id: int, reason: str) -> list[Event]:
        self.reset_stream(stream_id, reason)
        return [StreamReset(stream_id, reason, remote=False)]

    def receive_frame(self, frame: Frame) -> list[Event]:
        ftype = frame.type
        sid = frame.stream_id
        if ftype is FrameType.HEARTBEAT:
            return [HeartbeatReceived()]
        if ftype is FrameType.NETMAP:
            return [NetmapReceived(frame.json())]
        if ftype is FrameType.REGISTERED:
            body = frame.json()
            node_id = _text(body, "node_id")
            if not node_id:
                raise ProtocolError("REGISTERED without a node id")
            return [Registered(node_id, _text(body, "coordinator_id"), body)]
        if ftype is FrameType.ERROR:
            body = frame.json()
            return [Rejected(_text(body, "code", "error"), _text(body, "message", "unknown error"))]
        if ftype in SESSION_FRAMES:
            raise ProtocolError(f"unexpected {ftype.name} from the coordinator")
        if ftype is FrameType.OPEN:
            if sid % 2 == 1:
                raise ProtocolError(f"OPEN with odd stream id {sid}; the coordinator uses even ids")
            if sid in self._streams:
                raise ProtocolError(f"OPEN for stream {sid}, which is already open")
            body = frame.json()
            window = _window_of(body, "OPEN")
            source = _text(body, "source")
            peer = body.get("peer")
            self._streams[sid] = _Stream(sid, source, accepted=False, send_window=window, recv_window=0)
            return [StreamOpened(sid, source, peer if isinstance(peer, dict) else {})]
        stream = self._streams.get(sid)
        if stream is None:
            # Late frames for a stream one side already reset: nothing to do.
            return []
        if ftype is FrameType.DATA:
            if not frame.payload:
                return []
            if not stream.accepted or stream.remote_closed:
                return self._violation(sid, "data on a stream that is not open for it")
            if len(frame.payload) > stream.recv_window:
                return self._violation(sid, "flow control violation")
            stream.recv_window -= len(frame.payload)
            return [DataReceived(sid, frame.payload)]
        if ftype is FrameType.WINDOW_UPDATE:
            if not stream.accepted:
                return self._violation(sid, "window update before the stream was accepted")
            stream.send_window += frame.increment
            if stream.send_window > MAX_WINDOW:
                return self._violation(sid, "flow control window overflow")
            return [WindowOpened(sid, stream.send_window)]
        if ftype is FrameType.CLOSE:
            if not stream.accepted:
                return self._violation(sid, "close before the stream was accepted")
            stream.remote_closed = True
            if stream.local_closed:
                del self._streams[sid]
            return [StreamEnded(sid)]
        if ftype is FrameType.RESET:
            del self._streams[sid]
            reason = _reason(frame.payload, "reset by peer")
            return [StreamReset(sid, reason, remote=True, after_close=stream.remote_closed)]
        # OPEN_OK and OPEN_FAIL answer streams we opened (odd ids, not yet accepted).
        if sid % 2 == 0 or stream.accepted:
            return self._violation(sid, f"unexpected {ftype.name}")
        body = frame.json()
        if ftype is FrameType.OPEN_OK:
            stream.accepted = True
            stream.send_window = _window_of(body, "OPEN_OK")
            return [StreamAccepted(sid)]
        del self._streams[sid]
        return [StreamRejected(sid, _text(body, "reason", "stream refused"))]


# -- the coordinator's relay table -----------------------------------------------------------------

K = TypeVar("K", bound=Hashable)
Route: TypeAlias = tuple[Any, bytes]
"""(session to send to, encoded frame)."""


@dataclass(slots=True)
class _Link(Generic[K]):
    opener: K
    opener_sid: int
    acceptor: K
    acceptor_sid: int
    opener_credit: int = 0
    """Bytes the opener may still send towards the acceptor (granted by OPEN_OK and WINDOW_UPDATEs)."""
    acceptor_credit: int = 0
    accepted: bool = False
    opener_closed: bool = False
    acceptor_closed: bool = False


class Relay(Generic[K]):
    """Pairs a stream on one session with a stream on another and forwards frames between them.

    Sessions are opaque hashable keys. Every method returns the frames to send as (session, bytes);
    the caller queues them. The relay holds no data itself and checks each DATA frame against the
    credit the receiving side granted, so what the caller queues per stream never exceeds the window.
    """

    def __init__(self, *, max_streams_per_session: int = 1000, max_streams_per_pair: int = 100) -> None:
        self._max_streams = max_streams_per_session
        self._max_pair = max_streams_per_pair
        self._legs: dict[K, dict[int, _Link[K]]] = {}
        self._next_id: dict[K, int] = {}
        self._pairs: dict[tuple[K, K], int] = {}
        """Open streams by (opener, acceptor): one opener cannot take every slot a peer has."""

    def streams_of(self, session: K) -> int:
        return len(self._legs.get(session, ()))

    def streams_between(self, opener: K, acceptor: K) -> int:
        return self._pairs.get((opener, acceptor), 0)

    def __len__(self) -> int:
        return sum(len(v) for v in self._legs.values()) // 2

    @staticmethod
    def refuse(session: K, stream_id: int, reason: str) -> list[Route]:
        return [(session, encode(control(FrameType.OPEN_FAIL, {"reason": reason}, stream_id)))]

    def open(
        self, opener: K, stream_id: int, window: int, acceptor: K, announce: Mapping[str, Any]
    ) -> list[Route]:
        """Forward an OPEN (already authorized by the caller) to ``acceptor`` under a fresh even id."""
        if stream_id % 2 == 0:
            raise ProtocolError(f"OPEN with even stream id {stream_id}; nodes use odd ids")
        opener_legs = self._legs.setdefault(opener, {})
        if stream_id in opener_legs:
            raise ProtocolError(f"OPEN for stream {stream_id}, which is already open")
        if len(opener_legs) >= self._max_streams:
            return self._refuse_open(opener, stream_id, "too many streams on this session")
        pair = (opener, acceptor)
        if self._pairs.get(pair, 0) >= self._max_pair:
            return self._refuse_open(
                opener, stream_id, f"too many streams to this peer (at most {self._max_pair} per pair)"
            )
        acceptor_legs = self._legs.get(acceptor, {})
        if len(acceptor_legs) >= self._max_streams:
            return self._refuse_open(opener, stream_id, "the peer has too many streams open")
        new_id = self._next_id.get(acceptor, 2)
        if new_id > MAX_STREAM_ID:
            return self._refuse_open(opener, stream_id, "stream ids exhausted on the peer's session")
        self._next_id[acceptor] = new_id + 2
        link = _Link(opener, stream_id, acceptor, new_id, acceptor_credit=window)
        opener_legs[stream_id] = link
        self._legs.setdefault(acceptor, {})[new_id] = link
        self._pairs[pair] = self._pairs.get(pair, 0) + 1
        body = dict(announce)
        body["window"] = window
        return [(acceptor, encode(control(FrameType.OPEN, body, new_id)))]

    def _refuse_open(self, opener: K, stream_id: int, reason: str) -> list[Route]:
        if not self._legs.get(opener):
            self._legs.pop(opener, None)
        return self.refuse(opener, stream_id, reason)

    def _unpair(self, link: _Link[K]) -> None:
        pair = (link.opener, link.acceptor)
        count = self._pairs.get(pair, 0) - 1
        if count > 0:
            self._pairs[pair] = count
        else:
            self._pairs.pop(pair, None)

    def _remove(self, link: _Link[K]) -> None:
        self._unpair(link)
        for session, sid in ((link.opener, link.opener_sid), (link.acceptor, link.acceptor_sid)):
            legs = self._legs.get(session)
            if legs is not None:
                legs.pop(sid, None)
                if not legs:
                    # The id counter stays: ids are never reused on a session, so a late frame for an
                    # old stream cannot land on a new one.
                    del self._legs[session]

    def _violation(self, link: _Link[K], reason: str) -> list[Route]:
        self._remove(link)
        payload = orjson.dumps({"reason": reason})
        return [
            (link.opener, encode_parts(FrameType.RESET, link.opener_sid, payload)),
            (link.acceptor, encode_parts(FrameType.RESET, link.acceptor_sid, payload)),
        ]

    def receive(self, session: K, frame: Frame) -> list[Route]:
        """Forward a stream frame (anything but OPEN) that arrived on ``session``."""
        link = self._legs.get(session, {}).get(frame.stream_id)
        if link is None:
            return []  # a frame for a stream already reset or closed: drop it
        from_opener = link.opener == session and link.opener_sid == frame.stream_id
        other, other_sid = (
            (link.acceptor, link.acceptor_sid) if from_opener else (link.opener, link.opener_sid)
        )
        ftype = frame.type
        if ftype is FrameType.DATA:
            size = len(frame.payload)
            if from_opener:
                if not link.accepted or link.opener_closed:
                    return self._violation(link, "data on a stream that is not open for it")
                if size > link.opener_credit:
                    return self._violation(link, "flow control violation")
                link.opener_credit -= size
            else:
                if not link.accepted or link.acceptor_closed:
                    return self._violation(link, "data on a stream that is not open for it")
                if size > link.acceptor_credit:
                    return self._violation(link, "flow control violation")
                link.acceptor_credit -= size
            return [(other, encode_parts(FrameType.DATA, other_sid, frame.payload))]
        if ftype is FrameType.WINDOW_UPDATE:
            if not link.accepted:
                return self._violation(link, "window update before the stream was accepted")
            if from_opener:
                link.acceptor_credit += frame.increment
                over = link.acceptor_credit > MAX_WINDOW
            else:
                link.opener_credit += frame.increment
                over = link.opener_credit > MAX_WINDOW
            if over:
                return self._violation(link, "flow control window overflow")
            return [(other, encode_parts(FrameType.WINDOW_UPDATE, other_sid, frame.payload))]
        if ftype is FrameType.CLOSE:
            if not link.accepted:
                return self._violation(link, "close before the stream was accepted")
            if from_opener:
                link.opener_closed = True
            else:
                link.acceptor_closed = True
            if link.opener_closed and link.acceptor_closed:
                self._remove(link)
            return [(other, encode_parts(FrameType.CLOSE, other_sid, b""))]
        if ftype is FrameType.RESET:
            # Re-encoded, not passed on: a peer's payload the other node cannot read (not JSON, or past its
            # control-frame limit) would end that node's whole session.
            self._remove(link)
            reason = _reason(frame.payload, "reset by peer")
            return [(other, encode(control(FrameType.RESET, {"reason": reason}, other_sid)))]
        if ftype in (FrameType.OPEN_OK, FrameType.OPEN_FAIL):
            if from_opener or link.accepted:
                return self._violation(link, f"unexpected {ftype.name}")
            body = frame.json()
            if ftype is FrameType.OPEN_FAIL:
                self._remove(link)
                reason = _text(body, "reason", "stream refused")[:MAX_REASON_CHARS]
                return self.refuse(link.opener, link.opener_sid, reason)
            window = _window_of(body, "OPEN_OK")
            link.accepted = True
            link.opener_credit = window
            return [(other, encode(control(FrameType.OPEN_OK, {"window": window}, other_sid)))]
        raise ProtocolError(f"unexpected {ftype.name} on stream {frame.stream_id}")

    def drop(self, session: K, reason: str = "peer session closed") -> list[Route]:
        """``session`` is gone: reset every stream it was part of on the other side."""
        legs = self._legs.pop(session, {})
        self._next_id.pop(session, None)
        payload = orjson.dumps({"reason": reason})
        routes: list[Route] = []
        seen: set[int] = set()
        for link in legs.values():
            if id(link) in seen:
                continue
            seen.add(id(link))
            self._unpair(link)
            for other, sid in ((link.opener, link.opener_sid), (link.acceptor, link.acceptor_sid)):
                if other == session:
                    continue
                other_legs = self._legs.get(other)
                if other_legs is not None:
                    other_legs.pop(sid, None)
                    if not other_legs:
                        del self._legs[other]
                routes.append((other, encode_parts(FrameType.RESET, sid, payload)))
        return routes

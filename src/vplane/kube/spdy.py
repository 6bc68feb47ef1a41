"""SPDY/3.1 framing as Kubernetes streaming speaks it (pure: bytes in, frames out).

kubectl's port-forward opens SPDY/3.1 sessions (over an HTTP upgrade, or tunnelled in WebSocket binary
messages with the subprotocol ``SPDY/3.1+portforward.k8s.io``), and any client may fall back to SPDY for
exec and attach. The peer on the other side is moby/spdystream, so this is the subset it writes and
reads: frames of draft 3 of the SPDY protocol (control frames carry version 3), name/value header blocks
compressed with one zlib stream per direction primed with the protocol's dictionary and flushed with
``Z_SYNC_FLUSH`` after each block. spdystream does no flow control (it never sends ``WINDOW_UPDATE`` and
ignores those it gets), so neither side here waits on windows.

Frame layouts (draft 3, section 2.2 and 2.6):

- data: ``0 | stream-id (31)``, ``flags (8) | length (24)``, data.
- control: ``1 | version (15) | type (16)``, ``flags (8) | length (24)``, payload:
  SYN_STREAM ``stream-id, associated-id, priority (3) | unused (5), slot (8), header block``;
  SYN_REPLY and HEADERS ``stream-id, header block``; RST_STREAM ``stream-id, status``; SETTINGS
  ``count, (flags (8) | id (24), value)*``; PING ``id``; GOAWAY ``last-good-stream-id, status``;
  WINDOW_UPDATE ``stream-id, delta``.
- header block (before compression): ``count (32)``, then per header ``len (32), name, len (32),
  value``; names are lower case; several values of one name are joined by NUL.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

VERSION = 3
UPGRADE_TOKEN = "SPDY/3.1"

SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02

# RST_STREAM status codes (section 2.6.3)
PROTOCOL_ERROR, INVALID_STREAM, REFUSED_STREAM, UNSUPPORTED_VERSION, CANCEL, INTERNAL_ERROR = 1, 2, 3, 4, 5, 6
FLOW_CONTROL_ERROR, STREAM_IN_USE, STREAM_ALREADY_CLOSED, FRAME_TOO_LARGE = 7, 8, 9, 11

MAX_LENGTH = (1 << 24) - 1
"""The 24-bit length field: no frame is longer."""
MAX_HEADER_BLOCK = 1 << 20
"""A header block decompresses to at most this many bytes (spdystream's own limit is 16 MiB; Kubernetes
streams carry four short headers)."""

_WORD = struct.Struct(">I")
_TWO_WORDS = struct.Struct(">II")


def _dictionary() -> bytes:
    """The zlib dictionary of SPDY/3 header compression (draft 3, section 2.6.10.1): length-prefixed
    tokens, then a run of common values."""
    tokens = [
        "options",
        "head",
        "post",
        "put",
        "delete",
        "trace",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "connection",
        "content-base",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "content-type",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "retry-after",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "vary",
        "via",
        "warning",
        "www-authenticate",
        "method",
        "get",
        "status",
    ]
    tokens += ["200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"]
    prefix = b"".join(_WORD.pack(len(t)) + t.encode() for t in tokens)
    tail = (
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
        "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 "
        "Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service "
        "UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, "
        "Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,application/xml,"
        "application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdch"
        "charset=utf-8charset=iso-8859-1,utf-,*,enq=0."
    )
    return prefix + tail.encode()


HEADER_DICTIONARY = _dictionary()

Headers = dict[str, list[str]]


class SpdyError(ValueError):
    """The peer broke the framing: the session cannot go on (a GOAWAY/close follows)."""


@dataclass(frozen=True)
class DataFrame:
    stream_id: int
    data: bytes
    flags: int = 0

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


@dataclass(frozen=True)
class SynStream:
    stream_id: int
    headers: Headers
    flags: int = 0
    associated_id: int = 0
    priority: int = 0

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


@dataclass(frozen=True)
class SynReply:
    stream_id: int
    headers: Headers
    flags: int = 0


@dataclass(frozen=True)
class HeadersFrame:
    stream_id: int
    headers: Headers
    flags: int = 0


@dataclass(frozen=True)
class RstStream:
    stream_id: int
    status: int


@dataclass(frozen=True)
class Settings:
    entries: list[tuple[int, int, int]] = field(default_factory=list)
    """(flags, id, value) per setting."""
    flags: int = 0


@dataclass(frozen=True)
class Ping:
    id: int


@dataclass(frozen=True)
class GoAway:
    last_good_stream_id: int
    status: int = 0


@dataclass(frozen=True)
class WindowUpdate:
    stream_id: int
    delta: int


@dataclass(frozen=True)
class UnknownControl:
    """A control frame type this side does not use (spdystream would drop it too)."""

    type: int
    flags: int
    payload: bytes


Frame = (
    DataFrame
    | SynStream
    | SynReply
    | HeadersFrame
    | RstStream
    | Settings
    | Ping
    | GoAway
    | WindowUpdate
    | UnknownControl
)


def encode_header_block(headers: Headers) -> bytes:
    """The uncompressed name/value block (names lower-cased, values of one name NUL-joined)."""
    out = [_WORD.pack(len(headers))]
    for name, values in headers.items():
        key = name.lower().encode()
        value = "\0".join(values).encode()
        out += [_WORD.pack(len(key)), key, _WORD.pack(len(value)), value]
    return b"".join(out)


def decode_header_block(block: bytes) -> Headers:
    """The inverse of :func:`encode_header_block`; :class:`SpdyError` for a malformed block."""
    try:
        (count,) = _WORD.unpack_from(block, 0)
        offset = 4
        headers: Headers = {}
        for _ in range(count):
            (size,) = _WORD.unpack_from(block, offset)
            offset += 4
            if size == 0 or offset + size > len(block):
                raise SpdyError("invalid header name length")
            name = block[offset : offset + size].decode()
            offset += size
            (size,) = _WORD.unpack_from(block, offset)
            offset += 4
            if offset + size > len(block):
                raise SpdyError("invalid header value length")
            value = block[offset : offset + size].decode()
            offset += size
            if name != name.lower():
                raise SpdyError(f"header name {name!r} is not lower case")
            if name in headers:
                raise SpdyError(f"duplicate header {name!r}")
            headers[name] = value.split("\0")
    except (struct.error, UnicodeDecodeError) as exc:
        raise SpdyError(f"malformed header block: {exc}") from None
    if offset != len(block):
        raise SpdyError("trailing bytes after the header block")
    return headers


class FrameReader:
    """Frames from a byte stream fed in arbitrary pieces; holds the peer's header decompressor."""

    def __init__(self, max_frame: int = MAX_LENGTH) -> None:
        self._buffer = bytearray()
        self._inflate = zlib.decompressobj(zdict=HEADER_DICTIONARY)
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        buf = self._buffer
        offset = 0
        while len(buf) - offset >= 8:
            first, second = _TWO_WORDS.unpack_from(buf, offset)
            length = second & 0xFFFFFF
            if length > self.max_frame:
                raise SpdyError(f"frame of {length} bytes is over the limit of {self.max_frame}")
            if len(buf) - offset < 8 + length:
                break
            payload = bytes(buf[offset + 8 : offset + 8 + length])
            offset += 8 + length
            flags = second >> 24
            if first & 0x80000000:
                version = (first >> 16) & 0x7FFF
                if version != VERSION:
                    raise SpdyError(f"unsupported SPDY version {version}")
                frames.append(self._control(first & 0xFFFF, flags, payload))
            else:
                frames.append(DataFrame(first & 0x7FFFFFFF, payload, flags))
        del buf[:offset]
        return frames

    def _headers(self, block: bytes) -> Headers:
        try:
            raw = self._inflate.decompress(block, MAX_HEADER_BLOCK)
        except zlib.error as exc:
            raise SpdyError(f"header block does not decompress: {exc}") from None
        if self._inflate.unconsumed_tail:
            raise SpdyError("header block too large")
        return decode_header_block(raw)

    def _control(self, kind: int, flags: int, payload: bytes) -> Frame:
        try:
            if kind == SYN_STREAM:
                stream_id, associated = _TWO_WORDS.unpack_from(payload, 0)
                priority = payload[8] >> 5
                headers = self._headers(payload[10:])
                return SynStream(stream_id & 0x7FFFFFFF, headers, flags, associated & 0x7FFFFFFF, priority)
            if kind == SYN_REPLY:
                (stream_id,) = _WORD.unpack_from(payload, 0)
                return SynReply(stream_id & 0x7FFFFFFF, self._headers(payload[4:]), flags)
            if kind == HEADERS:
                (stream_id,) = _WORD.unpack_from(payload, 0)
                return HeadersFrame(stream_id & 0x7FFFFFFF, self._headers(payload[4:]), flags)
            if kind == RST_STREAM:
                stream_id, status = _TWO_WORDS.unpack_from(payload, 0)
                return RstStream(stream_id & 0x7FFFFFFF, status)
            if kind == SETTINGS:
                (count,) = _WORD.unpack_from(payload, 0)
                if len(payload) != 4 + 8 * count:
                    raise SpdyError("SETTINGS length does not match its count")
                entries = []
                for i in range(count):
                    head, value = _TWO_WORDS.unpack_from(payload, 4 + 8 * i)
                    entries.append((head >> 24, head & 0xFFFFFF, value))
                return Settings(entries, flags)
            if kind == PING:
                (ping_id,) = _WORD.unpack_from(payload, 0)
                return Ping(ping_id)
            if kind == GOAWAY:
                (last,) = _WORD.unpack_from(payload, 0)
                status = _WORD.unpack_from(payload, 4)[0] if len(payload) >= 8 else 0
                return GoAway(last & 0x7FFFFFFF, status)
            if kind == WINDOW_UPDATE:
                stream_id, delta = _TWO_WORDS.unpack_from(payload, 0)
                return WindowUpdate(stream_id & 0x7FFFFFFF, delta & 0x7FFFFFFF)
        except (struct.error, IndexError):
            raise SpdyError(f"control frame of type {kind} is too short") from None
        return UnknownControl(kind, flags, payload)


class FrameWriter:
    """Frames to bytes; holds this side's header compressor (one zlib stream for the session)."""

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, HEADER_DICTIONARY)

    def _block(self, headers: Headers) -> bytes:
        raw = encode_header_block(headers)
        return self._deflate.compress(raw) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    @staticmethod
    def _control(kind: int, flags: int, payload: bytes) -> bytes:
        if len(payload) > MAX_LENGTH:
            raise SpdyError("control frame too large")
        return _TWO_WORDS.pack(0x80000000 | (VERSION << 16) | kind, (flags << 24) | len(payload)) + payload

    def encode(self, frame: Frame) -> bytes:
        if isinstance(frame, DataFrame):
            return self.data(frame.stream_id, frame.data, fin=frame.fin)
        if isinstance(frame, SynStream):
            head = _TWO_WORDS.pack(frame.stream_id, frame.associated_id) + bytes([frame.priority << 5, 0])
            return self._control(SYN_STREAM, frame.flags, head + self._block(frame.headers))
        if isinstance(frame, SynReply):
            return self._control(
                SYN_REPLY, frame.flags, _WORD.pack(frame.stream_id) + self._block(frame.headers)
            )
        if isinstance(frame, HeadersFrame):
            return self._control(
                HEADERS, frame.flags, _WORD.pack(frame.stream_id) + self._block(frame.headers)
            )
        if isinstance(frame, RstStream):
            return self._control(RST_STREAM, 0, _TWO_WORDS.pack(frame.stream_id, frame.status))
        if isinstance(frame, Settings):
            body = _WORD.pack(len(frame.entries)) + b"".join(
                _TWO_WORDS.pack((f << 24) | i, v) for f, i, v in frame.entries
            )
            return self._control(SETTINGS, frame.flags, body)
        if isinstance(frame, Ping):
            return self._control(PING, 0, _WORD.pack(frame.id))
        if isinstance(frame, GoAway):
            return self._control(GOAWAY, 0, _TWO_WORDS.pack(frame.last_good_stream_id, frame.status))
        if isinstance(frame, WindowUpdate):
            return self._control(WINDOW_UPDATE, 0, _TWO_WORDS.pack(frame.stream_id, frame.delta))
        return self._control(frame.type, frame.flags, frame.payload)

    @staticmethod
    def data(stream_id: int, data: bytes, *, fin: bool = False, chunk: int = 32 * 1024) -> bytes:
        """DATA frames for ``data`` (split into ``chunk``-sized frames; FIN on the last)."""
        flags = FLAG_FIN if fin else 0
        if len(data) <= chunk:
            return _TWO_WORDS.pack(stream_id & 0x7FFFFFFF, (flags << 24) | len(data)) + data
        parts = []
        for start in range(0, len(data), chunk):
            piece = data[start : start + chunk]
            last = start + chunk >= len(data)
            parts.append(_TWO_WORDS.pack(stream_id, ((flags if last else 0) << 24) | len(piece)) + piece)
        return b"".join(parts)

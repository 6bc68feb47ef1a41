"""A SPDY/3.1 session, server side, over any byte transport (a taken-over HTTP connection, or WebSocket
binary messages): the asyncio glue around :mod:`vplane.kube.spdy`.

The client opens every stream (port-forward pairs, exec channels); each gets a SYN_REPLY at once, as the
kubelet's stream handler replies, and spdystream delivers no data on a stream it has no reply for. Pings
are echoed. A stream's inbound data waits in a short queue: a consumer that does not read stops the
session's reader, so a fast client cannot make the session buffer without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from vplane.kube import spdy

log = structlog.get_logger("vplane.runtime.streams")

Read = Callable[[], Awaitable[bytes]]
"""The next bytes from the client; b"" at the end."""
Write = Callable[[bytes], Awaitable[None]]

INBOUND_QUEUE = 16
"""Data frames a stream holds for its consumer before the session stops reading."""


class SpdyStream:
    def __init__(self, session: SpdySession, stream_id: int, headers: spdy.Headers) -> None:
        self.session = session
        self.id = stream_id
        self.headers = headers
        self._inbound: asyncio.Queue[bytes | None] = asyncio.Queue(INBOUND_QUEUE)
        self.remote_closed = False
        self.local_closed = False
        self.reset = False

    def header(self, name: str) -> str:
        values = self.headers.get(name.lower()) or [""]
        return values[0]

    async def read(self) -> bytes | None:
        """The next data the client sent on this stream; None once it half-closed (FIN) or reset it."""
        if self.remote_closed and self._inbound.empty():
            return None
        data = await self._inbound.get()
        if data is None:
            self.remote_closed = True
        return data

    async def write(self, data: bytes) -> None:
        if self.local_closed or self.reset or not data:
            return
        await self.session.send(spdy.DataFrame(self.id, data))

    async def close(self) -> None:
        """Half-close: an empty DATA frame with FIN (spdystream's ``Close``)."""
        if self.local_closed or self.reset:
            return
        self.local_closed = True
        with contextlib.suppress(ConnectionError, OSError):
            await self.session.send(spdy.DataFrame(self.id, b"", spdy.FLAG_FIN))

    async def _deliver(self, data: bytes | None) -> None:
        await self._inbound.put(data)

    def _gone(self) -> None:
        """The stream was reset or the session ended: readers get the end."""
        self.reset = True
        while not self._inbound.empty():  # a reset stream's data is dropped, and a waiting reader wakes
            self._inbound.get_nowait()
        self._inbound.put_nowait(None)


class SpdySession:
    """One client's SPDY connection; ``on_stream`` is called for each stream the client opens."""

    def __init__(self, read: Read, write: Write, on_stream: Callable[[SpdyStream], None]) -> None:
        self._read = read
        self._write = write
        self._on_stream = on_stream
        self._reader = spdy.FrameReader()
        self._writer = spdy.FrameWriter()
        self._lock = asyncio.Lock()
        self.streams: dict[int, SpdyStream] = {}
        self.closed = asyncio.Event()

    async def send(self, frame: spdy.Frame) -> None:
        # Encoding and writing stay in one order: the header compressor's state is shared by every frame.
        async with self._lock:
            if self.closed.is_set():
                raise ConnectionResetError("the SPDY session is closed")
            await self._write(self._writer.encode(frame))

    async def run(self) -> None:
        """Read frames until the client goes (or breaks the framing)."""
        try:
            while True:
                data = await self._read()
                if not data:
                    return
                for frame in self._reader.feed(data):
                    if not await self._handle(frame):
                        return
        except spdy.SpdyError as exc:
            log.info("SPDY session ended on a framing error", error=str(exc))
            with contextlib.suppress(ConnectionError, OSError):
                await self.send(spdy.GoAway(max(self.streams, default=0), spdy.PROTOCOL_ERROR))
        except (ConnectionError, OSError):
            return
        finally:
            self.closed.set()
            for stream in self.streams.values():
                stream._gone()

    async def _handle(self, frame: spdy.Frame) -> bool:
        if isinstance(frame, spdy.SynStream):
            if frame.stream_id in self.streams or frame.stream_id % 2 == 0:
                await self.send(spdy.RstStream(frame.stream_id, spdy.PROTOCOL_ERROR))
                return True
            stream = SpdyStream(self, frame.stream_id, frame.headers)
            self.streams[frame.stream_id] = stream
            await self.send(spdy.SynReply(frame.stream_id, {}))
            if frame.fin:
                await stream._deliver(None)
            self._on_stream(stream)
        elif isinstance(frame, spdy.DataFrame):
            found = self.streams.get(frame.stream_id)
            if found is None or found.remote_closed:
                return True
            if frame.data:
                await found._deliver(frame.data)
            if frame.fin:
                await found._deliver(None)
        elif isinstance(frame, spdy.RstStream):
            found = self.streams.get(frame.stream_id)
            if found is not None:
                found._gone()
        elif isinstance(frame, spdy.Ping):
            await self.send(frame)
        elif isinstance(frame, spdy.GoAway):
            return False
        return True  # SETTINGS, WINDOW_UPDATE, HEADERS: nothing to do (spdystream does no flow control)

    async def close(self) -> None:
        self.closed.set()

"""Relaying an upstream HTTP response to a downstream client, streaming (watches stay open).

Each side's end is the other's: a client that goes closes the upstream connection at once (its watch on
the backend ends then, not at its next event or its timeout), and an upstream that breaks mid-body drops
the client's connection (as Go's reverse proxy aborts the handler), so a truncated body never looks
complete. Writes wait for the client (back-pressure), so a slow client slows the upstream read instead
of making the relay buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from vplane.support.httpserver import abort, on_connection_lost
from vplane.support.requestheader import HOP_BY_HOP

T = TypeVar("T")


async def relay_response(request: web.BaseRequest, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    """Copy status, end-to-end headers and body chunk by chunk."""
    async with upstream:
        # Registered before anything is awaited, so a client gone while the upstream answered is seen too.
        forget = on_connection_lost(request, upstream.close)
        try:
            resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    resp.headers.add(name, value)
            if (
                upstream.headers.get("Transfer-Encoding", "").lower() == "chunked"
                or upstream.content_length is None
            ):
                resp.enable_chunked_encoding()
            else:
                resp.content_length = upstream.content_length
            try:
                await resp.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await resp.write(chunk)
            except ConnectionError:
                return resp  # the client went (its callback closed the upstream)
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
                if request.transport is not None:
                    abort(request.transport)  # the upstream broke mid-body
                return resp
            with contextlib.suppress(ConnectionError):
                await resp.write_eof()
            return resp
        finally:
            forget()


# -- connection upgrades (exec, attach, port-forward, any aggregated API's) ---------------------------------
#
# An upgrade is relayed as bytes, as Go's UpgradeAwareHandler does: the request head goes to the upstream
# on a connection of its own; a 101 answer is written to the client as it came and from then on the two
# connections are spliced, each side's end closing the other; any other answer is relayed as a normal
# response. Nothing here knows WebSocket or SPDY, so every subprotocol passes, end to end.

UPGRADE_HEAD_LIMIT = 64 * 1024
"""A response head larger than this is refused (Go's default ``MaxHeaderBytes`` is 1 MiB for requests;
an upgrade answer has a handful of headers)."""
ERROR_BODY_LIMIT = 1024 * 1024
"""A refused upgrade's body is read up to this many bytes (it is an error message)."""
SPLICE_CHUNK = 64 * 1024

UPGRADE_REQUEST_HEADERS = frozenset(
    {
        "upgrade",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-protocol",
        "sec-websocket-extensions",
        "x-stream-protocol-version",
        "user-agent",
        "origin",
    }
)
"""What a hop towards a kubelet passes on: the upgrade's own headers (never the caller's credentials)."""


class UpgradeError(Exception):
    """The upstream's answer to an upgrade request was not HTTP (or too large)."""


class ClientGone(Exception):
    """The client's connection went before its upgrade was answered."""


def is_upgrade(headers: Any) -> bool:
    """An HTTP/1.1 upgrade request: a ``Connection`` header with the ``upgrade`` token and an
    ``Upgrade`` header (``httpstream.IsUpgradeRequest``)."""
    tokens = {t.strip().lower() for value in headers.getall("Connection", []) for t in value.split(",")}
    return "upgrade" in tokens and bool(headers.get("Upgrade", "").strip())


@dataclass(frozen=True)
class ResponseHead:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    raw: bytes

    def get(self, name: str) -> str | None:
        lower = name.lower()
        return next((v for k, v in self.headers if k.lower() == lower), None)

    def getall(self, name: str) -> list[str]:
        lower = name.lower()
        return [v for k, v in self.headers if k.lower() == lower]


def parse_response_head(raw: bytes) -> ResponseHead:
    """An HTTP/1.x status line and headers (``raw`` ends with the blank line); ValueError if malformed."""
    if not raw.endswith(b"\r\n\r\n"):
        raise ValueError("incomplete response head")
    lines = raw[:-4].split(b"\r\n")
    status_line = lines[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or len(parts[1]) != 3 or not parts[1].isdigit():
        raise ValueError(f"malformed status line {status_line!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep or not name or name != name.strip() or any(c in name for c in " \t"):
            raise ValueError(f"malformed header line {line!r}")
        headers.append((name, value.strip()))
    return ResponseHead(int(parts[1]), parts[2] if len(parts) > 2 else "", headers, raw)


def request_head(method: str, target: str, host: str, headers: Iterable[tuple[str, str]]) -> bytes:
    """An upgrade request's head: ``Connection: Upgrade`` and the given headers; ValueError for a name or
    value that would split the head (CR, LF, NUL)."""
    if any(c in method + target + host for c in " \t\r\n\0") or not method or not target:
        raise ValueError("request line cannot be sent")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Connection: Upgrade"]
    for name, value in headers:
        if any(c in name + value for c in "\r\n\0") or not name or any(c in name for c in ": \t"):
            raise ValueError(f"header {name!r} cannot be sent")
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class ChunkedDecoder:
    """An incremental ``Transfer-Encoding: chunked`` decoder (for a refused upgrade's body)."""

    def __init__(self) -> None:
        self._buffer = b""
        self._remaining = -1  # -1: a size line is due; -2: the CRLF after a chunk; -3: trailers
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out = []
        while not self.done:
            if self._remaining == -1:
                line, sep, rest = self._buffer.partition(b"\r\n")
                if not sep:
                    if len(self._buffer) > 1024:
                        raise ValueError("chunk size line too long")
                    break
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ValueError("malformed chunk size") from None
                self._buffer = rest
                self._remaining = size if size > 0 else -3
            elif self._remaining == -2:
                if len(self._buffer) < 2:
                    break
                if self._buffer[:2] != b"\r\n":
                    raise ValueError("missing CRLF after chunk")
                self._buffer = self._buffer[2:]
                self._remaining = -1
            elif self._remaining == -3:
                line, sep, rest = self._buffer.partition(b"\r\n")
                if not sep:
                    break
                self._buffer = rest
                if not line:
                    self.done = True
            else:
                piece = self._buffer[: self._remaining]
                out.append(piece)
                self._buffer = self._buffer[len(piece) :]
                self._remaining -= len(piece)
                if self._remaining == 0:
                    self._remaining = -2
                elif not self._buffer:
                    break
        return b"".join(out)


async def send_upgrade(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, seconds: float
) -> ResponseHead:
    """Send an upgrade request's head and read the answer's head (within ``seconds``)."""
    writer.write(head)
    async with asyncio.timeout(seconds):
        await writer.drain()
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise UpgradeError("response head too large") from None
        except asyncio.IncompleteReadError:
            raise UpgradeError("connection closed before a response") from None
    try:
        return parse_response_head(raw)
    except ValueError as exc:
        raise UpgradeError(str(exc)) from None


async def dial_upgrade(
    connect: Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]],
    head: bytes,
    seconds: float,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, ResponseHead]:
    """Connect (``connect`` raises what it raises) and :func:`send_upgrade`; the connection is closed
    if that fails or is cancelled."""
    reader, writer = await connect()
    try:
        return reader, writer, await send_upgrade(reader, writer, head, seconds)
    except BaseException:
        abort(writer.transport)
        raise


async def while_client_stays(request: web.BaseRequest, work: Awaitable[T]) -> T:
    """Await ``work`` (dialling an upgrade's upstream and waiting for its answer), cancelled if the
    client's connection goes first, which raises :class:`ClientGone`: an upstream is not kept waiting
    on a caller that left (after the answer, :func:`splice` ends both sides together)."""
    task = asyncio.ensure_future(work)
    gone = False

    def lost() -> None:
        nonlocal gone
        gone = True
        task.cancel()

    forget = on_connection_lost(request, lost)
    try:
        return await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if gone and task.cancelled() and (current is None or not current.cancelling()):
            raise ClientGone() from None
        raise
    finally:
        forget()


async def read_body(reader: asyncio.StreamReader, head: ResponseHead, limit: int = ERROR_BODY_LIMIT) -> bytes:
    """A (refused upgrade's) response body: by Content-Length, chunked, or to the end; at most ``limit``
    bytes, read within ten seconds (Go's proxy gives a refused upgrade's answer ten seconds too)."""
    if head.status in (204, 304) or 100 <= head.status < 200:
        return b""
    async with asyncio.timeout(10.0):
        length = head.get("Content-Length")
        if length is not None and length.strip().isdigit():
            return await reader.read(min(int(length), limit)) if int(length) else b""
        if "chunked" in (head.get("Transfer-Encoding") or "").lower():
            decoder, body = ChunkedDecoder(), b""
            while not decoder.done and len(body) < limit:
                data = await reader.read(SPLICE_CHUNK)
                if not data:
                    break
                body += decoder.feed(data)
            return body[:limit]
        return await reader.read(limit)


class _Taken(asyncio.StreamReaderProtocol):
    """The protocol of a connection taken from aiohttp: a stream reader and writer over it; when it goes,
    aiohttp's own protocol is told too (its handler, timers and connection slot are released)."""

    def __init__(self, reader: asyncio.StreamReader, original: Any, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(reader, loop=loop)
        self._original = original
        self.gone: asyncio.Future[None] = loop.create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self.gone.done():
            self.gone.set_result(None)
        original, self._original = self._original, None
        if original is not None:
            with contextlib.suppress(Exception):
                original.connection_lost(exc)


@dataclass
class TakenConnection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    protocol: _Taken

    async def close(self) -> None:
        """Close (flushing what is queued, for at most a second) and wait until the loop has let go."""
        self.writer.close()
        try:
            await asyncio.wait_for(asyncio.shield(self.protocol.gone), 1.0)
        except (TimeoutError, asyncio.CancelledError):
            abort(self.writer.transport)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self.protocol.gone), 1.0)


class TakenResponse(web.StreamResponse):
    """What a handler returns for a connection it took over: aiohttp has nothing left to send."""

    def __init__(self, status: int = 101) -> None:
        super().__init__(status=status)

    async def prepare(self, request: web.BaseRequest) -> None:
        return None

    async def write_eof(self, data: bytes = b"") -> None:
        return None


def take_over(request: web.BaseRequest, head: bytes) -> TakenConnection:
    """Write ``head`` (a response head the caller built or relayed) on the request's connection and take
    the connection from aiohttp: bytes read from then on are the caller's. The client of an upgrade sends
    nothing more before it has the answer; what aiohttp buffered past the request anyway is kept."""
    transport = request.transport
    protocol = request.protocol
    if transport is None or transport.is_closing():
        raise ConnectionResetError("the client went")
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=SPLICE_CHUNK, loop=loop)
    taken = _Taken(reader, protocol, loop)
    tail = getattr(protocol, "_message_tail", b"")
    transport.set_protocol(taken)
    taken.connection_made(transport)
    if tail:
        reader.feed_data(bytes(tail))
        with contextlib.suppress(AttributeError):
            protocol._message_tail = b""
    with contextlib.suppress(AttributeError, RuntimeError):
        if not transport.is_reading():
            transport.resume_reading()
    writer = asyncio.StreamWriter(transport, taken, reader, loop)
    writer.write(head)
    return TakenConnection(reader, writer, taken)


async def splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter], b: tuple[asyncio.StreamReader, asyncio.StreamWriter]
) -> None:
    """Copy both ways until either side ends, then close both (each write waits for its reader)."""

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
            while True:
                data = await src.read(SPLICE_CHUNK)
                if not data:
                    return
                dst.write(data)
                await dst.drain()

    tasks = [asyncio.ensure_future(pump(a[0], b[1])), asyncio.ensure_future(pump(b[0], a[1]))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for _, writer in (a, b):
            writer.close()


def downstream_head(head: ResponseHead) -> bytes:
    """A 101 answer as the client gets it: as it came (its Upgrade, Connection and protocol headers are
    the point)."""
    return head.raw


async def relay_upgrade(
    request: web.BaseRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: ResponseHead
) -> web.StreamResponse:
    """After :func:`send_upgrade`: a 101 is passed to the client and the connections spliced until one
    side goes; any other answer becomes an ordinary response (its body read with :func:`read_body`)."""
    if head.status != 101:
        try:
            body = await read_body(reader, head)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
            body = b""
        finally:
            writer.close()
        resp = web.Response(status=head.status, reason=head.reason or None, body=body)
        for name, value in head.headers:
            if name.lower() not in HOP_BY_HOP:
                resp.headers.add(name, value)
        return resp
    try:
        taken = take_over(request, downstream_head(head))
    except ConnectionError:
        writer.close()
        return TakenResponse()
    try:
        await splice((taken.reader, taken.writer), (reader, writer))
    finally:
        writer.close()
        await taken.close()
    return TakenResponse()

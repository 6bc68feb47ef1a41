"""The kubelet's streaming endpoints: ``/exec``, ``/attach`` and ``/portForward``, over WebSocket and SPDY.

Upstream's routes and parameters (``pkg/kubelet/server/server.go``): ``/exec/{namespace}/{pod}/{container}``
and ``/attach/...`` with ``input``, ``output``, ``error``, ``tty`` = ``1`` and ``command`` (repeated), and
``/portForward/{namespace}/{pod}`` with ``port`` for WebSocket clients. The API server reaches them with
the pod's request upgraded as the client sent it (it relays the connection as bytes), so the protocol is
whichever the client speaks:

- **WebSocket** (kubectl 1.30+ for exec and attach, the ``kubernetes`` Python client): the channel
  protocols of :mod:`vplane.kube.remotecommand`, v5 (close signal) down to v1; port-forward's channel
  protocol (data and error channel per port, each opened with the port number);
- **SPDY/3.1** over the upgraded connection (``X-Stream-Protocol-Version``): exec and attach for clients
  that fall back to it, and port-forward (``portforward.k8s.io``);
- **SPDY tunnelled in WebSocket** (subprotocol ``SPDY/3.1+portforward.k8s.io``): kubectl's port-forward.

Errors before the upgrade are the kubelet's plain-text answers (``pod does not exist`` 404, ``container
not found ("main")`` 500 for a container that is not running, 400 for bad options); errors after it are
written on the error channel: the exit code as ``NonZeroExitCode`` (kubectl exits with it), a command
that cannot start as containerd reports it. A client that goes kills the exec'd command's process group,
so nothing outlives its session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import structlog
from aiohttp import WSMsgType, web

from vplane.kube import errors, spdy
from vplane.kube import remotecommand as rc
from vplane.runtime.cri import STDERR as SHIM_STDERR
from vplane.runtime.cri import STDOUT as SHIM_STDOUT
from vplane.runtime.cri import ContainerRuntime, ExecProcess, RunningContainer
from vplane.runtime.images import StartError
from vplane.runtime.streams_spdy import SpdySession, SpdyStream
from vplane.support.httprelay import TakenConnection, TakenResponse, take_over

log = structlog.get_logger("vplane.runtime.streams")

STREAM_CREATION_TIMEOUT = 30.0
"""Seconds a SPDY client has to open the streams it asked for (the kubelet's ``streamCreationTimeout``)."""
OUTPUT_DRAIN_SECONDS = 1.0
"""After an exec'd command exits, output still in flight is read this long (a child it left may hold its
pipes for ever)."""
CHUNK = 32 * 1024


# -- transports: what a session reads and writes ----------------------------------------------------------


class Channels(Protocol):
    protocol: str

    async def send(self, channel: int, data: bytes) -> None: ...

    async def receive(self) -> tuple[int, bytes | None] | None:
        """The client's next (channel, data); (channel, None) when it closed that channel; None when
        the connection is gone."""
        ...

    async def close(self) -> None: ...


async def send_status(channels: Channels, status: Mapping[str, Any]) -> None:
    """The final word on the error channel: the Status JSON from v4 on, else a failure's message."""
    if rc.status_on_error_channel(channels.protocol):
        await channels.send(rc.ERROR, json.dumps(status).encode())
    elif status.get("status") != "Success":
        await channels.send(rc.ERROR, str(status.get("message", "")).encode())


class WebSocketChannels:
    def __init__(self, ws: web.WebSocketResponse, protocol: str) -> None:
        self.ws = ws
        self.protocol = protocol

    async def send(self, channel: int, data: bytes) -> None:
        message = rc.encode(self.protocol, channel, data)
        if isinstance(message, str):
            await self.ws.send_str(message)
        else:
            await self.ws.send_bytes(message)

    async def receive(self) -> tuple[int, bytes | None] | None:
        while True:
            msg = await self.ws.receive()
            if msg.type in (WSMsgType.BINARY, WSMsgType.TEXT):
                try:
                    channel, data = rc.decode(self.protocol, msg.data)
                except ValueError:
                    continue
                if channel == rc.CLOSE:
                    if self.protocol == rc.V5 and data:
                        return data[0], None
                    continue
                return channel, data
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return None

    async def close(self) -> None:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            await self.ws.close()


class SpdyChannels:
    """Channels over a SPDY session's streams (one per ``streamtype``)."""

    def __init__(self, session: SpdySession, streams: dict[int, SpdyStream], protocol: str) -> None:
        self.session = session
        self.streams = streams
        self.protocol = protocol
        self._inbound: asyncio.Queue[tuple[int, bytes | None] | None] = asyncio.Queue(16)
        self._tasks = [asyncio.ensure_future(self._watch_session())]
        if rc.STDIN in streams:
            self._tasks.append(asyncio.ensure_future(self._read_stdin(streams[rc.STDIN])))
        if rc.RESIZE in streams:
            self._tasks.append(asyncio.ensure_future(self._read_resize(streams[rc.RESIZE])))

    async def _watch_session(self) -> None:
        await self.session.closed.wait()
        await self._inbound.put(None)

    async def _read_stdin(self, stream: SpdyStream) -> None:
        while True:
            data = await stream.read()
            await self._inbound.put((rc.STDIN, data))
            if data is None:
                return

    async def _read_resize(self, stream: SpdyStream) -> None:
        # client-go writes each size with json.Encoder: JSON documents one after another
        decoder, pending = json.JSONDecoder(), ""
        while (data := await stream.read()) is not None:
            pending += data.decode(errors="replace")
            while pending.strip():
                try:
                    doc, end = decoder.raw_decode(pending.lstrip())
                except ValueError:
                    break
                pending = pending.lstrip()[end:]
                await self._inbound.put((rc.RESIZE, json.dumps(doc).encode()))

    async def send(self, channel: int, data: bytes) -> None:
        stream = self.streams.get(channel)
        if stream is not None:
            await stream.write(data)

    async def receive(self) -> tuple[int, bytes | None] | None:
        return await self._inbound.get()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for stream in self.streams.values():
            with contextlib.suppress(ConnectionError, OSError):
                await stream.close()


# -- the handlers ---------------------------------------------------------------------------------------


def _upgrade_kind(request: web.Request) -> str:
    connection = {t.strip().lower() for v in request.headers.getall("Connection", []) for t in v.split(",")}
    upgrade = request.headers.get("Upgrade", "").strip().lower()
    if "upgrade" not in connection or not upgrade:
        return ""
    if upgrade == "websocket":
        return "websocket"
    if "spdy/3.1" in upgrade:
        return "spdy"
    return "other"


def _query(request: web.Request) -> dict[str, list[str]]:
    return {k: request.query.getall(k) for k in set(request.query.keys())}


def _text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message)


def _upgrade_required() -> web.Response:
    return _text(400, "Upgrade request required")


def _no_protocol(client: list[str], server: tuple[str, ...]) -> web.Response:
    """``httpstream.Handshake``'s refusal when no protocol matches."""
    return _text(
        403,
        f"unable to upgrade: unable to negotiate protocol: client supports [{' '.join(client)}], "
        f"server supports [{' '.join(server)}]",
    )


def _spdy_accept(request: web.Request, protocol: str) -> TakenConnection:
    head = (
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        f"X-Stream-Protocol-Version: {protocol}\r\n\r\n"
    )
    return take_over(request, head.encode())


async def _spdy_over(conn: TakenConnection, on_stream: Callable[[SpdyStream], None]) -> SpdySession:
    async def read() -> bytes:
        return await conn.reader.read(65536)

    async def write(data: bytes) -> None:
        conn.writer.write(data)
        await conn.writer.drain()

    return SpdySession(read, write, on_stream)


def _spdy_over_websocket(ws: web.WebSocketResponse, on_stream: Callable[[SpdyStream], None]) -> SpdySession:
    async def read() -> bytes:
        while True:
            msg = await ws.receive()
            if msg.type == WSMsgType.BINARY:
                if msg.data:
                    return bytes(msg.data)
                continue
            if msg.type == WSMsgType.TEXT:
                continue
            return b""

    async def write(data: bytes) -> None:
        await ws.send_bytes(data)

    return SpdySession(read, write, on_stream)


async def exec_handler(request: web.Request, runtime: ContainerRuntime) -> web.StreamResponse:
    return await _remote_command(request, runtime, "exec")


async def attach_handler(request: web.Request, runtime: ContainerRuntime) -> web.StreamResponse:
    return await _remote_command(request, runtime, "attach")


async def _remote_command(request: web.Request, runtime: ContainerRuntime, kind: str) -> web.StreamResponse:
    info = request.match_info
    namespace, pod, container = info["namespace"], info["pod"], info["container"]
    try:
        options = rc.kubelet_options(_query(request))
    except ValueError as exc:
        return _text(400, str(exc))
    if runtime.pod(namespace, pod) is None:
        return _text(404, "pod does not exist")
    running = runtime.container(namespace, pod, container)
    if running is None:
        return _text(500, f'container not found ("{container}")')
    upgrade = _upgrade_kind(request)

    async def serve(channels: Channels) -> None:
        if kind == "exec":
            await serve_exec(channels, runtime, running, options)
        else:
            await serve_attach(channels, runtime, running, options)

    if upgrade == "websocket":
        client = rc.offered(request.headers.getall("Sec-WebSocket-Protocol", []))
        protocol = rc.negotiate(client, rc.REMOTE_COMMAND_WEBSOCKET)
        if protocol is None:
            return _no_protocol(client, rc.REMOTE_COMMAND_WEBSOCKET)
        ws = web.WebSocketResponse(protocols=[protocol] if protocol else ())
        await ws.prepare(request)
        channels = WebSocketChannels(ws, protocol or rc.V1)
        try:
            await _first_message(channels, options)
            await serve(channels)
        finally:
            await channels.close()
        return ws
    if upgrade == "spdy":
        client = rc.offered(request.headers.getall("X-Stream-Protocol-Version", []))
        protocol = rc.negotiate(client, rc.REMOTE_COMMAND_SPDY)
        if protocol is None or not client:
            return _no_protocol(client, rc.REMOTE_COMMAND_SPDY)
        await _serve_spdy_command(request, protocol, options, serve)
        return TakenResponse()
    return _upgrade_required()


async def _first_message(channels: Channels, options: rc.StreamOptions) -> None:
    """An empty message on the lowest writable channel tells the client the streams are up (kubelet's
    ``createWebSocketStreams``)."""
    if options.stdout:
        await channels.send(rc.STDOUT, b"")
    elif options.stderr:
        await channels.send(rc.STDERR, b"")
    else:
        await channels.send(rc.ERROR, b"")


async def _serve_spdy_command(
    request: web.Request,
    protocol: str,
    options: rc.StreamOptions,
    serve: Callable[[Channels], Awaitable[None]],
) -> None:
    expected = {rc.ERROR}
    if options.stdin:
        expected.add(rc.STDIN)
    if options.stdout:
        expected.add(rc.STDOUT)
    if options.stderr:
        expected.add(rc.STDERR)
    if options.tty and rc.has_resize(protocol):
        expected.add(rc.RESIZE)
    streams: dict[int, SpdyStream] = {}
    ready = asyncio.Event()

    def on_stream(stream: SpdyStream) -> None:
        channel = rc.STREAM_TYPES.get(stream.header(rc.STREAM_TYPE_HEADER))
        if channel is not None:
            streams[channel] = stream
        if expected <= set(streams):
            ready.set()

    conn = _spdy_accept(request, protocol)
    session = await _spdy_over(conn, on_stream)
    reader = asyncio.ensure_future(session.run())
    try:
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait(
            [waiter, reader], timeout=STREAM_CREATION_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
        waiter.cancel()
        if not ready.is_set():
            log.info("SPDY client did not open its streams", expected=sorted(expected), got=sorted(streams))
            return
        channels = SpdyChannels(session, streams, protocol)
        try:
            await serve(channels)
        finally:
            await channels.close()
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
        await conn.close()


# -- exec -------------------------------------------------------------------------------------------


def _exec_start_failure(container_id: str, exc: StartError) -> str:
    """containerd's words for an exec whose process cannot start (runc's error, then ``: unknown``)."""
    detail = str(exc).removeprefix("failed to start container process: ")
    exec_id = os.urandom(32).hex()
    return (
        f'error executing command in container: failed to exec in container: failed to start exec "{exec_id}": '
        f"OCI runtime exec failed: exec failed: unable to start container process: {detail}: unknown"
    )


async def serve_exec(
    channels: Channels, runtime: ContainerRuntime, running: RunningContainer, options: rc.StreamOptions
) -> None:
    try:
        process = await runtime.exec(
            running.namespace,
            running.pod,
            running.name,
            list(options.command),
            tty=options.tty,
            stdin=options.stdin,
        )
    except LookupError:
        message = f'error executing command in container: container not found ("{running.name}")'
        await send_status(channels, errors.internal_error(message).to_status())
        return
    except StartError as exc:
        await send_status(
            channels, errors.internal_error(_exec_start_failure(running.container_id, exc)).to_status()
        )
        return
    except OSError as exc:
        message = f"error executing command in container: {exc}"
        await send_status(channels, errors.internal_error(message).to_status())
        return
    try:
        code = await _run_process(channels, process, options)
    finally:
        _kill_group(process)
        process.close()
    if code is None:
        return  # the client went: nobody to tell
    if code == 0:
        await send_status(channels, rc.success_status())
    else:
        await send_status(channels, rc.exit_code_status(options.command, code))


def _kill_group(process: ExecProcess) -> None:
    pid = process.process.pid
    if pid:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


async def _run_process(channels: Channels, process: ExecProcess, options: rc.StreamOptions) -> int | None:
    """Pump the command's streams until it exits (its exit code) or the client goes (None)."""
    proc = process.process
    outputs: list[asyncio.Future[None]] = []
    if process.pty_master is not None:
        os.set_blocking(process.pty_master, False)
        outputs.append(asyncio.ensure_future(_pump_fd(process.pty_master, channels, options.stdout)))
    else:
        assert proc.stdout is not None and proc.stderr is not None
        outputs.append(asyncio.ensure_future(_pump_reader(proc.stdout, channels, rc.STDOUT, options.stdout)))
        outputs.append(asyncio.ensure_future(_pump_reader(proc.stderr, channels, rc.STDERR, options.stderr)))
    inputs: asyncio.Future[Any] = asyncio.ensure_future(_pump_input(channels, process, options))
    exited: asyncio.Future[Any] = asyncio.ensure_future(proc.wait())
    try:
        await asyncio.wait([exited, inputs], return_when=asyncio.FIRST_COMPLETED)
        if not exited.done():  # the client went
            _kill_group(process)
            await exited
            return None
        await asyncio.wait(outputs, timeout=OUTPUT_DRAIN_SECONDS)
        code = int(exited.result())
        return 128 - code if code < 0 else code
    finally:
        for task in [*outputs, inputs]:
            task.cancel()
        exited.cancel()
        await asyncio.gather(*outputs, inputs, exited, return_exceptions=True)


async def _pump_reader(reader: asyncio.StreamReader, channels: Channels, channel: int, wanted: bool) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(CHUNK):
            if wanted:
                await channels.send(channel, data)


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


async def _read_fd(fd: int) -> bytes:
    """Read a non-blocking descriptor (a terminal's master side): b"" at its end (EIO once the command
    and everything it started have let go of the terminal)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            return os.read(fd, CHUNK)
        except BlockingIOError:
            pass
        except OSError:
            return b""
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _wake, ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)


async def _write_fd(fd: int, data: bytes) -> None:
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
            view = view[written:]
            continue
        except BlockingIOError:
            pass
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_writer(fd, _wake, ready)
        try:
            await ready
        finally:
            loop.remove_writer(fd)


async def _pump_fd(fd: int, channels: Channels, wanted: bool) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await _read_fd(fd):
            if wanted:
                await channels.send(rc.STDOUT, data)


async def _pump_input(channels: Channels, process: ExecProcess, options: rc.StreamOptions) -> None:
    """stdin, its end, and terminal sizes from the client, until the connection goes."""
    stdin = process.process.stdin
    while (message := await channels.receive()) is not None:
        channel, data = message
        try:
            if channel == rc.STDIN and options.stdin:
                if process.pty_master is not None:
                    await _write_fd(process.pty_master, data if data is not None else b"\x04")
                elif stdin is not None:
                    if data is None:
                        stdin.close()
                    elif not stdin.is_closing():
                        stdin.write(data)
                        await stdin.drain()
            elif channel == rc.RESIZE and data:
                size = rc.parse_resize(data)
                if size is not None:
                    process.resize(size.width, size.height)
        except (ConnectionError, OSError):
            pass  # the command closed its input or exited: what the client types goes nowhere


# -- attach -----------------------------------------------------------------------------------------


async def serve_attach(
    channels: Channels, runtime: ContainerRuntime, running: RunningContainer, options: rc.StreamOptions
) -> None:
    try:
        session = await runtime.attach(running.namespace, running.pod, running.name)
    except (LookupError, OSError):
        message = f'error attaching to container: container not found ("{running.name}")'
        await send_status(channels, errors.internal_error(message).to_status())
        return

    async def output() -> None:
        while (frame := await session.read()) is not None:
            channel, data = frame
            if channel == SHIM_STDOUT and options.stdout:
                await channels.send(rc.STDOUT, data)
            elif channel == SHIM_STDERR and options.stderr:
                await channels.send(rc.STDERR, data)
            elif channel not in (SHIM_STDOUT, SHIM_STDERR):
                return  # the container exited

    async def inputs() -> None:
        while (message := await channels.receive()) is not None:
            channel, data = message
            try:
                if channel == rc.STDIN and options.stdin and running.stdin:
                    if data is None:
                        await session.close_stdin()
                    else:
                        await session.write_stdin(data)
                elif channel == rc.RESIZE and data and running.tty:
                    size = rc.parse_resize(data)
                    if size is not None:
                        await session.resize(size.width, size.height)
            except (ConnectionError, OSError):
                # The keeper went (the container exited): what it sent before is still being relayed,
                # and the output's end, not this, ends the session.
                pass

    out, inp = asyncio.ensure_future(output()), asyncio.ensure_future(inputs())
    try:
        await asyncio.wait([out, inp], return_when=asyncio.FIRST_COMPLETED)
        if out.done() and not out.cancelled() and out.exception() is None:
            await send_status(channels, rc.success_status())
    except (ConnectionError, OSError):
        pass
    finally:
        for task in (out, inp):
            task.cancel()
        await asyncio.gather(out, inp, return_exceptions=True)
        await session.close()


# -- port-forward -----------------------------------------------------------------------------------


def _forward_error(pod: Mapping[str, Any], port: int, ip: str, exc: BaseException) -> str:
    meta = pod.get("metadata") or {}
    number = getattr(exc, "errno", None)
    reason = os.strerror(number).lower() if isinstance(number, int) and number > 0 else str(exc)
    return (
        f"error forwarding port {port} to pod {meta.get('name', '')}_{meta.get('namespace', '')}, uid "
        f"{meta.get('uid', '')}: failed to connect to {ip}:{port}: dial tcp4 {ip}:{port}: connect: {reason}"
    )


async def _dial(
    runtime: ContainerRuntime, namespace: str, pod: str, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str]:
    ip = runtime.pod_ip(namespace, pod) or ""
    if not ip:
        raise ConnectionRefusedError(111, "the pod has no IP address yet")
    reader, writer = await asyncio.open_connection(ip, port, limit=CHUNK)
    return reader, writer, ip


async def portforward_handler(request: web.Request, runtime: ContainerRuntime) -> web.StreamResponse:
    info = request.match_info
    namespace, name = info["namespace"], info["pod"]
    pod = runtime.pod(namespace, name)
    if pod is None:
        return _text(404, "pod does not exist")
    upgrade = _upgrade_kind(request)
    if upgrade == "websocket":
        client = rc.offered(request.headers.getall("Sec-WebSocket-Protocol", []))
        if rc.PORT_FORWARD_TUNNEL in client:
            ws = web.WebSocketResponse(protocols=[rc.PORT_FORWARD_TUNNEL])
            await ws.prepare(request)
            forwarder = SpdyPortForward(runtime, namespace, name, pod)
            session = _spdy_over_websocket(ws, forwarder.on_stream)
            try:
                await forwarder.run(session)
            finally:
                with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                    await ws.close()
            return ws
        try:
            ports = rc.parse_ports(request.query.getall(rc.PORT_HEADER, []))
        except ValueError as exc:
            return _text(400, str(exc))
        if not ports:
            return _text(400, "at least one port must be specified")
        protocol = rc.negotiate(client, rc.PORT_FORWARD_WEBSOCKET)
        if protocol is None:
            return _no_protocol(client, rc.PORT_FORWARD_WEBSOCKET)
        ws = web.WebSocketResponse(protocols=[protocol] if protocol else ())
        await ws.prepare(request)
        channels = WebSocketChannels(ws, protocol or rc.V4)
        try:
            await _websocket_port_forward(channels, runtime, namespace, name, pod, ports)
        finally:
            await channels.close()
        return ws
    if upgrade == "spdy":
        client = rc.offered(request.headers.getall("X-Stream-Protocol-Version", []))
        if rc.PORT_FORWARD_SPDY not in client:
            return _no_protocol(client, (rc.PORT_FORWARD_SPDY,))
        conn = _spdy_accept(request, rc.PORT_FORWARD_SPDY)
        forwarder = SpdyPortForward(runtime, namespace, name, pod)
        try:
            await forwarder.run(await _spdy_over(conn, forwarder.on_stream))
        finally:
            await conn.close()
        return TakenResponse()
    return _upgrade_required()


async def _websocket_port_forward(
    channels: WebSocketChannels,
    runtime: ContainerRuntime,
    namespace: str,
    name: str,
    pod: Mapping[str, Any],
    ports: list[int],
) -> None:
    """One connection per port for the WebSocket's life; it ends when every port's connection has."""
    writers: dict[int, asyncio.StreamWriter] = {}
    for index, port in enumerate(ports):
        data_channel, error_channel = rc.port_channels(index)
        await channels.send(data_channel, rc.port_prefix(port))
        await channels.send(error_channel, rc.port_prefix(port))

    async def forward(index: int, port: int) -> None:
        data_channel, error_channel = rc.port_channels(index)
        try:
            reader, writer, _ = await _dial(runtime, namespace, name, port)
        except OSError as exc:
            await channels.send(
                error_channel, _forward_error(pod, port, runtime.pod_ip(namespace, name) or "", exc).encode()
            )
            return
        writers[index] = writer
        try:
            while data := await reader.read(CHUNK):
                await channels.send(data_channel, data)
        except (ConnectionError, OSError):
            pass
        finally:
            writers.pop(index, None)
            writer.close()

    async def inbound() -> None:
        while (message := await channels.receive()) is not None:
            channel, data = message
            writer = writers.get(channel // 2)
            if channel % 2 == 0 and data and writer is not None:
                with contextlib.suppress(ConnectionError, OSError):
                    writer.write(data)
                    await writer.drain()

    forwards = [asyncio.ensure_future(forward(i, p)) for i, p in enumerate(ports)]
    reader_task = asyncio.ensure_future(inbound())
    try:
        await asyncio.wait(
            [asyncio.ensure_future(asyncio.wait(forwards)), reader_task], return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for task in [*forwards, reader_task]:
            task.cancel()
        await asyncio.gather(*forwards, reader_task, return_exceptions=True)
        for writer in writers.values():
            writer.close()


class SpdyPortForward:
    """Port-forward over a SPDY session: each (error, data) stream pair of a request ID is one TCP
    connection to the pod's address and the pair's port."""

    def __init__(self, runtime: ContainerRuntime, namespace: str, name: str, pod: Mapping[str, Any]) -> None:
        self.runtime = runtime
        self.namespace = namespace
        self.name = name
        self.pod = pod
        self.pairs: dict[str, dict[str, SpdyStream]] = {}
        self.tasks: set[asyncio.Future[None]] = set()

    def on_stream(self, stream: SpdyStream) -> None:
        kind = stream.header(rc.STREAM_TYPE_HEADER)
        if kind not in ("error", "data"):
            self._spawn(stream.session.send(_reset(stream)))
            return
        request_id = stream.header(rc.REQUEST_ID_HEADER)
        if not request_id:  # clients before requestID: the data stream follows its error stream
            request_id = str(stream.id if kind == "error" else stream.id - 2)
        pair = self.pairs.setdefault(request_id, {})
        if kind in pair:
            self._spawn(stream.session.send(_reset(stream)))
            return
        pair[kind] = stream
        if len(pair) == 2:
            del self.pairs[request_id]
            self._spawn(self._forward(pair["data"], pair["error"]))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run(self, session: SpdySession) -> None:
        try:
            await session.run()
        finally:
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _forward(self, data: SpdyStream, error: SpdyStream) -> None:
        try:
            try:
                port = rc.parse_spdy_port(data.header(rc.PORT_HEADER))
            except ValueError as exc:
                await error.write(str(exc).encode())
                return
            dialled: tuple[asyncio.StreamReader, asyncio.StreamWriter, str] | None = None
            try:
                dialled = await _dial(self.runtime, self.namespace, self.name, port)
            except OSError as exc:
                ip = self.runtime.pod_ip(self.namespace, self.name) or ""
                await error.write(_forward_error(self.pod, port, ip, exc).encode())
                return
            assert dialled is not None
            try:
                await _copy_pair(data, dialled[0], dialled[1])
            finally:
                dialled[1].close()
        except (ConnectionError, OSError):
            pass
        finally:
            await error.close()
            await data.close()


async def _copy_pair(stream: SpdyStream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Client to pod until the client's FIN (then the pod's write side is shut), pod to client until the
    pod's end (then the stream is half-closed); done when both are, or when the stream is reset."""

    async def upstream() -> None:
        while (data := await stream.read()) is not None:
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    async def downstream() -> None:
        while data := await reader.read(CHUNK):
            await stream.write(data)
        await stream.close()

    up, down = asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())
    try:
        done, _ = await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        if down in done and not stream.reset:
            await asyncio.wait([up], timeout=STREAM_CREATION_TIMEOUT)  # the client closes its side next
        elif up in done and not stream.reset:
            await down
    except (ConnectionError, OSError):
        pass
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)


def _reset(stream: SpdyStream) -> spdy.RstStream:
    return spdy.RstStream(stream.id, spdy.PROTOCOL_ERROR)

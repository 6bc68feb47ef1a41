"""What the kubelet API's streaming handlers need from the runtime (the CRI's streaming part, in Python).

:class:`ContainerRuntime` is implemented by :class:`vplane.runtime.node.NodeRuntime`; kubelet routes get
it as their second argument (see ``vplane.runtime.kubelet.ROUTES``):

- :meth:`ContainerRuntime.pod` and :meth:`ContainerRuntime.pod_ip`: the pod as this node runs it, and its
  loopback address (port-forward connects to ``pod_ip:port``; pods bind their own address).
- :meth:`ContainerRuntime.container`: a running container (its pid, ``tty``/``stdin`` flags, exec
  context), or None.
- :meth:`ContainerRuntime.attach`: an :class:`AttachSession` to the container's own process: its
  stdout/stderr as they are written, and its stdin when the spec says ``stdin: true`` (kept open between
  sessions unless ``stdinOnce``); with ``tty: true`` the process has a terminal and output arrives on the
  stdout channel only; :meth:`AttachSession.resize` sets the terminal size. The container's keeper (its
  shim) serves this, so attach works for containers a restarted runtime adopted too.
- :meth:`ContainerRuntime.exec`: an :class:`ExecProcess` running a command in the container's
  environment (its image's aliases and PATH, its env including ``POD_IP``, its working directory), with
  pipes, or a terminal when ``tty`` (read and write :attr:`ExecProcess.pty_master`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import socket
import struct
import sys
import termios
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from vplane.kube.objects import Obj

if TYPE_CHECKING:
    from vplane.runtime.pods import ExecContext

STDIN, STDOUT, STDERR, RESIZE, CLOSE_STDIN, EXIT = 0, 1, 2, 3, 4, 5
_HEADER = struct.Struct(">BI")


@dataclass(frozen=True)
class RunningContainer:
    namespace: str
    pod: str
    name: str
    container_id: str
    pid: int
    tty: bool
    stdin: bool
    stdin_once: bool
    attach_address: str
    exec_context: ExecContext | None


class _LossIsEnd(asyncio.StreamReader):
    """A lost connection to the keeper ends the stream after what it sent. The keeper closes right after
    the exit frame: a frame of ours it had not read yet turns that close into a reset, and one written
    after it into a broken pipe; a plain stream reader would report either before the frames it holds."""

    def set_exception(self, exc: Exception) -> None:
        if isinstance(exc, ConnectionError):
            self.feed_eof()
        else:
            super().set_exception(exc)


class AttachSession:
    """A connection to a container's keeper: frames of (channel, bytes) both ways."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, address: str) -> AttachSession:
        # Connected here and handed over: uvloop refuses abstract socket names (a leading NUL).
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(5.0)
            sock.connect(address)  # a local socket: accepted or refused at once
            sock.setblocking(False)
            loop = asyncio.get_running_loop()
            reader = _LossIsEnd(loop=loop)
            transport, protocol = await loop.create_unix_connection(
                lambda: asyncio.StreamReaderProtocol(reader, loop=loop), sock=sock
            )
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        except BaseException:
            sock.close()
            raise
        return cls(reader, writer)

    async def read(self) -> tuple[int, bytes] | None:
        """The next (channel, data): STDOUT, STDERR, or EXIT (JSON ``{"exitCode": n}``); None at the end."""
        try:
            header = await self._reader.readexactly(_HEADER.size)
            channel, length = _HEADER.unpack(header)
            return channel, await self._reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None

    async def _send(self, channel: int, data: bytes) -> None:
        self._writer.write(_HEADER.pack(channel, len(data)) + data)
        await self._writer.drain()

    async def write_stdin(self, data: bytes) -> None:
        await self._send(STDIN, data)

    async def close_stdin(self) -> None:
        await self._send(CLOSE_STDIN, b"")

    async def resize(self, width: int, height: int) -> None:
        await self._send(RESIZE, json.dumps({"Width": width, "Height": height}).encode())

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()


@dataclass
class ExecProcess:
    process: asyncio.subprocess.Process
    pty_master: int | None = None

    def resize(self, width: int, height: int) -> None:
        if self.pty_master is not None:
            with contextlib.suppress(OSError):
                fcntl.ioctl(self.pty_master, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))

    def close(self) -> None:
        if self.pty_master is not None:
            with contextlib.suppress(OSError):
                os.close(self.pty_master)
            self.pty_master = None


_CONTROLLING_TERMINAL = "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.argv[1], sys.argv[1:])"


async def spawn_exec(context: ExecContext, command: Sequence[str], *, tty: bool, stdin: bool) -> ExecProcess:
    """Start ``command`` in a container's environment (raises ``vplane.runtime.images.StartError``)."""
    argv = context.argv(command)
    if tty:
        master, slave = os.openpty()
        try:
            # The terminal becomes the command's controlling terminal in a small trampoline: a
            # ``preexec_fn`` runs before the standard descriptors are in place under uvloop.
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-S",
                "-c",
                _CONTROLLING_TERMINAL,
                *argv,
                env=context.env,
                cwd=str(context.cwd),
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,
            )
        finally:
            os.close(slave)
        return ExecProcess(process, master)
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=context.env,
        cwd=str(context.cwd),
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    return ExecProcess(process)


class ContainerRuntime(Protocol):
    node_name: str

    def pod(self, namespace: str, name: str) -> Obj | None: ...

    def pod_ip(self, namespace: str, name: str) -> str | None: ...

    def container(self, namespace: str, pod: str, container: str) -> RunningContainer | None: ...

    async def attach(self, namespace: str, pod: str, container: str) -> AttachSession: ...

    async def exec(
        self, namespace: str, pod: str, container: str, command: Sequence[str], *, tty: bool, stdin: bool
    ) -> ExecProcess: ...

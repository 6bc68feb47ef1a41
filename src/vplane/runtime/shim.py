"""One container's keeper (conmon's and containerd-shim's job), run as its own small process.

The runtime starts ``python -I -S shim.py SPEC`` in a session of its own; the shim starts the container's
process, holds its stdin/stdout/stderr, writes every line to the container's log file in the CRI format
the kubelet reads (``<RFC 3339 nano time> <stream> <F|P> <text>``), serves attach connections on an
abstract Unix socket, and when the process exits records its exit status in a file. So a container keeps
running, logging and being accountable while the runtime itself is down, and a restarted runtime adopts it
(the pid files) or reads how it ended (the exit file). When the container's main process exits, the shim
kills what is left of its process group, as a container's pid namespace ends with its first process.

This file imports only the standard library and is run by path with ``-S``: the runtime's packages are
not loaded into each container's keeper (a few MB of memory each).

Attach protocol (one frame = 1 byte channel, 4 bytes big-endian length, payload). Client to shim:
0 stdin data, 3 terminal size (JSON ``{"Width": w, "Height": h}``), 4 end of stdin. Shim to client:
1 stdout, 2 stderr, 5 exit (JSON ``{"exitCode": n}``), after which the shim closes the connection. Only
connections from the same user are accepted (``SO_PEERCRED``). An attach gets output from the moment it
connects, as a CRI runtime's does: what came before is in the log (kubectl 1.36's ``run -i``/``-it`` reads
the log before attaching, so a replay here would print it twice).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from typing import Any

STDIN, STDOUT, STDERR, RESIZE, CLOSE_STDIN, EXIT = 0, 1, 2, 3, 4, 5
HEADER = struct.Struct(">BI")
MAX_LINE = 16 * 1024
"""A line longer than this is written in parts (``P``), as containerd splits at its buffer size."""
DRAIN_SECONDS = 0.2
"""After the process exits, output still in flight is read this long (a child may hold the pipes)."""
CLOSE_LINGER_SECONDS = 1.0
"""After the exit frame, an attach client has this long to close its end (its reader may still hold
frames; the shim reads and drops what it sends meanwhile)."""


def rfc3339_nano(ns: int) -> str:
    seconds, nanos = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def write_json(path: str, doc: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(doc, out)
    os.replace(tmp, path)


def proc_start_time(pid: int) -> str:
    """A process's start time in clock ticks since boot: with the pid, it names one process for good."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


class LogWriter:
    """CRI log lines for one stream: full lines as ``F``, a line past MAX_LINE in ``P`` parts."""

    def __init__(self, fd: int, stream: str) -> None:
        self.fd = fd
        self.stream = stream.encode()
        self.pending = b""

    def feed(self, data: bytes) -> None:
        self.pending += data
        out = []
        while True:
            newline = self.pending.find(b"\n")
            if newline < 0 or newline > MAX_LINE:
                break
            out.append(self._line(self.pending[:newline], b"F"))
            self.pending = self.pending[newline + 1 :]
        while len(self.pending) > MAX_LINE:
            out.append(self._line(self.pending[:MAX_LINE], b"P"))
            self.pending = self.pending[MAX_LINE:]
        if out:
            self._write(b"".join(out))

    def flush(self) -> None:
        if self.pending:
            self._write(self._line(self.pending, b"F"))
            self.pending = b""

    def _line(self, text: bytes, tag: bytes) -> bytes:
        if text.endswith(b"\r"):
            text = text[:-1]
        return rfc3339_nano(time.time_ns()).encode() + b" " + self.stream + b" " + tag + b" " + text + b"\n"

    def _write(self, data: bytes) -> None:
        with contextlib.suppress(OSError):  # a full disk loses log lines, never the container
            os.write(self.fd, data)


class Client:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.sent_stdin = False


class Shim:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.selector = selectors.DefaultSelector()
        self.clients: list[Client] = []
        self.stdin_fd: int | None = None
        self.pty_master: int | None = None
        self.writers: dict[int, tuple[int, LogWriter]] = {}
        self.process: subprocess.Popen[bytes] | None = None
        self.listener: socket.socket | None = None
        self.exited: int | None = None

    # -- start ----------------------------------------------------------------------------------

    def start(self) -> None:
        spec = self.spec
        log_fd = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        tty = bool(spec.get("tty"))
        want_stdin = bool(spec.get("stdin"))
        slave: int | None = None
        if tty:
            master, slave = os.openpty()
            self.pty_master = master
            stdin: Any = slave
            stdout: Any = slave
            stderr: Any = slave
        else:
            stdin = subprocess.PIPE if want_stdin else subprocess.DEVNULL
            stdout = subprocess.PIPE
            stderr = subprocess.PIPE

        def child_setup() -> None:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            if tty:
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        try:
            self.process = subprocess.Popen(
                spec["argv"],
                env=spec["env"],
                cwd=spec.get("cwd") or None,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
                preexec_fn=child_setup,
            )
        except OSError as exc:
            message = f'failed to start container process: exec: "{spec["argv"][0]}": {exc.strerror or exc}'
            if exc.errno == errno.ENOENT and spec.get("cwd") and not os.path.isdir(spec["cwd"]):
                message = f"failed to start container process: chdir to cwd ({spec['cwd']!r}): no such file or directory"
            write_json(spec["exit"], {"exitCode": 128, "startError": message, "finishedAt": time.time_ns()})
            sys.exit(0)
        process = self.process
        if spec.get("attach"):
            # Listening before the state says the process runs: whoever reads that state may attach at once
            # (connections wait in the backlog until the loop accepts them).
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(spec["attach"])
            self.listener.listen(16)
            self.listener.setblocking(False)
            self.selector.register(self.listener, selectors.EVENT_READ, ("listen", None))
        write_json(
            spec["state"],
            {
                "pid": process.pid,
                "startTime": proc_start_time(process.pid),
                "shimPid": os.getpid(),
                "startedAt": time.time_ns(),
            },
        )
        if tty:
            assert slave is not None and self.pty_master is not None
            os.close(slave)
            self._watch_output(self.pty_master, STDOUT, LogWriter(log_fd, "stdout"))
            if want_stdin:
                self.stdin_fd = self.pty_master
        else:
            assert process.stdout is not None and process.stderr is not None
            self._watch_output(process.stdout.fileno(), STDOUT, LogWriter(log_fd, "stdout"))
            self._watch_output(process.stderr.fileno(), STDERR, LogWriter(log_fd, "stderr"))
            if process.stdin is not None:
                self.stdin_fd = process.stdin.fileno()

    def _watch_output(self, fd: int, channel: int, writer: LogWriter) -> None:
        os.set_blocking(fd, False)
        self.writers[fd] = (channel, writer)
        self.selector.register(fd, selectors.EVENT_READ, ("output", fd))

    # -- loop -----------------------------------------------------------------------------------

    def run(self) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: None)  # handled by the loop; reset to default in the child
        self.start()
        self.selector.register(wake_r, selectors.EVENT_READ, ("wake", None))
        process = self.process
        assert process is not None
        deadline: float | None = None
        while True:
            if self.exited is None and process.poll() is not None:
                self.exited = process.returncode
                deadline = time.monotonic() + DRAIN_SECONDS
            if deadline is not None and (not self.writers or time.monotonic() >= deadline):
                break
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            for key, _ in self.selector.select(timeout if timeout is not None else 1.0):
                kind, arg = key.data
                if kind == "wake":
                    with contextlib.suppress(OSError):
                        os.read(wake_r, 512)
                elif kind == "output":
                    self._read_output(arg)
                elif kind == "listen":
                    self._accept()
                elif kind == "client":
                    self._read_client(arg)
        self._finish()

    def _read_output(self, fd: int) -> None:
        channel, writer = self.writers[fd]
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""  # EIO: the pty's other side is closed
        if not data:
            writer.flush()
            self.selector.unregister(fd)
            del self.writers[fd]  # the descriptor stays open until the shim exits (Popen owns it)
            return
        writer.feed(data)
        self._broadcast(channel, data)

    def _broadcast(self, channel: int, data: bytes) -> None:
        frame = HEADER.pack(channel, len(data)) + data
        for client in list(self.clients):
            try:
                client.sock.setblocking(True)
                client.sock.settimeout(5.0)  # a stuck attach client must not stop the logs for long
                client.sock.sendall(frame)
                client.sock.setblocking(False)
            except OSError:
                self._drop(client)

    def _accept(self) -> None:
        assert self.listener is not None
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():
            sock.close()
            return
        sock.setblocking(False)
        client = Client(sock)
        self.clients.append(client)
        self.selector.register(sock, selectors.EVENT_READ, ("client", client))

    def _read_client(self, client: Client) -> None:
        try:
            data = client.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(client)
            return
        client.buffer += data
        while len(client.buffer) >= HEADER.size:
            channel, length = HEADER.unpack_from(client.buffer)
            if len(client.buffer) < HEADER.size + length:
                break
            payload = client.buffer[HEADER.size : HEADER.size + length]
            client.buffer = client.buffer[HEADER.size + length :]
            self._client_frame(client, channel, payload)

    def _client_frame(self, client: Client, channel: int, payload: bytes) -> None:
        if channel == STDIN and self.stdin_fd is not None:
            client.sent_stdin = True
            try:
                os.set_blocking(self.stdin_fd, True)
                os.write(self.stdin_fd, payload)
            except OSError:
                self._close_stdin()
        elif channel == RESIZE and self.pty_master is not None:
            with contextlib.suppress(ValueError, OSError):
                size = json.loads(payload)
                packed = struct.pack("HHHH", int(size["Height"]), int(size["Width"]), 0, 0)
                fcntl.ioctl(self.pty_master, termios.TIOCSWINSZ, packed)
        elif channel == CLOSE_STDIN and self.spec.get("stdinOnce"):
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self.stdin_fd is None:
            return
        if self.stdin_fd == self.pty_master:
            with contextlib.suppress(OSError):
                os.write(self.pty_master, b"\x04")  # end of input on a terminal
        elif self.process is not None and self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        self.stdin_fd = None

    def _drop(self, client: Client) -> None:
        if client in self.clients:
            self.clients.remove(client)
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(client.sock)
            client.sock.close()
            if client.sent_stdin and self.spec.get("stdinOnce"):
                self._close_stdin()

    # -- exit -----------------------------------------------------------------------------------

    def _finish(self) -> None:
        process = self.process
        assert process is not None
        code = process.returncode
        # What the container's first process left behind goes with it (a pid namespace would end them).
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        for _channel, writer in list(self.writers.values()):
            writer.flush()
        doc: dict[str, Any] = {"finishedAt": time.time_ns()}
        if code < 0:
            doc["exitCode"] = 128 - code
            doc["signal"] = -code
        else:
            doc["exitCode"] = code
        write_json(self.spec["exit"], doc)
        payload = json.dumps({"exitCode": doc["exitCode"]}).encode()
        open_clients: list[socket.socket] = []
        for client in list(self.clients):
            with contextlib.suppress(OSError):
                client.sock.setblocking(True)
                client.sock.settimeout(1.0)
                client.sock.sendall(HEADER.pack(EXIT, len(payload)) + payload)
                client.sock.shutdown(socket.SHUT_WR)
                open_clients.append(client.sock)
        self._linger(open_clients)
        for client in self.clients:
            client.sock.close()

    def _linger(self, socks: list[socket.socket]) -> None:
        """Wait (a while) for each client to close after the exit frame, reading what it still sends (its
        end of input, say): closing over unread bytes would reset the connection, and a client writing
        after the close would break its pipe; either makes an asyncio reader drop the frames it holds."""
        deadline = time.monotonic() + CLOSE_LINGER_SECONDS
        with selectors.DefaultSelector() as selector:
            for sock in socks:
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ)
            while selector.get_map() and (remaining := deadline - time.monotonic()) > 0:
                for key, _ in selector.select(remaining):
                    client = key.fileobj
                    assert isinstance(client, socket.socket)
                    try:
                        data = client.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        selector.unregister(client)


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    Shim(spec).run()


if __name__ == "__main__":
    main()

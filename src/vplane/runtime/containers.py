"""Container instances: a shim process each (``vplane.runtime.shim``), and what the runtime reads of them.

Files of one instance, under ``<pod dir>/containers/<name>/<instance>/``: ``spec.json`` (what the shim
runs), ``state.json`` (written by the shim once the process runs: its pid and start time),
``exit.json`` (written by the shim when the process ended: exit code, signal, time) and ``shim.log``
(the shim's own errors). The container's output goes to ``<pod dir>/logs/<name>/<instance>.log``.

A process is identified by its pid *and* its start time (``/proc/<pid>/stat``), so a pid reused by an
unrelated process is never signalled. The runtime waits for a shim to end with a pidfd, whether it
started the shim or adopted it after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from vplane.runtime.shim import proc_start_time

log = structlog.get_logger("vplane.runtime.containers")

SHIM = Path(__file__).with_name("shim.py")
START_TIMEOUT = 120.0
"""How long a shim may take to start its process before the start counts as failed (the runtime passes
``RuntimeSettings.container_start_timeout_seconds``)."""
POLL_INTERVAL = 0.01


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int
    finished_at: float
    signal: int = 0
    start_error: str = ""
    unknown: bool = False
    """The shim vanished without recording how the process ended (``ContainerStatusUnknown``)."""


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _same_process(pid: int, start_time: str) -> bool:
    return bool(start_time) and proc_start_time(pid) == start_time and _alive(pid)


def _is_shim_of(pid: int, spec_path: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(spec_path).encode() in cmdline and _alive(pid)


class ContainerProcess:
    """One run of one container."""

    def __init__(self, directory: Path, log_path: Path, container_id: str) -> None:
        self.directory = directory
        self.log_path = log_path
        self.container_id = container_id
        self.pid: int | None = None
        self.start_time = ""
        self.shim_pid: int | None = None
        self.started_at: float | None = None
        self._exit: ExitStatus | None = None
        self._waiter: asyncio.Future[ExitStatus] | None = None

    @property
    def spec_path(self) -> Path:
        return self.directory / "spec.json"

    @property
    def attach_address(self) -> str:
        """The shim's attach socket: an abstract Unix socket (no path length limit, no file to clean)."""
        return "\0vplane-attach-" + self.container_id.rsplit("/", 1)[-1]

    # -- start ----------------------------------------------------------------------------------

    def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        *,
        tty: bool = False,
        stdin: bool = False,
        stdin_once: bool = False,
    ) -> None:
        """Start the shim (it starts the process); :meth:`wait_started` tells whether the process runs."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        spec = {
            "argv": argv,
            "env": env,
            "cwd": str(cwd),
            "log": str(self.log_path),
            "state": str(self.directory / "state.json"),
            "exit": str(self.directory / "exit.json"),
            "attach": self.attach_address,
            "tty": tty,
            "stdin": stdin,
            "stdinOnce": stdin_once,
        }
        self.spec_path.write_text(json.dumps(spec))
        shim_log = os.open(self.directory / "shim.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            actions = [
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, shim_log, 1),
                (os.POSIX_SPAWN_DUP2, shim_log, 2),
            ]
            self.shim_pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", str(SHIM), str(self.spec_path)],
                {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                file_actions=actions,
                setsid=True,
            )
        finally:
            os.close(shim_log)

    async def wait_started(self, limit: float = START_TIMEOUT) -> ExitStatus | None:
        """None once the process runs; its exit status if it could not start or ended at once."""
        deadline = time.monotonic() + limit
        state_path, exit_path = self.directory / "state.json", self.directory / "exit.json"
        while True:
            state = read_json(state_path)
            if state is not None:
                self._load_state(state)
                return None
            ended = exit_path.exists()
            if not ended and self.shim_pid is not None and not _alive(self.shim_pid):
                self._reap()
                ended = True
            if ended:
                # A process that started and ended between the two reads above has its state written
                # too: it ran (its exit is recorded by the exit watcher), it did not fail to start.
                state = read_json(state_path)
                if state is not None:
                    self._load_state(state)
                    return None
                return self._read_exit()
            if time.monotonic() > deadline:
                self._kill_unstarted_shim()
                return ExitStatus(
                    128, time.time(), start_error="failed to start container process: timed out"
                )
            await asyncio.sleep(POLL_INTERVAL)

    def _load_state(self, state: dict[str, Any]) -> None:
        self.pid = int(state.get("pid") or 0) or None
        self.start_time = str(state.get("startTime") or "")
        self.shim_pid = int(state.get("shimPid") or 0) or self.shim_pid
        self.started_at = float(state.get("startedAt") or 0) / 1e9 or time.time()

    # -- adoption -------------------------------------------------------------------------------

    @classmethod
    def adopt(cls, directory: Path, log_path: Path, container_id: str) -> ContainerProcess:
        """The instance as an earlier runtime left it: running (its shim alive), or ended."""
        process = cls(directory, log_path, container_id)
        state = read_json(directory / "state.json")
        if state is not None:
            process._load_state(state)
        shim_alive = process.shim_pid is not None and _is_shim_of(process.shim_pid, process.spec_path)
        if not shim_alive and not (directory / "exit.json").exists():
            # The shim is gone without a record: whatever is left of the process goes too.
            if process.pid is not None and _same_process(process.pid, process.start_time):
                with contextlib.suppress(OSError):
                    os.killpg(process.pid, signal.SIGKILL)
            process._exit = ExitStatus(137, time.time(), unknown=True)
        elif not shim_alive:
            process._exit = process._read_exit()
        if not shim_alive:
            process.shim_pid = None
        return process

    # -- running --------------------------------------------------------------------------------

    @property
    def ended(self) -> ExitStatus | None:
        """How the process ended, once known (adopted instances that had ended know at once)."""
        return self._exit

    @property
    def running(self) -> bool:
        return self._exit is None and self.pid is not None and _same_process(self.pid, self.start_time)

    def signal(self, sig: int) -> bool:
        """Send ``sig`` to the process's group; False when it is no longer there."""
        if self.pid is None or not _same_process(self.pid, self.start_time):
            return False
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:
            with contextlib.suppress(OSError):
                os.kill(self.pid, sig)
        return True

    def _kill_unstarted_shim(self) -> None:
        """The shim we spawned has not said it started: kill its session (it and anything it began). It is
        our child and not reaped, so its pid is still its own even before its exec shows in /proc, where
        :meth:`kill_shim`'s check could not recognise it yet."""
        if self.shim_pid is None:
            return
        with contextlib.suppress(OSError):
            os.killpg(self.shim_pid, signal.SIGKILL)  # spawned with setsid: its pid is its group's
        with contextlib.suppress(OSError):
            os.kill(self.shim_pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.shim_pid, 0)

    def kill_shim(self) -> None:
        if self.shim_pid is not None and _is_shim_of(self.shim_pid, self.spec_path):
            with contextlib.suppress(OSError):
                os.kill(self.shim_pid, signal.SIGKILL)

    async def wait(self) -> ExitStatus:
        """How the process ended (waits for its shim to finish)."""
        if self._exit is not None:
            return self._exit
        if self._waiter is None:
            self._waiter = asyncio.ensure_future(self._wait())
        return await asyncio.shield(self._waiter)

    async def _wait(self) -> ExitStatus:
        pid = self.shim_pid
        if pid is not None:
            await _wait_pid(pid)
            self._reap()
        status = self._read_exit()
        self._exit = status
        return status

    def _reap(self) -> None:
        if self.shim_pid is None:
            return
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.shim_pid, os.WNOHANG)

    def _read_exit(self) -> ExitStatus:
        doc = read_json(self.directory / "exit.json")
        if doc is None:
            return ExitStatus(137, time.time(), unknown=True)
        return ExitStatus(
            int(doc.get("exitCode", 0)),
            float(doc.get("finishedAt") or time.time_ns()) / 1e9,
            int(doc.get("signal") or 0),
            str(doc.get("startError") or ""),
        )


async def _wait_pid(pid: int) -> None:
    """Until process ``pid`` (ours or not) has ended."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:
        while _alive(pid):  # noqa: ASYNC110 - no pidfd on this kernel: poll
            await asyncio.sleep(0.2)
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)

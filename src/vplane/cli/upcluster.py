"""``vplane up``'s connected cluster: one embedded cluster (``vplane cluster start``) connected to the platform
the way an operator connects one (``vplane platform connect cluster <name> --kubeconfig ...``: the same
function, so the Cluster has ``spec.networkPeer``, the agent chart is installed with helm and the agent runs as
a pod of that cluster's node).

It comes up in the background: ``vplane up`` prints the platform's contexts as soon as they serve, and this
cluster's context and Cluster phase once ``Initialized`` (or a line saying why not). Nothing here ends
``vplane up``: every failure becomes one line. Stopping ``vplane up`` stops the cluster's process, which stops
its pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import structlog
import yaml

log = structlog.get_logger("vplane.cli.upcluster")

DEFAULT_NAME = "edge"
POD_CIDR = "127.11.0.0/16"
"""The embedded cluster's pod range: beside the platform's own node (127.10.0.0/16) and the tenants' pools."""
SERVICE_CIDR = "127.97.0.0/16"
"""Its Service range: beside the platform's own cluster's (127.96.0.0/16)."""
START_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 30.0
POLL_SECONDS = 0.5
RESERVED_NAMES = ("host", "management")
"""Context names ``vplane up`` already uses (``vplane_host``, ``vplane_management``)."""
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def context_name(name: str) -> str:
    return f"vplane_{name}"


def check_name(name: str) -> str | None:
    """Why NAME cannot be the connected cluster's name (a Cluster name and a context of its own), or None."""
    if not _LABEL.match(name):
        return f"{name!r} is not a valid cluster name (lower-case letters, digits and '-', at most 63)"
    if name in RESERVED_NAMES:
        return f"{name!r} is taken: vplane up's context vplane_{name} is another one's"
    return None


def preflight(helm_binary: str | None) -> str | None:
    """Why the cluster cannot be connected at all (no helm, no chart), or None. Checked before starting it."""
    from vplane.platform.clusters.helm import find_chart, find_helm

    try:
        find_helm(helm_binary)
    except FileNotFoundError:
        return (
            "helm was not found: install it (scripts/bootstrap puts it in .tools/bin; or put helm on PATH, or "
            "set $VPLANE_HELM or --set helm_binary=PATH), or skip this with --no-connected-cluster"
        )
    try:
        find_chart()
    except FileNotFoundError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Verdict:
    done: bool
    """Initialized with no reason: the agent pod is ready and the platform reaches the cluster."""
    text: str
    """``<phase>`` or ``<phase or 'no phase yet'> (<reason>: <message>)``."""


def verdict(cluster: dict[str, Any] | None) -> Verdict:
    """What the Cluster's status says, for the line ``vplane up`` prints."""
    if cluster is None:
        return Verdict(False, "no Cluster object")
    status = cluster.get("status") or {}
    phase = str(status.get("phase") or "")
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or "")
    if phase == "Initialized" and not reason:
        return Verdict(True, phase)
    detail = f"{reason}: {message}" if message else reason
    return Verdict(False, f"{phase or 'no phase yet'}" + (f" ({detail})" if detail else ""))


def kubeconfig_entry(path: Path, context: str) -> tuple[str, str, bytes, str]:
    """The embedded cluster's admin kubeconfig (one server, CA data, token) as a context named ``context``."""
    import base64

    doc = yaml.safe_load(path.read_text())
    cluster = doc["clusters"][0]["cluster"]
    token = doc["users"][0]["user"]["token"]
    return (context, cluster["server"], base64.b64decode(cluster["certificate-authority-data"]), token)


def recorded_listen(port_file: Path) -> str:
    """The address to start the embedded cluster on: the port of its last run while that port is free, so
    pods adopted across a restart of ``vplane up`` (its agent among them, whose in-cluster address names
    that port) still reach it; any free port otherwise."""
    return f"127.0.0.1:{recorded_port(port_file)}"


def recorded_port(port_file: Path, host: str = "127.0.0.1") -> int:
    """The port recorded in ``port_file`` (:func:`record_listen`) while it is free on ``host``, else 0 (any
    free port)."""
    import socket

    try:
        port = int(port_file.read_text().strip())
        if not 0 < port < 65536:
            return 0
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (OSError, ValueError):
        return 0
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError:
            return 0
    return port


def record_listen(port_file: Path, server: str) -> None:
    """Remember the port of ``server`` (the cluster's API URL) for the next run."""
    from urllib.parse import urlsplit

    from vplane.support.files import write_private

    port = urlsplit(server).port
    if port is not None:
        write_private(port_file, f"{port}\n")


class ConnectedCluster:
    """The embedded cluster's process and the background task that connects it."""

    def __init__(
        self,
        name: str,
        directory: Path,
        *,
        node_overrides: tuple[str, ...] = (),
        helm_binary: str | None = None,
        initialized_timeout_seconds: float = 180.0,
    ) -> None:
        self.name = name
        self.directory = directory
        self.node_overrides = node_overrides
        self.helm_binary = helm_binary
        self.initialized_timeout_seconds = initialized_timeout_seconds
        self.log_path = directory.parent / f"{name}.log"
        self.port_file = directory.parent / f"{name}.port"
        self.context = context_name(name)
        self.process: asyncio.subprocess.Process | None = None
        self.task: asyncio.Task[None] | None = None
        self.stopping = False

    def command(self, ready_file: Path) -> list[str]:
        cmd = [sys.executable, "-m", "vplane.cli.main", "cluster", "start", "--data-dir", str(self.directory)]
        cmd += ["--listen", recorded_listen(self.port_file), "--ready-file", str(ready_file)]
        cmd += ["--apiserver-set", f"service_cluster_ip_range={SERVICE_CIDR}"]
        for item in (f"node_name={self.name}", f"pod_cidr={POD_CIDR}", *self.node_overrides):
            cmd += ["--set", item]
        return cmd

    def start(
        self,
        login: tuple[str, str, bytes],
        cluster_status: Callable[[], Awaitable[dict[str, Any] | None]],
        on_context: Callable[[tuple[str, str, bytes, str]], None],
        printed: asyncio.Event,
    ) -> None:
        """Run in the background: start, connect, wait for Initialized; say each outcome after ``printed``."""
        self.task = asyncio.create_task(self._run(login, cluster_status, on_context, printed))

    async def _run(
        self,
        login: tuple[str, str, bytes],
        cluster_status: Callable[[], Awaitable[dict[str, Any] | None]],
        on_context: Callable[[tuple[str, str, bytes, str]], None],
        printed: asyncio.Event,
    ) -> None:
        prefix = f'Connected cluster "{self.name}":'

        async def say(*lines: str) -> None:
            await printed.wait()
            for line in lines:
                click.echo(line)

        try:
            why = await asyncio.to_thread(preflight, self.helm_binary)
            if why is not None:
                await say(f"{prefix} not started: {why}")
                return
            kubeconfig = await self._start_process()
            if kubeconfig is None:
                await say(f"{prefix} not started: vplane cluster start failed; see {self.log_path}")
                return
            entry = kubeconfig_entry(kubeconfig, self.context)
            record_listen(self.port_file, entry[1])
            on_context(entry)
            try:
                await asyncio.to_thread(self._connect, login, kubeconfig)
            except click.ClickException as exc:
                await say(f"{prefix} not connected: {exc.format_message()}")
                return
            await self._wait_initialized(cluster_status, say, prefix)
            assert self.process is not None
            code = await self.process.wait()
            if not self.stopping:
                await say(f"{prefix} vplane cluster start exited (code {code}); see {self.log_path}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never ends vplane up: one line instead
            log.exception("connected cluster failed", cluster=self.name)
            await say(f"{prefix} failed: {exc}")

    async def _start_process(self) -> Path | None:
        self.directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        ready = self.directory.parent / f"{self.name}.ready"
        ready.unlink(missing_ok=True)
        with self.log_path.open("ab") as out:
            # A session of its own: a Ctrl-C at the terminal reaches vplane up alone, which stops it (and
            # stops it at once on a second Ctrl-C), as the platform does with its tenant replicas.
            self.process = await asyncio.create_subprocess_exec(
                *self.command(ready),
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
            )
        log.info("started connected cluster", cluster=self.name, pid=self.process.pid)
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT_SECONDS
        while not ready.exists():
            if self.process.returncode is not None or asyncio.get_running_loop().time() > deadline:
                return None
            await asyncio.sleep(0.1)
        return Path(ready.read_text().strip())

    def _connect(self, login: tuple[str, str, bytes], kubeconfig: Path) -> None:
        from vplane.cli import clusters

        url, key, ca = login
        clusters.connect(
            url,
            key,
            ca,
            self.name,
            kubeconfig=kubeconfig,
            helm_binary=self.helm_binary,
            echo=lambda line: log.info("connect", cluster=self.name, line=line),
        )

    async def _wait_initialized(
        self,
        cluster_status: Callable[[], Awaitable[dict[str, Any] | None]],
        say: Callable[..., Awaitable[None]],
        prefix: str,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.initialized_timeout_seconds
        warned = False
        while True:
            seen = verdict(await cluster_status())
            if seen.done:
                break
            if not warned and loop.time() > deadline:
                warned = True
                await say(
                    f"{prefix} not Initialized after {self.initialized_timeout_seconds:g}s: {seen.text}; "
                    f"see vplane doctor cluster {self.name} (its log: {self.log_path})"
                )
            await asyncio.sleep(POLL_SECONDS)
        await say(
            f"{prefix} {seen.text} (vplane cluster start, connected with vplane platform connect cluster "
            f"{self.name}; its agent runs as a pod there). Its context:",
            f"  kubectl --context {self.context} get pods -n vcluster-platform -l app=loft",
            f"  kubectl --context vplane_management get cluster.management.loft.sh {self.name}",
            f"  vplane doctor cluster {self.name}",
        )

    async def stop(self) -> None:
        """Cancel the background task, then stop the cluster's process (it stops its pods); a second signal
        to it if it does not end in time (it then kills its pods), and SIGKILL last."""
        self.stopping = True
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        process = self.process
        if process is None or process.returncode is not None:
            return
        for sig, timeout in (
            (signal.SIGTERM, STOP_TIMEOUT_SECONDS),
            (signal.SIGINT, 5.0),
            (signal.SIGKILL, None),
        ):
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(sig)
            try:
                await asyncio.wait_for(process.wait(), timeout)
                return
            except TimeoutError:
                continue

    def force_stop(self) -> None:
        """``vplane up`` stops at once (a second Ctrl-C): two signals make the cluster kill its pods and end."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, sig)

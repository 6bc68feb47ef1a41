"""Tenant control planes as local processes: start, supervise, scale and remove them.

Each tenant cluster gets a directory under the platform's data directory. Its replicas share one store
file there (SQLite in shared mode) and its PKI, and each listens on a port recorded in ``ports.json``
so addresses survive platform restarts. Replica 0 starts first because it creates the shared PKI; the
others follow once it serves. A replica that exits is restarted with exponential back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import structlog

from vplane.kube.tenantconfig import CONTROL_PLANE_ENV
from vplane.mesh.settings import INSECURE_SKIP_VERIFY_ENV
from vplane.platform.placement import (
    CONFIG_FILE,
    NODE_DIR,
    Replica,
    Tenant,
    TenantSpec,
    mesh_material,
    reap_node_processes,
    tenant_args,
)
from vplane.platform.settings import PlatformSettings
from vplane.platform.tenantnet import tenant_network
from vplane.support import tls
from vplane.support.files import private_dir, write_private

log = structlog.get_logger("vplane.platform.tenants")

__all__ = ["CONFIG_FILE", "Replica", "Tenant", "TenantSpec", "TenantSupervisor", "free_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def recorded_ports(directory: Path, count: int) -> list[int]:
    """A tenant's replica ports, chosen once and kept in ``ports.json`` (replica 0's first, whatever the
    placement, so adopted replicas and a tenant moved between placements keep theirs). Written atomically and
    only when it grows: a platform killed mid-write once left it empty, and every later pass failed; a file
    that cannot be read gives new ports."""
    path = directory / "ports.json"
    ports: list[int] = []
    try:
        loaded = json.loads(path.read_text())
        if isinstance(loaded, list) and all(isinstance(p, int) for p in loaded):
            ports = loaded
    except (OSError, ValueError):
        pass
    if len(ports) < count:
        while len(ports) < count:
            ports.append(free_port())
        write_private(path, json.dumps(ports))
    return ports


NODE_SWITCHES = (INSECURE_SKIP_VERIFY_ENV,)
"""Mesh switches a replica reads that its vcluster.yaml cannot set: skipping verification of the
platform's certificate is never inherited from the shell the platform runs in."""


def replica_env(environ: Mapping[str, str], spec_env: Iterable[tuple[str, str]]) -> dict[str, str]:
    """A process replica's environment: the platform's (the log level travels there as VPLANE_LOG_LEVEL,
    set by its logging configuration), but the control plane's own switches (``DEBUG``,
    ``TS_DEBUG_DIAL_DIRECT``, ...) only from its vcluster.yaml, never from the shell the platform runs in."""
    inherited = {k: v for k, v in environ.items() if k not in CONTROL_PLANE_ENV and k not in NODE_SWITCHES}
    return {**inherited, **dict(spec_env), "PYTHONUNBUFFERED": "1"}


class TenantSupervisor:
    """The ``process`` placement (:class:`vplane.platform.placement.TenantPlacement`)."""

    def __init__(
        self,
        settings: PlatformSettings,
        platform_url: str,
        platform_ca: Path,
        mesh_ca: tls.CertPair | None = None,
    ) -> None:
        self.settings = settings
        self.mesh_ca = mesh_ca
        """Issues the certificates tenants serve direct mesh dials with; peers verify against it."""
        self.platform_url = platform_url
        self.platform_ca = platform_ca
        self.root = settings.data_dir / "tenants"
        self.tenants: dict[tuple[str, str], Tenant] = {}
        self.changed: asyncio.Event = asyncio.Event()
        """Set when a replica becomes ready or fails, so the VCI controller updates status promptly."""
        self.closing = False
        """The platform is stopping: replicas that exit are not restarted (and that is no warning)."""

    def directory(self, namespace: str, name: str) -> Path:
        return self.root / namespace / name

    def get(self, namespace: str, name: str) -> Tenant | None:
        return self.tenants.get((namespace, name))

    async def ensure(self, spec: TenantSpec) -> Tenant:
        """Bring the tenant to ``spec.replicas`` running replicas (idempotent)."""
        tenant = self.tenants.get(spec.key)
        if tenant is not None and tenant.spec.values != spec.values:
            # A changed vcluster.yaml restarts the control plane, as a changed helm release restarts its
            # pods (the runbook's decommission step: "The control plane pod restarts").
            log.info("tenant configuration changed; restarting its replicas", tenant=spec.name)
            await self._stop_all(tenant)
            for ready in tenant.directory.glob("replica-*.ready"):
                ready.unlink(missing_ok=True)
            write_private(tenant.directory / CONFIG_FILE, spec.values)
            tenant.spec = spec
        if tenant is None or tenant.spec.access_key != spec.access_key:
            if tenant is not None:
                await self._stop_all(tenant)
            tenant = Tenant(spec, self.directory(spec.namespace, spec.name))
            private_dir(tenant.directory)
            _forget_stale_replicas(tenant.directory, spec)
            write_private(tenant.directory / "access-key", spec.access_key)
            write_private(tenant.directory / CONFIG_FILE, spec.values)
            mesh_material(self.mesh_ca, tenant.directory)
            tenant.network = tenant_network(self.settings, self.root, tenant.directory)  # issue 10
            self.tenants[spec.key] = tenant
        tenant.spec = spec
        ports = self._ports(tenant, spec.replicas)
        for index in range(spec.replicas):
            if index not in tenant.replicas:
                replica = Replica(index, ports[index])
                tenant.replicas[index] = replica
                replica.task = asyncio.create_task(self._supervise(tenant, replica))
        for index in [i for i in tenant.replicas if i >= spec.replicas]:
            await self._stop(tenant.replicas.pop(index))
        return tenant

    def _ports(self, tenant: Tenant, replicas: int) -> list[int]:
        return recorded_ports(tenant.directory, replicas)

    async def _supervise(self, tenant: Tenant, replica: Replica) -> None:
        backoff = self.settings.tenant_restart_backoff_seconds
        while True:
            if replica.index > 0:
                await self._wait_first_ready(tenant)
            ready_file = tenant.directory / f"replica-{replica.index}.ready"
            pid_file = tenant.directory / f"replica-{replica.index}.pid"
            adopted = _running_replica(pid_file, tenant.directory)
            if adopted is not None and ready_file.exists():
                # A replica outlived the previous platform process (it was killed): keep it; its mesh
                # session reconnects to this platform by itself.
                replica.pid = adopted
                self._mark_ready(tenant, replica)
                log.info(
                    "adopted running tenant replica",
                    tenant=tenant.spec.name,
                    replica=replica.index,
                    pid=adopted,
                )
                while _alive(adopted):  # noqa: ASYNC110 - another process: no event to wait on
                    await asyncio.sleep(0.5)
                code: int | None = None
            else:
                if adopted is not None:
                    _terminate(adopted)
                code = await self._run_once(tenant, replica, ready_file, pid_file)
            replica.ready = False
            replica.serving.clear()
            if self.closing:
                log.info("tenant replica stopped", tenant=tenant.spec.name, replica=replica.index, code=code)
                return
            replica.restarts += 1
            self.changed.set()
            log.warning(
                "tenant replica exited",
                tenant=tenant.spec.name,
                replica=replica.index,
                code=code,
                restart_in=backoff,
            )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.settings.tenant_restart_backoff_max_seconds)

    def _mark_ready(self, tenant: Tenant, replica: Replica) -> None:
        replica.ready = True
        replica.serving.set()
        tenant.failed = ""
        self.changed.set()

    async def _run_once(self, tenant: Tenant, replica: Replica, ready_file: Path, pid_file: Path) -> int:
        ready_file.unlink(missing_ok=True)
        cmd = self._command(tenant, replica, ready_file)
        log_path = tenant.directory / f"replica-{replica.index}.log"
        with log_path.open("ab") as out:
            # A session of its own: a Ctrl-C at the terminal reaches the platform alone, which stops its
            # replicas in order (and kills them on a second Ctrl-C).
            process = await asyncio.create_subprocess_exec(
                *cmd,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=replica_env(os.environ, tenant.spec.env),
                start_new_session=True,
            )
        replica.process = process
        replica.pid = process.pid
        write_private(pid_file, str(process.pid))  # replaced at once: a reader never sees it empty
        log.info(
            "started tenant replica",
            tenant=tenant.spec.name,
            project=tenant.spec.project,
            replica=replica.index,
            port=replica.port,
            pid=process.pid,
        )
        waiter = asyncio.create_task(process.wait())
        deadline = asyncio.get_running_loop().time() + self.settings.tenant_ready_timeout_seconds
        while not waiter.done() and not ready_file.exists():
            if asyncio.get_running_loop().time() > deadline:
                tenant.failed = (
                    f"replica {replica.index} did not become ready within "
                    f"{self.settings.tenant_ready_timeout_seconds:g}s"
                )
                self.changed.set()
                break
            await asyncio.sleep(0.05)
        if ready_file.exists() and not waiter.done():
            self._mark_ready(tenant, replica)
        return await waiter

    async def _wait_first_ready(self, tenant: Tenant) -> None:
        await tenant.replicas[0].serving.wait()

    def _command(self, tenant: Tenant, replica: Replica, ready_file: Path) -> list[str]:
        args = tenant_args(
            tenant.spec,
            self.settings,
            data_dir=str(tenant.directory),
            replica=str(replica.index),
            replicas=tenant.spec.replicas,
            listen=f"127.0.0.1:{replica.port}",
            platform_url=self.platform_url,
            platform_ca=str(self.platform_ca),
            ready_file=str(ready_file),
            network=tenant.network,
        )
        return [sys.executable, "-m", "vplane.cli.main", *args]

    async def _stop(self, replica: Replica) -> None:
        if replica.task is not None:
            replica.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await replica.task
        process = replica.process
        timeout = self.settings.tenant_stop_timeout_seconds
        if process is not None and process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except TimeoutError:
                process.kill()
                await process.wait()
        elif process is None and replica.pid is not None and _alive(replica.pid):
            _terminate(replica.pid)
            deadline = asyncio.get_running_loop().time() + timeout
            while _alive(replica.pid) and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            if _alive(replica.pid):
                _kill(replica.pid)
        replica.ready = False

    async def _stop_all(self, tenant: Tenant) -> None:
        for replica in list(tenant.replicas.values()):
            await self._stop(replica)
        tenant.replicas.clear()

    async def remove(self, namespace: str, name: str) -> None:
        """Stop every replica and delete the tenant's data."""
        tenant = self.tenants.pop((namespace, name), None)
        if tenant is not None:
            await self._stop_all(tenant)
        directory = self.directory(namespace, name)
        left = await asyncio.to_thread(reap_node_processes, directory / NODE_DIR)  # issue 10
        if left:
            log.warning("killed the pods a removed tenant's node left running", tenant=name, processes=left)
        await asyncio.to_thread(shutil.rmtree, directory, True)

    def begin_shutdown(self) -> None:
        self.closing = True

    async def close(self) -> None:
        """Stop every replica at once, saying which ones it waits for."""
        self.begin_shutdown()
        running = [
            f"{tenant.spec.name}-{index}"
            for tenant in self.tenants.values()
            for index, replica in sorted(tenant.replicas.items())
            if replica.pid is not None and _alive(replica.pid)
        ]
        if running:
            log.info("stopping: waiting for tenant replicas", replicas=", ".join(sorted(running)))
        await asyncio.gather(*(self._stop_all(tenant) for tenant in list(self.tenants.values())))

    def kill_all(self) -> None:
        """SIGKILL every replica this platform runs or adopted (a second Ctrl-C: nothing is waited for)."""
        for tenant in self.tenants.values():
            for replica in tenant.replicas.values():
                process = replica.process
                if process is not None:
                    if process.returncode is None:  # not reaped yet, so the pid is still this child's
                        with contextlib.suppress(ProcessLookupError):
                            process.kill()
                elif replica.pid is not None and _is_replica(replica.pid, tenant.directory):
                    _kill(replica.pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return True


def _running_replica(pid_file: Path, directory: Path) -> int | None:
    """The pid of a live replica of this tenant started by an earlier platform process, if any."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if b"tenant" in cmdline and str(directory).encode() in cmdline and _alive(pid):
        return pid
    return None


def _is_replica(pid: int, directory: Path) -> bool:
    """Whether ``pid`` is still a replica of this tenant (an adopted pid may have exited and been reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"tenant" in cmdline and str(directory).encode() in cmdline


def _forget_stale_replicas(directory: Path, spec: TenantSpec) -> None:
    """Replicas left running by an earlier platform process read their key and vcluster.yaml when they
    started; if either changed since (the key revoked and minted anew, the configuration edited), they must
    not be adopted: without their ready files the supervisor stops and restarts them."""
    for name, wanted in (("access-key", spec.access_key), (CONFIG_FILE, spec.values)):
        try:
            if (directory / name).read_text() == wanted:
                continue
        except OSError:
            continue
        for ready in directory.glob("replica-*.ready"):
            ready.unlink(missing_ok=True)
        return


def _terminate(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)

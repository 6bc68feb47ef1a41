"""The node of a tenant cluster: a node runtime the tenant's leader replica runs, made here because the tenant
layer does not import the runtime (import-linter: they are independent layers).

Every replica of a tenant makes the same node: its name and data directory are the tenant's, so whichever
replica leads runs the one Node and adopts the pods a previous leader left running. An ``flock`` on the node's
directory makes sure two runtimes never work on it at once: a new leader waits until the previous leader's
runtime has let go (it stops, hands over, or its process ends)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from vplane.cli.options import build_settings
from vplane.support import tls
from vplane.support.files import private_dir
from vplane.tenant.server import TenantNode, TenantNodeFactory
from vplane.tenant.settings import TenantSettings

if TYPE_CHECKING:
    from vplane.runtime.node import NodeRuntime
    from vplane.runtime.settings import RuntimeSettings

log = structlog.get_logger("vplane.tenant.node")

LOCK_NAME = "node.lock"


class LockedNode:
    """A node runtime that holds its directory's lock from start to stop."""

    def __init__(self, settings: RuntimeSettings, kubeconfig: Path, poll_seconds: float) -> None:
        from vplane.runtime.node import NodeRuntime

        self.settings = settings
        self.runtime: NodeRuntime = NodeRuntime(settings, kubeconfig)
        self.poll_seconds = poll_seconds
        self._fd: int | None = None

    async def _lock(self) -> None:
        fd = os.open(self.settings.data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        waited = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not waited:
                        log.info(
                            "waiting for the previous runtime of this node to let go",
                            node=self.settings.node_name,
                        )
                        waited = True
                    await asyncio.sleep(self.poll_seconds)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _unlock(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # the only descriptor: the flock goes with it
            self._fd = None

    async def start(self) -> None:
        private_dir(self.settings.data_dir)
        await self._lock()
        await self.runtime.start()

    async def stop(self, *, keep_pods: bool = False) -> None:
        try:
            if self._fd is not None:
                await self.runtime.stop(keep_pods=keep_pods)
        finally:
            self._unlock()

    def force_stop(self) -> None:
        self.runtime.force_stop()


def runtime_settings(settings: TenantSettings, service_cidr: str) -> RuntimeSettings:
    """The tenant node's settings: the tenant's node name, directory and pod range, the API server's Service
    range (its proxy serves the ClusterIPs that server allocates), then the ``node`` overrides."""
    from vplane.runtime.settings import RuntimeSettings

    directory = settings.node_data_dir
    pki = directory / "pki"
    return build_settings(
        RuntimeSettings,
        {
            "data_dir": directory,
            "node_name": settings.node_display_name,
            "tls_cert_file": pki / "kubelet-serving.crt",
            "tls_key_file": pki / "kubelet-serving.key",
            "service_cidr": service_cidr,
            **({"pod_cidr": settings.node_pod_cidr} if settings.node_pod_cidr else {}),
            **settings.node,
        },
        (),
    )


def tenant_node(settings: TenantSettings, service_cidr: str) -> TenantNodeFactory | None:
    """The factory a replica's leader calls, or None when the tenant runs no node. The settings are checked
    here, so a bad ``node`` override is a usage error before anything starts."""
    if not settings.node_enabled:
        return None
    node_settings = runtime_settings(settings, service_cidr)

    def make(kubeconfig: Path, ca: tls.CertPair) -> TenantNode:
        cert, key = node_settings.tls_cert_file, node_settings.tls_key_file
        assert cert is not None and key is not None
        private_dir(node_settings.data_dir)
        if not cert.exists() or not key.exists():
            # The kubelet's serving certificate from the tenant's CA (replicas share it): the API server
            # verifies it.
            private_dir(cert.parent)
            names = ["127.0.0.1", node_settings.node_name, "localhost"]
            tls.issue_serving(ca, names).write(cert, key)
        return LockedNode(node_settings, kubeconfig, settings.node_lock_poll_seconds)

    return make

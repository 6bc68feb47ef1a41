"""Where tenant control planes run: the seam between the VirtualClusterInstance controller (and the
platform's tenant path) and what runs the replicas.

Two placements implement :class:`TenantPlacement` (setting ``tenant_placement``):

- ``process`` (:mod:`vplane.platform.tenants`): each replica a child process of the platform;
- ``pods`` (:mod:`vplane.platform.tenantpods`): a StatefulSet per tenant on the platform's own cluster, its
  pods run by the node runtime the platform starts beside its API server (:class:`HostNode`).

Both keep the tenant's files in one directory under the platform's data directory (the shared SQLite store,
PKI, access key, vcluster.yaml, mesh material) and describe the replicas the same way (:class:`Tenant`), so
the controller and the tenant path do not know which one runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from vplane.kube import tenantconfig as tenant_config
from vplane.platform.settings import PlatformSettings
from vplane.platform.tenantnet import TenantNetwork
from vplane.support import tls

CONFIG_FILE = "vcluster.yaml"
ACCESS_KEY_FILE = "access-key"


@dataclass(frozen=True)
class TenantSpec:
    project: str
    namespace: str
    name: str
    replicas: int
    access_key: str
    values: str = ""
    """The VirtualClusterInstance's vcluster.yaml (helm values): replicas read it from ``vcluster.yaml``."""
    cluster: str = ""
    """Issue 11 item 6: the connected cluster that runs the replicas (``spec.clusterRef.cluster``), empty for
    the platform's own placement (:mod:`vplane.platform.clusters.tenants`)."""
    host_namespace: str = ""
    """With ``cluster``: the namespace there (``spec.clusterRef.namespace``; empty: ``vcluster-<name>``)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @functools.cached_property
    def env(self) -> tuple[tuple[str, str], ...]:
        """``controlPlane.statefulSet.env`` of the values, for every placement's replicas (admission has
        validated the values; values it would refuse give none). Parsed once per spec: placements read
        it on every pass."""
        try:
            return tuple(tenant_config.parse(self.values).env)
        except tenant_config.ConfigInvalid:
            return ()


@dataclass
class Replica:
    index: int
    port: int
    process: asyncio.subprocess.Process | None = None
    pid: int | None = None
    ready: bool = False
    task: asyncio.Task[None] | None = None
    restarts: int = 0
    serving: asyncio.Event = field(default_factory=asyncio.Event)
    host: str = "127.0.0.1"
    """The address the replica serves on: loopback for a process, the pod IP for a pod."""

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"


@dataclass
class Tenant:
    spec: TenantSpec
    directory: Path
    replicas: dict[int, Replica] = field(default_factory=dict)
    failed: str = ""
    network: TenantNetwork | None = None
    """The tenant's pod and Service ranges (``vplane.platform.tenantnet``), passed to every replica."""

    @property
    def ready_replicas(self) -> int:
        return sum(1 for r in self.replicas.values() if r.ready)

    def endpoints(self) -> list[str]:
        return [r.url for _, r in sorted(self.replicas.items())]


class TenantPlacement(Protocol):
    changed: asyncio.Event
    """Set when a replica becomes ready or fails, so the VCI controller updates status promptly."""

    def directory(self, namespace: str, name: str) -> Path: ...

    def get(self, namespace: str, name: str) -> Tenant | None: ...

    async def ensure(self, spec: TenantSpec) -> Tenant:
        """Bring the tenant to ``spec.replicas`` running replicas (idempotent)."""
        ...

    async def remove(self, namespace: str, name: str) -> None:
        """Stop every replica and delete the tenant's data."""
        ...

    def begin_shutdown(self) -> None:
        """The platform is stopping: replicas that end from now on are expected."""
        ...

    async def close(self) -> None: ...

    def kill_all(self) -> None:
        """A second Ctrl-C: end what can be ended at once, wait for nothing."""
        ...


class HostNode(Protocol):
    """The node runtime the ``pods`` placement runs tenant pods on (``vplane.runtime.NodeRuntime``, made by
    the CLI: the platform layer does not import the runtime)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def force_stop(self) -> None: ...


HostNodeFactory = Callable[[Path, tls.CertPair], HostNode]
"""Makes the platform's node from its admin kubeconfig and its cluster CA (which signs the kubelet's serving
certificate, as ``vplane cluster start`` does)."""


def mesh_material(mesh_ca: tls.CertPair | None, directory: Path) -> None:
    """The mesh CA and the certificate the tenant's direct mesh listener serves on loopback."""
    if mesh_ca is None or (directory / "mesh.crt").exists():
        return
    (directory / "mesh-ca.crt").write_bytes(mesh_ca.cert_pem)
    tls.issue_serving(mesh_ca, ["127.0.0.1", "localhost"]).write(
        directory / "mesh.crt", directory / "mesh.key"
    )


def tenant_args(
    spec: TenantSpec,
    settings: PlatformSettings,
    *,
    data_dir: str,
    replica: str,
    listen: str,
    platform_url: str,
    platform_ca: str,
    replicas: int | None = None,
    ready_file: str | None = None,
    network: TenantNetwork | None = None,
) -> list[str]:
    """``tenant start ...``: the arguments of one replica, for a process or a pod (where ``data_dir``,
    ``replica`` and ``listen`` are ``$(VAR)`` references the node runtime expands)."""
    args = [
        "tenant",
        "start",
        "--data-dir",
        data_dir,
        "--name",
        spec.name,
        "--project",
        spec.project,
        "--project-namespace",
        spec.namespace,
        "--replica",
        replica,
    ]
    if replicas is not None:
        args += ["--replicas", str(replicas)]
    args += [
        "--listen",
        listen,
        "--platform-url",
        platform_url,
        "--platform-ca",
        platform_ca,
        "--access-key-file",
        f"{data_dir}/{ACCESS_KEY_FILE}",
    ]
    if ready_file is not None:
        args += ["--ready-file", ready_file]
    args += [
        "--set",
        f"config_file={data_dir}/{CONFIG_FILE}",
        "--set",
        f"token_review_ttl_seconds={settings.token_review_ttl_seconds}",
        "--set",
        f"token_review_cache_max_entries={settings.token_review_cache_max_entries}",
        "--set",
        f"token_max_bytes={settings.token_max_bytes}",
    ]
    args += node_args(settings, network)
    for name, value in settings.tenant_apiserver.items():
        args += ["--apiserver-set", f"{name}={value}"]
    for name, value in settings.tenant_mesh.items():
        args += ["--mesh-set", f"{name}={value}"]
    for name, value in settings.tenant_proxy.items():
        args += ["--proxy-set", f"{name}={value}"]
    return args


# -- issue 10 (tenant nodes) ---------------------------------------------------------------------------

NODE_DIR = "node"
"""The tenant node's data directory in the tenant's directory (``TenantSettings.node_data_dir``)."""


def node_args(settings: PlatformSettings, network: TenantNetwork | None) -> list[str]:
    """The tenant node's part of a replica's arguments: on or off, its settings (it stops its pods within half
    the time the platform gives a replica to stop, so they are stopped before the replica could be killed),
    and the tenant's ranges (the Service range before ``tenant_apiserver``, which may override it: the node
    takes whatever its API server uses)."""
    if not settings.tenant_node:
        return ["--set", "node_enabled=false"]
    node = {
        "stop_grace_period_seconds": settings.tenant_stop_timeout_seconds / 2,
        **settings.tenant_node_settings,
    }
    args = ["--set", f"node={json.dumps(node, separators=(',', ':'))}"]
    if network is not None:
        args += [
            "--set",
            f"node_pod_cidr={network.pod_cidr}",
            "--apiserver-set",
            f"service_cluster_ip_range={network.service_cidr}",
        ]
    return args


def node_processes(node_dir: Path) -> list[int]:
    """Processes of a tenant node's pods that are alive: their environment names the node's directory
    (``VPLANE_NODE_ROOT``, set by the runtime) or, for shims, their command line does."""
    marker = f"VPLANE_NODE_ROOT={node_dir}".encode()
    needle = f"{node_dir}/".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and (marker in environ.split(b"\0") or needle in cmdline):
            found.append(int(entry.name))
    return found


def reap_node_processes(node_dir: Path) -> int:
    """SIGKILL what a tenant's node left running once its replicas are gone (a replica killed before its
    node stopped its pods): nothing of a deleted tenant may outlive it. Returns how many were found."""
    found = node_processes(node_dir)
    for pid in found:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return len(found)

"""The node of the platform's own cluster (``tenant_placement: pods``): a node runtime on the platform's API
server, made here because the platform layer does not import the runtime (import-linter: they are
independent layers)."""

from __future__ import annotations

from pathlib import Path

from vplane.cli.options import build_settings
from vplane.platform.placement import HostNode, HostNodeFactory
from vplane.platform.settings import PlatformSettings
from vplane.support import tls


def node_dir(settings: PlatformSettings) -> Path:
    return settings.data_dir / "node"


def platform_node(settings: PlatformSettings) -> HostNodeFactory | None:
    """The factory the platform calls once its API serves, or None for the process placement. The node's
    settings are checked here, so a bad ``host_node`` is a usage error before anything starts."""
    if settings.tenant_placement != "pods":
        return None
    from vplane.runtime.node import NodeRuntime
    from vplane.runtime.settings import RuntimeSettings

    directory = node_dir(settings)
    pki = directory / "pki"
    runtime_settings = build_settings(
        RuntimeSettings,
        {
            "data_dir": directory,
            "tls_cert_file": pki / "kubelet-serving.crt",
            "tls_key_file": pki / "kubelet-serving.key",
            # Stopping the platform stops its tenants' pods within the time it gives a replica.
            "stop_grace_period_seconds": settings.tenant_stop_timeout_seconds,
            **settings.host_node,
        },
        (),
    )

    def make(kubeconfig: Path, ca: tls.CertPair) -> HostNode:
        cert, key = runtime_settings.tls_cert_file, runtime_settings.tls_key_file
        assert cert is not None and key is not None
        if not cert.exists() or not key.exists():
            # The kubelet's serving certificate from the platform's CA: its API server verifies it.
            names = ["127.0.0.1", runtime_settings.node_name, "localhost"]
            tls.issue_serving(ca, names).write(cert, key)
        return NodeRuntime(runtime_settings, kubeconfig)

    return make

"""``vplane kubelet`` (a node runtime for any cluster) and ``vplane cluster start`` (an embedded cluster:
API server, controller manager and one node runtime, with its kubeconfig)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from vplane.cli.controller_manager import apiserver_controller_manager
from vplane.cli.options import (
    DataDirLock,
    build_settings,
    claim_private_dir,
    list_settings_option,
    parse_listen,
    private_process,
    run_until_signalled,
)

if TYPE_CHECKING:
    from pydantic import BaseModel


def _runtime_settings() -> type[BaseModel]:
    from vplane.runtime.settings import RuntimeSettings

    return RuntimeSettings


def _overrides(items: tuple[str, ...]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint="--apiserver-set")
        out[key.strip().replace("-", "_")] = yaml.safe_load(raw) if raw else ""
    return out


@click.command("kubelet")
@click.option(
    "--kubeconfig",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="How to reach the API server (any Kubernetes API server).",
)
@click.option("--context", default=None, help="The kubeconfig context (default: its current context).")
@click.option("--data-dir", required=True, type=click.Path(path_type=Path), help="Pods, logs and state.")
@click.option(
    "--set", "overrides", multiple=True, metavar="NAME=VALUE", help="Override a RuntimeSettings field."
)
@click.option("--ready-file", type=click.Path(path_type=Path), default=None)
@list_settings_option(_runtime_settings, skip=("data_dir",))
def kubelet(
    kubeconfig: Path, context: str | None, data_dir: Path, overrides: tuple[str, ...], ready_file: Path | None
) -> None:
    """Run a node: register it, run the pods bound to it as local processes, serve their logs."""
    from vplane.runtime.node import NodeRuntime
    from vplane.runtime.settings import RuntimeSettings

    settings = build_settings(RuntimeSettings, {"data_dir": data_dir}, overrides)
    private_process()
    lock = DataDirLock(claim_private_dir(data_dir)).acquire()
    runtime = NodeRuntime(settings, kubeconfig, context)

    async def start() -> None:
        await runtime.start()
        click.echo(
            f"vplane node {settings.node_name}: kubelet on port {runtime.kubelet.port if runtime.kubelet else 0}"
        )

    run_until_signalled(
        start,
        runtime.stop,
        ready_file,
        lambda: settings.node_name,
        locks=[lock],
        address=lambda: settings.node_name,
        force_stop=runtime.force_stop,
    )


@click.group("cluster")
def cluster() -> None:
    """An embedded cluster whose pods run on this machine."""


@cluster.command("start")
@click.option(
    "--data-dir", required=True, type=click.Path(path_type=Path), help="Everything the cluster keeps."
)
@click.option(
    "--listen",
    default="127.0.0.1:6443",
    show_default=True,
    help="The API server's HOST:PORT (port 0 picks one).",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a RuntimeSettings field (the node).",
)
@click.option(
    "--apiserver-set",
    "api_overrides",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override an APIServerSettings field.",
)
@click.option(
    "--ready-file", type=click.Path(path_type=Path), default=None, help="Gets the kubeconfig's path."
)
@list_settings_option(_runtime_settings, skip=("data_dir", "tls_cert_file", "tls_key_file"))
def cluster_start(
    data_dir: Path,
    listen: str,
    overrides: tuple[str, ...],
    api_overrides: tuple[str, ...],
    ready_file: Path | None,
) -> None:
    """Run a cluster on this machine: an API server, its controllers and one node; prints a kubeconfig."""
    from vplane.apiserver.server import APIServer
    from vplane.apiserver.settings import APIServerSettings
    from vplane.runtime.node import NodeRuntime
    from vplane.runtime.settings import RuntimeSettings
    from vplane.support import tls

    host, port = parse_listen(listen)
    api_settings = build_settings(
        APIServerSettings,
        {
            "data_dir": data_dir / "apiserver",
            "listen_host": host,
            "listen_port": port,
            **_overrides(api_overrides),
        },
        (),
    )
    node_dir = data_dir / "node"
    pki = node_dir / "pki"
    runtime_settings = build_settings(
        RuntimeSettings,
        {
            "data_dir": node_dir,
            "tls_cert_file": pki / "kubelet-serving.crt",
            "tls_key_file": pki / "kubelet-serving.key",
            # The proxy serves the ClusterIPs the API server allocates.
            "service_cidr": api_settings.service_cluster_ip_range,
        },
        overrides,
    )
    private_process()
    claim_private_dir(data_dir)
    lock = DataDirLock(data_dir).acquire()
    server = APIServer(api_settings)
    kcm = apiserver_controller_manager(
        api_settings.controller_manager,
        api_settings.controller_manager_settings,
        api_settings.scheduler,
        api_settings.scheduler_settings,
    )
    kubeconfig = data_dir / "kubeconfig.yaml"
    holder: dict[str, NodeRuntime] = {}

    async def start() -> None:
        await server.start()
        await kcm.start(server.kubeconfig_path, server.url, api_settings.listen_host, server.port)
        assert server.ca is not None
        cert, key = runtime_settings.tls_cert_file, runtime_settings.tls_key_file
        assert cert is not None and key is not None
        if not cert.exists() or not key.exists():
            # The kubelet's serving certificate from the cluster CA: the API server verifies it.
            names = ["127.0.0.1", runtime_settings.node_name, "localhost"]
            tls.issue_serving(server.ca, names).write(cert, key)
        shutil.copyfile(server.kubeconfig_path, kubeconfig)
        kubeconfig.chmod(0o600)
        runtime = holder["runtime"] = NodeRuntime(runtime_settings, server.kubeconfig_path)
        await runtime.start()
        click.echo(f"vplane cluster: {server.url}, node {runtime_settings.node_name}")
        click.echo(f"  kubectl --kubeconfig {kubeconfig} get nodes")

    async def stop() -> None:
        runtime = holder.get("runtime")
        if runtime is not None:
            await runtime.stop()
        await kcm.stop()
        await server.stop()

    def force_stop() -> None:
        runtime = holder.get("runtime")
        if runtime is not None:
            runtime.force_stop()

    from vplane.storage.sqlite import SQLiteStore

    run_until_signalled(
        start,
        stop,
        ready_file,
        lambda: str(kubeconfig),
        listen=listen,
        locks=[lock],
        address=lambda: server.url,
        force_stop=force_stop,
        failure=server.store.wait_failed if isinstance(server.store, SQLiteStore) else None,
    )

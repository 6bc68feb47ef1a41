"""``vplane``: every process of the system is a subcommand."""

from __future__ import annotations

import faulthandler
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from vplane.cli import node
from vplane.cli.agent import agent
from vplane.cli.clusters import connect_cluster
from vplane.cli.controller_manager import apiserver_controller_manager, controller_manager
from vplane.cli.create import create
from vplane.cli.doctor import doctor
from vplane.cli.options import (
    DataDirLock,
    build_settings,
    claim_private_dir,
    list_settings_option,
    parse_listen,
    private_process,
    run_until_signalled,
)
from vplane.cli.scheduler import scheduler as scheduler_command
from vplane.runtime import resolver
from vplane.support import logging as vlogging

if TYPE_CHECKING:
    from pydantic import BaseModel

    from vplane.storage.interface import Store


def _apiserver_settings() -> type[BaseModel]:
    from vplane.apiserver.settings import APIServerSettings

    return APIServerSettings


def _platform_settings() -> type[BaseModel]:
    from vplane.platform.settings import PlatformSettings

    return PlatformSettings


def _tenant_settings() -> type[BaseModel]:
    from vplane.tenant.settings import TenantSettings

    return TenantSettings


def _platform_nested() -> list[tuple[tuple[str, ...], type[BaseModel]]]:
    from vplane.apiserver.settings import APIServerSettings
    from vplane.mesh.settings import MeshSettings
    from vplane.runtime.settings import RuntimeSettings

    return [
        (("apiserver", "tenant_apiserver"), APIServerSettings),
        (("mesh", "tenant_mesh"), MeshSettings),
        (("host_node",), RuntimeSettings),
    ]


def _store_failure(store: Store) -> Any:
    """What a server process stops on: its SQLite store's writer failing (see storage.sqlite), or its
    etcd watch falling behind compaction (see storage.etcd)."""
    from vplane.storage.etcd import EtcdStore
    from vplane.storage.sqlite import SQLiteStore

    return store.wait_failed if isinstance(store, SQLiteStore | EtcdStore) else None


@click.group()
@click.option("--log-level", default=None, help="debug, info, warning or error (env VPLANE_LOG_LEVEL).")
def main(log_level: str | None) -> None:
    """vplane: tenant clusters, a platform that connects them, and the API server they stand on."""
    faulthandler.enable()  # a crash in a native extension leaves a Python traceback in the log
    vlogging.configure(log_level)
    resolver.install()  # in a pod of the node runtime: Service names from its hosts file (no-op elsewhere)


@main.command()
@click.option(
    "--data-dir", required=True, type=click.Path(path_type=Path), help="State, TLS material and kubeconfig."
)
@click.option(
    "--listen",
    default="127.0.0.1:6443",
    show_default=True,
    help="HOST:PORT to serve HTTPS on (port 0 picks one).",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a setting (see APIServerSettings).",
)
@click.option(
    "--ready-file", type=click.Path(path_type=Path), default=None, help="Write the URL here once serving."
)
@list_settings_option(_apiserver_settings)
def apiserver(data_dir: Path, listen: str, overrides: tuple[str, ...], ready_file: Path | None) -> None:
    """Run one Kubernetes-compatible API server."""
    from vplane.apiserver.server import APIServer
    from vplane.apiserver.settings import APIServerSettings

    host, port = parse_listen(listen)
    settings = build_settings(
        APIServerSettings, {"data_dir": data_dir, "listen_host": host, "listen_port": port}, overrides
    )
    private_process()
    lock = DataDirLock(claim_private_dir(data_dir)).acquire()
    server = APIServer(settings)
    kcm = apiserver_controller_manager(
        settings.controller_manager,
        settings.controller_manager_settings,
        settings.scheduler,
        settings.scheduler_settings,
    )

    async def start() -> None:
        await server.start()
        await kcm.start(server.kubeconfig_path, server.url, settings.listen_host, server.port)
        click.echo(f"vplane API server: {server.url}")
        click.echo(f"  kubectl --kubeconfig {server.kubeconfig_path} get namespaces")

    async def stop() -> None:
        await kcm.stop()
        await server.stop()

    run_until_signalled(
        start,
        stop,
        ready_file,
        lambda: server.url,
        listen=listen,
        locks=[lock],
        address=lambda: server.url,
        failure=_store_failure(server.store),
    )


# -- platform ------------------------------------------------------------------------------------------


@main.group()
def platform() -> None:
    """The platform: management API, mesh coordinator, tenant clusters."""


@platform.command("start")
@click.option("--data-dir", required=True, type=click.Path(path_type=Path))
@click.option("--listen", default="127.0.0.1:10443", show_default=True, help="HOST:PORT (port 0 picks one).")
@click.option(
    "--set", "overrides", multiple=True, metavar="NAME=VALUE", help="Override a PlatformSettings field."
)
@click.option("--ready-file", type=click.Path(path_type=Path), default=None)
@list_settings_option(_platform_settings, nested=_platform_nested)
def platform_start(data_dir: Path, listen: str, overrides: tuple[str, ...], ready_file: Path | None) -> None:
    """Run the platform (then `vplane platform login URL --access-key KEY --ca-file CA` to use it)."""
    from vplane.platform.server import Platform
    from vplane.platform.settings import PlatformSettings

    host, port = parse_listen(listen)
    settings = build_settings(
        PlatformSettings, {"data_dir": data_dir, "listen_host": host, "listen_port": port}, overrides
    )
    from vplane.cli.hostnode import platform_node

    host_node = platform_node(settings)
    private_process()
    lock = DataDirLock(claim_private_dir(data_dir)).acquire()
    server = Platform(settings, host_node)

    async def start() -> None:
        await server.start()
        click.echo(f"vplane platform: {server.url}")
        click.echo(f"  kubectl --kubeconfig {server.management_kubeconfig} get projects")
        key = f"$(kubectl --kubeconfig {server.management_kubeconfig} config view --raw -o jsonpath='{{.users[0].user.token}}')"
        click.echo(f'  vplane platform login {server.url} --ca-file {server.ca_path} --access-key "{key}"')
        if settings.tenant_placement == "pods":
            click.echo(f"  kubectl --kubeconfig {server.management_kubeconfig} get pods -A -l app=vcluster")

    run_until_signalled(
        start,
        server.stop,
        ready_file,
        lambda: server.url,
        listen=listen,
        locks=[lock],
        address=lambda: server.url,
        force_stop=server.force_stop,
        failure=_store_failure(server.api.store),
    )


@platform.command("login")
@click.argument("url")
@click.option("--access-key", required=True)
@click.option("--ca-file", required=True, type=click.Path(exists=True, path_type=Path))
def platform_login(url: str, access_key: str, ca_file: Path) -> None:
    """Remember a platform and an access key for `vplane connect`."""
    from vplane.cli.userconfig import PlatformLogin

    path = PlatformLogin(url, access_key, ca_file.read_bytes()).save()
    click.echo(f"saved platform login to {path}")


@platform.group("connect")
def platform_connect() -> None:
    """Add a kubectl context for the management API, or connect a cluster to the platform."""


@platform_connect.command("management")
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path),
    default=None,
    help="File to add the context to (default: $KUBECONFIG or ~/.kube/config).",
)
@click.option("--print", "print_only", is_flag=True, help="Print a kubeconfig instead of changing a file.")
def platform_connect_management(kubeconfig: Path | None, print_only: bool) -> None:
    """Add a kubectl context for the platform's management API and switch to it."""
    import yaml

    from vplane.cli import userconfig

    login = _login()
    name = userconfig.management_context()
    if print_only:
        doc = userconfig.kubeconfig_doc([(name, login.url, login.ca_pem, login.access_key)], name)
        click.echo(yaml.safe_dump(doc, sort_keys=False), nl=False)
        return
    path = kubeconfig or userconfig.default_kubeconfig()
    userconfig.merge_context(path, name, login.url, login.ca_pem, login.access_key)
    click.echo(f'Switched to context "{name}" in {path}')


platform_connect.add_command(connect_cluster)


class _CommandNotFound(click.ClickException):
    """The command after ``--`` does not exist: the shell's exit code."""

    exit_code = 127


class _CommandNotRunnable(click.ClickException):
    exit_code = 126


def _login() -> Any:
    from vplane.cli.userconfig import PlatformLogin

    try:
        return PlatformLogin.load()
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None


# -- tenant --------------------------------------------------------------------------------------------


@main.group()
def tenant() -> None:
    """Tenant control planes (started by the platform)."""


@tenant.command("start")
@click.option("--data-dir", required=True, type=click.Path(path_type=Path))
@click.option("--name", required=True)
@click.option("--project", required=True)
@click.option("--project-namespace", required=True)
@click.option("--replica", type=int, default=0, show_default=True)
@click.option("--replicas", type=int, default=1, show_default=True)
@click.option("--listen", default="127.0.0.1:0", show_default=True)
@click.option("--platform-url", required=True)
@click.option("--platform-ca", required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--access-key-file", required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--set", "overrides", multiple=True, metavar="NAME=VALUE", help="Override a TenantSettings field."
)
@click.option(
    "--apiserver-set",
    "api_overrides",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override an APIServerSettings field of this replica.",
)
@click.option(
    "--mesh-set",
    "mesh_overrides",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a MeshSettings field of this replica.",
)
@click.option(
    "--proxy-set",
    "proxy_overrides",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a ProxySettings field of this replica's resource proxy.",
)
@click.option("--ready-file", type=click.Path(path_type=Path), default=None)
@list_settings_option(_tenant_settings, skip=("listen_host", "listen_port", "replica", "replicas"))
def tenant_start(
    data_dir: Path,
    name: str,
    project: str,
    project_namespace: str,
    replica: int,
    replicas: int,
    listen: str,
    platform_url: str,
    platform_ca: Path,
    access_key_file: Path,
    overrides: tuple[str, ...],
    api_overrides: tuple[str, ...],
    mesh_overrides: tuple[str, ...],
    proxy_overrides: tuple[str, ...],
    ready_file: Path | None,
) -> None:
    """Run one replica of a tenant control plane."""
    import yaml

    if os.environ.get(vlogging.DEBUG_ENV, "").lower() == "true":
        vlogging.configure("debug")  # this tenant's own verbose switch (its vcluster.yaml env)

    from vplane.cli.tenantnode import tenant_node
    from vplane.tenant.server import TenantServer
    from vplane.tenant.settings import TenantSettings

    host, port = parse_listen(listen)
    api: dict[str, Any] = {}
    mesh: dict[str, Any] = {}
    proxy: dict[str, Any] = {}
    for target, items in ((api, api_overrides), (mesh, mesh_overrides), (proxy, proxy_overrides)):
        for item in items:
            key, _, raw = item.partition("=")
            target[key.strip().replace("-", "_")] = yaml.safe_load(raw) if raw else ""
    settings = build_settings(
        TenantSettings,
        {
            "data_dir": data_dir,
            "name": name,
            "project": project,
            "project_namespace": project_namespace,
            "replica": replica,
            "replicas": replicas,
            "listen_host": host,
            "listen_port": port,
            "platform_url": platform_url,
            "platform_ca": platform_ca,
            "access_key_file": access_key_file,
            "apiserver": api,
            "mesh": mesh,
            "proxy": proxy,
        },
        overrides,
    )
    private_process()
    # Replicas share the tenant's directory and store by design; each replica index is one process.
    lock = DataDirLock(
        data_dir, f"replica-{replica}.lock", subject=f"replica {replica} of tenant {name} ({data_dir})"
    ).acquire()
    server = TenantServer(settings)
    # The tenant's node (issue 10): its proxy serves the ClusterIPs this replica's API server allocates.
    server.node_factory = tenant_node(settings, server.api.settings.service_cluster_ip_range)
    run_until_signalled(
        server.start,
        server.stop,
        ready_file,
        lambda: server.url,
        listen=listen,
        locks=[lock],
        address=lambda: server.url,
        failure=_store_failure(server.api.store),
        force_stop=server.force_stop,
    )


# -- connect and up ------------------------------------------------------------------------------------


@main.command()
@click.argument("name")
@click.option("--driver", type=click.Choice(["platform"]), default="platform", show_default=True)
@click.option("--project", default="default", show_default=True)
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path),
    default=None,
    help="File to add the context to (default: $KUBECONFIG or ~/.kube/config).",
)
@click.option("--print", "print_only", is_flag=True, help="Print a kubeconfig instead of changing a file.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def connect(
    name: str, driver: str, project: str, kubeconfig: Path | None, print_only: bool, command: tuple[str, ...]
) -> None:
    """Connect to tenant cluster NAME through the platform; with `-- COMMAND ...`, run COMMAND against it."""
    import os
    import subprocess
    import tempfile

    import yaml

    from vplane.cli import userconfig

    login = _login()
    userconfig.check_tenant(login, name, project)
    context = userconfig.tenant_context(name, project)
    server = userconfig.tenant_server(login, name, project)
    doc = userconfig.kubeconfig_doc([(context, server, login.ca_pem, login.access_key)], context)
    if command:
        with tempfile.TemporaryDirectory(prefix="vplane-connect-") as tmp:
            path = Path(tmp) / "kubeconfig.yaml"
            userconfig.write_kubeconfig(path, doc)
            env = {**os.environ, "KUBECONFIG": str(path)}
            try:
                code = subprocess.run(list(command), env=env).returncode
            except FileNotFoundError:
                raise _CommandNotFound(f"command not found: {command[0]}") from None
            except PermissionError:
                raise _CommandNotRunnable(f"permission denied: {command[0]}") from None
        raise SystemExit(code)
    if print_only:
        click.echo(yaml.safe_dump(doc, sort_keys=False), nl=False)
        return
    path = kubeconfig or userconfig.default_kubeconfig()
    userconfig.merge_context(path, context, server, login.ca_pem, login.access_key)
    click.echo(f'Switched to context "{context}" in {path}')


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where everything lives (default: $VPLANE_HOME/up, i.e. ~/.vplane/up).",
)
@click.option(
    "--listen",
    default="127.0.0.1:10443",
    show_default=True,
    help="The platform's HOST:PORT. Port 0: a free port, the same one on the next run while it is free.",
)
@click.option(
    "--set", "overrides", multiple=True, metavar="NAME=VALUE", help="Override a PlatformSettings field."
)
@click.option("--ready-file", type=click.Path(path_type=Path), default=None)
@click.option(
    "--connected-cluster",
    "connected_cluster",
    default="edge",
    show_default=True,
    help="The embedded cluster vplane up connects to the platform (its Cluster and context vplane_NAME).",
)
@click.option("--no-connected-cluster", is_flag=True, help="Do not start or connect an embedded cluster.")
@click.option(
    "--cluster-set",
    "cluster_overrides",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a RuntimeSettings field of the connected cluster's node (vplane cluster start --set).",
)
@list_settings_option(_platform_settings, nested=_platform_nested)
def up(
    data_dir: Path | None,
    listen: str,
    overrides: tuple[str, ...],
    ready_file: Path | None,
    connected_cluster: str,
    no_connected_cluster: bool,
    cluster_overrides: tuple[str, ...],
) -> None:
    """Start the platform with two tenant clusters, `client` and `target`, in project `default`, and one
    embedded cluster connected to it."""
    from vplane.cli import upcluster, userconfig
    from vplane.cli.up import Up

    why = upcluster.check_name(connected_cluster)
    if why is not None and not no_connected_cluster:
        raise click.BadParameter(why, param_hint="--connected-cluster")
    host, port = parse_listen(listen)
    data = data_dir or userconfig.home() / "up"
    private_process()
    # The kubeconfig lives in the data directory and the platform's state under it: both private, and
    # the platform's directory locked as `vplane platform start` locks it.
    claim_private_dir(data)
    lock = DataDirLock(claim_private_dir(data / "platform")).acquire()
    runner = Up(
        data,
        host,
        port,
        overrides,
        None if no_connected_cluster else connected_cluster,
        cluster_overrides,
    )
    run_until_signalled(
        runner.start,
        runner.stop,
        ready_file,
        lambda: runner.kubeconfig.as_posix(),
        listen=listen,
        locks=[lock],
        address=lambda: runner.platform.url,
        force_stop=runner.force_stop,
        failure=_store_failure(runner.platform.api.store),
    )


main.add_command(agent)
main.add_command(create)
main.add_command(doctor)
main.add_command(scheduler_command)
main.add_command(node.kubelet)
main.add_command(node.cluster)
main.add_command(controller_manager)

if __name__ == "__main__":
    main()

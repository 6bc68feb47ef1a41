"""``vplane``: every process of the system is a subcommand."""

from __future__ import annotations

from pathlib import Path

import click

from vplane.cli.options import build_settings, parse_listen, run_until_signalled
from vplane.support import logging as vlogging


@click.group()
@click.option("--log-level", default=None, help="debug, info, warning or error (env VPLANE_LOG_LEVEL).")
def main(log_level: str | None) -> None:
    """vplane: tenant clusters, a platform that connects them, and the API server they stand on."""
    vlogging.configure(log_level)


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
def apiserver(data_dir: Path, listen: str, overrides: tuple[str, ...], ready_file: Path | None) -> None:
    """Run one Kubernetes-compatible API server."""
    from vplane.apiserver.server import APIServer
    from vplane.apiserver.settings import APIServerSettings

    host, port = parse_listen(listen)
    settings = build_settings(
        APIServerSettings, {"data_dir": data_dir, "listen_host": host, "listen_port": port}, overrides
    )
    server = APIServer(settings)

    async def start() -> None:
        await server.start()
        click.echo(f"vplane API server: {server.url}")
        click.echo(f"  kubectl --kubeconfig {server.kubeconfig_path} get namespaces")

    run_until_signalled(start, server.stop, ready_file, lambda: server.url)


if __name__ == "__main__":
    main()

"""``vplane agent``: the connected-cluster agent, configured as the agent chart configures it (environment
variables from the Secrets ``loft-agent-connection`` and ``loft-additional-ca``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path

import click

from vplane.cli.options import build_settings, list_settings_option


def _agent_settings() -> type:
    from vplane.agent.settings import AgentSettings

    return AgentSettings


@click.command("agent")
@click.option(
    "--token", envvar="LOFT_AGENT_TOKEN", default="", show_envvar=True, help="The cluster's access key."
)
@click.option("--url", envvar="LOFT_AGENT_URL", default="", show_envvar=True, help="The platform's URL.")
@click.option(
    "--ca-data", envvar="LOFT_AGENT_CA_DATA", default="", show_envvar=True, help="PEM of the platform's CA."
)
@click.option(
    "--ca-file", type=click.Path(exists=True, path_type=Path), default=None, help="File with that PEM."
)
@click.option(
    "--name", envvar="POD_NAME", default="loft-agent", show_envvar=True, help="This agent's node name."
)
@click.option(
    "--namespace",
    envvar="POD_NAMESPACE",
    default="",
    show_envvar=True,
    help="This agent's namespace (told to the platform).",
)
@click.option(
    "--health-port",
    envvar="VPLANE_AGENT_HEALTH_PORT",
    type=click.IntRange(0, 65535),
    default=0,
    show_envvar=True,
    help="Serve /healthz and /readyz (tunnel registered) on this port; 0: none.",
)
@click.option(
    "--health-host",
    envvar="POD_IP",
    default="0.0.0.0",
    show_envvar=True,
    help="The address the health endpoints bind (the pod's IP).",
)
@click.option(
    "--proxy-only",
    is_flag=True,
    default=False,
    help="The upgrade bridge: only hold a tunnel session for the platform (Deployment proxy-only-agent).",
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Reach the cluster with this kubeconfig instead of the pod's service account.",
)
@click.option("--context", "kube_context", default=None, help="Context of --kubeconfig.")
@click.option(
    "--service-account-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="In-cluster credentials (default /var/run/secrets/kubernetes.io/serviceaccount).",
)
@click.option(
    "--set", "overrides", multiple=True, metavar="NAME=VALUE", help="Override an AgentSettings field."
)
@list_settings_option(_agent_settings, skip=("token", "url", "ca_pem"))
def agent(
    token: str,
    url: str,
    ca_data: str,
    ca_file: Path | None,
    name: str,
    namespace: str,
    health_port: int,
    health_host: str,
    proxy_only: bool,
    kubeconfig: Path | None,
    kube_context: str | None,
    service_account_dir: Path | None,
    overrides: tuple[str, ...],
) -> None:
    """Connect this cluster to the platform (what the agent chart runs)."""
    import structlog

    from vplane.agent.agent import Agent, ConfigError, run_agent
    from vplane.agent.settings import AgentSettings
    from vplane.agent.upstream import UpstreamConfigError

    log = structlog.get_logger("vplane.agent")
    base: dict[str, object] = {
        "token": token,
        "url": url,
        "ca_pem": ca_file.read_text() if ca_file is not None else ca_data,
        "name": name,
        "namespace": namespace,
        "health_port": health_port,
        "health_host": health_host,
        "proxy_only": proxy_only,
        "kubeconfig": kubeconfig,
        "kube_context": kube_context,
    }
    if service_account_dir is not None:
        base["service_account_dir"] = service_account_dir
    settings = build_settings(AgentSettings, base, overrides)
    try:
        Agent(settings)  # configuration problems surface before any network activity
    except (ConfigError, UpstreamConfigError) as exc:
        log.error(str(exc))
        sys.exit(1)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(run_agent(settings))
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            return await task
        return 0

    sys.exit(asyncio.run(main()))

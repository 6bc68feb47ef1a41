"""``vplane scheduler --kubeconfig FILE``: the scheduler as a process of its own, against any API server."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

import click

from vplane.cli.options import STOP_SIGNALS, build_settings, list_settings_option

if TYPE_CHECKING:
    from pydantic import BaseModel


def _settings_model() -> type[BaseModel]:
    from vplane.controllers.scheduler.settings import SchedulerSettings

    return SchedulerSettings


@click.command("scheduler")
@click.option(
    "--kubeconfig",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="How to reach the API server (any cluster, ours or not).",
)
@click.option("--context", default=None, help="The kubeconfig context to use (default: its current one).")
@click.option(
    "--set", "overrides", multiple=True, metavar="NAME=VALUE", help="Override a SchedulerSettings field."
)
@click.option(
    "--ready-file", type=click.Path(path_type=Path), default=None, help="Written once the scheduler runs."
)
@list_settings_option(_settings_model)
def scheduler(
    kubeconfig: Path, context: str | None, overrides: tuple[str, ...], ready_file: Path | None
) -> None:
    """Bind pending pods to nodes (default-scheduler), talking to the API server over HTTP."""
    from vplane.controllers.client import KubeClient
    from vplane.controllers.scheduler import run_scheduler
    from vplane.controllers.scheduler.settings import SchedulerSettings

    settings = build_settings(SchedulerSettings, {}, overrides)
    try:
        client = KubeClient.from_kubeconfig(kubeconfig, context, field_manager=settings.scheduler_name)
    except (ValueError, OSError) as exc:
        raise click.ClickException(f"--kubeconfig {kubeconfig}: {exc}") from None

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(run_scheduler(client, settings))
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, task.cancel)
        click.echo(f"vplane scheduler: {settings.scheduler_name} using {kubeconfig}")
        if ready_file is not None:
            tmp = ready_file.with_suffix(".tmp")
            tmp.write_text("ready")
            tmp.replace(ready_file)
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            await client.close()

    try:
        asyncio.run(main())
    except Exception as exc:  # the scheduler stopped on its own: one line, not a traceback
        raise click.ClickException(f"the scheduler stopped: {exc}") from None

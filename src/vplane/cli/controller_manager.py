"""``vplane controller-manager``, and the controller manager ``vplane apiserver`` runs beside itself."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import structlog
import yaml

from vplane.cli.options import build_settings, list_settings_option, run_until_signalled
from vplane.controllers.embedded import ManagedRun, ManagedScheduler

if TYPE_CHECKING:
    from pydantic import BaseModel

    from vplane.controllers.kcm.settings import ControllerManagerSettings

log = structlog.get_logger("vplane.cli.controller_manager")


def _settings_model() -> type[BaseModel]:
    from vplane.controllers.kcm.settings import ControllerManagerSettings

    return ControllerManagerSettings


def loopback_kubeconfig(kubeconfig: Path, url: str, host: str, port: int) -> Path:
    """The server's own kubeconfig, or for a wildcard listen address a private copy pointing at loopback
    (the serving certificate names 127.0.0.1, not 0.0.0.0)."""
    if host not in ("0.0.0.0", "::", ""):
        return kubeconfig
    from vplane.support.kubeconfig import write_kubeconfig

    doc = yaml.safe_load(kubeconfig.read_text())
    for cluster in doc.get("clusters") or []:
        cluster.setdefault("cluster", {})["server"] = f"https://127.0.0.1:{port}"
    path = kubeconfig.with_name("controller-manager.kubeconfig.yaml")
    write_kubeconfig(path, doc)
    return path


def apiserver_controller_manager(
    enabled: bool,
    raw_settings: dict[str, Any],
    scheduler: bool = False,
    raw_scheduler_settings: dict[str, Any] | None = None,
) -> Any:
    """What ``vplane apiserver`` (and ``vplane cluster start``) starts once it serves: the controller
    manager and the scheduler over loopback, as kube-controller-manager and kube-scheduler run beside
    kube-apiserver, each when enabled."""
    from pydantic import ValidationError

    from vplane.controllers.kcm.manager import enabled_controllers
    from vplane.controllers.kcm.settings import ControllerManagerSettings
    from vplane.controllers.scheduler.settings import SchedulerSettings

    try:
        settings = ControllerManagerSettings.model_validate(raw_settings)
        enabled_controllers(settings.controllers)
    except (ValidationError, ValueError) as exc:
        raise click.UsageError(f"controller_manager_settings: {exc}") from None
    try:
        scheduler_settings = SchedulerSettings.model_validate(raw_scheduler_settings or {})
    except ValidationError as exc:
        raise click.UsageError(f"scheduler_settings: {exc}") from None
    return _ApiserverHook(enabled, settings, scheduler, scheduler_settings)


def server_local_defaults(data_dir: Path, settings: ControllerManagerSettings) -> dict[str, Any]:
    """What a controller manager beside its API server takes from the server's data directory unless set:
    where the local-path provisioner keeps volumes, and the cluster CA that signs CSRs and legacy tokens."""
    update: dict[str, Any] = {}
    if settings.local_path_root is None:
        update["local_path_root"] = str(data_dir / "volumes")
    if settings.cluster_signing_cert_file is None and settings.cluster_signing_key_file is None:
        update["cluster_signing_cert_file"] = str(data_dir / "pki" / "ca.crt")
        update["cluster_signing_key_file"] = str(data_dir / "pki" / "ca.key")
    if settings.service_account_private_key_file is None:
        # the API server verifies legacy token Secrets with its CA's public key
        update["service_account_private_key_file"] = str(data_dir / "pki" / "ca.key")
    return update


class _ApiserverHook:
    def __init__(
        self,
        enabled: bool,
        settings: ControllerManagerSettings,
        scheduler: bool = False,
        scheduler_settings: Any = None,
    ) -> None:
        self.enabled = enabled
        self.settings = settings
        self.scheduler = scheduler
        self.scheduler_settings = scheduler_settings
        self.run: ManagedRun | None = None
        self.scheduling: ManagedScheduler | None = None

    async def start(self, kubeconfig: Path, url: str, host: str, port: int) -> None:
        if not self.enabled and not self.scheduler:
            return
        path = await asyncio.to_thread(loopback_kubeconfig, kubeconfig, url, host, port)
        if self.enabled:
            self.run = ManagedRun(
                path, self.settings.model_copy(update=server_local_defaults(kubeconfig.parent, self.settings))
            )
            await self.run.start()
        if self.scheduler:
            self.scheduling = ManagedScheduler(path, self.scheduler_settings)
            await self.scheduling.start()

    async def stop(self) -> None:
        if self.scheduling is not None:
            await self.scheduling.stop()
        if self.run is not None:
            await self.run.stop()


@click.command("controller-manager")
@click.option(
    "--kubeconfig",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="How to reach the API server (any Kubernetes API server).",
)
@click.option("--context", default=None, help="The kubeconfig context (default: its current context).")
@click.option(
    "--controllers",
    default="*",
    show_default=True,
    help="Comma-separated: '*' is every controller, NAME adds one, -NAME removes one "
    "(deployment, replicaset, replicationcontroller, endpoint, endpointslice, serviceaccount, "
    "root-ca-cert-publisher, resourcequota, disruption, horizontalpodautoscaling, persistentvolume-binder, "
    "csrsigning, csrcleaner).",
)
@click.option(
    "--root-ca-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The CA published as kube-root-ca.crt in every namespace (default: the kubeconfig's CA).",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a ControllerManagerSettings field.",
)
@click.option(
    "--ready-file", type=click.Path(path_type=Path), default=None, help="Written once caches are filled."
)
@list_settings_option(_settings_model, skip=())
def controller_manager(
    kubeconfig: Path,
    context: str | None,
    controllers: str,
    root_ca_file: Path | None,
    overrides: tuple[str, ...],
    ready_file: Path | None,
) -> None:
    """Run the controllers that make Deployments, ReplicaSets and Services act (kube-controller-manager)."""
    from vplane.controllers.kcm.manager import enabled_controllers
    from vplane.controllers.kcm.settings import ControllerManagerSettings

    settings = build_settings(ControllerManagerSettings, {"controllers": controllers.split(",")}, overrides)
    try:
        names = enabled_controllers(settings.controllers)
    except ValueError as exc:
        raise click.UsageError(str(exc), ctx=click.get_current_context()) from None
    root_ca = root_ca_file.read_bytes() if root_ca_file is not None else None
    run = ManagedRun(kubeconfig, settings, context=context, root_ca=root_ca)

    async def start() -> None:
        await run.start()
        await run.ready.wait()
        click.echo(f"vplane controller manager: {', '.join(names)}")

    run_until_signalled(start, run.stop, ready_file, lambda: "ready")

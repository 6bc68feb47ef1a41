"""The controller manager: the controllers of kube-controller-manager that vplane has, run together over
one client, one set of shared informers and one event writer.

:func:`run_controller_manager` is the entry point every host uses: ``vplane controller-manager`` (a
process of its own, with a kubeconfig), ``vplane apiserver`` (a task group against itself over loopback
HTTP) and tenant clusters (on their elected leader). It runs until cancelled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from vplane.controllers.client import KubeAPI, Resource, TransportError
from vplane.controllers.kcm.certificates import (
    CSRS,
    CSRApprovingController,
    CSRCleanerController,
    CSRSigningController,
)
from vplane.controllers.kcm.context import Clock, ControllerContext, ManagedController
from vplane.controllers.kcm.cronjob import CronJobController
from vplane.controllers.kcm.cronjobutil import CRONJOBS
from vplane.controllers.kcm.daemonset import DaemonSetController
from vplane.controllers.kcm.deployment import DeploymentController
from vplane.controllers.kcm.disruption import PODDISRUPTIONBUDGETS, DisruptionController
from vplane.controllers.kcm.endpoints import EndpointsController
from vplane.controllers.kcm.endpointslices import ENDPOINTSLICES, EndpointSliceController
from vplane.controllers.kcm.events import EventBroadcaster
from vplane.controllers.kcm.informers import SharedInformers
from vplane.controllers.kcm.job import JobController
from vplane.controllers.kcm.jobutil import JOBS
from vplane.controllers.kcm.persistentvolume import PersistentVolumeBinderController
from vplane.controllers.kcm.podautoscaler import HPAS, HorizontalPodAutoscalerController
from vplane.controllers.kcm.replicaset import REPLICATION_CONTROLLER_KIND, ReplicaSetController
from vplane.controllers.kcm.resourcequota import ResourceQuotaController
from vplane.controllers.kcm.resources import REPLICATIONCONTROLLERS
from vplane.controllers.kcm.serviceaccounts import RootCAPublisher, ServiceAccountsController
from vplane.controllers.kcm.servicecidrs import SERVICE_CIDRS, ServiceCIDRController
from vplane.controllers.kcm.settings import ControllerManagerSettings
from vplane.controllers.kcm.statefulset import StatefulSetController
from vplane.controllers.kcm.storageprotection import PVCProtectionController, PVProtectionController
from vplane.controllers.kcm.tokens import TokensController
from vplane.controllers.kcm.ttlafterfinished import TTLAfterFinishedController
from vplane.kube.errors import StatusError

log = structlog.get_logger("vplane.controllers.kcm")


@dataclass(frozen=True)
class ControllerSpec:
    build: Callable[[ControllerContext], ManagedController]
    requires: Resource | None = None
    """A kind the server may not serve yet: the controller starts only if listing it works."""
    needs_root_ca: bool = False
    needs_setting: str | None = None
    """A setting that must be set for the controller to start (a key file, say)."""


CONTROLLERS: dict[str, ControllerSpec] = {
    "deployment": ControllerSpec(DeploymentController),
    "replicaset": ControllerSpec(ReplicaSetController),
    "replicationcontroller": ControllerSpec(
        lambda ctx: ReplicaSetController(ctx, REPLICATION_CONTROLLER_KIND), requires=REPLICATIONCONTROLLERS
    ),
    "endpoint": ControllerSpec(EndpointsController),
    "serviceaccount": ControllerSpec(ServiceAccountsController),
    "serviceaccount-token": ControllerSpec(
        TokensController, needs_setting="service_account_private_key_file"
    ),
    "root-ca-cert-publisher": ControllerSpec(RootCAPublisher, needs_root_ca=True),
    "job": ControllerSpec(JobController, requires=JOBS),
    "cronjob": ControllerSpec(CronJobController, requires=CRONJOBS),
    "ttl-after-finished": ControllerSpec(TTLAfterFinishedController, requires=JOBS),
    "statefulset": ControllerSpec(StatefulSetController),
    "daemonset": ControllerSpec(DaemonSetController),
    "resourcequota": ControllerSpec(ResourceQuotaController),
    "endpointslice": ControllerSpec(EndpointSliceController, requires=ENDPOINTSLICES),
    "disruption": ControllerSpec(DisruptionController, requires=PODDISRUPTIONBUDGETS),
    "horizontalpodautoscaling": ControllerSpec(HorizontalPodAutoscalerController, requires=HPAS),
    "persistentvolume-binder": ControllerSpec(PersistentVolumeBinderController),
    "pvc-protection": ControllerSpec(PVCProtectionController),
    "pv-protection": ControllerSpec(PVProtectionController),
    "csrsigning": ControllerSpec(CSRSigningController, requires=CSRS),
    "csrcleaner": ControllerSpec(CSRCleanerController, requires=CSRS),
    "csrapproving": ControllerSpec(CSRApprovingController, requires=CSRS),
    "service-cidr-controller": ControllerSpec(ServiceCIDRController, requires=SERVICE_CIDRS),
}
"""Controller names as kube-controller-manager's ``--controllers`` spells them."""


def enabled_controllers(requested: list[str], known: list[str] | None = None) -> list[str]:
    """Upstream's ``--controllers`` rule: ``*`` turns on every default controller, ``name`` one more,
    ``-name`` one off (an explicit ``-name`` wins over ``*``)."""
    known = known if known is not None else list(CONTROLLERS)
    items = [item.strip() for entry in requested for item in entry.split(",") if item.strip()]
    unknown = sorted({item.lstrip("-") for item in items if item != "*" and item.lstrip("-") not in known})
    if unknown:
        raise ValueError(f"unknown controllers: {', '.join(unknown)} (known: {', '.join(known)})")
    disabled = {item[1:] for item in items if item.startswith("-")}
    chosen = set(known) if "*" in items else {item for item in items if not item.startswith("-")}
    return [name for name in known if name in chosen and name not in disabled]


async def _served(client: KubeAPI, resource: Resource) -> bool:
    try:
        await client.list(resource, chunk_size=1)
    except StatusError as exc:
        if exc.code == 404:
            return False
        raise
    return True


class ControllerManager:
    def __init__(
        self,
        client: KubeAPI,
        settings: ControllerManagerSettings | None = None,
        *,
        root_ca: bytes | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.settings = settings or ControllerManagerSettings()
        self.client = client
        self.informers = SharedInformers(client, self.settings.informer)
        self.events = EventBroadcaster(client, self.settings.events, clock=clock)
        self.ctx = ControllerContext(client, self.informers, self.events, self.settings, clock, root_ca)
        self.names = enabled_controllers(self.settings.controllers)
        self.controllers: dict[str, ManagedController] = {}
        self.ready = asyncio.Event()
        """Set once every started controller's caches are filled."""

    async def _build(self) -> None:
        for name in self.names:
            spec = CONTROLLERS[name]
            if spec.needs_root_ca and not self.ctx.root_ca:
                log.warning("controller needs the cluster CA; not starting it", controller=name)
                continue
            if spec.needs_setting is not None and not getattr(self.settings, spec.needs_setting):
                log.info(
                    "controller not configured; not starting it", controller=name, setting=spec.needs_setting
                )
                continue
            if spec.requires is not None:
                served = False
                while True:
                    try:
                        served = await _served(self.client, spec.requires)
                        break
                    except (StatusError, TransportError) as exc:
                        log.warning(
                            "cannot tell whether a kind is served; retrying", controller=name, error=str(exc)
                        )
                        await asyncio.sleep(1.0)
                if not served:
                    log.info(
                        "kind not served; controller not started",
                        controller=name,
                        resource=spec.requires.plural,
                    )
                    continue
            self.controllers[name] = spec.build(self.ctx)

    async def run(self) -> None:
        """Build the enabled controllers, then run informers, the event writer and the controllers."""
        await self._build()
        log.info("starting controllers", controllers=sorted(self.controllers))
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.informers.run())
            tasks.create_task(self.events.run())
            for controller in self.controllers.values():
                tasks.create_task(controller.run())
            await self.informers.wait_for_sync()
            self.ready.set()


async def run_controller_manager(
    client: KubeAPI,
    settings: ControllerManagerSettings | None = None,
    *,
    root_ca: bytes | None = None,
    clock: Clock = time.time,
) -> None:
    """Run the controller manager against ``client`` until cancelled (the client is the caller's to close)."""
    await ControllerManager(client, settings, root_ca=root_ca, clock=clock).run()

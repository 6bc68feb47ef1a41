"""What every controller of the manager is built from, and the small base they share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from vplane.controllers.client import KubeAPI
from vplane.controllers.informer import Informer
from vplane.controllers.kcm.events import EventBroadcaster, EventRecorder
from vplane.controllers.kcm.informers import SharedInformers
from vplane.controllers.kcm.settings import ControllerManagerSettings
from vplane.controllers.reconciler import Controller

Clock = Callable[[], float]
"""Wall-clock seconds since the epoch: what object timestamps are compared with."""


@dataclass
class ControllerContext:
    client: KubeAPI
    informers: SharedInformers
    events: EventBroadcaster
    settings: ControllerManagerSettings
    clock: Clock
    root_ca: bytes | None = None
    """The cluster CA the root-CA publisher puts in every namespace (the kubeconfig's, by default)."""


class ManagedController:
    """One controller of the manager: a reconciler over a primary informer, plus the informers it reads."""

    name = ""
    event_source = ""

    def __init__(
        self, ctx: ControllerContext, primary: Informer, secondary: Sequence[Informer], workers: int
    ):
        self.ctx = ctx
        self.client = ctx.client
        self.clock = ctx.clock
        self.recorder: EventRecorder = ctx.events.recorder(self.event_source or self.name)
        self.informers = [primary, *secondary]
        self.controller = Controller(
            self.name,
            primary,
            self.reconcile,
            workers=workers,
            queue_settings=ctx.settings.queue,
            run_informer=False,
        )
        self.log = structlog.get_logger(f"vplane.controllers.kcm.{self.name}")

    async def reconcile(self, key: str) -> float | None:
        raise NotImplementedError

    def enqueue(self, key: str) -> None:
        self.controller.enqueue(key)

    def enqueue_after(self, key: str, delay: float) -> None:
        self.controller.queue.add_after(key, delay)

    async def run(self) -> None:
        """Wait for every informer this controller reads, then reconcile until cancelled."""
        for informer in self.informers:
            await informer.wait_for_sync()
        await self.started()
        await self.controller.run()

    async def started(self) -> None:
        """A hook for work once the caches are filled (upstream's one-off startup checks)."""

"""The controller manager and the scheduler as background tasks of a process that hosts them: ``vplane
apiserver``/``vplane cluster start`` beside their API server, a tenant replica while it leads."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import yaml

if TYPE_CHECKING:
    from vplane.controllers.client import KubeClient
    from vplane.controllers.kcm.settings import ControllerManagerSettings

log = structlog.get_logger("vplane.controllers.embedded")

RESTART_DELAY_SECONDS = 5.0


def kubeconfig_ca(path: Path, context: str | None = None) -> bytes | None:
    """The CA a kubeconfig trusts for its (current) context's cluster: what the root-CA publisher hands out."""
    doc: Any = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict):
        return None
    name = context or doc.get("current-context")
    contexts = {
        c.get("name"): c.get("context") or {} for c in doc.get("contexts") or [] if isinstance(c, dict)
    }
    clusters = {
        c.get("name"): c.get("cluster") or {} for c in doc.get("clusters") or [] if isinstance(c, dict)
    }
    cluster = clusters.get((contexts.get(name) or {}).get("cluster"))
    if cluster is None and len(clusters) == 1:
        cluster = next(iter(clusters.values()))
    if not cluster:
        return None
    if cluster.get("certificate-authority-data"):
        return base64.b64decode(cluster["certificate-authority-data"])
    if cluster.get("certificate-authority"):
        ca_path = Path(cluster["certificate-authority"])
        if not ca_path.is_absolute():
            ca_path = path.parent / ca_path
        return ca_path.read_bytes()
    return None


class ManagedRun:
    """The controller manager as a background task: started, restarted after a crash, stopped."""

    def __init__(
        self,
        kubeconfig: Path,
        settings: ControllerManagerSettings,
        *,
        context: str | None = None,
        root_ca: bytes | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.settings = settings
        self.root_ca = root_ca
        self.client: KubeClient | None = None
        self.task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()

    async def start(self) -> None:
        from vplane.controllers.client import KubeClient

        if self.root_ca is None:
            self.root_ca = await asyncio.to_thread(kubeconfig_ca, self.kubeconfig, self.context)
        self.client = await asyncio.to_thread(
            KubeClient.from_kubeconfig,
            self.kubeconfig,
            self.context,
            field_manager=self.settings.field_manager,
        )
        self.task = asyncio.create_task(self._supervise(self.client))

    async def _supervise(self, client: KubeClient) -> None:
        from vplane.controllers.kcm.manager import ControllerManager

        while True:
            manager = ControllerManager(client, self.settings, root_ca=self.root_ca)
            watcher = asyncio.create_task(manager.ready.wait())
            watcher.add_done_callback(lambda _: self.ready.set())
            try:
                await manager.run()
            except Exception:
                log.exception("controller manager failed; restarting", retry_in=RESTART_DELAY_SECONDS)
            finally:
                watcher.cancel()
            await asyncio.sleep(RESTART_DELAY_SECONDS)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        if self.client is not None:
            await self.client.close()


class ManagedScheduler:
    """The scheduler as a background task: started, restarted after a crash, stopped."""

    def __init__(self, kubeconfig: Path, settings: Any) -> None:
        self.kubeconfig = kubeconfig
        self.settings = settings
        self.client: KubeClient | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        from vplane.controllers.client import KubeClient

        self.client = await asyncio.to_thread(
            KubeClient.from_kubeconfig, self.kubeconfig, None, field_manager=self.settings.scheduler_name
        )
        self.task = asyncio.create_task(self._supervise(self.client))

    async def _supervise(self, client: KubeClient) -> None:
        from vplane.controllers.scheduler import run_scheduler

        while True:
            try:
                await run_scheduler(client, self.settings)
            except Exception:
                log.exception("scheduler failed; restarting", retry_in=RESTART_DELAY_SECONDS)
            await asyncio.sleep(RESTART_DELAY_SECONDS)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        if self.client is not None:
            await self.client.close()

"""A minimal controller runtime: informer events become keys in a work queue, workers reconcile keys.

``reconcile(key)`` is level-triggered: it receives only the key (``namespace/name``) and reads the
current state from the informer's cache (absent means deleted), so however many events arrive for an
object it is reconciled against its latest state. It returns ``None`` when done, or a number of
seconds after which to look again (0 or less: now, rate-limited like a failure); if it raises, the key comes back after the queue's per-key
exponential back-off, which a later success resets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from vplane.controllers.informer import Informer, object_key
from vplane.controllers.workqueue import Clock, ShutDown, WorkQueue, WorkQueueSettings
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

log = structlog.get_logger("vplane.controllers.reconciler")

Reconcile = Callable[[str], Awaitable[float | None]]
"""``async def reconcile(key) -> None | requeue_after_seconds``."""


class Controller:
    """Reconciles the keys of one informer's objects with ``workers`` concurrent workers."""

    def __init__(
        self,
        name: str,
        informer: Informer,
        reconcile: Reconcile,
        *,
        workers: int = 1,
        queue_settings: WorkQueueSettings | None = None,
        run_informer: bool = True,
        clock: Clock | None = None,
    ) -> None:
        """``run_informer=False`` when the informer is shared and run elsewhere."""
        if workers < 1:
            raise ValueError("a controller needs at least one worker")
        self.name = name
        self.informer = informer
        self.queue: WorkQueue[str] = WorkQueue(queue_settings, clock=clock)
        self._reconcile = reconcile
        self._workers = workers
        self._run_informer = run_informer
        self._log = log.bind(controller=name)
        informer.add_handlers(
            on_add=self._enqueue_object,
            on_update=lambda old, new: self._enqueue_object(new),
            on_delete=self._enqueue_object,
        )

    def enqueue(self, key: str) -> None:
        """Queue a key by hand, e.g. from a second informer whose objects map to this controller's keys."""
        self.queue.add(key)

    def _enqueue_object(self, obj: Obj) -> None:
        self.queue.add(object_key(obj))

    async def run(self) -> None:
        """Run the informer (unless shared), wait for its first list, then the workers. Cancel to stop."""
        try:
            async with asyncio.TaskGroup() as tasks:
                if self._run_informer:
                    tasks.create_task(self.informer.run())
                await self.informer.wait_for_sync()
                self._log.info("starting workers", workers=self._workers)
                for _ in range(self._workers):
                    tasks.create_task(self._worker())
        finally:
            self.queue.shut_down()

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            try:
                requeue_after = await self._reconcile(key)
            except StatusError as exc:
                # An answer of the API server (a conflict with a newer write, above all) is an ordinary
                # outcome: one line, as upstream's controllers log it, and a rate-limited retry.
                retries = self.queue.num_requeues(key)
                self._log.warning(
                    "reconcile failed", key=key, retries=retries, code=exc.code, error=exc.message
                )
                self.queue.add_rate_limited(key)
            except Exception:
                retries = self.queue.num_requeues(key)
                self._log.exception("reconcile failed", key=key, retries=retries)
                self.queue.add_rate_limited(key)
            else:
                if requeue_after is not None and requeue_after <= 0:
                    # "Look again now" is re-queued rate-limited, as upstream's deployment controller
                    # does for a progress check that is already due: a key that keeps asking for "now"
                    # backs off instead of being taken again at once, which would never yield to the
                    # event loop and starve the whole process (the API server included).
                    self.queue.add_rate_limited(key)
                else:
                    self.queue.forget(key)
                    if requeue_after is not None:
                        self.queue.add_after(key, requeue_after)
            finally:
                self.queue.done(key)

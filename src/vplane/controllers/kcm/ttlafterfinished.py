"""The TTL-after-finished controller (upstream ``pkg/controller/ttlafterfinished``): a finished Job with
``spec.ttlSecondsAfterFinished`` is deleted that many seconds after its ``Complete`` or ``Failed``
condition's transition, with foreground propagation (its pods go first) and a UID precondition, after a
fresh read confirms the TTL (which may have been changed meanwhile) has really run out. Until then the key
comes back when the TTL ends, measured with the manager's clock.
"""

from __future__ import annotations

from vplane.controllers.kcm import jobutil as ju
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.jobutil import JOBS
from vplane.controllers.kcm.timefmt import parse_time
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj


def needs_cleanup(job: Obj) -> bool:
    """``needsCleanup``: a TTL is set and the Job has finished."""
    ttl = ju.spec(job).get("ttlSecondsAfterFinished")
    return isinstance(ttl, int) and not isinstance(ttl, bool) and ju.is_finished(job)


def finish_time(job: Obj) -> float | None:
    """``jobFinishTime``: the last transition of the true ``Complete`` or ``Failed`` condition."""
    for cond in ju.conditions(job):
        if cond.get("type") in (ju.COMPLETE, ju.FAILED) and cond.get("status") == "True":
            return parse_time(cond.get("lastTransitionTime"))
    return None


class TTLError(Exception):
    """A finished Job whose finish time cannot be read (upstream's error; the key is retried)."""


def time_left(job: Obj, now: float) -> float | None:
    """Seconds until the Job expires (zero or less: expired), or None when it needs no cleanup."""
    if podutil.is_deleting(job) or not needs_cleanup(job):
        return None
    finished = finish_time(job)
    if finished is None:
        raise TTLError(
            f"unable to find the time when the Job {podutil.namespace_of(job)}/{podutil.name_of(job)} finished"
        )
    ttl = int(ju.spec(job)["ttlSecondsAfterFinished"])
    return finished + ttl - now


class TTLAfterFinishedController(ManagedController):
    name = "ttl-after-finished"
    event_source = "ttl-after-finished-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        self.jobs = ctx.informers.informer(JOBS)
        super().__init__(ctx, self.jobs, [], ctx.settings.concurrent_ttl_after_finished_syncs)

    async def reconcile(self, key: str) -> float | None:
        job = self.jobs.get(key)
        if job is None:
            return None
        left = time_left(job, self.clock())
        if left is None:
            return None
        if left > 0:
            return left
        namespace = podutil.namespace_of(job)
        try:
            fresh = await self.client.get(JOBS, podutil.name_of(job), namespace=namespace)
        except StatusError as exc:
            if exc.code == 404:
                return None
            raise
        left = time_left(fresh, self.clock())
        if left is None:
            return None
        if left > 0:
            return left
        try:
            await self.client.delete(
                JOBS,
                podutil.name_of(fresh),
                namespace=namespace,
                propagation_policy="Foreground",
                precondition_uid=podutil.uid_of(fresh),
            )
        except StatusError as exc:
            if exc.code == 404:
                return None
            raise
        self.log.info("deleted finished job after its TTL", job=key)
        return None

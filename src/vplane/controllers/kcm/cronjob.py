"""The CronJob controller (upstream ``pkg/controller/cronjob``, the v2 controller).

Each sync of a CronJob: delete finished Jobs beyond the history limits, reconcile ``status.active`` with
the Jobs it controls (``SawCompletedJob``, ``MissingJob``, ``UnexpectedJob``), then, unless it is being
deleted, suspended or its schedule or zone is unusable, find the latest unmet scheduled time
(:func:`~vplane.controllers.kcm.cronjobutil.next_schedule_time`). A time past
``startingDeadlineSeconds`` is missed (``MissSchedule``); ``Forbid`` skips it while a Job runs
(``JobAlreadyActive``); ``Replace`` deletes the running ones first. The Job is named
``<cronjob>-<minutes since the epoch>``, so a time is never run twice, and goes into ``status.active``
with ``lastScheduleTime``. The key comes back when the next time is due, measured with the manager's clock.
"""

from __future__ import annotations

import copy
import datetime
import math
import os
import zoneinfo
from pathlib import Path

from vplane.controllers.informer import object_key, split_key
from vplane.controllers.kcm import cronjobutil as cu
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.cronjobutil import CRONJOBS
from vplane.controllers.kcm.events import NORMAL, WARNING, object_reference
from vplane.controllers.kcm.jobutil import JOBS
from vplane.controllers.kcm.replicaset import error_text, namespace_terminating
from vplane.controllers.kcm.timefmt import format_time, parse_time
from vplane.kube import cron
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj


def local_zone() -> datetime.tzinfo:
    """The process's zone as Go's ``time.Local`` finds it: ``TZ``, else ``/etc/localtime``, else UTC."""
    name = os.environ.get("TZ")
    if name is not None:
        try:
            return cron.load_zone(name.lstrip(":"))
        except cron.CronError:
            return datetime.UTC
    try:
        with Path("/etc/localtime").open("rb") as fh:
            return zoneinfo.ZoneInfo.from_file(fh, key="Local")
    except (OSError, ValueError):
        return datetime.UTC


class CronJobController(ManagedController):
    name = "cronjob"
    event_source = "cronjob-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        self.cronjobs = ctx.informers.informer(CRONJOBS)
        self.jobs = ctx.informers.informer(JOBS)
        self.jobs_by_namespace = ctx.informers.namespace_index(JOBS)
        super().__init__(ctx, self.cronjobs, [self.jobs], ctx.settings.concurrent_cron_job_syncs)
        zone = ctx.settings.cronjob_default_time_zone
        self.zone = cron.load_zone(zone) if zone else local_zone()
        self.jobs.add_handlers(
            on_add=self._job_changed,
            on_update=lambda old, new: self._job_updated(old, new),
            on_delete=self._job_changed,
        )

    # -- job events -> keys --------------------------------------------------------------------------

    def _owner_key(self, job: Obj, ref: Obj | None) -> str | None:
        if ref is None or ref.get("kind") != "CronJob":
            return None
        key = f"{podutil.namespace_of(job)}/{ref.get('name')}"
        owner = self.cronjobs.get(key)
        if owner is None or podutil.uid_of(owner) != ref.get("uid"):
            return None
        return key

    def _job_changed(self, job: Obj) -> None:
        key = self._owner_key(job, podutil.controller_ref(job))
        if key is not None:
            self.enqueue(key)

    def _job_updated(self, old: Obj, new: Obj) -> None:
        if podutil.meta(old).get("resourceVersion") == podutil.meta(new).get("resourceVersion"):
            return
        old_ref, new_ref = podutil.controller_ref(old), podutil.controller_ref(new)
        if old_ref != new_ref:
            key = self._owner_key(old, old_ref)
            if key is not None:
                self.enqueue(key)
        self._job_changed(new)

    # -- sync ----------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        cached = self.cronjobs.get(key)
        if cached is None:
            return None
        namespace, _ = split_key(key)
        jobs = [j for j in self.jobs_by_namespace.get(namespace or "") if cu.controlled_by(j, cached)]
        cj = copy.deepcopy(cached)
        update = await self._cleanup_finished(cj, jobs)
        requeue, synced_update, error = await self._sync(cj, jobs)
        if update or synced_update:
            await self.client.replace_status(CRONJOBS, cj, namespace=podutil.namespace_of(cj))
        if requeue is not None:
            return requeue
        if error is not None:
            raise error
        return None

    async def _cleanup_finished(self, cj: Obj, jobs: list[Obj]) -> bool:
        spec = cu.spec(cj)
        if spec.get("successfulJobsHistoryLimit") is None and spec.get("failedJobsHistoryLimit") is None:
            return False
        updated = False
        for job in cu.history_to_delete(cj, jobs):
            if await self._delete_job(cj, job):
                updated = True
        return updated

    async def _delete_job(self, cj: Obj, job: Obj) -> bool:
        """``deleteJob``: delete the Job (its pods in the background) and drop it from the active list."""
        name = podutil.name_of(job)
        try:
            await self.client.delete(
                JOBS, name, namespace=podutil.namespace_of(job), propagation_policy="Background"
            )
        except StatusError as exc:
            self.recorder.event(cj, WARNING, "FailedDelete", f"Deleted job: {error_text(exc)}")
            self.log.error("error deleting job from cronjob", job=name, error=exc.message)
            return False
        cu.delete_from_active_list(cj, podutil.uid_of(job))
        self.recorder.event(cj, NORMAL, "SuccessfulDelete", f"Deleted job {name}")
        return True

    def _requeue(self, cj: Obj, now: float, schedule: cron.Schedule) -> float | None:
        delay = cu.next_schedule_delay(
            cj, now, schedule, self.zone, self.ctx.settings.cronjob_next_schedule_delta_seconds
        )
        return None if math.isinf(delay) else max(delay, 0.0)

    async def _sync(self, cj: Obj, jobs: list[Obj]) -> tuple[float | None, bool, Exception | None]:
        """``syncCronJob``: (requeue after, status changed, error). ``cj`` is updated in place, and may be
        replaced by a fresh read when a Job turns out to be in the server's active list already."""
        now = self.clock()
        update = False
        children: set[str] = set()
        for job in jobs:
            uid = podutil.uid_of(job)
            children.add(uid)
            found = cu.in_active_list(cj, uid)
            finished = cu.finished_condition(job)
            if not found and finished is None:
                try:
                    fresh = await self.client.get(
                        CRONJOBS, podutil.name_of(cj), namespace=podutil.namespace_of(cj)
                    )
                except StatusError as exc:
                    return None, update, exc
                if cu.in_active_list(fresh, uid):
                    cj.clear()
                    cj.update(fresh)
                    continue
                self.recorder.event(
                    cj,
                    WARNING,
                    "UnexpectedJob",
                    f"Saw a job that the controller did not create or forgot: {podutil.name_of(job)}",
                )
            elif finished is not None:
                if found:
                    cu.delete_from_active_list(cj, uid)
                    self.recorder.event(
                        cj,
                        NORMAL,
                        "SawCompletedJob",
                        f"Saw completed job: {podutil.name_of(job)}, condition: {finished}",
                    )
                    update = True
                if finished == "Complete":
                    completed = podutil.status(job).get("completionTime")
                    last = parse_time(podutil.status(cj).get("lastSuccessfulTime"))
                    done = parse_time(completed)
                    if completed and (last is None or (done is not None and done > last)):
                        cj.setdefault("status", {})["lastSuccessfulTime"] = completed
                        update = True
        for ref in list(cu.active_refs(cj)):
            if ref.get("uid") in children:
                continue
            try:
                await self.client.get(
                    JOBS,
                    str(ref.get("name")),
                    namespace=str(ref.get("namespace") or podutil.namespace_of(cj)),
                )
            except StatusError as exc:
                if exc.code != 404:
                    return None, update, exc
                self.recorder.event(cj, NORMAL, "MissingJob", f"Active job went missing: {ref.get('name')}")
                cu.delete_from_active_list(cj, str(ref.get("uid")))
                update = True

        if podutil.is_deleting(cj):
            return None, update, None
        zone_error = cu.time_zone_error(cj)
        if zone_error is not None:
            self.recorder.event(cj, WARNING, "UnknownTimeZone", zone_error)
            return None, update, None
        if cu.spec(cj).get("suspend") is True:
            return None, update, None
        if cu.uses_tz_prefix(cj):
            schedule_text = str(cu.spec(cj).get("schedule"))
            self.recorder.event(
                cj,
                WARNING,
                "UnsupportedSchedule",
                cu.UNSUPPORTED_TZ_MESSAGE.format(schedule=cu.go_quote(schedule_text)),
            )
        try:
            schedule = cron.parse(cu.format_schedule(cj))
        except cron.CronError as exc:
            text = str(cu.spec(cj).get("schedule") or "")
            self.recorder.event(
                cj, WARNING, "UnparseableSchedule", f"unparseable schedule: {cu.go_quote(text)} : {exc}"
            )
            return None, update, None

        recent = cu.next_schedule_time(cj, now, schedule, self.zone)
        if recent.missed is cu.Missed.MANY and recent.most_recent is not None:
            self.recorder.event(
                cj,
                WARNING,
                "TooManyMissedTimes",
                "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
            )
        if recent.error is not None and recent.most_recent is None:
            text = str(cu.spec(cj).get("schedule") or "")
            self.recorder.event(cj, WARNING, "InvalidSchedule", f"invalid schedule: {text} : {recent.error}")
            return None, update, None
        scheduled = recent.most_recent
        if scheduled is None:
            return self._requeue(cj, now, schedule), update, None

        deadline = cu.spec(cj).get("startingDeadlineSeconds")
        if isinstance(deadline, int) and not isinstance(deadline, bool) and scheduled + deadline < now:
            self.recorder.event(
                cj, WARNING, "MissSchedule", f"Missed scheduled time to start a job: {cu.rfc1123z(scheduled)}"
            )
            return self._requeue(cj, now, schedule), update, None
        last = parse_time(podutil.status(cj).get("lastScheduleTime"))
        if cu.in_active_list_by_name(cj, cu.job_name(cj, scheduled)) or last == scheduled:
            return self._requeue(cj, now, schedule), update, None
        policy = cu.spec(cj).get("concurrencyPolicy")
        if policy == "Forbid" and cu.active_refs(cj):
            self.recorder.event(
                cj,
                NORMAL,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid",
            )
            return self._requeue(cj, now, schedule), update, None
        if policy == "Replace":
            for ref in list(cu.active_refs(cj)):
                try:
                    job = await self.client.get(
                        JOBS,
                        str(ref.get("name")),
                        namespace=str(ref.get("namespace") or podutil.namespace_of(cj)),
                    )
                except StatusError as exc:
                    self.recorder.event(cj, WARNING, "FailedGet", f"Get job: {error_text(exc)}")
                    return None, update, exc
                if not await self._delete_job(cj, job):
                    return (
                        None,
                        update,
                        RuntimeError(
                            f"could not replace job {podutil.namespace_of(job)}/{podutil.name_of(job)}"
                        ),
                    )
                update = True

        request = cu.job_from_template(cj, scheduled)
        namespace = podutil.namespace_of(cj)
        try:
            created = await self.client.create(JOBS, request, namespace=namespace)
        except StatusError as exc:
            if namespace_terminating(exc):
                return None, update, exc
            if exc.code != 409 or exc.reason != "AlreadyExists":
                self.recorder.event(cj, WARNING, "FailedCreate", f"Error creating job: {error_text(exc)}")
                return None, update, exc
            try:
                existing = await self.client.get(JOBS, request["metadata"]["name"], namespace=namespace)
            except StatusError as get_error:
                return None, update, get_error
            owner = podutil.controller_ref(existing)
            if owner is None or owner.get("uid") != podutil.uid_of(cj):
                return None, update, None  # someone else's Job: assume it keeps the status itself
            if cu.in_active_list(cj, podutil.uid_of(existing)):
                return None, update, None
            self.log.info("job already exists", cronjob=object_key(cj), job=podutil.name_of(existing))
            job_ref = existing
        else:
            self.recorder.event(cj, NORMAL, "SuccessfulCreate", f"Created job {podutil.name_of(created)}")
            job_ref = created
        job_ref.setdefault("apiVersion", JOBS.api_version)
        job_ref.setdefault("kind", JOBS.kind)
        status = cj.setdefault("status", {})
        status["active"] = [*cu.active_refs(cj), object_reference(job_ref)]
        status["lastScheduleTime"] = format_time(scheduled)
        return self._requeue(cj, now, schedule), True, None

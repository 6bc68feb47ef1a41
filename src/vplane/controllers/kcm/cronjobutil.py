"""Pure decisions of the CronJob controller (upstream ``pkg/controller/cronjob/utils.go``): which scheduled
time is due, how many were missed, when to look again, the Job a schedule makes and which finished Jobs
the history limits remove. Times are Unix seconds; nothing here reads a clock.
"""

from __future__ import annotations

import copy
import datetime
import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass

from vplane.controllers.client import Resource
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.timefmt import parse_time
from vplane.kube import cron
from vplane.kube.objects import Obj

CRONJOBS = Resource("batch/v1", "CronJob", "cronjobs", namespaced=True)
SCHEDULED_TIMESTAMP_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
"""Set on every Job a CronJob makes (CronJobsScheduledAnnotation, on by default since 1.32)."""
TOO_MANY_MISSED = 100
"""Upstream's bound: more missed start times than this is reported as a clock or deadline problem."""
UNSUPPORTED_TZ_MESSAGE = (
    "CRON_TZ or TZ used in schedule {schedule} is not officially supported, "
    "see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details"
)


class Missed(enum.Enum):
    NONE = "none"
    FEW = "few"
    MANY = "many"


class ScheduleError(Exception):
    """A schedule that parses but cannot produce two distinct times (``0 0 31 2 *``)."""


def spec(cj: Obj) -> Obj:
    return podutil.spec(cj)


def go_quote(text: str) -> str:
    """Go's ``%q`` for the strings these messages quote (plain text: backslash and quote escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def uses_tz_prefix(cj: Obj) -> bool:
    """Upstream still honours ``CRON_TZ=``/``TZ=`` in schedules stored before validation refused them,
    with an ``UnsupportedSchedule`` warning."""
    return "TZ" in str(spec(cj).get("schedule") or "")


def format_schedule(cj: Obj) -> str:
    """``formatSchedule``: the schedule with ``TZ=<spec.timeZone>`` in front when the zone loads."""
    schedule = str(spec(cj).get("schedule") or "")
    if uses_tz_prefix(cj):
        return schedule
    zone = spec(cj).get("timeZone")
    if isinstance(zone, str):
        try:
            cron.load_zone(zone)
        except cron.CronError:
            return schedule
        return f"TZ={zone} {schedule}"
    return schedule


def time_zone_error(cj: Obj) -> str | None:
    """The ``UnknownTimeZone`` event's message when ``spec.timeZone`` does not load."""
    zone = spec(cj).get("timeZone")
    if not isinstance(zone, str):
        return None
    try:
        cron.load_zone(zone)
    except cron.CronError as exc:
        return f"invalid timeZone: {go_quote(zone)}: {exc}"
    return None


def _start_of(cj: Obj) -> float:
    meta_time = parse_time(podutil.meta(cj).get("creationTimestamp"))
    last = parse_time(podutil.status(cj).get("lastScheduleTime"))
    if last is not None:
        return last
    return meta_time if meta_time is not None else 0.0


@dataclass(frozen=True)
class Recent:
    earliest: float
    """The last schedule time, else the creation time (moved up to the starting deadline if asked)."""
    most_recent: float | None
    """The latest time a Job should have started at, not after now; None if none is due."""
    missed: Missed
    error: str | None = None


def most_recent_schedule_time(
    cj: Obj,
    now: float,
    schedule: cron.Schedule,
    zone: datetime.tzinfo,
    *,
    include_starting_deadline: bool,
) -> Recent:
    """``mostRecentScheduleTime``: find the latest due time without walking every missed one. The
    interval between the first two times after ``earliest`` estimates how many were missed; the walk
    starts two intervals before the estimate so irregular schedules (``30 6-16/4 * * 1-5``) still land
    on their latest time."""
    earliest = _start_of(cj)
    deadline = spec(cj).get("startingDeadlineSeconds")
    if include_starting_deadline and isinstance(deadline, int) and not isinstance(deadline, bool):
        earliest = max(earliest, now - deadline)
    t1 = cron.next_time(schedule, earliest, zone)
    t2 = cron.next_time(schedule, t1, zone) if t1 is not None else None
    if t1 is not None and now < t1:
        return Recent(earliest, None, Missed.NONE)
    if t1 is not None and t2 is not None and now < t2:
        return Recent(earliest, t1, Missed.NONE)
    between = int(round(t2 - t1)) if t1 is not None and t2 is not None else 0
    if t1 is None or between < 1:
        return Recent(
            earliest, None, Missed.NONE, "time difference between two schedules is less than 1 second"
        )
    elapsed = int(now - t1)
    missed_count = elapsed // between + 1
    most_recent: float | None = None
    t: float | None = cron.next_time(schedule, t1 + (missed_count - 2) * between, zone)
    while t is not None and t <= now:
        most_recent = t
        t = cron.next_time(schedule, t, zone)
    missed = (
        Missed.MANY if missed_count > TOO_MANY_MISSED else Missed.FEW if missed_count > 0 else Missed.NONE
    )
    return Recent(earliest, most_recent, missed)


def next_schedule_time(cj: Obj, now: float, schedule: cron.Schedule, zone: datetime.tzinfo) -> Recent:
    """``nextScheduleTime``: the unmet time to start a Job for now (``most_recent``), honouring
    ``startingDeadlineSeconds``."""
    recent = most_recent_schedule_time(cj, now, schedule, zone, include_starting_deadline=True)
    if recent.most_recent is None or recent.most_recent > now:
        return Recent(recent.earliest, None, recent.missed, recent.error)
    return recent


def next_schedule_delay(
    cj: Obj, now: float, schedule: cron.Schedule, zone: datetime.tzinfo, delta: float
) -> float:
    """``nextScheduleTimeDuration``: seconds until the next scheduled time after the most recent one,
    plus ``delta`` so a clock a little behind the API server's still finds that time due."""
    recent = most_recent_schedule_time(cj, now, schedule, zone, include_starting_deadline=False)
    if recent.error is not None:
        base = now
    elif recent.most_recent is None:
        base = recent.earliest if recent.missed is Missed.NONE else now
    else:
        base = recent.most_recent
    following = cron.next_time(schedule, base, zone)
    if following is None:
        return math.inf
    return following + delta - now


def job_name(cj: Obj, scheduled: float) -> str:
    """``<cronjob>-<scheduled time in minutes since the epoch>``: deterministic, so a time is run once."""
    return f"{podutil.name_of(cj)}-{int(scheduled) // 60}"


def rfc3339_in(ts: float, zone: datetime.tzinfo) -> str:
    """Go's ``time.RFC3339`` of ``ts`` in ``zone`` (``Z`` for UTC, else ``+hh:mm``)."""
    local = datetime.datetime.fromtimestamp(int(ts), zone)
    offset = local.utcoffset() or datetime.timedelta(0)
    stamp = local.strftime("%Y-%m-%dT%H:%M:%S")
    if offset == datetime.timedelta(0):
        return stamp + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    minutes = abs(minutes)
    return f"{stamp}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def rfc1123z(ts: float) -> str:
    """Go's ``time.RFC1123Z`` in UTC (the ``MissSchedule`` event's time)."""
    return datetime.datetime.fromtimestamp(int(ts), datetime.UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")


def job_from_template(cj: Obj, scheduled: float) -> Obj:
    """``getJobFromTemplate2``: the template's labels and annotations, the scheduled-timestamp annotation
    (in ``spec.timeZone``, UTC without one), the deterministic name and a controller reference."""
    template = spec(cj).get("jobTemplate")
    template = template if isinstance(template, dict) else {}
    tmeta = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    labels = dict((tmeta or {}).get("labels") or {})
    annotations = dict((tmeta or {}).get("annotations") or {})
    zone_name = spec(cj).get("timeZone")
    zone = cron.load_zone(zone_name if isinstance(zone_name, str) else "")
    annotations[SCHEDULED_TIMESTAMP_ANNOTATION] = rfc3339_in(scheduled, zone)
    meta: Obj = {
        "name": job_name(cj, scheduled),
        "namespace": podutil.namespace_of(cj),
        "ownerReferences": [podutil.new_controller_ref(cj)],
    }
    if labels:
        meta["labels"] = labels
    meta["annotations"] = annotations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def finished_condition(job: Obj) -> str | None:
    """``FinishedCondition``: ``Complete`` or ``Failed`` when the Job has that condition true."""
    for cond in podutil.status(job).get("conditions") or ():
        if (
            isinstance(cond, dict)
            and cond.get("type") in ("Complete", "Failed")
            and cond.get("status") == "True"
        ):
            return str(cond["type"])
    return None


def controlled_by(job: Obj, cj: Obj) -> bool:
    """A Job this CronJob controls: its controller reference names it (upstream matches the name; the kind
    is checked too, so a Job some other controller of the same name owns is left alone)."""
    ref = podutil.controller_ref(job)
    return ref is not None and ref.get("kind") == "CronJob" and ref.get("name") == podutil.name_of(cj)


def _start_key(job: Obj) -> tuple[int, float, str]:
    started = parse_time(podutil.status(job).get("startTime"))
    return (1, 0.0, podutil.name_of(job)) if started is None else (0, started, podutil.name_of(job))


def jobs_over_limit(jobs: Iterable[Obj], limit: int) -> list[Obj]:
    """``removeOldestJobs``: the oldest (by start time, unstarted last, then name) beyond ``limit``."""
    ordered = sorted(jobs, key=_start_key)
    return ordered[: max(len(ordered) - limit, 0)]


def history_to_delete(cj: Obj, jobs: Iterable[Obj]) -> list[Obj]:
    """``cleanupFinishedJobs``: finished Jobs beyond ``successfulJobsHistoryLimit`` and
    ``failedJobsHistoryLimit`` (each counted separately; an absent limit keeps everything)."""
    succeeded: list[Obj] = []
    failed: list[Obj] = []
    for job in jobs:
        condition = finished_condition(job)
        if condition == "Complete":
            succeeded.append(job)
        elif condition == "Failed":
            failed.append(job)
    doomed: list[Obj] = []
    for limit_field, finished in (
        ("successfulJobsHistoryLimit", succeeded),
        ("failedJobsHistoryLimit", failed),
    ):
        limit = spec(cj).get(limit_field)
        if isinstance(limit, int) and not isinstance(limit, bool):
            doomed += jobs_over_limit(finished, limit)
    return doomed


def active_refs(cj: Obj) -> list[Obj]:
    return [r for r in podutil.status(cj).get("active") or () if isinstance(r, dict)]


def in_active_list(cj: Obj, uid: str) -> bool:
    return any(r.get("uid") == uid for r in active_refs(cj))


def in_active_list_by_name(cj: Obj, name: str) -> bool:
    namespace = podutil.namespace_of(cj)
    return any(
        r.get("name") == name and (r.get("namespace") or namespace) == namespace for r in active_refs(cj)
    )


def delete_from_active_list(cj: Obj, uid: str) -> None:
    status = cj.setdefault("status", {})
    status["active"] = [r for r in active_refs(cj) if r.get("uid") != uid]
    if not status["active"]:
        del status["active"]

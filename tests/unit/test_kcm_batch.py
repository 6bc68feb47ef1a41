"""Pure decisions of the Job, CronJob and TTL-after-finished controllers, with fake time (Unix seconds handed
in): cron schedules as robfig/cron computes them (its own DST cases, a daily job across DST in a zone),
missed-schedule counting, the pod failure back-off, completion indexes, TTL expiry."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from vplane.controllers.kcm import cronjobutil as cu
from vplane.controllers.kcm import jobutil as ju
from vplane.controllers.kcm import ttlafterfinished as ttl
from vplane.controllers.kcm.timefmt import format_time
from vplane.kube import cron

UTC = datetime.UTC


def ts(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


def iso(t: float | None, zone: str = "UTC") -> str | None:
    if t is None:
        return None
    return datetime.datetime.fromtimestamp(t, cron.load_zone(zone)).isoformat()


# -- cron: robfig's Next ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "schedule", "expected"),
    [
        # robfig/cron's own TestNext cases (its six-field specs, seconds dropped)
        ("2012-07-09T14:45:00+00:00", "0/15 * * * *", "2012-07-09T15:00:00+00:00"),
        ("2012-07-09T14:59:59+00:00", "0/15 * * * *", "2012-07-09T15:00:00+00:00"),
        ("2012-07-09T15:45:00+00:00", "20-35/15 * * * *", "2012-07-09T16:20:00+00:00"),
        ("2012-07-09T23:46:00+00:00", "*/15 * * * *", "2012-07-10T00:00:00+00:00"),
        ("2012-07-09T23:35:00+00:00", "0 0 9 Apr-Oct ?", "2012-08-09T00:00:00+00:00"),
        ("2012-07-09T23:35:00+00:00", "0 0 */5 Apr,Aug,Oct Mon", "2012-08-01T00:00:00+00:00"),
        ("2012-07-09T23:35:00+00:00", "0 0 * Feb Mon/2", "2013-02-01T00:00:00+00:00"),
        ("2012-12-31T23:59:45+00:00", "* * * * *", "2013-01-01T00:00:00+00:00"),
        ("2012-07-09T23:35:00+00:00", "0 0 29 Feb ?", "2016-02-29T00:00:00+00:00"),
        # spring forward, America/New_York: 02:00 EST -> 03:00 EDT
        ("2012-03-11T00:00:00-05:00", "TZ=America/New_York 30 2 11 Mar ?", "2013-03-11T02:30:00-04:00"),
        ("2012-03-11T01:00:00-05:00", "TZ=America/New_York 0 * * * ?", "2012-03-11T03:00:00-04:00"),
        ("2012-03-11T00:00:00-05:00", "TZ=America/New_York 0 2 * * ?", "2012-03-12T02:00:00-04:00"),
        # fall back: 02:00 EDT -> 01:00 EST; a 01:00 job runs twice
        ("2012-11-04T01:00:00-04:00", "CRON_TZ=America/New_York 0 1 * * ?", "2012-11-04T01:00:00-05:00"),
        ("2012-11-04T01:00:00-05:00", "TZ=America/New_York 0 1 * * ?", "2012-11-05T01:00:00-05:00"),
        ("2012-11-04T01:45:00-04:00", "TZ=America/New_York 30 1 04 Nov ?", "2012-11-04T01:30:00-05:00"),
        ("2012-11-04T00:00:00-04:00", "TZ=America/New_York 0 3 3 * ?", "2012-12-03T03:00:00-05:00"),
        # a midnight that does not exist (robfig issue 157)
        ("2018-10-17T05:00:00-04:00", "TZ=America/Sao_Paulo 0 9 10 * ?", "2018-11-10T06:00:00-05:00"),
        ("2018-02-14T05:00:00-05:00", "TZ=America/Sao_Paulo 0 9 22 * ?", "2018-02-22T07:00:00-05:00"),
        # no such day within five years: the zero time
        ("2012-07-09T23:35:00+00:00", "0 0 30 Feb ?", None),
        ("2012-07-09T23:35:00+00:00", "0 0 31 Apr ?", None),
    ],
)
def test_next_time_as_robfig(start: str, schedule: str, expected: str | None) -> None:
    got = cron.next_time(cron.parse(schedule), ts(start))
    assert got == (ts(expected) if expected else None)


def test_descriptors_every_and_day_rules() -> None:
    t = ts("2012-07-09T15:04:00+00:00")
    assert iso(cron.next_time(cron.parse("@hourly"), t)) == "2012-07-09T16:00:00+00:00"
    assert iso(cron.next_time(cron.parse("@daily"), t)) == "2012-07-10T00:00:00+00:00"
    assert iso(cron.next_time(cron.parse("@weekly"), t)) == "2012-07-15T00:00:00+00:00"  # a Sunday
    assert iso(cron.next_time(cron.parse("@monthly"), t)) == "2012-08-01T00:00:00+00:00"
    assert iso(cron.next_time(cron.parse("@yearly"), t)) == "2013-01-01T00:00:00+00:00"
    # @every: a constant delay from the whole second
    assert cron.next_time(cron.parse("@every 1h30m"), t + 0.7) == t + 5400
    assert cron.next_time(cron.parse("@every 300ms"), t) == t + 1  # under a second rounds up
    # both day fields restricted: either matches; one of them '*' (or '*/1'): both must
    sunday_15th = ts("2012-07-15T00:00:00+00:00")
    assert cron.next_time(cron.parse("0 0 1,15 * Sun"), sunday_15th - 1) == sunday_15th
    assert iso(cron.next_time(cron.parse("0 0 1,15 * Mon"), ts("2012-07-08T00:00:00+00:00"))) == (
        "2012-07-09T00:00:00+00:00"  # Monday the 9th, by its weekday
    )
    assert iso(cron.next_time(cron.parse("0 0 * * Mon"), sunday_15th)) == "2012-07-16T00:00:00+00:00"
    assert cron.next_time(cron.parse("0 0 */2 * Sun"), sunday_15th - 1) == sunday_15th  # */2 is no star


@pytest.mark.parametrize(
    ("schedule", "error"),
    [
        ("TZ=Nowhere/Land 0 * * * *", "provided bad location Nowhere/Land: unknown time zone Nowhere/Land"),
        ("*/0 * * * *", "step of range should be a positive number: */0"),
        ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
        ("1/2/3 * * * *", "too many slashes: 1/2/3"),
        ("5-1 * * * *", "beginning of range (5) beyond end of range (1): 5-1"),
        ("@every 1x", 'failed to parse duration @every 1x: time: invalid duration "1x"'),
        ("", "empty spec string"),
    ],
)
def test_parse_errors(schedule: str, error: str) -> None:
    assert cron.parse_error(schedule) == error


# -- CronJob: which time is due, how many were missed -------------------------------------------------------


def cronjob(
    schedule: str = "* * * * *", created: str = "2024-01-01T00:00:00Z", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "cj", "namespace": "ns", "uid": "cj-uid", "creationTimestamp": created},
        "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {}}}}, **spec},
        "status": {},
    }


def due(cj: dict[str, Any], now: str, zone: str = "UTC") -> cu.Recent:
    schedule = cron.parse(cu.format_schedule(cj))
    return cu.next_schedule_time(cj, ts(now), schedule, cron.load_zone(zone))


def test_nothing_due_before_the_first_time() -> None:
    recent = due(cronjob("*/5 * * * *"), "2024-01-01T00:04:59+00:00")
    assert recent.most_recent is None and recent.missed is cu.Missed.NONE


def test_the_first_time_is_due_once_reached() -> None:
    recent = due(cronjob("*/5 * * * *"), "2024-01-01T00:05:30+00:00")
    assert iso(recent.most_recent) == "2024-01-01T00:05:00+00:00"
    assert recent.missed is cu.Missed.NONE


def test_missed_times_are_counted_and_only_the_latest_is_due() -> None:
    cj = cronjob("*/5 * * * *")
    cj["status"]["lastScheduleTime"] = "2024-01-01T00:05:00Z"
    recent = due(cj, "2024-01-01T01:02:00+00:00")
    assert iso(recent.most_recent) == "2024-01-01T01:00:00+00:00"
    assert recent.missed is cu.Missed.FEW
    # more than 100 missed: "many" (the controller warns TooManyMissedTimes), the latest still found
    recent = due(cj, "2024-01-02T00:00:30+00:00")
    assert iso(recent.most_recent) == "2024-01-02T00:00:00+00:00"
    assert recent.missed is cu.Missed.MANY


def test_irregular_schedules_follow_upstreams_estimate() -> None:
    cj = cronjob("30 6-16/4 * * 1-5", created="2024-01-01T00:00:00Z")  # Monday
    recent = due(cj, "2024-01-01T15:00:00+00:00")
    assert iso(recent.most_recent) == "2024-01-01T14:30:00+00:00"
    assert recent.missed is cu.Missed.FEW
    # Over a weekend the interval estimate (4 h) overshoots past Friday's last time, and upstream finds
    # nothing due; the controller then waits for the next time from now (Monday 06:30).
    cj["status"]["lastScheduleTime"] = "2024-01-01T06:30:00Z"
    now = ts("2024-01-06T12:00:00+00:00")
    recent = due(cj, "2024-01-06T12:00:00+00:00")
    assert recent.most_recent is None and recent.missed is cu.Missed.FEW
    schedule = cron.parse(cj["spec"]["schedule"])
    assert iso(now + cu.next_schedule_delay(cj, now, schedule, UTC, 0.0)) == "2024-01-08T06:30:00+00:00"


def test_starting_deadline_limits_how_far_back_a_time_is_due() -> None:
    cj = cronjob("0 * * * *", startingDeadlineSeconds=600)
    recent = due(cj, "2024-01-01T05:20:00+00:00")
    assert recent.most_recent is None  # 05:00 is more than 10 minutes ago
    recent = due(cj, "2024-01-01T05:09:00+00:00")
    assert iso(recent.most_recent) == "2024-01-01T05:00:00+00:00"


def test_a_schedule_without_two_times_is_an_error() -> None:
    recent = due(cronjob("0 0 31 2 *"), "2024-03-01T00:00:00+00:00")
    assert recent.most_recent is None
    assert recent.error == "time difference between two schedules is less than 1 second"


def test_daily_schedule_in_a_time_zone_across_dst() -> None:
    """A 02:30 job in Europe/Berlin over the week clocks spring forward (2024-03-31): created jobs follow
    the zone's wall clock, the day without 02:30 has no job, and the names count minutes since the epoch."""
    cj = cronjob("30 2 * * *", created="2024-03-28T12:00:00Z", timeZone="Europe/Berlin")
    schedule = cron.parse(cu.format_schedule(cj))
    assert cu.format_schedule(cj) == "TZ=Europe/Berlin 30 2 * * *"
    runs: list[str] = []
    now = ts("2024-03-28T12:00:00+00:00")
    while now < ts("2024-04-03T00:00:00+00:00"):
        recent = cu.next_schedule_time(cj, now, schedule, UTC)
        if recent.most_recent is not None:
            runs.append(iso(recent.most_recent, "Europe/Berlin") or "")
            cj["status"]["lastScheduleTime"] = format_time(recent.most_recent)
        now += cu.next_schedule_delay(cj, now, schedule, UTC, 0.1)
    assert runs == [
        "2024-03-29T02:30:00+01:00",
        "2024-03-30T02:30:00+01:00",
        "2024-04-01T02:30:00+02:00",  # 2024-03-31 02:30 does not exist in Berlin
        "2024-04-02T02:30:00+02:00",
    ]
    job = cu.job_from_template(cj, ts("2024-04-01T02:30:00+02:00"))
    assert job["metadata"]["name"] == f"cj-{int(ts('2024-04-01T00:30:00+00:00')) // 60}"
    assert job["metadata"]["annotations"] == {
        "batch.kubernetes.io/cronjob-scheduled-timestamp": "2024-04-01T02:30:00+02:00"
    }


def test_next_schedule_delay_waits_for_the_next_time_plus_the_delta() -> None:
    cj = cronjob("*/5 * * * *")
    schedule = cron.parse("*/5 * * * *")
    cj["status"]["lastScheduleTime"] = "2024-01-01T00:05:00Z"
    delay = cu.next_schedule_delay(cj, ts("2024-01-01T00:06:00+00:00"), schedule, UTC, 0.1)
    assert delay == pytest.approx(240.1)


def test_job_from_template_and_history() -> None:
    cj = cronjob(jobTemplate={"metadata": {"labels": {"a": "b"}}, "spec": {"backoffLimit": 1}})
    job = cu.job_from_template(cj, ts("2024-01-01T00:05:00+00:00"))
    assert job["metadata"]["name"] == "cj-28401125"
    assert job["metadata"]["labels"] == {"a": "b"}
    assert job["metadata"]["annotations"] == {
        "batch.kubernetes.io/cronjob-scheduled-timestamp": "2024-01-01T00:05:00Z"
    }
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "name": "cj",
            "uid": "cj-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert job["spec"] == {"backoffLimit": 1}
    assert cu.rfc1123z(ts("2024-01-01T00:05:00+00:00")) == "Mon, 01 Jan 2024 00:05:00 +0000"

    def finished(name: str, kind: str, start: str | None) -> dict[str, Any]:
        status: dict[str, Any] = {"conditions": [{"type": kind, "status": "True"}]}
        if start:
            status["startTime"] = start
        return {"metadata": {"name": name}, "status": status}

    jobs = [
        finished("c", "Complete", "2024-01-01T00:03:00Z"),
        finished("a", "Complete", "2024-01-01T00:01:00Z"),
        finished("z", "Complete", None),
        finished("b", "Complete", "2024-01-01T00:02:00Z"),
        finished("f1", "Failed", "2024-01-01T00:01:00Z"),
        finished("f2", "Failed", "2024-01-01T00:02:00Z"),
        {"metadata": {"name": "running"}, "status": {"startTime": "2024-01-01T00:00:00Z"}},
    ]
    limited = cronjob(successfulJobsHistoryLimit=2, failedJobsHistoryLimit=1)
    assert [j["metadata"]["name"] for j in cu.history_to_delete(limited, jobs)] == ["a", "b", "f1"]
    assert cu.history_to_delete(cronjob(), jobs) == []  # no limits: keep everything
    zero = cronjob(successfulJobsHistoryLimit=0, failedJobsHistoryLimit=0)
    assert len(cu.history_to_delete(zero, jobs)) == 6


def test_time_zone_messages() -> None:
    assert cu.time_zone_error(cronjob(timeZone="Mars/Base")) == (
        'invalid timeZone: "Mars/Base": unknown time zone Mars/Base'
    )
    assert cu.time_zone_error(cronjob(timeZone="Asia/Tokyo")) is None
    assert cu.format_schedule(cronjob(timeZone="Mars/Base")) == "* * * * *"
    assert cu.uses_tz_prefix(cronjob("CRON_TZ=Asia/Tokyo 0 9 * * *"))


# -- Job: back-off, indexes, conditions ------------------------------------------------------------------


def test_backoff_doubles_from_ten_seconds_to_the_cap() -> None:
    delays = [ju.backoff_delay(n, 10.0, 600.0) for n in range(9)]
    assert delays == [0.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 600.0, 600.0]
    record = ju.BackoffRecord(3, 1000.0)
    assert ju.remaining_backoff(record, 1010.0, 10.0, 600.0) == 30.0
    assert ju.remaining_backoff(record, 1041.0, 10.0, 600.0) == 0.0
    assert ju.remaining_backoff(ju.BackoffRecord(), 1000.0, 10.0, 600.0) == 0.0


def pod(
    name: str,
    phase: str = "Running",
    *,
    finished: str | None = None,
    index: int | None = None,
    ready: bool = False,
    finalizer: bool = True,
    **meta: Any,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", **meta}
    if finalizer:
        metadata["finalizers"] = [ju.TRACKING_FINALIZER]
    if index is not None:
        metadata["annotations"] = {ju.COMPLETION_INDEX: str(index)}
    status: dict[str, Any] = {"phase": phase}
    if finished:
        status["containerStatuses"] = [{"state": {"terminated": {"finishedAt": finished}}}]
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    return {"metadata": metadata, "spec": {}, "status": status}


def test_backoff_record_counts_failures_since_the_last_success() -> None:
    f1 = pod("f1", "Failed", finished="2024-01-01T00:00:10Z")
    f2 = pod("f2", "Failed", finished="2024-01-01T00:00:30Z")
    s1 = pod("s1", "Succeeded", finished="2024-01-01T00:00:20Z")
    record = ju.new_backoff_record(ju.BackoffRecord(), [], [f1])
    assert record == ju.BackoffRecord(1, ts("2024-01-01T00:00:10+00:00"))
    record = ju.new_backoff_record(record, [], [f2])
    assert record == ju.BackoffRecord(2, ts("2024-01-01T00:00:30+00:00"))
    # a success in the same sync: only failures after it count
    assert ju.new_backoff_record(ju.BackoffRecord(5, 0.0), [s1], [f1, f2]) == ju.BackoffRecord(
        1, ts("2024-01-01T00:00:30+00:00")
    )
    assert ju.new_backoff_record(record, [s1], []) == ju.BackoffRecord()
    # finish time falls back to Ready=False, then deletion minus grace, then creation
    deleted = pod("d", deletionTimestamp="2024-01-01T00:01:00Z", deletionGracePeriodSeconds=30)
    assert ju.finished_time(deleted) == ts("2024-01-01T00:00:30+00:00")


def job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 6,
            "completionMode": "NonIndexed",
            "template": {"metadata": {"labels": {"job-name": "j"}}, "spec": {"containers": [{"name": "c"}]}},
            **spec,
        },
        "status": {},
    }


def test_intervals_round_trip() -> None:
    assert ju.parse_indexes("1,3-5,7", 10) == [(1, 1), (3, 5), (7, 7)]
    assert ju.format_intervals(ju.with_indexes([(1, 1), (3, 5)], [2, 7, 8])) == "1-5,7,8"
    assert ju.format_intervals([(0, 1), (4, 6)]) == "0,1,4-6"
    assert ju.parse_indexes("0-9,x,12", 5) == [(0, 4)]  # past completions and malformed parts dropped
    assert ju.intervals_total([(0, 2), (5, 5)]) == 4


def test_indexed_jobs_start_the_lowest_free_indexes_and_drop_duplicates() -> None:
    indexed = job(completionMode="Indexed", completions=6, parallelism=3)
    running = [pod("a", index=1), pod("b", index=3)]
    assert ju.first_pending_indexes(indexed, [(0, 0), (4, 4)], running, [], 3) == [2, 5]
    # podReplacementPolicy Failed: a terminating pod still holds its index
    strict = job(completionMode="Indexed", completions=6, podReplacementPolicy="Failed")
    assert ju.first_pending_indexes(strict, [], running, [pod("t", index=0)], 2) == [2, 4]
    dup = [pod("x1", index=2), pod("x2", index=2, ready=True), pod("bad", index=9), pod("none")]
    removed = {p["metadata"]["name"] for p in ju.active_pods_for_removal(indexed, dup, 0, 0.0)}
    assert removed == {"x1", "bad", "none"}  # the ready duplicate is kept


def test_want_active() -> None:
    assert ju.want_active(job(completions=5, parallelism=2), 4, 0) == 1
    assert ju.want_active(job(completions=5, parallelism=2), 0, 0) == 2
    work_queue = job(parallelism=3)
    del work_queue["spec"]["completions"]
    assert ju.want_active(work_queue, 0, 0) == 3
    assert ju.want_active(work_queue, 1, 2) == 2  # after a success, what runs may finish


def test_deadlines_and_restart_limits() -> None:
    j = job(activeDeadlineSeconds=30)
    j["status"]["startTime"] = "2024-01-01T00:00:00Z"
    assert not ju.past_active_deadline(j, ts("2024-01-01T00:00:29+00:00"))
    assert ju.past_active_deadline(j, ts("2024-01-01T00:00:30+00:00"))
    assert ju.deadline_in(j, ts("2024-01-01T00:00:10+00:00")) == 20
    j["spec"]["suspend"] = True
    assert not ju.past_active_deadline(j, ts("2024-01-01T01:00:00+00:00"))
    on_failure = job(backoffLimit=2)
    on_failure["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    restarting = pod("r")
    restarting["status"]["containerStatuses"] = [{"restartCount": 2}]
    assert ju.past_backoff_limit_on_failure(on_failure, [restarting])
    restarting["status"]["containerStatuses"] = [{"restartCount": 1}]
    assert not ju.past_backoff_limit_on_failure(on_failure, [restarting])


def test_conditions() -> None:
    conds, changed = ju.ensure_condition([], "Suspended", "False", "JobResumed", "Job resumed", 0.0)
    assert (conds, changed) == ([], False)  # nothing to say False about
    conds, changed = ju.ensure_condition([], "Suspended", "True", "JobSuspended", "Job suspended", 0.0)
    assert changed and conds[0]["status"] == "True" and conds[0]["lastProbeTime"] == "1970-01-01T00:00:00Z"
    conds, changed = ju.ensure_condition(conds, "Suspended", "False", "JobResumed", "Job resumed", 60.0)
    assert changed and conds == [
        {
            "type": "Suspended",
            "status": "False",
            "lastProbeTime": "1970-01-01T00:01:00Z",
            "lastTransitionTime": "1970-01-01T00:01:00Z",
            "reason": "JobResumed",
            "message": "Job resumed",
        }
    ]
    failed = pod("p", deletionTimestamp="2024-01-01T00:00:00Z")
    assert ju.is_pod_failed(failed, job())  # deleted before finishing counts as failed...
    assert not ju.is_pod_failed(failed, job(podReplacementPolicy="Failed"))  # ...unless only Failed counts


def test_pods_of_an_indexed_job() -> None:
    indexed = job(completionMode="Indexed", completions=3)
    made = ju.pod_for(indexed, 2)
    meta = made["metadata"]
    assert meta["generateName"] == "j-2-"
    assert meta["annotations"] == {ju.COMPLETION_INDEX: "2"}
    assert meta["labels"] == {"job-name": "j", ju.COMPLETION_INDEX: "2"}
    assert meta["finalizers"] == [ju.TRACKING_FINALIZER]
    assert made["spec"]["hostname"] == "j-2"
    assert made["spec"]["containers"][0]["env"] == [
        {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
            },
        }
    ]
    assert ju.generate_name_with_index("x" * 60, 12) == "x" * 54 + "-12-"
    plain = ju.pod_for(job(), None)
    assert plain["metadata"]["generateName"] == "j-" and "hostname" not in plain["spec"]
    assert ju.remove_finalizer_patch(plain) == {
        "metadata": {"$deleteFromPrimitiveList/finalizers": [ju.TRACKING_FINALIZER]}
    }


def test_status_wire_form() -> None:
    assert ju.status_for_write(
        {
            "active": 0,
            "succeeded": 2,
            "failed": 0,
            "ready": 0,
            "terminating": 0,
            "uncountedTerminatedPods": {"succeeded": []},
        }
    ) == {"succeeded": 2, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {}}


# -- TTL after finished ------------------------------------------------------------------------------------


def test_ttl_time_left() -> None:
    finished = job(ttlSecondsAfterFinished=100)
    assert ttl.time_left(finished, 0.0) is None  # not finished
    finished["status"]["conditions"] = [
        {"type": "Complete", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}
    ]
    assert ttl.time_left(finished, ts("2024-01-01T00:00:40+00:00")) == 60
    assert ttl.time_left(finished, ts("2024-01-01T00:02:00+00:00")) == -20
    finished["metadata"]["deletionTimestamp"] = "2024-01-01T00:02:00Z"
    assert ttl.time_left(finished, 0.0) is None  # being deleted already
    no_ttl = job()
    no_ttl["status"]["conditions"] = finished["status"]["conditions"]
    assert ttl.time_left(no_ttl, 0.0) is None
    broken = job(ttlSecondsAfterFinished=1)
    broken["status"]["conditions"] = [{"type": "Failed", "status": "True"}]
    with pytest.raises(ttl.TTLError):
        ttl.time_left(broken, 0.0)

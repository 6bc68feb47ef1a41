"""The Job, CronJob and TTL-after-finished controllers in the controller manager against the in-memory API of
``test_kcm_controllers`` (no server, no sockets), with fake time (looptime): minutes of CronJob schedules,
the pod failure back-off, ``activeDeadlineSeconds`` and TTLs pass in milliseconds. The fake API here also
keeps objects with finalizers until they are removed, honours UID preconditions, applies the API server's
Job defaults and records each delete's propagation policy; a kubelet stand-in finishes pods as told.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from test_kcm_controllers import T0, Cluster, FakeKube, loop_clock, plain_tracebacks  # noqa: F401

from vplane.apiserver.kinds.batch import default_job_spec
from vplane.controllers.client import Resource
from vplane.controllers.kcm import jobutil as ju
from vplane.controllers.kcm.cronjobutil import CRONJOBS
from vplane.controllers.kcm.jobutil import JOBS
from vplane.controllers.kcm.manager import ControllerManager
from vplane.controllers.kcm.resources import NAMESPACES, PODS
from vplane.controllers.kcm.settings import ControllerManagerSettings
from vplane.controllers.kcm.timefmt import format_time, parse_time
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

Outcome = Callable[[Obj], str | None]
"""For a pod that started: the phase to finish it with (Succeeded/Failed), or None to keep it running."""


class BatchKube(FakeKube):
    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock)
        self.deletes: list[tuple[str, str, str | None, str | None]] = []
        self.created_at: dict[str, float] = {}
        self.create_hook = self._defaults

    def _defaults(self, resource: Resource, obj: Obj) -> None:
        """What the API server adds to a Job (a selector and template labels, ``default_job_spec``)."""
        if resource.kind != "Job":
            return
        spec = obj.setdefault("spec", {})
        name = obj["metadata"]["name"]
        if spec.get("selector") is None:
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/job-name": name}}
            template_labels = (
                spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
            )
            template_labels.update({"batch.kubernetes.io/job-name": name, "job-name": name})
        default_job_spec(spec)

    async def create(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        created = await super().create(resource, obj, namespace=namespace)
        if resource.kind == "Pod":
            self.created_at[created["metadata"]["name"]] = self.clock()
        return created

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: str | None = None,
        precondition_uid: str | None = None,
    ) -> None:
        self.deletes.append((resource.plural, name, propagation_policy, precondition_uid))
        old = self.peek(resource, namespace, name)
        if old is None:
            raise self._not_found(resource, name)
        if precondition_uid is not None and old["metadata"]["uid"] != precondition_uid:
            raise StatusError(409, "Conflict", "Precondition failed: UID in precondition")
        if old["metadata"].get("finalizers"):
            if not old["metadata"].get("deletionTimestamp"):
                marked = copy.deepcopy(old)
                marked["metadata"]["deletionTimestamp"] = format_time(self.clock())
                marked["metadata"]["deletionGracePeriodSeconds"] = 0
                await self._commit(resource, "MODIFIED", marked)
            return
        await super().delete(resource, name, namespace=namespace)

    async def patch(self, resource: Resource, name: str, patch: Any, **kwargs: Any) -> Obj:
        patched = await super().patch(resource, name, patch, **kwargs)
        meta = patched["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            await FakeKube.delete(self, resource, name, namespace=meta.get("namespace"))
        return patched

    async def finish(self, pod: Obj, phase: str) -> None:
        now = format_time(self.clock())
        pod = copy.deepcopy(pod)
        pod["status"] = {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
            "containerStatuses": [
                {
                    "name": "c",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {"exitCode": 0 if phase == "Succeeded" else 1, "finishedAt": now}
                    },
                }
            ],
        }
        await self.replace_status(PODS, pod, namespace=pod["metadata"]["namespace"])


async def kubelet(kube: BatchKube, outcome: Outcome, stop: asyncio.Event) -> None:
    """Start pods, finish them as ``outcome`` says, and end deleted ones (Failed), every half second."""
    while not stop.is_set():
        for pod in kube.objects(PODS, "ns"):
            phase = pod["status"].get("phase")
            try:
                if pod["metadata"].get("deletionTimestamp"):
                    if phase not in ("Succeeded", "Failed"):
                        await kube.finish(pod, "Failed")
                elif phase == "Pending":
                    pod["status"] = {"phase": "Running"}
                    await kube.replace_status(PODS, pod, namespace="ns")
                elif phase == "Running":
                    result = outcome(pod)
                    if result is not None:
                        await kube.finish(pod, result)
            except StatusError as exc:
                if exc.code not in (404, 409):
                    raise
        await asyncio.sleep(0.5)


class Batch(Cluster):
    kube: BatchKube

    def __init__(self, kube: BatchKube, manager: ControllerManager) -> None:
        super().__init__(kube, manager)
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def run_kubelet(self, outcome: Outcome) -> None:
        self.tasks.append(asyncio.create_task(kubelet(self.kube, outcome, self.stop)))

    def job(self, name: str) -> Obj | None:
        found = self.kube.peek(JOBS, "ns", name)
        return copy.deepcopy(found) if found is not None else None

    def jobs(self) -> list[Obj]:
        return self.kube.objects(JOBS, "ns")

    def condition(self, name: str, kind: str) -> Obj | None:
        job = self.job(name)
        return ju.find_condition(ju.conditions(job), kind) if job is not None else None

    def messages(self, reason: str, kind: str | None = None) -> list[str]:
        return [
            e["message"] for e in self.events(reason) if kind is None or e["involvedObject"]["kind"] == kind
        ]


@pytest.fixture
async def batch(request: pytest.FixtureRequest) -> AsyncIterator[Batch]:
    """The three controllers on a fake API; a test parametrizes this fixture (indirect) to override settings."""
    clock = loop_clock()
    kube = BatchKube(clock)
    await kube.create(NAMESPACES, {"metadata": {"name": "ns"}})
    overrides: dict[str, Any] = getattr(request, "param", {})
    settings = ControllerManagerSettings(
        controllers=["job", "cronjob", "ttl-after-finished"], cronjob_default_time_zone="UTC", **overrides
    )
    manager = ControllerManager(kube, settings, clock=clock)
    task = asyncio.create_task(manager.run())
    async with asyncio.timeout(10):
        await manager.ready.wait()
    cluster = Batch(kube, manager)
    yield cluster
    cluster.stop.set()
    await asyncio.gather(*cluster.tasks)
    if task.done():
        task.result()
        raise AssertionError("the controller manager stopped")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def job_body(name: str, command: str = "true", **spec: Any) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "args": [command]}],
                }
            },
            **spec,
        },
    }


def cronjob_body(name: str, schedule: str = "* * * * *", **spec: Any) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Allow",
            "suspend": False,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 1,
            "jobTemplate": {"spec": job_body("unused")["spec"]},
            **spec,
        },
    }


def succeed(pod: Obj) -> str:
    return "Succeeded"


def fail(pod: Obj) -> str:
    return "Failed"


def keep_running(pod: Obj) -> None:
    return None


# -- Jobs ------------------------------------------------------------------------------------------------


@pytest.mark.looptime
async def test_job_runs_to_completion_within_parallelism(batch: Batch) -> None:
    kube = batch.kube
    most_active = 0

    def watch_active(event: str, resource: Resource, obj: Obj) -> None:
        nonlocal most_active
        running = [p for p in kube.objects(PODS, "ns") if p["status"].get("phase") in ("Pending", "Running")]
        most_active = max(most_active, len(running))

    kube.write_hook = watch_active
    batch.run_kubelet(succeed)
    await kube.create(JOBS, job_body("work", completions=5, parallelism=2), namespace="ns")
    await batch.eventually(lambda: batch.condition("work", "Complete") is not None, "Complete")
    job = batch.job("work")
    assert job is not None
    status = job["status"]
    complete = ju.find_condition(status["conditions"], "Complete")
    met = ju.find_condition(status["conditions"], "SuccessCriteriaMet")
    assert met is not None and complete is not None
    assert [c["type"] for c in status["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    for cond in (met, complete):
        assert (cond["reason"], cond["message"], cond["status"]) == (
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            "True",
        )
    assert status["completionTime"] == complete["lastTransitionTime"]
    assert {k: v for k, v in status.items() if k not in ("conditions", "startTime", "completionTime")} == {
        "succeeded": 5,
        "ready": 0,
        "terminating": 0,
        "uncountedTerminatedPods": {},
    }
    assert most_active <= 2
    pods = kube.objects(PODS, "ns")
    assert len(pods) == 5
    for pod in pods:
        assert pod["metadata"]["generateName"] == "work-"
        assert pod["metadata"]["labels"]["job-name"] == "work"
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "work"
        assert not pod["metadata"].get("finalizers")  # counted, then released
        (ref,) = pod["metadata"]["ownerReferences"]
        assert ref["kind"] == "Job" and ref["uid"] == job["metadata"]["uid"] and ref["controller"] is True
    assert sorted(batch.messages("SuccessfulCreate")) == sorted(
        f"Created pod: {p['metadata']['name']}" for p in pods
    )
    assert batch.messages("Completed") == ["Job completed"]


@pytest.mark.looptime
async def test_job_fails_after_backoff_limit_with_a_doubling_back_off(batch: Batch) -> None:
    kube = batch.kube
    batch.run_kubelet(fail)
    await kube.create(JOBS, job_body("flaky", backoffLimit=3), namespace="ns")
    await batch.eventually(lambda: batch.condition("flaky", "Failed") is not None, "Failed", within=600)
    job = batch.job("flaky")
    assert job is not None
    target = batch.condition("flaky", "FailureTarget")
    failed = batch.condition("flaky", "Failed")
    assert target is not None and failed is not None
    for cond in (target, failed):
        assert (cond["reason"], cond["message"]) == (
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
    assert job["status"]["failed"] == 4
    assert "completionTime" not in job["status"]
    starts = sorted(kube.created_at.values())
    assert len(starts) == 4
    gaps = [later - earlier for earlier, later in zip(starts, starts[1:], strict=False)]
    # each replacement waits 10 s, 20 s, 40 s after the last failure (fake time: the kubelet stand-in and
    # the one-second sync batching add at most a couple of seconds)
    for gap, backoff in zip(gaps, (10, 20, 40), strict=True):
        assert backoff <= gap < backoff + 3, gaps
    assert batch.messages("BackoffLimitExceeded") == ["Job has reached the specified backoff limit"]


@pytest.mark.looptime
async def test_active_deadline_fails_the_job_and_removes_its_pods(batch: Batch) -> None:
    kube = batch.kube
    batch.run_kubelet(keep_running)
    await kube.create(
        JOBS, job_body("slow", activeDeadlineSeconds=30, parallelism=2, completions=4), namespace="ns"
    )
    await batch.eventually(lambda: len(kube.objects(PODS, "ns")) == 2, "two pods")
    await batch.eventually(lambda: batch.condition("slow", "Failed") is not None, "Failed", within=120)
    job = batch.job("slow")
    assert job is not None
    started, failed_at = (
        parse_time(job["status"]["startTime"]),
        parse_time(
            ju.find_condition(job["status"]["conditions"], "Failed")["lastTransitionTime"]  # type: ignore[index]
        ),
    )
    assert started is not None and failed_at is not None and failed_at - started >= 30
    assert batch.condition("slow", "Failed")["reason"] == "DeadlineExceeded"  # type: ignore[index]
    assert job["status"]["failed"] == 2 and job["status"]["terminating"] == 0
    assert kube.objects(PODS, "ns") == []  # deleted, counted, released
    assert batch.messages("DeadlineExceeded") == ["Job was active longer than specified deadline"]


@pytest.mark.looptime
async def test_suspend_and_resume(batch: Batch) -> None:
    kube = batch.kube
    batch.run_kubelet(keep_running)
    await kube.create(JOBS, job_body("paused", suspend=True, parallelism=2, completions=2), namespace="ns")
    await batch.eventually(lambda: batch.condition("paused", "Suspended") is not None, "Suspended")
    job = batch.job("paused")
    assert job is not None
    assert "startTime" not in job["status"] and kube.objects(PODS, "ns") == []
    assert batch.messages("Suspended") == ["Job suspended"]
    job["spec"]["suspend"] = False
    await kube.replace(JOBS, job, namespace="ns")
    await batch.eventually(lambda: len(kube.objects(PODS, "ns")) == 2, "two pods")
    await batch.eventually(
        lambda: (batch.condition("paused", "Suspended") or {}).get("status") == "False", "resumed"
    )
    resumed = batch.condition("paused", "Suspended")
    assert resumed is not None and (resumed["reason"], resumed["message"]) == ("JobResumed", "Job resumed")
    assert batch.messages("Resumed") == ["Job resumed"]
    assert batch.job("paused")["status"].get("startTime")  # type: ignore[index]
    # suspending again deletes the running pods
    job = batch.job("paused")
    assert job is not None
    job["spec"]["suspend"] = True
    await kube.replace(JOBS, job, namespace="ns")
    await batch.eventually(lambda: kube.objects(PODS, "ns") == [], "pods removed")
    await batch.eventually(lambda: batch.job("paused")["status"].get("active", 0) == 0, "active 0")  # type: ignore[index]


@pytest.mark.looptime
async def test_indexed_job(batch: Batch) -> None:
    kube = batch.kube
    batch.run_kubelet(succeed)
    await kube.create(
        JOBS, job_body("idx", completionMode="Indexed", completions=3, parallelism=3), namespace="ns"
    )
    await batch.eventually(lambda: batch.condition("idx", "Complete") is not None, "Complete")
    status = batch.job("idx")["status"]  # type: ignore[index]
    assert status["completedIndexes"] == "0-2" and status["succeeded"] == 3
    pods = kube.objects(PODS, "ns")
    assert sorted(p["metadata"]["annotations"][ju.COMPLETION_INDEX] for p in pods) == ["0", "1", "2"]
    for pod in pods:
        index = pod["metadata"]["annotations"][ju.COMPLETION_INDEX]
        assert pod["metadata"]["labels"][ju.COMPLETION_INDEX] == index
        assert pod["spec"]["hostname"] == f"idx-{index}"
        assert pod["metadata"]["generateName"] == f"idx-{index}-"


@pytest.mark.looptime
@pytest.mark.parametrize(
    "batch", [{"job_max_pod_create_delete_per_sync": 2, "job_max_uncounted_pods": 1}], indirect=True
)
async def test_per_sync_limits_spread_work_over_syncs(batch: Batch) -> None:
    """At most two pods created per sync, one finished pod counted per sync: the Job still completes."""
    kube = batch.kube
    creates: list[int] = []

    def count_creates(event: str, resource: Resource, obj: Obj) -> None:
        if event == "ADDED" and resource.kind == "Pod":
            creates.append(kube.revision)

    kube.write_hook = count_creates
    controller = batch.manager.controllers["job"].controller
    inner = controller._reconcile
    per_sync: list[int] = []

    async def counted(key: str) -> float | None:
        before = len(creates)
        try:
            return await inner(key)
        finally:
            per_sync.append(len(creates) - before)

    controller._reconcile = counted
    batch.run_kubelet(succeed)
    await kube.create(JOBS, job_body("chunked", completions=6, parallelism=6), namespace="ns")
    await batch.eventually(lambda: batch.condition("chunked", "Complete") is not None, "Complete", within=300)
    status = batch.job("chunked")["status"]  # type: ignore[index]
    assert status["succeeded"] == 6 and status["uncountedTerminatedPods"] == {}
    assert len(creates) == 6 and max(per_sync) == 2


@pytest.mark.looptime
async def test_a_deleted_jobs_pods_lose_the_tracking_finalizer(batch: Batch) -> None:
    kube = batch.kube
    batch.run_kubelet(keep_running)
    await kube.create(JOBS, job_body("gone"), namespace="ns")
    await batch.eventually(lambda: len(kube.objects(PODS, "ns")) == 1, "a pod")
    await kube.delete(JOBS, "gone", namespace="ns")
    await batch.eventually(
        lambda: not any(p["metadata"].get("finalizers") for p in kube.objects(PODS, "ns")),
        "finalizer removed",
    )


# -- CronJobs --------------------------------------------------------------------------------------------


def minute_of(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


@pytest.mark.looptime
async def test_cronjob_runs_every_minute_and_keeps_its_history(batch: Batch) -> None:
    kube = batch.kube
    batch.run_kubelet(succeed)
    await kube.create(CRONJOBS, cronjob_body("tick", successfulJobsHistoryLimit=2), namespace="ns")
    # T0 is 22:13:20 UTC: the first run is at 22:14:00, then every minute
    await asyncio.sleep(4 * 60 + 10)
    cj = batch.obj(CRONJOBS, "tick")
    first = (int(T0) // 60) + 1
    created = batch.messages("SuccessfulCreate", "CronJob")
    assert created == [f"Created job tick-{first + i}" for i in range(4)]
    assert cj["status"]["lastScheduleTime"] == format_time((first + 3) * 60)
    assert parse_time(cj["status"]["lastSuccessfulTime"]) >= (first + 3) * 60  # type: ignore[operator]
    assert "active" not in cj["status"]
    names = sorted(j["metadata"]["name"] for j in batch.jobs())
    assert names == [f"tick-{first + 2}", f"tick-{first + 3}"]  # successfulJobsHistoryLimit: 2
    assert batch.messages("SuccessfulDelete") == [
        f"Deleted job tick-{first}",
        f"Deleted job tick-{first + 1}",
    ]
    assert ("jobs", f"tick-{first}", "Background", None) in kube.deletes
    assert f"Saw completed job: tick-{first}, condition: Complete" in batch.messages("SawCompletedJob")
    job = batch.job(f"tick-{first + 3}")
    assert job is not None
    assert job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"] == format_time(
        (first + 3) * 60
    )
    (ref,) = job["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"]) == ("CronJob", "tick", cj["metadata"]["uid"])


@pytest.mark.looptime
async def test_cronjob_forbid_skips_while_a_job_runs(batch: Batch) -> None:
    kube = batch.kube
    batch.run_kubelet(keep_running)
    await kube.create(CRONJOBS, cronjob_body("solo", concurrencyPolicy="Forbid"), namespace="ns")
    await asyncio.sleep(3 * 60)
    assert len(batch.jobs()) == 1
    cj = batch.obj(CRONJOBS, "solo")
    (active,) = cj["status"]["active"]
    assert active["kind"] == "Job" and active["name"] == batch.jobs()[0]["metadata"]["name"]
    assert batch.messages("JobAlreadyActive")[0] == (
        "Not starting job because prior execution is running and concurrency policy is Forbid"
    )


@pytest.mark.looptime
async def test_cronjob_replace_deletes_the_running_job(batch: Batch) -> None:
    kube = batch.kube
    batch.run_kubelet(keep_running)
    await kube.create(CRONJOBS, cronjob_body("swap", concurrencyPolicy="Replace"), namespace="ns")
    await asyncio.sleep(2 * 60)
    first = (int(T0) // 60) + 1
    assert [j["metadata"]["name"] for j in batch.jobs()] == [f"swap-{first + 1}"]
    assert batch.messages("SuccessfulDelete") == [f"Deleted job swap-{first}"]
    (active,) = batch.obj(CRONJOBS, "swap")["status"]["active"]
    assert active["name"] == f"swap-{first + 1}"


@pytest.mark.looptime
async def test_cronjob_skips_a_time_past_its_starting_deadline(batch: Batch) -> None:
    """Times older than ``startingDeadlineSeconds`` are not due at all (upstream moves the earliest time
    up to the deadline), so the 22:18:00 run a resumed CronJob finds 20 s late is skipped, not started."""
    kube = batch.kube
    await kube.create(
        CRONJOBS, cronjob_body("late", suspend=True, startingDeadlineSeconds=10), namespace="ns"
    )
    await asyncio.sleep(300)  # 22:18:20
    cj = batch.obj(CRONJOBS, "late")
    cj["spec"]["suspend"] = False
    await kube.replace(CRONJOBS, cj, namespace="ns")
    await asyncio.sleep(30)
    assert batch.jobs() == []
    await asyncio.sleep(30)  # 22:19:00 is on time
    assert [j["metadata"]["name"] for j in batch.jobs()] == [f"late-{int(T0) // 60 + 6}"]


@pytest.mark.looptime
async def test_cronjob_in_a_time_zone(batch: Batch) -> None:
    kube = batch.kube
    # 23:15 in Asia/Kolkata (UTC+05:30) is 17:45 UTC: the next one after T0 (22:13:20 UTC) is the day after
    await kube.create(CRONJOBS, cronjob_body("zoned", "15 23 * * *", timeZone="Asia/Kolkata"), namespace="ns")
    await asyncio.sleep(24 * 3600)
    (job,) = batch.jobs()
    scheduled = job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
    assert scheduled == "2023-11-15T23:15:00+05:30"
    assert batch.obj(CRONJOBS, "zoned")["status"]["lastScheduleTime"] == "2023-11-15T17:45:00Z"


# -- TTL after finished ------------------------------------------------------------------------------------


@pytest.mark.looptime
async def test_finished_job_is_deleted_after_its_ttl(batch: Batch) -> None:
    kube = batch.kube
    batch.run_kubelet(succeed)
    await kube.create(JOBS, job_body("brief", ttlSecondsAfterFinished=30), namespace="ns")
    await batch.eventually(lambda: batch.condition("brief", "Complete") is not None, "Complete")
    finished = parse_time(batch.condition("brief", "Complete")["lastTransitionTime"])  # type: ignore[index]
    uid = batch.job("brief")["metadata"]["uid"]  # type: ignore[index]
    await batch.eventually(lambda: batch.job("brief") is None, "deleted", within=120)
    assert ("jobs", "brief", "Foreground", uid) in kube.deletes
    deleted_at = kube.clock()
    assert finished is not None and deleted_at - finished >= 30

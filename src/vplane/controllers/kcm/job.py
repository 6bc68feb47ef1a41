"""The Job controller (upstream ``pkg/controller/job``).

Each sync of a Job: claim its pods; count pods that finished since the last sync; decide whether the Job
has failed (``backoffLimit``, or restarts under ``OnFailure``: ``BackoffLimitExceeded``;
``activeDeadlineSeconds``: ``DeadlineExceeded``) or succeeded (``completions`` reached, or any success
without ``completions``); otherwise create or delete pods towards ``parallelism`` (after the pod failure
back-off: 10 s doubling per failure since the last success, capped), delete everything while suspended.
Indexed Jobs give each pod an index (annotation, label, hostname, ``JOB_COMPLETION_INDEX``) and track
``completedIndexes``.

Pods carry the ``batch.kubernetes.io/job-tracking`` finalizer until counted: a finished pod's UID goes
into ``status.uncountedTerminatedPods`` first, then its finalizer is removed, then it moves into
``succeeded``/``failed``, so no pod is counted twice or lost if the controller stops in between. A Job
ends in two steps as upstream: ``SuccessCriteriaMet`` or ``FailureTarget`` first, then ``Complete`` or
``Failed`` once no pod is uncounted or terminating. Orphaned pods that still carry the finalizer get it
removed by a second, small queue.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

from vplane.controllers.informer import object_key
from vplane.controllers.kcm import jobutil as ju
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.events import NORMAL, WARNING
from vplane.controllers.kcm.expectations import Expectations
from vplane.controllers.kcm.jobutil import JOBS
from vplane.controllers.kcm.podowners import PodOwners
from vplane.controllers.kcm.refmanager import claim, recheck_alive
from vplane.controllers.kcm.replicaset import error_text, namespace_terminating, slow_start_batches
from vplane.controllers.kcm.resources import PODS
from vplane.controllers.kcm.timefmt import format_time, parse_time
from vplane.controllers.workqueue import ShutDown, WorkQueue
from vplane.kube import labels as labelsel
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj


class _JobKind:
    """Jobs as pod owners: a controller reference is one by its kind alone (upstream's job controller does
    not check the group)."""

    def owns(self, ref: Obj) -> bool:
        return ref.get("kind") == "Job"

    def selector(self, obj: Obj) -> labelsel.Selector:
        return labelsel.from_label_selector(ju.spec(obj).get("selector"))


@dataclass
class SyncState:
    """What one sync learns and changes (upstream's ``syncJobCtx``)."""

    job: Obj
    pods: list[Obj]
    active_pods: list[Obj]
    uncounted_succeeded: set[str]
    uncounted_failed: set[str]
    expected_rm: set[str]
    backoff: ju.BackoffRecord
    finished: Obj | None = None
    succeeded: int = 0
    failed: int = 0
    ready: int = 0
    terminating: int = 0
    prev_succeeded_indexes: ju.Intervals = field(default_factory=list)
    succeeded_indexes: ju.Intervals = field(default_factory=list)
    failed_indexes: ju.Intervals | None = None
    """With ``backoffLimitPerIndex``: the indexes that have failed (None otherwise)."""
    delayed: dict[int, Obj] = field(default_factory=dict)
    """With ``backoffLimitPerIndex``: per index, the failed pod whose finalizer waits for a replacement."""


def _status(job: Obj) -> Obj:
    status = job.get("status")
    if not isinstance(status, dict):
        status = job["status"] = {}
    return status


def _uncounted(job: Obj) -> Obj:
    status = _status(job)
    value = status.get("uncountedTerminatedPods")
    if not isinstance(value, dict):
        value = status["uncountedTerminatedPods"] = {}
    return value


def _clean_uncounted(job: Obj, with_finalizer: set[str]) -> bool:
    """``cleanUncountedPodsWithoutFinalizers``: UIDs whose finalizer is gone move into the counters."""
    status, uncounted = _status(job), _uncounted(job)
    updated = False
    for list_key, counter in (("succeeded", "succeeded"), ("failed", "failed")):
        uids = list(uncounted.get(list_key) or [])
        kept = [u for u in uids if u in with_finalizer]
        if len(kept) != len(uids):
            updated = True
            status[counter] = int(status.get(counter) or 0) + len(uids) - len(kept)
            uncounted[list_key] = kept
    return updated


class JobController(ManagedController):
    name = "job"
    event_source = "job-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        informers = ctx.informers
        self.jobs = informers.informer(JOBS)
        self.pods = informers.informer(PODS)
        self.jobs_by_namespace = informers.namespace_index(JOBS)
        self.owners = PodOwners(_JobKind(), self.jobs, self.jobs_by_namespace)
        self.pods_by_owner = informers.controller_index(PODS)
        self.orphan_pods = informers.orphan_index(PODS)
        super().__init__(ctx, self.jobs, [self.pods], ctx.settings.concurrent_job_syncs)
        self.settings = ctx.settings
        self.expectations = Expectations(ctx.clock, ctx.settings.expectations_timeout_seconds)
        self.finalizer_expectations: dict[str, set[str]] = {}
        self.backoffs: dict[str, ju.BackoffRecord] = {}
        self.orphan_queue: WorkQueue[str] = WorkQueue(ctx.settings.queue)
        self.pods.add_handlers(
            on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted
        )
        self.jobs.add_handlers(on_update=self._job_updated, on_delete=self._cleanup_pod_finalizers)

    async def run(self) -> None:
        for informer in self.informers:
            await informer.wait_for_sync()
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self.controller.run())
                tasks.create_task(self._orphan_worker())
        finally:
            self.orphan_queue.shut_down()

    # -- events -> keys --------------------------------------------------------------------------------

    def _enqueue_batched(self, key: str) -> None:
        self.enqueue_after(key, self.settings.job_sync_batch_seconds)

    def _enqueue_orphan(self, pod: Obj) -> None:
        self.orphan_queue.add(object_key(pod))

    def _pod_added(self, pod: Obj) -> None:
        if podutil.is_deleting(pod):
            self._pod_gone(pod, final=False)
            return
        ref = podutil.controller_ref(pod)
        if ref is not None:
            job = self.owners.resolve(podutil.namespace_of(pod), ref)
            if job is not None:
                key = object_key(job)
                self.expectations.creation_observed(key)
                self._enqueue_batched(key)
            return
        if ju.has_finalizer(pod):
            self._enqueue_orphan(pod)
        for job in self.owners.matching(pod):
            self._enqueue_batched(object_key(job))

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if podutil.meta(old).get("resourceVersion") == podutil.meta(new).get("resourceVersion"):
            return
        if podutil.is_deleting(new):
            self._pod_gone(new, final=False)
            return
        finalizer_removed = not ju.has_finalizer(new)
        new_ref, old_ref = podutil.controller_ref(new), podutil.controller_ref(old)
        if new_ref != old_ref and old_ref is not None:
            job = self.owners.resolve(podutil.namespace_of(old), old_ref)
            if job is not None:
                if finalizer_removed:
                    self._finalizer_removal_observed(object_key(job), podutil.uid_of(new))
                self._enqueue_batched(object_key(job))
        if new_ref is not None:
            job = self.owners.resolve(podutil.namespace_of(new), new_ref)
            if job is not None:
                if finalizer_removed:
                    self._finalizer_removal_observed(object_key(job), podutil.uid_of(new))
                self._enqueue_batched(object_key(job))
            return
        if ju.has_finalizer(new):
            self._enqueue_orphan(new)
        if podutil.labels_of(old) != podutil.labels_of(new) or new_ref != old_ref:
            for job in self.owners.matching(new):
                self._enqueue_batched(object_key(job))

    def _pod_deleted(self, pod: Obj) -> None:
        self._pod_gone(pod, final=True)

    def _pod_gone(self, pod: Obj, *, final: bool) -> None:
        ref = podutil.controller_ref(pod)
        has_finalizer = ju.has_finalizer(pod)
        if ref is None:
            if has_finalizer:
                self._enqueue_orphan(pod)
            return
        job = self.owners.resolve(podutil.namespace_of(pod), ref)
        if job is None or ju.is_finished(job):
            if has_finalizer:
                self._enqueue_orphan(pod)
            return
        key = object_key(job)
        self.expectations.deletion_observed(key, object_key(pod))
        if final or not has_finalizer:
            self._finalizer_removal_observed(key, podutil.uid_of(pod))
        self._enqueue_batched(key)

    def _finalizer_removal_observed(self, key: str, uid: str) -> None:
        expected = self.finalizer_expectations.get(key)
        if expected is not None:
            expected.discard(uid)
            if not expected:
                del self.finalizer_expectations[key]

    def _job_updated(self, old: Obj, new: Obj) -> None:
        if ju.is_finished(new):
            self._cleanup_pod_finalizers(new)
        started = parse_time(podutil.status(new).get("startTime"))
        deadline = ju.spec(new).get("activeDeadlineSeconds")
        if started is None or not isinstance(deadline, int):
            return
        if ju.spec(old).get("activeDeadlineSeconds") != deadline:
            self.enqueue_after(object_key(new), max(started + deadline - self.clock(), 0.0))

    def _cleanup_pod_finalizers(self, job: Obj) -> None:
        """A finished or deleted Job will not count its pods any more: free those still held."""
        for pod in self.pods_by_owner.get(podutil.uid_of(job)):
            if ju.has_finalizer(pod):
                self._enqueue_orphan(pod)

    # -- orphan pods --------------------------------------------------------------------------------------

    async def _orphan_worker(self) -> None:
        while True:
            try:
                key = await self.orphan_queue.get()
            except ShutDown:
                return
            try:
                await self._sync_orphan_pod(key)
            except Exception:
                self.log.exception("error syncing orphan pod", pod=key)
                self.orphan_queue.add_rate_limited(key)
            else:
                self.orphan_queue.forget(key)
            finally:
                self.orphan_queue.done(key)

    async def _sync_orphan_pod(self, key: str) -> None:
        """``syncOrphanPod``: drop the tracking finalizer from a pod no unfinished Job counts."""
        pod = self.pods.get(key)
        if pod is None:
            return
        ref = podutil.controller_ref(pod)
        if ref is not None:
            if ref.get("kind") != "Job" or ref.get("apiVersion") != JOBS.api_version:
                return
            job = self.owners.resolve(podutil.namespace_of(pod), ref)
            if job is not None and (ju.managed_elsewhere(job) or not ju.is_finished(job)):
                return
        patch = ju.remove_finalizer_patch(pod)
        if patch is None:
            return
        try:
            await self.client.patch(
                PODS, podutil.name_of(pod), patch, namespace=podutil.namespace_of(pod), patch_type="strategic"
            )
        except StatusError as exc:
            if exc.code != 404:
                raise

    # -- sync ----------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        cached = self.jobs.get(key)
        if cached is None:
            self.expectations.forget(key)
            self.finalizer_expectations.pop(key, None)
            self.backoffs.pop(key, None)
            return None
        if ju.managed_elsewhere(cached) is not None:
            return None
        job = copy.deepcopy(cached)
        if ju.is_finished(job):
            self.backoffs.pop(key, None)
            return None
        if ju.spec(job).get("completionMode") not in (None, "NonIndexed", "Indexed"):
            self.recorder.event(
                job, WARNING, "UnknownCompletionMode", "Skipped Job sync because completion mode is unknown"
            )
            return None
        now = self.clock()
        status = _status(job)
        uncounted = _uncounted(job)
        satisfied = self.expectations.satisfied(key)
        pods = await self._pods_for_job(job)
        active_pods = [p for p in pods if podutil.is_pod_active(p)]
        state = SyncState(
            job=job,
            pods=pods,
            active_pods=active_pods,
            uncounted_succeeded=set(uncounted.get("succeeded") or ()),
            uncounted_failed=set(uncounted.get("failed") or ()),
            expected_rm=set(self.finalizer_expectations.get(key, ())),
            backoff=self.backoffs.get(key, ju.BackoffRecord()),
            ready=sum(1 for p in active_pods if podutil.is_pod_ready(p)),
            terminating=sum(1 for p in pods if ju.is_terminating(p)),
        )
        active = len(active_pods)
        new_succeeded, new_failed = self._new_finished_pods(state)
        state.succeeded = (
            int(status.get("succeeded") or 0) + len(new_succeeded) + len(state.uncounted_succeeded)
        )
        state.failed = (
            int(status.get("failed") or 0)
            + ju.counted_failures(job, new_failed)
            + len(state.uncounted_failed)
        )
        if not status.get("startTime") and not ju.is_suspended(job):
            status["startTime"] = format_time(now)
        state.backoff = ju.new_backoff_record(state.backoff, new_succeeded, new_failed)

        state.finished = ju.true_condition(job, ju.SUCCESS_CRITERIA_MET)
        if state.finished is None:
            target = ju.true_condition(job, ju.FAILURE_TARGET)
            if target is not None:
                state.finished = ju.new_condition(
                    ju.FAILED, "True", str(target.get("reason") or ""), str(target.get("message") or ""), now
                )
            else:
                message = ju.fail_job_message(job, pods)
                if message is not None:
                    # FailureTarget first records the message before the pods' finalizers go
                    state.finished = ju.new_condition(
                        ju.FAILURE_TARGET, "True", ju.POD_FAILURE_POLICY, message, now
                    )
        if state.finished is None:
            if state.failed > ju.backoff_limit(job) or ju.past_backoff_limit_on_failure(job, pods):
                state.finished = ju.new_condition(ju.FAILURE_TARGET, "True", *ju.BACKOFF_LIMIT_EXCEEDED, now)
            elif ju.past_active_deadline(job, now):
                state.finished = ju.new_condition(ju.FAILURE_TARGET, "True", *ju.DEADLINE_EXCEEDED, now)
            else:
                left = ju.deadline_in(job, now)
                if left is not None:
                    self.enqueue_after(key, max(left, 0.0))
        if ju.is_indexed(job):
            state.prev_succeeded_indexes, state.succeeded_indexes = ju.succeeded_indexes(job, pods)
            state.succeeded = ju.intervals_total(state.succeeded_indexes)
            self._check_indexes(state, now)

        manage_error: Exception | None = None
        suspend_changed = False
        if state.finished is not None:
            deleted_ready, deleted, manage_error = await self._delete_active_pods(job, state.active_pods)
            if deleted != active or not satisfied:
                state.finished = None  # pods may still be uncounted or not in the cache yet
            active -= deleted
            state.terminating += deleted
            state.ready -= deleted_ready
        else:
            managed = False
            if satisfied and not podutil.is_deleting(job):
                active, manage_error = await self._manage(job, key, state)
                managed = True
            total = ju.completions(job)
            if total is None:
                complete = state.succeeded > 0 and active == 0
            else:
                complete = state.succeeded >= total and active == 0
            if complete:
                state.finished = ju.new_condition(
                    ju.SUCCESS_CRITERIA_MET, "True", *ju.COMPLETIONS_REACHED, now
                )
            elif managed:
                suspend_changed = self._note_suspension(job, now)

        needs_update = (
            suspend_changed
            or active != int(status.get("active") or 0)
            or status.get("ready") != state.ready
            or status.get("terminating") != state.terminating
        )
        status["active"] = active
        status["ready"] = state.ready
        status["terminating"] = state.terminating
        try:
            await self._track_status(key, state, needs_update)
        except StatusError as exc:
            if exc.code != 409:
                raise
            # The cache was behind the Job (our own last write, usually): its newer version is on its way
            # through the informer and brings the key back. Nothing written so far is lost: uncounted
            # UIDs whose finalizer is gone are moved into the counters by the next sync.
            self.log.debug("job changed meanwhile; syncing again", key=key)
            return None
        if manage_error is not None:
            raise manage_error
        return None

    @staticmethod
    def _check_indexes(state: SyncState, now: float) -> None:
        """Indexed Jobs: failed indexes (``backoffLimitPerIndex``: too many is ``MaxFailedIndexesExceeded``,
        all indexes done with some failed is ``FailedIndexes``), then the success policy."""
        job = state.job
        if ju.has_backoff_limit_per_index(job):
            state.failed_indexes = ju.failed_indexes(job, state.pods)
            failed_total = ju.intervals_total(state.failed_indexes)
            if state.finished is None:
                most = ju.spec(job).get("maxFailedIndexes")
                if isinstance(most, int) and failed_total > most:
                    state.finished = ju.new_condition(
                        ju.FAILURE_TARGET, "True", *ju.MAX_FAILED_INDEXES_EXCEEDED, now
                    )
                elif failed_total > 0 and failed_total + ju.intervals_total(state.succeeded_indexes) >= (
                    ju.completions(job) or 0
                ):
                    state.finished = ju.new_condition(ju.FAILURE_TARGET, "True", *ju.FAILED_INDEXES, now)
            state.delayed = ju.pods_with_delayed_deletion(
                job, state.pods, state.succeeded_indexes, state.failed_indexes, state.active_pods
            )
        if state.finished is None:
            message = ju.match_success_policy(job, state.succeeded_indexes)
            if message is not None:
                state.finished = ju.new_condition(
                    ju.SUCCESS_CRITERIA_MET, "True", ju.SUCCESS_POLICY, message, now
                )

    def _note_suspension(self, job: Obj, now: float) -> bool:
        """The ``Suspended`` condition and events; resuming restarts ``startTime`` (the deadline counts
        time continuously active)."""
        status = _status(job)
        if ju.is_suspended(job):
            conds, changed = ju.ensure_condition(
                ju.conditions(job), ju.SUSPENDED, "True", "JobSuspended", "Job suspended", now
            )
            if changed:
                status["conditions"] = conds
                self.recorder.event(job, NORMAL, "Suspended", "Job suspended")
            return changed
        conds, changed = ju.ensure_condition(
            ju.conditions(job), ju.SUSPENDED, "False", "JobResumed", "Job resumed", now
        )
        if changed:
            status["conditions"] = conds
            self.recorder.event(job, NORMAL, "Resumed", "Job resumed")
            status["startTime"] = format_time(now)
        return changed

    def _new_finished_pods(self, state: SyncState) -> tuple[list[Obj], list[Obj]]:
        """``getNewFinishedPods``: finished pods still holding the finalizer and not in the uncounted lists."""
        job = state.job

        def valid(pod: Obj, uncounted: set[str]) -> bool:
            uid = podutil.uid_of(pod)
            if not ju.has_finalizer(pod) or uid in uncounted or uid in state.expected_rm:
                return False
            return not ju.is_indexed(job) or ju.valid_index(job, pod)

        succeeded = [
            p for p in state.pods if valid(p, state.uncounted_succeeded) and podutil.phase(p) == "Succeeded"
        ]
        failed = [p for p in state.pods if valid(p, state.uncounted_failed) and ju.is_pod_failed(p, job)]
        return succeeded, failed

    async def _pods_for_job(self, job: Obj) -> list[Obj]:
        """``getPodsForJob``: its pods, adopting orphans its selector matches (with the finalizer) and
        releasing those it no longer matches."""
        try:
            selector = labelsel.from_label_selector(ju.spec(job).get("selector"))
        except StatusError as exc:
            raise RuntimeError(f"couldn't convert Job selector: {exc.message}") from exc
        uid = podutil.uid_of(job)
        candidates = {
            object_key(p): p
            for p in (*self.pods_by_owner.get(uid), *self.orphan_pods.get(podutil.namespace_of(job)))
        }

        async def can_adopt() -> None:
            await recheck_alive(self.client, JOBS, job)

        claimed = await claim(self.client, PODS, job, selector, candidates.values(), can_adopt=can_adopt)
        result = []
        for pod in claimed:
            owned_before = any(
                r.get("uid") == uid
                for r in (candidates.get(object_key(pod)) or {}).get("metadata", {}).get("ownerReferences")
                or ()
            )
            if not owned_before and not ju.has_finalizer(pod):
                pod = await self.client.patch(
                    PODS,
                    podutil.name_of(pod),
                    {"metadata": {"finalizers": [ju.TRACKING_FINALIZER]}},
                    namespace=podutil.namespace_of(pod),
                    patch_type="strategic",
                )
            result.append(pod)
        return result

    # -- pods: create and delete -----------------------------------------------------------------------

    async def _manage(self, job: Obj, key: str, state: SyncState) -> tuple[int, Exception | None]:
        """``manageJob``: the number of active pods after creating or deleting towards the wanted count."""
        settings = self.settings
        active = len(state.active_pods)
        if ju.is_suspended(job):
            doomed = ju.active_pods_for_removal(job, state.active_pods, active, self.clock())
            self.expectations.expect_deletions(key, [object_key(p) for p in doomed])
            removed_ready, removed, error = await self._delete_job_pods(job, key, doomed)
            state.terminating += removed
            state.ready -= removed_ready
            return active - removed, error
        wanted = ju.want_active(job, state.succeeded, active)
        doomed = ju.active_pods_for_removal(
            job, state.active_pods, max(active - wanted, 0), self.clock(), state.failed_indexes
        )
        doomed = doomed[: settings.job_max_pod_create_delete_per_sync]
        if doomed:
            self.expectations.expect_deletions(key, [object_key(p) for p in doomed])
            removed_ready, removed, error = await self._delete_job_pods(job, key, doomed)
            state.terminating += removed
            state.ready -= removed_ready
            return active - removed, error
        terminating = state.terminating if ju.only_replace_failed_pods(job) else 0
        diff = wanted - terminating - active
        if diff <= 0:
            return active, None
        per_index = ju.has_backoff_limit_per_index(job)
        if not per_index:  # each index has its own back-off instead
            remaining = ju.remaining_backoff(
                state.backoff,
                self.clock(),
                settings.job_pod_failure_backoff_seconds,
                settings.job_pod_failure_backoff_max_seconds,
            )
            if remaining > 0:
                self.enqueue_after(key, max(remaining, settings.job_sync_batch_seconds))
                return active, None
        diff = min(diff, settings.job_max_pod_create_delete_per_sync)
        indexes: list[int | None] = [None] * diff
        if ju.is_indexed(job):
            terminating_pods = [p for p in state.pods if ju.is_terminating(p)]
            found = ju.first_pending_indexes(
                job, state.succeeded_indexes, state.active_pods, terminating_pods, diff, state.failed_indexes
            )
            if per_index:
                found = self._indexes_past_backoff(key, state, found)
            indexes = [ix for ix in found]
            diff = len(indexes)
        if diff == 0:
            return active, None
        self.expectations.expect_creations(key, diff)
        active += diff
        first_error: Exception | None = None
        pending = list(indexes)
        for size in slow_start_batches(diff, settings.slow_start_initial_batch):
            batch, pending = pending[:size], pending[size:]
            results = await asyncio.gather(
                *(
                    self._create_pod(job, ix, state.delayed.get(ix) if ix is not None else None)
                    for ix in batch
                ),
                return_exceptions=True,
            )
            errors: list[Exception] = []
            for result in results:
                if isinstance(result, BaseException) and not isinstance(result, Exception):
                    raise result
                if isinstance(result, Exception):
                    errors.append(result)
            for error in errors:
                self.expectations.creation_observed(key)
                active -= 1
                first_error = first_error or error
            if errors and pending:
                for _ in pending:
                    self.expectations.creation_observed(key)
                active -= len(pending)
                break
        return active, first_error

    def _indexes_past_backoff(self, key: str, state: SyncState, indexes: list[int]) -> list[int]:
        """``getPodCreationInfoForIndependentIndexes``: the indexes whose own back-off is over; the sync
        comes back when the soonest of the others is."""
        now, settings = self.clock(), self.settings
        ready: list[int] = []
        soonest: float | None = None
        for ix in indexes:
            left = ju.remaining_backoff_for_index(
                state.delayed.get(ix),
                now,
                settings.job_pod_failure_backoff_seconds,
                settings.job_pod_failure_backoff_max_seconds,
            )
            if left <= 0:
                ready.append(ix)
            elif soonest is None or left < soonest:
                soonest = left
        if soonest is not None:
            self.enqueue_after(key, max(soonest, settings.job_sync_batch_seconds))
        return ready

    async def _create_pod(self, job: Obj, index: int | None, replaced: Obj | None = None) -> None:
        pod = ju.pod_for(job, index, replaced)
        try:
            created = await self.client.create(PODS, pod, namespace=podutil.namespace_of(job))
        except StatusError as exc:
            if namespace_terminating(exc):
                raise
            self.recorder.event(job, WARNING, "FailedCreate", f"Error creating: {error_text(exc)}")
            raise
        self.recorder.event(job, NORMAL, "SuccessfulCreate", f"Created pod: {podutil.name_of(created)}")

    async def _delete_pod(self, job: Obj, pod: Obj) -> None:
        name = podutil.name_of(pod)
        try:
            await self.client.delete(PODS, name, namespace=podutil.namespace_of(pod))
        except StatusError as exc:
            if exc.code != 404:
                self.recorder.event(job, WARNING, "FailedDelete", f"Error deleting: {error_text(exc)}")
            raise
        self.recorder.event(job, NORMAL, "SuccessfulDelete", f"Deleted pod: {name}")

    async def _delete_job_pods(
        self, job: Obj, key: str, pods: list[Obj]
    ) -> tuple[int, int, Exception | None]:
        """``deleteJobPods``: drop the finalizer, then delete (pods removed before they finished are not
        counted). Returns (ready pods removed, pods removed, first error)."""

        async def one(pod: Obj) -> bool:
            try:
                patch = ju.remove_finalizer_patch(pod)
                if patch is not None:
                    await self.client.patch(
                        PODS,
                        podutil.name_of(pod),
                        patch,
                        namespace=podutil.namespace_of(pod),
                        patch_type="strategic",
                    )
                await self._delete_pod(job, pod)
            except StatusError as exc:
                self.expectations.deletion_observed(key, object_key(pod))
                if exc.code != 404:
                    raise
            return podutil.is_pod_ready(pod)

        return await self._gather_deletes(pods, one)

    async def _delete_active_pods(self, job: Obj, pods: list[Obj]) -> tuple[int, int, Exception | None]:
        """``deleteActivePods``: delete keeping the finalizers; the pods are counted as failed afterwards."""

        async def one(pod: Obj) -> bool:
            try:
                await self._delete_pod(job, pod)
            except StatusError as exc:
                if exc.code != 404:
                    raise
            return podutil.is_pod_ready(pod)

        return await self._gather_deletes(pods, one)

    @staticmethod
    async def _gather_deletes(pods: list[Obj], one: Any) -> tuple[int, int, Exception | None]:
        results = await asyncio.gather(*(one(p) for p in pods), return_exceptions=True)
        deleted = ready = 0
        first_error: Exception | None = None
        for result in results:
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result
                first_error = first_error or result
                continue
            deleted += 1
            ready += 1 if result else 0
        return ready, deleted, first_error

    # -- status and finalizers --------------------------------------------------------------------------

    def _can_remove_finalizer(self, state: SyncState, pod: Obj, failed: bool) -> bool:
        if podutil.is_deleting(state.job) or state.finished is not None or podutil.phase(pod) == "Succeeded":
            return True
        if not failed:
            return False
        # a failed pod whose index waits for a replacement keeps the finalizer (its counts are read)
        delayed = state.delayed.get(ju.completion_index(pod))
        return delayed is None or podutil.uid_of(delayed) != podutil.uid_of(pod)

    async def _track_status(self, key: str, state: SyncState, needs_flush: bool) -> None:
        """``trackJobStatusAndRemoveFinalizers``: uncounted UIDs first, then finalizers, then counters, then
        the terminal condition."""
        job = state.job
        indexed = ju.is_indexed(job)
        pods = sorted(state.pods, key=ju.completion_index) if indexed else state.pods
        with_finalizer = {
            podutil.uid_of(p)
            for p in pods
            if ju.has_finalizer(p) and podutil.uid_of(p) not in state.expected_rm
        }
        if _clean_uncounted(job, with_finalizer):
            needs_flush = True
        uncounted = _uncounted(job)
        to_release: list[Obj] = []
        new_indexes: list[int] = []
        reached_max = False
        for pod in pods:
            uid = podutil.uid_of(pod)
            if not ju.has_finalizer(pod) or uid in state.expected_rm:
                continue
            failed = ju.is_pod_failed(pod, job)
            if not self._can_remove_finalizer(state, pod, failed):
                continue
            to_release.append(pod)
            if podutil.phase(pod) == "Succeeded" and uid not in state.uncounted_failed:
                if indexed:
                    ix = ju.completion_index(pod)
                    if ju.valid_index(job, pod) and not ju.intervals_has(state.prev_succeeded_indexes, ix):
                        new_indexes.append(ix)
                        needs_flush = True
                elif uid not in state.uncounted_succeeded:
                    needs_flush = True
                    uncounted.setdefault("succeeded", []).append(uid)
            elif failed or (state.finished is not None and state.finished["type"] != ju.SUCCESS_CRITERIA_MET):
                if (
                    uid not in state.uncounted_failed
                    and (not indexed or ju.valid_index(job, pod))
                    and ju.match_pod_failure_policy(job, pod).counts  # Ignore: not a failure
                ):
                    needs_flush = True
                    uncounted.setdefault("failed", []).append(uid)
            counted = (
                len(new_indexes) + len(uncounted.get("succeeded") or ()) + len(uncounted.get("failed") or ())
            )
            if counted >= self.settings.job_max_uncounted_pods:
                reached_max = True
                break
        status = _status(job)
        if indexed:
            state.succeeded_indexes = ju.with_indexes(state.succeeded_indexes, new_indexes)
            text = ju.format_intervals(state.succeeded_indexes)
            if text != (status.get("completedIndexes") or ""):
                needs_flush = True
            status["succeeded"] = ju.intervals_total(state.succeeded_indexes)
            status["completedIndexes"] = text
            failed_text = (
                ju.format_intervals(state.failed_indexes) if state.failed_indexes is not None else None
            )
            if failed_text != status.get("failedIndexes"):
                status["failedIndexes"] = failed_text
                needs_flush = True
        now = self.clock()
        if state.finished is not None and state.finished["type"] == ju.FAILURE_TARGET:
            status["conditions"] = [*ju.conditions(job), state.finished]
            needs_flush = True
            state.finished = ju.new_condition(
                ju.FAILED, "True", state.finished["reason"], state.finished["message"], now
            )
        if state.finished is not None and state.finished["type"] == ju.SUCCESS_CRITERIA_MET:
            if ju.true_condition(job, ju.SUCCESS_CRITERIA_MET) is None:
                status["conditions"] = [*ju.conditions(job), state.finished]
                needs_flush = True
            state.finished = ju.new_condition(
                ju.COMPLETE, "True", state.finished["reason"], state.finished["message"], now
            )
        job, needs_flush = await self._flush_and_release(key, state, to_release, with_finalizer, needs_flush)
        state.job = job
        finished = not reached_max and self._enact_finished(state)
        if finished:
            needs_flush = True
        if needs_flush:
            await self._write_status(state.job)
            if finished:
                self._record_finished(state.job, state.finished)

    async def _flush_and_release(
        self, key: str, state: SyncState, pods: list[Obj], with_finalizer: set[str], needs_flush: bool
    ) -> tuple[Obj, bool]:
        """``flushUncountedAndRemoveFinalizers``: write the uncounted UIDs, remove the finalizers, move what
        was released into the counters (and write again if a removal failed)."""
        job = state.job
        if needs_flush:
            job = await self._write_status(job)
            self.backoffs[key] = state.backoff
            needs_flush = False
        release_error: Exception | None = None
        if pods:
            released, release_error = await self._release(key, pods)
            for pod, ok in zip(pods, released, strict=True):
                if ok:
                    with_finalizer.discard(podutil.uid_of(pod))
        if _clean_uncounted(job, with_finalizer):
            needs_flush = True
        if release_error is not None:
            if needs_flush:
                await self._write_status(job)
            raise release_error
        return job, needs_flush

    async def _release(self, key: str, pods: list[Obj]) -> tuple[list[bool], Exception | None]:
        """``removeTrackingFinalizerFromPods``: which removals succeeded (a pod already gone counts)."""
        self.finalizer_expectations.setdefault(key, set()).update(podutil.uid_of(p) for p in pods)

        async def one(pod: Obj) -> bool:
            patch = ju.remove_finalizer_patch(pod)
            if patch is None:
                return True
            try:
                await self.client.patch(
                    PODS,
                    podutil.name_of(pod),
                    patch,
                    namespace=podutil.namespace_of(pod),
                    patch_type="strategic",
                )
            except StatusError as exc:
                self._finalizer_removal_observed(key, podutil.uid_of(pod))
                if exc.code != 404:
                    raise
            return True

        results = await asyncio.gather(*(one(p) for p in pods), return_exceptions=True)
        first_error: Exception | None = None
        flags: list[bool] = []
        for result in results:
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result
                first_error = first_error or result
                flags.append(False)
            else:
                flags.append(result)
        return flags, first_error

    def _enact_finished(self, state: SyncState) -> bool:
        """``enactJobFinished``: the terminal condition, once nothing is uncounted or terminating."""
        if state.finished is None:
            return False
        uncounted = _uncounted(state.job)
        if uncounted.get("succeeded") or uncounted.get("failed"):
            return False
        if state.terminating > 0:
            return False
        status = _status(state.job)
        cond = state.finished
        conds, _ = ju.ensure_condition(
            ju.conditions(state.job),
            cond["type"],
            cond["status"],
            cond["reason"],
            cond["message"],
            self.clock(),
        )
        status["conditions"] = conds
        if cond["type"] == ju.COMPLETE:
            status["completionTime"] = cond["lastTransitionTime"]
        return True

    def _record_finished(self, job: Obj, cond: Obj | None) -> None:
        if cond is None:
            return
        if cond["type"] == ju.COMPLETE:
            total = ju.completions(job)
            if total is not None and int(_status(job).get("succeeded") or 0) > total:
                self.recorder.event(
                    job,
                    WARNING,
                    "TooManySucceededPods",
                    "Too many succeeded pods running after completion count reached",
                )
            self.recorder.event(job, NORMAL, "Completed", "Job completed")
        else:
            self.recorder.event(job, WARNING, cond["reason"], cond["message"])

    async def _write_status(self, job: Obj) -> Obj:
        """``updateJobStatus``: PUT /status guarded by resourceVersion (a conflict fails the sync, which
        comes back with fresh state)."""
        body = {**job, "status": ju.status_for_write(_status(job))}
        written = await self.client.replace_status(JOBS, body, namespace=podutil.namespace_of(job))
        written.setdefault("apiVersion", JOBS.api_version)
        written.setdefault("kind", JOBS.kind)
        # Keep what the sync computed (the server may have left out empty fields).
        written["status"] = {**_status(job), **(written.get("status") or {})}
        return written

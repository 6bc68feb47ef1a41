"""Pure decisions of the Job controller (upstream ``pkg/controller/job``: ``job_controller.go``,
``backoff_utils.go``, ``indexed_job_utils.go``): conditions, which pods count as failed, the pod failure
back-off, completion indexes and their interval strings, which pods to remove and which indexes to start.
Times are Unix seconds; nothing here reads a clock.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vplane.controllers.client import Resource
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.timefmt import format_time, parse_time
from vplane.kube.objects import Obj

JOBS = Resource("batch/v1", "Job", "jobs", namespaced=True)
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
"""Every pod a Job makes carries it until the Job has counted the pod (``JobTrackingFinalizer``)."""
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
"""An Indexed Job's pod index: annotation, and label (PodIndexLabel, GA in 1.32)."""
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
JOB_CONTROLLER = "kubernetes.io/job-controller"
"""``spec.managedBy`` naming this controller; any other value leaves the Job to an external one."""
UNKNOWN_INDEX = -1
MAX_GENERATED_NAME_LENGTH = 58
"""A pod name prefix leaves room for the five random characters of ``generateName``."""

COMPLETE = "Complete"
FAILED = "Failed"
SUSPENDED = "Suspended"
FAILURE_TARGET = "FailureTarget"
SUCCESS_CRITERIA_MET = "SuccessCriteriaMet"
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")
BACKOFF_LIMIT_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")
POD_FAILURE_POLICY = "PodFailurePolicy"
MAX_FAILED_INDEXES_EXCEEDED = (
    "MaxFailedIndexesExceeded",
    "Job has exceeded the specified maximal number of failed indexes",
)
FAILED_INDEXES = ("FailedIndexes", "Job has failed indexes")
SUCCESS_POLICY = "SuccessPolicy"
INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
"""Failures of earlier pods of the same index that counted towards ``backoffLimitPerIndex``."""
INDEX_IGNORED_FAILURE_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"
"""Failures of earlier pods of the same index that a pod failure policy ``Ignore`` rule matched."""


# -- the Job's own fields ---------------------------------------------------------------------------------


def spec(job: Obj) -> Obj:
    return podutil.spec(job)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def completions(job: Obj) -> int | None:
    return _int(spec(job).get("completions"))


def parallelism(job: Obj) -> int:
    value = _int(spec(job).get("parallelism"))
    return 1 if value is None else value


def backoff_limit(job: Obj) -> int:
    value = _int(spec(job).get("backoffLimit"))
    return 6 if value is None else value


def is_indexed(job: Obj) -> bool:
    return spec(job).get("completionMode") == "Indexed"


def is_suspended(job: Obj) -> bool:
    return spec(job).get("suspend") is True


def managed_elsewhere(job: Obj) -> str | None:
    """The external controller named in ``spec.managedBy``, if it is not this one."""
    value = spec(job).get("managedBy")
    return str(value) if isinstance(value, str) and value != JOB_CONTROLLER else None


def has_backoff_limit_per_index(job: Obj) -> bool:
    return is_indexed(job) and _int(spec(job).get("backoffLimitPerIndex")) is not None


def only_replace_failed_pods(job: Obj) -> bool:
    """``podReplacementPolicy: Failed`` (or a pod failure policy): terminating pods are not replaced until
    they have failed."""
    return spec(job).get("podReplacementPolicy") == "Failed" or spec(job).get("podFailurePolicy") is not None


# -- conditions -------------------------------------------------------------------------------------------


def conditions(job: Obj) -> list[Obj]:
    return [c for c in podutil.status(job).get("conditions") or () if isinstance(c, dict)]


def find_condition(conds: Iterable[Obj], kind: str) -> Obj | None:
    return next((c for c in conds if c.get("type") == kind), None)


def true_condition(job: Obj, kind: str) -> Obj | None:
    cond = find_condition(conditions(job), kind)
    return cond if cond is not None and cond.get("status") == "True" else None


def is_finished(job: Obj) -> bool:
    """``IsJobFinished``: ``Complete`` or ``Failed`` is true."""
    return any(c.get("type") in (COMPLETE, FAILED) and c.get("status") == "True" for c in conditions(job))


def new_condition(kind: str, status: str, reason: str, message: str, now: float) -> Obj:
    stamp = format_time(now)
    return {
        "type": kind,
        "status": status,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def ensure_condition(
    conds: list[Obj], kind: str, status: str, reason: str, message: str, now: float
) -> tuple[list[Obj], bool]:
    """``ensureJobConditionStatus``: set a condition, or add it unless it would be added as False."""
    for i, cond in enumerate(conds):
        if cond.get("type") == kind:
            if cond.get("status") != status or cond.get("reason") != reason or cond.get("message") != message:
                conds = [*conds[:i], new_condition(kind, status, reason, message, now), *conds[i + 1 :]]
                return conds, True
            return conds, False
    if status != "False":
        return [*conds, new_condition(kind, status, reason, message, now)], True
    return conds, False


# -- pods ------------------------------------------------------------------------------------------------


def has_finalizer(pod: Obj) -> bool:
    return TRACKING_FINALIZER in (podutil.meta(pod).get("finalizers") or ())


def is_pod_failed(pod: Obj, job: Obj) -> bool:
    """``isPodFailed``: Failed, or (unless only failed pods are replaced) deleted before succeeding, so an
    orphan that never reaches a phase still counts."""
    if podutil.phase(pod) == "Failed":
        return True
    if only_replace_failed_pods(job):
        return False
    return podutil.is_deleting(pod) and podutil.phase(pod) != "Succeeded"


def is_terminating(pod: Obj) -> bool:
    """``CountTerminatingPods``: being deleted and not yet in a terminal phase."""
    return podutil.is_deleting(pod) and not podutil.is_pod_terminal(pod)


def completion_index(pod: Obj) -> int:
    """The pod's index from its annotation, or :data:`UNKNOWN_INDEX`."""
    raw = podutil.annotations_of(pod).get(COMPLETION_INDEX)
    if raw is None:
        return UNKNOWN_INDEX
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return UNKNOWN_INDEX
    return value if value >= 0 else UNKNOWN_INDEX


def valid_index(job: Obj, pod: Obj) -> bool:
    ix = completion_index(pod)
    total = completions(job)
    return ix != UNKNOWN_INDEX and total is not None and ix < total


def past_backoff_limit_on_failure(job: Obj, pods: Iterable[Obj]) -> bool:
    """``pastBackoffLimitOnFailure``: with ``restartPolicy: OnFailure`` the kubelet restarts containers
    in place, so their restart counts stand in for failed pods."""
    template_spec = (spec(job).get("template") or {}).get("spec") or {}
    if template_spec.get("restartPolicy") != "OnFailure":
        return False
    restarts = 0
    for pod in pods:
        if podutil.phase(pod) in ("Running", "Pending"):
            for key in ("initContainerStatuses", "containerStatuses"):
                for cs in podutil.status(pod).get(key) or ():
                    restarts += int(cs.get("restartCount") or 0)
    limit = backoff_limit(job)
    return restarts > 0 if limit == 0 else restarts >= limit


def past_active_deadline(job: Obj, now: float) -> bool:
    deadline = _int(spec(job).get("activeDeadlineSeconds"))
    started = parse_time(podutil.status(job).get("startTime"))
    if deadline is None or started is None or is_suspended(job):
        return False
    return now - started >= deadline


def deadline_in(job: Obj, now: float) -> float | None:
    """Seconds until ``activeDeadlineSeconds`` runs out (the sync that will fail the Job), if set."""
    deadline = _int(spec(job).get("activeDeadlineSeconds"))
    started = parse_time(podutil.status(job).get("startTime"))
    if deadline is None or started is None or is_suspended(job):
        return None
    return started + deadline - now


# -- the pod failure back-off ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackoffRecord:
    failures_after_last_success: int = 0
    last_failure_time: float | None = None


def _finish_from_containers(pod: Obj) -> float | None:
    finished: float | None = None
    for cs in podutil.status(pod).get("containerStatuses") or ():
        terminated = (cs.get("state") or {}).get("terminated")
        if not isinstance(terminated, dict):
            return None
        at = parse_time(terminated.get("finishedAt"))
        if at is None:
            return None
        finished = at if finished is None else max(finished, at)
    return finished


def finished_time(pod: Obj) -> float:
    """``getFinishedTime``: the last container's finish, else the Ready=False transition, else deletion
    minus grace period, else creation."""
    at = _finish_from_containers(pod)
    if at is not None:
        return at
    ready = podutil.ready_condition(pod)
    if ready is not None and ready.get("status") == "False":
        at = parse_time(ready.get("lastTransitionTime"))
        if at is not None:
            return at
    deleted = parse_time(podutil.meta(pod).get("deletionTimestamp"))
    if deleted is not None:
        return deleted - int(podutil.meta(pod).get("deletionGracePeriodSeconds") or 0)
    return parse_time(podutil.meta(pod).get("creationTimestamp")) or 0.0


def new_backoff_record(old: BackoffRecord, succeeded: Sequence[Obj], failed: Sequence[Obj]) -> BackoffRecord:
    """``newBackoffRecord``: a success resets the count of consecutive failures; failures after the last
    success count, the latest of them being the time the back-off runs from."""
    if not succeeded:
        if not failed:
            return old
        return BackoffRecord(
            old.failures_after_last_success + len(failed), max(finished_time(p) for p in failed)
        )
    if not failed:
        return BackoffRecord()
    last_success = max(finished_time(p) for p in succeeded)
    after = sorted((t for t in (finished_time(p) for p in failed) if t > last_success), reverse=True)
    return BackoffRecord(len(after), after[0] if after else None)


def backoff_delay(failures: int, base: float, maximum: float) -> float:
    """10 s, 20 s, 40 s, ... (``base`` doubled per further failure), capped at ``maximum``."""
    if failures <= 0:
        return 0.0
    delay = base
    for _ in range(1, failures):
        delay *= 2
        if delay >= maximum:
            return maximum
    return min(delay, maximum)


def remaining_backoff(record: BackoffRecord, now: float, base: float, maximum: float) -> float:
    """``getRemainingTime``: how long pod creation still waits after the last failure."""
    if record.failures_after_last_success == 0 or record.last_failure_time is None:
        return 0.0
    delay = backoff_delay(record.failures_after_last_success, base, maximum)
    elapsed = now - record.last_failure_time
    return 0.0 if delay < elapsed else delay - elapsed


# -- completion indexes as intervals ------------------------------------------------------------------------

Intervals = list[tuple[int, int]]
"""Ordered, disjoint, non-adjacent [first, last] ranges (upstream's ``orderedIntervals``)."""


def parse_indexes(text: str | None, total: int) -> Intervals:
    """``parseIndexesFromString``: ``1,3-5,7`` into intervals, dropping what is malformed or past ``total``."""
    result: Intervals = []
    if not text:
        return result
    for part in text.split(","):
        first_text, _, last_text = part.partition("-")
        try:
            first = int(first_text)
            last = int(last_text) if last_text else first
        except ValueError:
            continue
        if first < 0 or first >= total:
            continue
        last = min(last, total - 1)
        if last < first:
            continue
        if result and result[-1][1] + 1 >= first:
            result[-1] = (result[-1][0], max(result[-1][1], last))
        else:
            result.append((first, last))
    return result


def with_indexes(intervals: Intervals, indexes: Iterable[int]) -> Intervals:
    """``withOrderedIndexes``: the union of the intervals and the indexes, merged."""
    points = sorted({*indexes})
    merged = sorted([*intervals, *((i, i) for i in points)])
    result: Intervals = []
    for first, last in merged:
        if result and result[-1][1] + 1 >= first:
            result[-1] = (result[-1][0], max(result[-1][1], last))
        else:
            result.append((first, last))
    return result


def intervals_total(intervals: Intervals) -> int:
    return sum(last - first + 1 for first, last in intervals)


def intervals_has(intervals: Intervals, index: int) -> bool:
    return any(first <= index <= last for first, last in intervals)


def format_intervals(intervals: Intervals) -> str:
    """``orderedIntervals.String``: ``1,3-5,7``; two neighbours are listed, three or more are a range."""
    parts: list[str] = []
    for first, last in intervals:
        if first == last:
            parts.append(str(first))
        elif last == first + 1:
            parts.append(f"{first},{last}")
        else:
            parts.append(f"{first}-{last}")
    return ",".join(parts)


def succeeded_indexes(job: Obj, pods: Iterable[Obj]) -> tuple[Intervals, Intervals]:
    """``calculateSucceededIndexes``: (indexes in ``status.completedIndexes``, those plus the indexes of
    succeeded pods not yet counted)."""
    total = completions(job) or 0
    previous = parse_indexes(podutil.status(job).get("completedIndexes"), total)
    new = {
        completion_index(p)
        for p in pods
        if podutil.phase(p) == "Succeeded" and valid_index(job, p) and has_finalizer(p)
    }
    return previous, with_indexes(previous, new)


def first_pending_indexes(
    job: Obj,
    succeeded: Intervals,
    active: Iterable[Obj],
    terminating: Iterable[Obj],
    count: int,
    failed: Intervals | None = None,
) -> list[int]:
    """``firstPendingIndexes``: the lowest ``count`` indexes neither succeeded, failed (with
    ``backoffLimitPerIndex``) nor running (nor, when only failed pods are replaced, still terminating)."""
    total = completions(job) or 0
    taken = {completion_index(p) for p in active} - {UNKNOWN_INDEX}
    if only_replace_failed_pods(job):
        taken |= {completion_index(p) for p in terminating} - {UNKNOWN_INDEX}
    result: list[int] = []
    candidate = 0
    blocked = with_indexes(succeeded, taken)
    for first, last in failed or ():
        blocked = with_indexes(blocked, range(first, last + 1))
    for first, last in blocked:
        while candidate < total and len(result) < count and candidate < first:
            result.append(candidate)
            candidate += 1
        candidate = max(candidate, last + 1)
    while candidate < total and len(result) < count:
        result.append(candidate)
        candidate += 1
    return result


# -- which pods go --------------------------------------------------------------------------------------


def _sorted_for_removal(pods: Sequence[Obj], now: float) -> list[Obj]:
    """``controller.ActivePods`` order: unscheduled, pending, not ready, ... first."""
    return podutil.pods_to_delete(list(pods), [], len(pods), now) if len(pods) > 1 else list(pods)


def active_pods_for_removal(
    job: Obj, pods: Sequence[Obj], rm_at_least: int, now: float, failed: Intervals | None = None
) -> list[Obj]:
    """``activePodsForRemoval``: for Indexed Jobs first pods without a valid index, of a failed index and
    all but one pod of a repeated index, then the earliest in lifecycle until ``rm_at_least`` are chosen."""
    remove: list[Obj] = []
    left: list[Obj] = []
    if is_indexed(job):
        total = completions(job) or 0
        groups: dict[int, list[Obj]] = {}
        for pod in pods:
            groups.setdefault(completion_index(pod), []).append(pod)
        for ix in sorted(groups):
            group = groups[ix]
            if ix == UNKNOWN_INDEX or ix >= total or intervals_has(failed or [], ix):
                remove += group
            elif len(group) == 1:
                left.append(group[0])
            else:
                ordered = _sorted_for_removal(group, now)
                remove += ordered[:-1]
                left.append(ordered[-1])
    else:
        left = list(pods)
    if len(remove) < rm_at_least:
        remove += _sorted_for_removal(left, now)[: rm_at_least - len(remove)]
    return remove


def want_active(job: Obj, succeeded: int, active: int) -> int:
    """How many pods should run: ``parallelism`` without ``completions`` until one succeeds (then what
    runs may finish), else the remaining completions capped at ``parallelism``."""
    total = completions(job)
    if total is None:
        return active if succeeded > 0 else parallelism(job)
    return max(min(total - succeeded, parallelism(job)), 0)


# -- the pod failure policy ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyMatch:
    """What ``podFailurePolicy`` says about one failed pod (upstream's ``matchPodFailurePolicy``):
    ``fail_job_message`` for a ``FailJob`` rule, whether the failure counts towards the back-off limits
    (not for ``Ignore``), and the matched action (None when no rule matched)."""

    fail_job_message: str | None = None
    counts: bool = True
    action: str | None = None


def _exit_codes_match(code: int, requirement: Obj) -> bool:
    values = [v for v in requirement.get("values") or () if isinstance(v, int)]
    operator = requirement.get("operator")
    if operator == "In":
        return code in values
    if operator == "NotIn":
        return code not in values
    return False


def _matching_container(statuses: object, requirement: Obj) -> tuple[str, int] | None:
    """The first terminated container with a non-zero exit code the requirement matches."""
    wanted = requirement.get("containerName")
    for cs in statuses if isinstance(statuses, list) else ():
        if not isinstance(cs, dict):
            continue
        terminated = (cs.get("state") or {}).get("terminated")
        if not isinstance(terminated, dict):
            continue  # still terminating: no exit code yet
        if wanted is not None and wanted != cs.get("name"):
            continue
        code = _int(terminated.get("exitCode")) or 0
        if code != 0 and _exit_codes_match(code, requirement):
            return str(cs.get("name") or ""), code
    return None


def _matching_condition(pod: Obj, patterns: list[Obj]) -> str | None:
    for cond in podutil.status(pod).get("conditions") or ():
        if not isinstance(cond, dict):
            continue
        for pattern in patterns:
            # the API server defaults a pattern's status to True
            if cond.get("type") == pattern.get("type") and cond.get("status") == (
                pattern.get("status") or "True"
            ):
                return str(cond.get("type"))
    return None


def match_pod_failure_policy(job: Obj, pod: Obj) -> PolicyMatch:
    """The first rule (in order) whose ``onExitCodes`` (app containers, then init containers) or
    ``onPodConditions`` matches the failed pod decides; unknown actions are skipped, as upstream."""
    policy = spec(job).get("podFailurePolicy")
    if not isinstance(policy, dict):
        return PolicyMatch()
    namespace, name = podutil.namespace_of(pod), podutil.name_of(pod)
    status = podutil.status(pod)
    for index, rule in enumerate(policy.get("rules") or ()):
        if not isinstance(rule, dict):
            continue
        action = rule.get("action")
        on_codes = rule.get("onExitCodes")
        on_conditions = rule.get("onPodConditions")
        message: str
        if isinstance(on_codes, dict):
            found = _matching_container(status.get("containerStatuses"), on_codes) or _matching_container(
                status.get("initContainerStatuses"), on_codes
            )
            if found is None:
                continue
            message = (
                f"Container {found[0]} for pod {namespace}/{name} failed with exit code {found[1]} "
                f"matching {action} rule at index {index}"
            )
        elif isinstance(on_conditions, list):
            cond_type = _matching_condition(pod, [p for p in on_conditions if isinstance(p, dict)])
            if cond_type is None:
                continue
            message = (
                f"Pod {namespace}/{name} has condition {cond_type} matching {action} rule at index {index}"
            )
        else:
            continue
        if action == "Ignore":
            return PolicyMatch(None, False, "Ignore")
        if action == "Count":
            return PolicyMatch(None, True, "Count")
        if action == "FailIndex":
            return PolicyMatch(None, True, "FailIndex")
        if action == "FailJob":
            return PolicyMatch(message, True, "FailJob")
    return PolicyMatch()


def fail_job_message(job: Obj, pods: Iterable[Obj]) -> str | None:
    """``getFailJobMessage``: the message of the first failed pod a ``FailJob`` rule matches."""
    if not isinstance(spec(job).get("podFailurePolicy"), dict):
        return None
    for pod in pods:
        if is_pod_failed(pod, job):
            message = match_pod_failure_policy(job, pod).fail_job_message
            if message is not None:
                return message
    return None


def counted_failures(job: Obj, failed: Iterable[Obj]) -> int:
    """``nonIgnoredFailedPodsCount``: failed pods an ``Ignore`` rule does not exempt."""
    return sum(1 for p in failed if match_pod_failure_policy(job, p).counts)


# -- backoffLimitPerIndex -------------------------------------------------------------------------------------


def _count_annotation(pod: Obj, key: str) -> int:
    try:
        value = int(podutil.annotations_of(pod).get(key) or 0)
    except (TypeError, ValueError):
        return 0
    return max(value, 0)


def index_failure_count(pod: Obj) -> int:
    return _count_annotation(pod, INDEX_FAILURE_COUNT)


def index_absolute_failure_count(pod: Obj) -> int:
    """Counted and ignored failures of the index before this pod: what its back-off runs on."""
    return _count_annotation(pod, INDEX_FAILURE_COUNT) + _count_annotation(pod, INDEX_IGNORED_FAILURE_COUNT)


def new_index_failure_counts(job: Obj, replaced: Obj | None) -> tuple[int, int]:
    """``getNewIndexFailureCounts``: the (counted, ignored) failures a replacement for ``replaced`` carries."""
    if replaced is None:
        return 0, 0
    counted = index_failure_count(replaced)
    ignored = _count_annotation(replaced, INDEX_IGNORED_FAILURE_COUNT)
    if match_pod_failure_policy(job, replaced).counts:
        counted += 1
    else:
        ignored += 1
    return counted, ignored


def is_index_failed(job: Obj, pod: Obj) -> bool:
    """``isIndexFailed``: a ``FailIndex`` rule matched the failed pod, or its counted failure was the last
    ``backoffLimitPerIndex`` allows."""
    if not is_pod_failed(pod, job):
        return False
    match = match_pod_failure_policy(job, pod)
    if match.action == "FailIndex":
        return True
    limit = _int(spec(job).get("backoffLimitPerIndex")) or 0
    return match.counts and index_failure_count(pod) >= limit


def failed_indexes(job: Obj, pods: Iterable[Obj]) -> Intervals:
    """``calculateFailedIndexes``: ``status.failedIndexes`` plus the indexes of pods that failed them."""
    total = completions(job) or 0
    previous = parse_indexes(podutil.status(job).get("failedIndexes"), total)
    new = [completion_index(p) for p in pods if valid_index(job, p) and is_index_failed(job, p)]
    return with_indexes(previous, new)


def pods_with_delayed_deletion(
    job: Obj, pods: Iterable[Obj], succeeded: Intervals, failed: Intervals, active: Iterable[Obj]
) -> dict[int, Obj]:
    """``getPodsWithDelayedDeletionPerIndex``: per index not yet finished and without an active pod, its
    latest failed pod (by failure count, then finish time). It keeps its tracking finalizer until a
    replacement exists, because the replacement's failure-count annotations are computed from it."""
    running = {completion_index(p) for p in active}
    result: dict[int, Obj] = {}
    for pod in pods:
        if not has_finalizer(pod) or not is_pod_failed(pod, job) or not valid_index(job, pod):
            continue
        ix = completion_index(pod)
        if intervals_has(succeeded, ix) or intervals_has(failed, ix) or ix in running:
            continue
        last = result.get(ix)
        if last is None or (
            index_absolute_failure_count(last) <= index_absolute_failure_count(pod)
            and finished_time(pod) >= finished_time(last)
        ):
            result[ix] = pod
    return result


def remaining_backoff_for_index(last_failed: Obj | None, now: float, base: float, maximum: float) -> float:
    """``getRemainingTimePerIndex``: an index's own back-off after its latest failed pod."""
    if last_failed is None:
        return 0.0
    failures = index_absolute_failure_count(last_failed) + 1
    delay = backoff_delay(failures, base, maximum)
    elapsed = now - finished_time(last_failed)
    return 0.0 if delay < elapsed else delay - elapsed


# -- the success policy ---------------------------------------------------------------------------------------


def _overlap_with_rule(rule: Intervals, succeeded: Intervals) -> int:
    """How many of the rule's indexes succeeded (both lists ordered and disjoint)."""
    contains = r = s = 0
    while r < len(rule) and s < len(succeeded):
        overlap = min(rule[r][1], succeeded[s][1]) - max(rule[r][0], succeeded[s][0]) + 1
        if overlap > 0:
            contains += overlap
        if succeeded[s][1] < rule[r][1]:
            s += 1
        else:
            r += 1
    return contains


def match_success_policy(job: Obj, succeeded: Intervals) -> str | None:
    """``matchSuccessPolicy``: the condition message (``Matched rules at index N``) of the first rule the
    succeeded indexes satisfy: all of its ``succeededIndexes``, or ``succeededCount`` of them (of any
    index when the rule names none)."""
    policy = spec(job).get("successPolicy")
    if not isinstance(policy, dict) or not succeeded:
        return None
    total = completions(job) or 0
    for index, rule in enumerate(policy.get("rules") or ()):
        if not isinstance(rule, dict):
            continue
        count = _int(rule.get("succeededCount"))
        wanted_text = rule.get("succeededIndexes")
        if isinstance(wanted_text, str):
            wanted = parse_indexes(wanted_text, total)
            if not wanted:
                continue
            contains = _overlap_with_rule(wanted, succeeded)
            if (count is None and contains == intervals_total(wanted)) or (
                count is not None and contains >= count
            ):
                return f"Matched rules at index {index}"
        elif count is not None and intervals_total(succeeded) >= count:
            return f"Matched rules at index {index}"
    return None


# -- the pods a Job makes --------------------------------------------------------------------------------


def generate_name_with_index(job_name: str, index: int) -> str:
    suffix = f"-{index}-"
    prefix = job_name + suffix
    if len(prefix) > MAX_GENERATED_NAME_LENGTH:
        prefix = job_name[: MAX_GENERATED_NAME_LENGTH - len(suffix)] + suffix
    return prefix


def _add_index_env(container: Obj) -> None:
    env = container.setdefault("env", [])
    if any(isinstance(e, dict) and e.get("name") == COMPLETION_INDEX_ENV for e in env):
        return
    env.append(
        {
            "name": COMPLETION_INDEX_ENV,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
        }
    )


def pod_for(job: Obj, index: int | None, replaced: Obj | None = None) -> Obj:
    """The pod a Job creates: its template, the tracking finalizer, a controller reference, ``generateName``
    ``<job>-`` (``<job>-<index>-`` with the index annotation, label, hostname and the
    ``JOB_COMPLETION_INDEX`` variable in every container for Indexed Jobs; with ``backoffLimitPerIndex``
    the index's failure counts, carried on from the failed pod it ``replaced``)."""
    template = copy.deepcopy(spec(job).get("template") or {})
    tspec = template.setdefault("spec", {})
    if is_indexed(job):
        for key in ("initContainers", "containers"):
            for container in tspec.get(key) or ():
                if isinstance(container, dict):
                    _add_index_env(container)
    tmeta = template.setdefault("metadata", {})
    finalizers = list(tmeta.get("finalizers") or [])
    if TRACKING_FINALIZER not in finalizers:
        finalizers.append(TRACKING_FINALIZER)
    tmeta["finalizers"] = finalizers
    pod = podutil.pod_from_template(template, job, "job-controller")
    name = podutil.name_of(job)
    pod["metadata"]["generateName"] = f"{name}-"
    if index is not None:
        pod["metadata"].setdefault("annotations", {})[COMPLETION_INDEX] = str(index)
        pod["metadata"].setdefault("labels", {})[COMPLETION_INDEX] = str(index)
        pod["spec"]["hostname"] = f"{name}-{index}"
        pod["metadata"]["generateName"] = generate_name_with_index(name, index)
        if has_backoff_limit_per_index(job):
            counted, ignored = new_index_failure_counts(job, replaced)
            pod["metadata"]["annotations"][INDEX_FAILURE_COUNT] = str(counted)
            if ignored > 0:
                pod["metadata"]["annotations"][INDEX_IGNORED_FAILURE_COUNT] = str(ignored)
    return pod


def remove_finalizer_patch(pod: Obj) -> Obj | None:
    """The strategic merge patch that drops the tracking finalizer (None when the pod has none)."""
    if not has_finalizer(pod):
        return None
    return {"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}}


# -- status on the wire ------------------------------------------------------------------------------------


def status_for_write(status: Obj) -> Obj:
    """Upstream's wire form: zero counters (``omitempty``) and empty strings are left out; ``ready``,
    ``terminating`` and ``uncountedTerminatedPods`` are pointers and stay, even at zero or empty."""
    out: Obj = {}
    for key, value in status.items():
        if key in ("active", "succeeded", "failed") and not value:
            continue
        if key in ("completedIndexes",) and not value:
            continue
        if key == "conditions" and not value:
            continue
        if key == "uncountedTerminatedPods":
            value = {k: v for k, v in (value or {}).items() if v}
        if value is None:
            continue
        out[key] = value
    return out

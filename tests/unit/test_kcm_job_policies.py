"""The Job's failure and success policies: ``podFailurePolicy`` (FailJob, Ignore, Count, FailIndex on exit
codes and pod conditions such as ``DisruptionTarget``), ``backoffLimitPerIndex``/``maxFailedIndexes`` and
``successPolicy``, first as pure decisions, then in the Job controller on the fake API of
``test_kcm_batch_controllers`` with fake time, and the API server's validation of those fields with
upstream's messages."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import test_kcm_batch_controllers
from test_kcm_batch_controllers import Batch, BatchKube, job_body, keep_running
from test_kcm_controllers import plain_tracebacks  # noqa: F401

from vplane.apiserver.kinds.batch import JobStrategy, default_job_spec, indexes_format_error
from vplane.controllers.kcm import jobutil as ju
from vplane.controllers.kcm.jobutil import JOBS
from vplane.controllers.kcm.resources import PODS
from vplane.controllers.kcm.timefmt import format_time
from vplane.kube.objects import Obj

batch = test_kcm_batch_controllers.batch
"""The Job controller on the fake API (a fixture, shared)."""

FAIL_ON_42 = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
IGNORE_3 = {"action": "Ignore", "onExitCodes": {"containerName": "c", "operator": "In", "values": [3]}}
IGNORE_DISRUPTION = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


def job(**spec: Any) -> Obj:
    return {
        "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 6,
            "completionMode": "NonIndexed",
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}},
            **spec,
        },
        "status": {},
    }


def failed_pod(
    name: str,
    code: int = 1,
    *,
    container: str = "c",
    index: int | None = None,
    conditions: list[Obj] | None = None,
    finished: float = 100.0,
    phase: str = "Failed",
    **annotations: str,
) -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "finalizers": [ju.TRACKING_FINALIZER]}
    notes = dict(annotations)
    if index is not None:
        notes[ju.COMPLETION_INDEX] = str(index)
    meta["annotations"] = notes
    return {
        "metadata": meta,
        "spec": {},
        "status": {
            "phase": phase,
            "conditions": conditions or [],
            "containerStatuses": [
                {
                    "name": container,
                    "state": {"terminated": {"exitCode": code, "finishedAt": format_time(finished)}},
                }
            ],
        },
    }


# -- pure decisions --------------------------------------------------------------------------------------------


def test_rules_match_in_order_on_exit_codes_and_conditions() -> None:
    j = job(podFailurePolicy={"rules": [IGNORE_3, FAIL_ON_42, IGNORE_DISRUPTION]})
    assert ju.match_pod_failure_policy(j, failed_pod("a", 3)) == ju.PolicyMatch(None, False, "Ignore")
    assert ju.match_pod_failure_policy(j, failed_pod("b", 42)) == ju.PolicyMatch(
        "Container c for pod ns/b failed with exit code 42 matching FailJob rule at index 1", True, "FailJob"
    )
    evicted = failed_pod("e", 137, conditions=[{"type": "DisruptionTarget", "status": "True"}])
    assert ju.match_pod_failure_policy(j, evicted) == ju.PolicyMatch(None, False, "Ignore")
    assert ju.match_pod_failure_policy(j, failed_pod("d", 1)) == ju.PolicyMatch()  # no rule: counted
    # the containerName of a rule restricts it; exit code 0 never matches (NotIn)
    assert ju.match_pod_failure_policy(j, failed_pod("o", 3, container="other")).action is None
    not_in = job(
        podFailurePolicy={"rules": [{"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}}]}
    )
    assert ju.match_pod_failure_policy(not_in, failed_pod("z", 0)).action is None
    assert ju.match_pod_failure_policy(not_in, failed_pod("n", 2)).action == "Count"
    on_condition = job(
        podFailurePolicy={"rules": [{"action": "FailJob", "onPodConditions": [{"type": "ConfigIssue"}]}]}
    )
    broken = failed_pod("p", conditions=[{"type": "ConfigIssue", "status": "True"}])
    assert ju.match_pod_failure_policy(on_condition, broken).fail_job_message == (
        "Pod ns/p has condition ConfigIssue matching FailJob rule at index 0"
    )
    # unknown actions are skipped, as upstream
    odd = job(
        podFailurePolicy={"rules": [{"action": "Later", "onExitCodes": {"operator": "In", "values": [1]}}]}
    )
    assert ju.match_pod_failure_policy(odd, failed_pod("x")) == ju.PolicyMatch()


def test_fail_job_message_and_counted_failures() -> None:
    j = job(podFailurePolicy={"rules": [IGNORE_3, FAIL_ON_42]})
    pods = [failed_pod("a", 3), failed_pod("b", 1), failed_pod("c", 42)]
    assert ju.counted_failures(j, pods) == 2
    assert ju.fail_job_message(j, pods) == (
        "Container c for pod ns/c failed with exit code 42 matching FailJob rule at index 1"
    )
    running = failed_pod("r", 42, phase="Running")  # not failed yet: no decision
    assert ju.fail_job_message(j, [running]) is None
    assert ju.fail_job_message(job(), pods) is None


def test_index_failures_counted_and_carried_to_the_replacement() -> None:
    j = job(
        completionMode="Indexed",
        completions=4,
        backoffLimitPerIndex=1,
        podFailurePolicy={"rules": [IGNORE_3]},
    )
    first = failed_pod("i0", 1, index=0, **{ju.INDEX_FAILURE_COUNT: "0"})
    assert not ju.is_index_failed(j, first)  # one more attempt allowed
    assert ju.new_index_failure_counts(j, first) == (1, 0)
    second = failed_pod("i0b", 1, index=0, **{ju.INDEX_FAILURE_COUNT: "1"})
    assert ju.is_index_failed(j, second)
    ignored = failed_pod("i1", 3, index=1, **{ju.INDEX_FAILURE_COUNT: "1"})
    assert not ju.is_index_failed(j, ignored)  # Ignore does not count
    assert ju.new_index_failure_counts(j, ignored) == (1, 1)
    made = ju.pod_for(j, 1, ignored)["metadata"]["annotations"]
    assert made[ju.INDEX_FAILURE_COUNT] == "1" and made[ju.INDEX_IGNORED_FAILURE_COUNT] == "1"
    assert ju.pod_for(j, 2)["metadata"]["annotations"][ju.INDEX_FAILURE_COUNT] == "0"
    assert ju.INDEX_IGNORED_FAILURE_COUNT not in ju.pod_for(j, 2)["metadata"]["annotations"]
    fail_index = job(
        completionMode="Indexed",
        completions=4,
        backoffLimitPerIndex=5,
        podFailurePolicy={
            "rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [7]}}]
        },
    )
    assert ju.is_index_failed(fail_index, failed_pod("f", 7, index=3))
    j["status"]["failedIndexes"] = "2"
    assert ju.failed_indexes(j, [second, ignored]) == [(0, 0), (2, 2)]


def test_delayed_deletion_and_per_index_back_off() -> None:
    j = job(completionMode="Indexed", completions=3, backoffLimitPerIndex=3)
    older = failed_pod("a", index=0, finished=100.0, **{ju.INDEX_FAILURE_COUNT: "0"})
    newer = failed_pod("b", index=0, finished=150.0, **{ju.INDEX_FAILURE_COUNT: "1"})
    other = failed_pod("c", index=1, finished=120.0)
    running = failed_pod("r", index=1, phase="Running")
    delayed = ju.pods_with_delayed_deletion(j, [older, newer, other], [], [], [running])
    assert delayed == {0: newer}  # index 1 runs again: its failed pod can go
    # the back-off of index 0: two failures so far, the third attempt waits 10 s doubled once
    assert ju.remaining_backoff_for_index(newer, 155.0, 10.0, 600.0) == 15.0
    assert ju.remaining_backoff_for_index(newer, 171.0, 10.0, 600.0) == 0.0
    assert ju.remaining_backoff_for_index(None, 0.0, 10.0, 600.0) == 0.0
    assert ju.first_pending_indexes(j, [], [], [], 3, [(1, 1)]) == [0, 2]
    duplicate = [failed_pod("x", index=1, phase="Running"), failed_pod("y", index=2, phase="Running")]
    removed = ju.active_pods_for_removal(j, duplicate, 0, 0.0, [(1, 1)])
    assert [p["metadata"]["name"] for p in removed] == ["x"]


def test_success_policy_rules() -> None:
    j = job(
        completionMode="Indexed",
        completions=10,
        successPolicy={
            "rules": [{"succeededIndexes": "0,2-4"}, {"succeededIndexes": "5-9", "succeededCount": 2}]
        },
    )
    assert ju.match_success_policy(j, []) is None
    assert ju.match_success_policy(j, [(0, 3)]) is None  # 4 of rule 0 missing
    assert ju.match_success_policy(j, [(0, 0), (2, 4)]) == "Matched rules at index 0"
    assert ju.match_success_policy(j, [(1, 1), (6, 6), (9, 9)]) == "Matched rules at index 1"
    count_only = job(
        completionMode="Indexed", completions=5, successPolicy={"rules": [{"succeededCount": 3}]}
    )
    assert ju.match_success_policy(count_only, [(0, 1)]) is None
    assert ju.match_success_policy(count_only, [(0, 1), (4, 4)]) == "Matched rules at index 0"


# -- validation ---------------------------------------------------------------------------------------------


def causes_of(spec: Obj, old_spec: Obj | None = None) -> list[tuple[str, str]]:
    obj = {"metadata": {"name": "j", "uid": "u"}, "spec": copy.deepcopy(spec)}
    strategy = JobStrategy()
    strategy.prepare_for_create(obj)
    default_job_spec(obj["spec"])
    old = None
    if old_spec is not None:
        old = {"metadata": {"name": "j", "uid": "u"}, "spec": copy.deepcopy(old_spec)}
        strategy.prepare_for_create(old)
        default_job_spec(old["spec"])
    return [(c["field"], c["message"]) for c in strategy.validate(obj, old)]


def template(restart: str = "Never") -> Obj:
    return {"spec": {"restartPolicy": restart, "containers": [{"name": "main", "image": "busybox"}]}}


def test_validation_of_the_pod_failure_policy() -> None:
    rules = [
        {
            "action": "FailJob",
            "onExitCodes": {"operator": "In", "values": [0, 5, 5, 2], "containerName": "x"},
        },
        {"action": "Retry", "onPodConditions": [{"type": "Bad Type", "status": "Maybe"}]},
        {"action": "FailIndex", "onExitCodes": {"operator": "Is", "values": []}},
        {"onExitCodes": {"operator": "In", "values": [1]}, "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "Ignore"},
    ]
    got = causes_of({"template": template("OnFailure"), "podFailurePolicy": {"rules": rules}})
    p = "spec.podFailurePolicy.rules"
    assert got == [
        (
            f"{p}[0].onExitCodes.containerName",
            'Invalid value: "x": must be one of the container or initContainer names in the pod template',
        ),
        (f"{p}[0].onExitCodes.values[0]", "Invalid value: 0: must not be 0 for the In operator"),
        (f"{p}[0].onExitCodes.values[2]", "Duplicate value: 5"),
        (f"{p}[0].onExitCodes.values", "Invalid value: []int32{0, 5, 5, 2}: must be ordered"),
        (
            f"{p}[1].action",
            'Unsupported value: "Retry": supported values: "Count", "FailIndex", "FailJob", "Ignore"',
        ),
        (
            f"{p}[1].onPodConditions[0].type",
            "Invalid value: \"Bad Type\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
        (
            f"{p}[1].onPodConditions[0].status",
            'Unsupported value: "Maybe": supported values: "False", "True", "Unknown"',
        ),
        (f"{p}[2].action", 'Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set'),
        (f"{p}[2].onExitCodes.operator", 'Unsupported value: "Is": supported values: "In", "NotIn"'),
        (f"{p}[2].onExitCodes.values", "Invalid value: []int32{}: at least one value is required"),
        (f"{p}[3].action", 'Required value: valid values: ["Count" "FailIndex" "FailJob" "Ignore"]'),
        (f"{p}[3]", "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported"),
        (f"{p}[4]", "Invalid value: specifying one of OnExitCodes and OnPodConditions is required"),
        (
            "spec.template.spec.restartPolicy",
            'Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified',
        ),
    ]
    too_many = {"template": template(), "podFailurePolicy": {"rules": [IGNORE_DISRUPTION] * 21}}
    assert causes_of(too_many) == [(f"{p}", "Too many: 21: must have at most 20 items")]
    replacement = {
        "template": template(),
        "podFailurePolicy": {"rules": [IGNORE_DISRUPTION]},
        "podReplacementPolicy": "TerminatingOrFailed",
    }
    assert causes_of(replacement) == [
        ("spec.podReplacementPolicy", 'Unsupported value: "TerminatingOrFailed": supported values: "Failed"')
    ]
    # a pattern without a status is defaulted to True
    defaulted: Obj = {
        "template": template(),
        "podFailurePolicy": {
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        },
    }
    default_job_spec(defaulted)
    assert defaulted["podFailurePolicy"]["rules"][0]["onPodConditions"] == [
        {"type": "DisruptionTarget", "status": "True"}
    ]


def test_validation_of_per_index_limits_and_success_policy() -> None:
    assert causes_of({"template": template(), "backoffLimitPerIndex": 1, "maxFailedIndexes": 2}) == [
        ("spec.backoffLimitPerIndex", "Invalid value: 1: requires indexed completion mode"),
        ("spec.maxFailedIndexes", "Invalid value: 2: requires indexed completion mode"),
    ]
    indexed = {"template": template(), "completionMode": "Indexed", "completions": 3}
    assert causes_of({**indexed, "maxFailedIndexes": 4}) == [
        ("spec.backoffLimitPerIndex", "Required value: when maxFailedIndexes is specified"),
        ("spec.maxFailedIndexes", "Invalid value: 4: must be less than or equal to completions"),
    ]
    assert causes_of({**indexed, "backoffLimitPerIndex": 1, "maxFailedIndexes": 1}) == []
    assert causes_of({"template": template(), "successPolicy": {"rules": [{"succeededCount": 1}]}}) == [
        ("spec.successPolicy", "Invalid value: batch.SuccessPolicy{...}: requires indexed completion mode")
    ]
    rules = [{}, {"succeededIndexes": "0-5"}, {"succeededIndexes": "0,1", "succeededCount": 3}]
    r = "spec.successPolicy.rules"
    assert causes_of({**indexed, "successPolicy": {"rules": rules}}) == [
        (f"{r}[0]", "Required value: at least one of succeededCount or succeededIndexes must be specified"),
        (
            f"{r}[1].succeededIndexes",
            'Invalid value: "0-5": error parsing succeededIndexes: too large index: "5"',
        ),
        (
            f"{r}[2].succeededCount",
            "Invalid value: 3: must be less than or equal to 2 (the number of indexes in the specified succeededIndexes field)",
        ),
    ]
    assert causes_of({**indexed, "successPolicy": {"rules": []}}) == [
        (f"{r}", "Required value: at least one rules must be specified when the successPolicy is specified")
    ]
    assert indexes_format_error("1,3-5", 10) == (4, None)
    assert indexes_format_error("3,1", 10) == (0, "non-increasing order, previous: 3, current: 1")
    assert indexes_format_error("1-2-3", 10)[1] == (
        'the fragment "1-2-3" violates the requirement that an index interval can have at most two parts '
        "separated by '-'"
    )
    assert indexes_format_error("a", 10)[1] == 'cannot convert string to integer for index: "a"'
    # immutable once created
    with_policy = {"template": template(), "podFailurePolicy": {"rules": [IGNORE_DISRUPTION]}}
    changed = {"template": template(), "podFailurePolicy": {"rules": [FAIL_ON_42]}}
    assert [f for f, _ in causes_of(changed, with_policy)] == ["spec.podFailurePolicy"]


# -- the controller ---------------------------------------------------------------------------------------------


async def finish(kube: BatchKube, pod: Obj, code: int, conditions: list[Obj] | None = None) -> None:
    """End a pod with an exit code (and conditions), as its kubelet would."""
    now = format_time(kube.clock())
    pod = copy.deepcopy(kube.peek(PODS, "ns", pod["metadata"]["name"]))
    pod["status"] = {
        "phase": "Succeeded" if code == 0 else "Failed",
        "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}, *(conditions or [])],
        "containerStatuses": [
            {
                "name": "c",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": code, "finishedAt": now}},
            }
        ],
    }
    await kube.replace_status(PODS, pod, namespace="ns")


def live_pods(batch: Batch) -> list[Obj]:
    return [
        p
        for p in batch.kube.objects(PODS, "ns")
        if p["status"].get("phase") not in ("Succeeded", "Failed")
        and not p["metadata"].get("deletionTimestamp")
    ]


async def one_live_pod(batch: Batch, index: int | None = None) -> Obj:
    def found() -> bool:
        return any(index is None or ju.completion_index(p) == index for p in live_pods(batch))

    await batch.eventually(found, f"a running pod (index {index})", within=300)
    return next(p for p in live_pods(batch) if index is None or ju.completion_index(p) == index)


@pytest.mark.looptime
async def test_fail_job_rule_fails_the_job_at_once(batch: Batch) -> None:
    kube = batch.kube
    spec = {"backoffLimit": 6, "podFailurePolicy": {"rules": [FAIL_ON_42, IGNORE_3]}}
    batch.run_kubelet(keep_running)  # ends the pods the controller deletes
    await kube.create(JOBS, job_body("policy", **spec), namespace="ns")
    await finish(kube, await one_live_pod(batch), 3)  # ignored: replaced, not counted
    second = await one_live_pod(batch)
    await finish(kube, second, 42)
    await batch.eventually(lambda: batch.condition("policy", "Failed") is not None, "Failed", within=300)
    message = f"Container c for pod ns/{second['metadata']['name']} failed with exit code 42 matching FailJob rule at index 0"
    for kind in ("FailureTarget", "Failed"):
        cond = batch.condition("policy", kind)
        assert cond is not None and (cond["reason"], cond["message"]) == ("PodFailurePolicy", message)
    status = batch.job("policy")["status"]  # type: ignore[index]
    assert status["failed"] == 1  # the ignored failure is not counted
    assert batch.messages("PodFailurePolicy") == [message]
    assert not any(p["metadata"].get("finalizers") for p in kube.objects(PODS, "ns"))


@pytest.mark.looptime
async def test_ignored_disruptions_do_not_use_up_the_backoff_limit(batch: Batch) -> None:
    kube = batch.kube
    spec = {"backoffLimit": 0, "podFailurePolicy": {"rules": [IGNORE_DISRUPTION]}}
    batch.run_kubelet(keep_running)  # ends the pods the controller deletes
    await kube.create(JOBS, job_body("evicted", **spec), namespace="ns")
    for _ in range(3):
        evicted = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]
        await finish(kube, await one_live_pod(batch), 137, evicted)
    await finish(kube, await one_live_pod(batch), 0)
    await batch.eventually(lambda: batch.condition("evicted", "Complete") is not None, "Complete", within=300)
    status = batch.job("evicted")["status"]  # type: ignore[index]
    assert status["succeeded"] == 1 and "failed" not in status
    assert len(kube.objects(PODS, "ns")) == 4


@pytest.mark.looptime
async def test_backoff_limit_per_index_fails_only_that_index(batch: Batch) -> None:
    kube = batch.kube
    spec = {"completionMode": "Indexed", "completions": 3, "parallelism": 3, "backoffLimitPerIndex": 1}
    batch.run_kubelet(keep_running)  # ends the pods the controller deletes
    await kube.create(JOBS, job_body("perindex", **spec), namespace="ns")
    for ix in (0, 2):
        await finish(kube, await one_live_pod(batch, ix), 0)
    first = await one_live_pod(batch, 1)
    assert first["metadata"]["annotations"][ju.INDEX_FAILURE_COUNT] == "0"
    await finish(kube, first, 1)
    retry = await one_live_pod(batch, 1)  # after the index's own back-off
    assert retry["metadata"]["annotations"][ju.INDEX_FAILURE_COUNT] == "1"
    await finish(kube, retry, 1)
    await batch.eventually(lambda: batch.condition("perindex", "Failed") is not None, "Failed", within=300)
    status = batch.job("perindex")["status"]  # type: ignore[index]
    assert (status["completedIndexes"], status["failedIndexes"], status["failed"], status["succeeded"]) == (
        "0,2",
        "1",
        2,
        2,
    )
    cond = batch.condition("perindex", "Failed")
    assert cond is not None and (cond["reason"], cond["message"]) == (
        "FailedIndexes",
        "Job has failed indexes",
    )
    assert len(kube.objects(PODS, "ns")) == 4


@pytest.mark.looptime
async def test_max_failed_indexes_stops_the_job(batch: Batch) -> None:
    kube = batch.kube
    spec = {
        "completionMode": "Indexed",
        "completions": 4,
        "parallelism": 2,
        "backoffLimitPerIndex": 0,
        "maxFailedIndexes": 0,
    }
    batch.run_kubelet(keep_running)  # ends the pods the controller deletes
    await kube.create(JOBS, job_body("most", **spec), namespace="ns")
    await finish(kube, await one_live_pod(batch, 0), 1)
    await batch.eventually(lambda: batch.condition("most", "Failed") is not None, "Failed", within=300)
    cond = batch.condition("most", "Failed")
    assert cond is not None and (cond["reason"], cond["message"]) == (
        "MaxFailedIndexesExceeded",
        "Job has exceeded the specified maximal number of failed indexes",
    )
    assert batch.job("most")["status"]["failedIndexes"] == "0"  # type: ignore[index]
    assert live_pods(batch) == []  # index 1's pod was stopped


@pytest.mark.looptime
async def test_success_policy_completes_the_job_early(batch: Batch) -> None:
    kube = batch.kube
    batch.run_kubelet(keep_running)  # ends the pods the controller deletes
    spec = {
        "completionMode": "Indexed",
        "completions": 3,
        "parallelism": 3,
        "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
    }
    await kube.create(JOBS, job_body("leader", **spec), namespace="ns")
    await one_live_pod(batch, 1)
    await one_live_pod(batch, 2)
    await finish(kube, await one_live_pod(batch, 0), 0)
    await batch.eventually(lambda: batch.condition("leader", "Complete") is not None, "Complete", within=300)
    for kind in ("SuccessCriteriaMet", "Complete"):
        cond = batch.condition("leader", kind)
        assert cond is not None and (cond["reason"], cond["message"]) == (
            "SuccessPolicy",
            "Matched rules at index 0",
        )
    status = batch.job("leader")["status"]  # type: ignore[index]
    assert status["completedIndexes"] == "0" and status["succeeded"] == 1
    assert live_pods(batch) == []  # the other indexes were stopped

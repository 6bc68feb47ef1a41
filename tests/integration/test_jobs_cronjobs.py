"""Jobs, CronJobs and TTL-after-finished against ``vplane cluster start`` (API server, controller manager,
scheduler and one node whose pods are real processes), driven with kubectl 1.36 and 1.32 as a user would:
``kubectl create job``, ``kubectl wait --for=condition=complete|failed``, ``kubectl create job
--from=cronjob/x``, ``kubectl logs``, suspend and resume.

The pod failure back-off and the Job sync batching are shrunk through the controller manager's settings.
A CronJob's own schedule is not waited for (a minute is too long for a test): its firing is tested with
fake time in tests/unit/test_kcm_batch_controllers.py; here only what is fast (manual runs from a CronJob,
its history limits, suspend).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_runtime import Cluster, kubectl_for

from harness import Kubectl

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("jobs_cronjobs")]

KCM = "{job_sync_batch_seconds: 0.2, job_pod_failure_backoff_seconds: 0.3, job_pod_failure_backoff_max_seconds: 0.6}"
NEVER_SOON = "0 0 1 1 *"
"""A schedule that does not fire while a test runs (yearly)."""


def wait_for(check: Callable[[], Any], what: str, within: float = 60.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("jobs") / "cluster")
    running.api_settings = {"controller_manager_settings": KCM}
    running.start()
    yield running
    running.stop()
    running.assert_no_leftovers()


@pytest.fixture
def k(cluster: Cluster, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return kubectl_for(cluster, kubectl_path, tmp_path)


@pytest.fixture
def k132(cluster: Cluster, kubectl132_path: str, tmp_path: Path) -> Kubectl:
    return kubectl_for(cluster, kubectl132_path, tmp_path)


@pytest.fixture
def ns(k: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name += "-" + str(time.monotonic_ns())[-4:]
    k.run("create", "namespace", name)
    yield name
    k.run("delete", "namespace", name, "--wait=false", check=False)


def get(k: Kubectl, ns: str, *what: str) -> Any:
    return json.loads(k.run("get", *what, "-n", ns, "-o", "json").out)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def events(k: Kubectl, ns: str, name: str) -> list[tuple[str, str, str]]:
    items = get(k, ns, "events", "--field-selector", f"involvedObject.name={name}")["items"]
    return [(e["type"], e["reason"], e["message"]) for e in items]


def job_manifest(name: str, command: str, **spec: Any) -> str:
    return json.dumps(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {"name": "main", "image": "busybox", "command": ["sh", "-c", command]}
                        ],
                    }
                },
                **spec,
            },
        }
    )


# -- Jobs ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", ["k", "k132"])
def test_kubectl_create_job_completes(client: str, request: pytest.FixtureRequest, ns: str) -> None:
    kc: Kubectl = request.getfixturevalue(client)
    kc.run("create", "job", "hello", "-n", ns, "--image=busybox", "--", "sh", "-c", "echo hello from a job")
    kc.run("wait", "--for=condition=complete", "job/hello", "-n", ns, "--timeout=60s")
    job = get(kc, ns, "job", "hello")
    status = job["status"]
    for kind in ("SuccessCriteriaMet", "Complete"):
        cond = condition(job, kind)
        assert cond is not None and cond["status"] == "True"
        assert (cond["reason"], cond["message"]) == (
            "CompletionsReached",
            "Reached expected number of succeeded pods",
        )
    assert status["succeeded"] == 1 and status["ready"] == 0 and status["terminating"] == 0
    assert status["uncountedTerminatedPods"] == {} and "active" not in status
    assert status["completionTime"] >= status["startTime"]
    (pod,) = get(kc, ns, "pods", "-l", "job-name=hello")["items"]
    labels = pod["metadata"]["labels"]
    uid = job["metadata"]["uid"]
    assert labels["batch.kubernetes.io/controller-uid"] == uid and labels["controller-uid"] == uid
    assert labels["batch.kubernetes.io/job-name"] == "hello" and labels["job-name"] == "hello"
    assert not pod["metadata"].get("finalizers")  # the tracking finalizer is gone once counted
    assert kc.run("logs", "job/hello", "-n", ns).out == "hello from a job\n"
    got = events(kc, ns, "hello")
    assert ("Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}") in got
    assert ("Normal", "Completed", "Job completed") in got
    line = kc.run("get", "job", "hello", "-n", ns, "--no-headers").out.split()
    assert line[:3] == ["hello", "Complete", "1/1"]


def test_failing_job_stops_at_its_backoff_limit(k: Kubectl, ns: str) -> None:
    k.apply(job_manifest("broken", "exit 1", backoffLimit=2), "-n", ns)
    k.run("wait", "--for=condition=failed", "job/broken", "-n", ns, "--timeout=60s")
    job = get(k, ns, "job", "broken")
    for kind in ("FailureTarget", "Failed"):
        cond = condition(job, kind)
        assert cond is not None
        assert (cond["reason"], cond["message"]) == (
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
    assert job["status"]["failed"] == 3 and "succeeded" not in job["status"]
    pods = get(k, ns, "pods", "-l", "job-name=broken")["items"]
    assert len(pods) == 3 and all(p["status"]["phase"] == "Failed" for p in pods)
    assert ("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit") in events(
        k, ns, "broken"
    )
    assert k.run("get", "job", "broken", "-n", ns, "--no-headers").out.split()[:3] == [
        "broken",
        "Failed",
        "0/1",
    ]


def test_indexed_job_gives_each_pod_its_index(k: Kubectl, ns: str) -> None:
    k.apply(
        job_manifest(
            "indexed",
            "echo index=$JOB_COMPLETION_INDEX",
            completions=3,
            parallelism=3,
            completionMode="Indexed",
        ),
        "-n",
        ns,
    )
    k.run("wait", "--for=condition=complete", "job/indexed", "-n", ns, "--timeout=60s")
    job = get(k, ns, "job", "indexed")
    assert job["status"]["completedIndexes"] == "0-2" and job["status"]["succeeded"] == 3
    seen = {}
    for pod in get(k, ns, "pods", "-l", "job-name=indexed")["items"]:
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == index
        assert pod["spec"]["hostname"] == f"indexed-{index}"
        assert pod["metadata"]["name"].startswith(f"indexed-{index}-")
        seen[index] = k.run("logs", pod["metadata"]["name"], "-n", ns).out
    assert seen == {"0": "index=0\n", "1": "index=1\n", "2": "index=2\n"}


def test_active_deadline_fails_a_job_and_stops_its_pods(k: Kubectl, ns: str, cluster: Cluster) -> None:
    k.apply(job_manifest("overdue", "sleep 600", activeDeadlineSeconds=2), "-n", ns)
    k.run("wait", "--for=condition=failed", "job/overdue", "-n", ns, "--timeout=60s")
    cond = condition(get(k, ns, "job", "overdue"), "Failed")
    assert cond is not None
    assert (cond["reason"], cond["message"]) == (
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )
    wait_for(lambda: get(k, ns, "pods", "-l", "job-name=overdue")["items"] == [], "the pod removed")
    assert get(k, ns, "job", "overdue")["status"]["failed"] == 1
    assert ("Warning", "DeadlineExceeded", "Job was active longer than specified deadline") in events(
        k, ns, "overdue"
    )


def test_suspended_job_starts_when_resumed(k: Kubectl, ns: str) -> None:
    k.apply(job_manifest("later", "echo resumed", suspend=True), "-n", ns)
    wait_for(lambda: condition(get(k, ns, "job", "later"), "Suspended"), "Suspended condition")
    assert get(k, ns, "pods")["items"] == []
    assert "startTime" not in get(k, ns, "job", "later").get("status", {})
    k.run("patch", "job", "later", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    k.run("wait", "--for=condition=complete", "job/later", "-n", ns, "--timeout=60s")
    cond = condition(get(k, ns, "job", "later"), "Suspended")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "JobResumed")
    got = events(k, ns, "later")
    assert ("Normal", "Suspended", "Job suspended") in got and ("Normal", "Resumed", "Job resumed") in got


def test_ttl_after_finished_deletes_the_job_and_its_pods(k: Kubectl, ns: str) -> None:
    k.apply(job_manifest("shortlived", "true", ttlSecondsAfterFinished=1), "-n", ns)
    k.run("wait", "--for=delete", "job/shortlived", "-n", ns, "--timeout=60s")
    wait_for(lambda: get(k, ns, "pods")["items"] == [], "pods deleted with the job (foreground)")


# -- failure and success policies -----------------------------------------------------------------------


def test_pod_failure_policy_fail_job_rule(k: Kubectl, ns: str) -> None:
    policy = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}
        ]
    }
    k.apply(job_manifest("exit42", "exit 42", backoffLimit=6, podFailurePolicy=policy), "-n", ns)
    k.run("wait", "--for=condition=failed", "job/exit42", "-n", ns, "--timeout=60s")
    (pod,) = get(k, ns, "pods", "-l", "job-name=exit42")["items"]  # no retry
    message = (
        f"Container main for pod {ns}/{pod['metadata']['name']} failed with exit code 42 matching FailJob rule "
        "at index 0"
    )
    job = get(k, ns, "job", "exit42")
    for kind in ("FailureTarget", "Failed"):
        cond = condition(job, kind)
        assert cond is not None and (cond["reason"], cond["message"]) == ("PodFailurePolicy", message)
    assert job["spec"]["podReplacementPolicy"] == "Failed"  # defaulted with a pod failure policy
    assert ("Warning", "PodFailurePolicy", message) in events(k, ns, "exit42")


def test_evicted_pod_is_ignored_by_the_pod_failure_policy(k: Kubectl, ns: str, tmp_path: Path) -> None:
    policy = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    k.apply(job_manifest("evictme", "sleep 600", backoffLimit=0, podFailurePolicy=policy), "-n", ns)
    first = wait_for(
        lambda: [
            p
            for p in get(k, ns, "pods", "-l", "job-name=evictme")["items"]
            if p["status"].get("phase") == "Running"
        ],
        "the pod running",
    )[0]
    name = first["metadata"]["name"]
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
    (tmp_path / "eviction.json").write_text(json.dumps(eviction))
    k.run(
        "create",
        "--raw",
        f"/api/v1/namespaces/{ns}/pods/{name}/eviction",
        "-f",
        str(tmp_path / "eviction.json"),
    )

    def replaced() -> bool:
        pods = get(k, ns, "pods", "-l", "job-name=evictme")["items"]
        return any(p["metadata"]["name"] != name and p["status"].get("phase") == "Running" for p in pods)

    # the evicted pod got DisruptionTarget=True (EvictionByEvictionAPI) and was replaced: without the
    # condition its failure would have used up backoffLimit 0 and failed the Job
    wait_for(replaced, "a replacement pod running")
    job = get(k, ns, "job", "evictme")
    assert condition(job, "Failed") is None and not job["status"].get("failed")  # backoffLimit 0 not used up


def indexed_manifest(name: str, command: str, **spec: Any) -> str:
    return job_manifest(name, command, completionMode="Indexed", **spec)


def test_backoff_limit_per_index_and_failed_indexes(k: Kubectl, ns: str) -> None:
    k.apply(
        indexed_manifest(
            "perindex",
            '[ "$JOB_COMPLETION_INDEX" != 1 ]',
            completions=3,
            parallelism=3,
            backoffLimitPerIndex=1,
        ),
        "-n",
        ns,
    )
    k.run("wait", "--for=condition=failed", "job/perindex", "-n", ns, "--timeout=60s")
    job = get(k, ns, "job", "perindex")
    status = job["status"]
    assert (status["completedIndexes"], status["failedIndexes"], status["succeeded"], status["failed"]) == (
        "0,2",
        "1",
        2,
        2,
    )
    cond = condition(job, "Failed")
    assert cond is not None and (cond["reason"], cond["message"]) == (
        "FailedIndexes",
        "Job has failed indexes",
    )
    counts = sorted(
        p["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"]
        for p in get(k, ns, "pods", "-l", "batch.kubernetes.io/job-completion-index=1")["items"]
    )
    assert counts == ["0", "1"]  # the retry carried its index's failure count


def test_success_policy_completes_when_the_leader_succeeds(k: Kubectl, ns: str) -> None:
    k.apply(
        indexed_manifest(
            "leader",
            '[ "$JOB_COMPLETION_INDEX" = 0 ] || sleep 600',
            completions=3,
            parallelism=3,
            successPolicy={"rules": [{"succeededIndexes": "0", "succeededCount": 1}]},
        ),
        "-n",
        ns,
    )
    k.run("wait", "--for=condition=complete", "job/leader", "-n", ns, "--timeout=60s")
    job = get(k, ns, "job", "leader")
    for kind in ("SuccessCriteriaMet", "Complete"):
        cond = condition(job, kind)
        assert cond is not None and (cond["reason"], cond["message"]) == (
            "SuccessPolicy",
            "Matched rules at index 0",
        )
    assert job["status"]["completedIndexes"] == "0" and job["status"]["succeeded"] == 1
    assert job["status"].get("active", 0) == 0


def test_policy_fields_are_validated(k: Kubectl, ns: str) -> None:
    bad = job_manifest(
        "invalid",
        "true",
        backoffLimitPerIndex=1,
        podFailurePolicy={"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0]}}]},
        successPolicy={"rules": [{"succeededCount": 1}]},
    )
    err = k.fails("apply", "-f", "-", "-n", ns, input=bad).stderr
    assert 'The Job "invalid" is invalid: ' in err
    for text in (
        "spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode",
        "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator",
        "spec.successPolicy: Invalid value: batch.SuccessPolicy{...}: requires indexed completion mode",
    ):
        assert text in err, err


# -- CronJobs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", ["k", "k132"])
def test_create_job_from_cronjob(client: str, request: pytest.FixtureRequest, ns: str) -> None:
    kc: Kubectl = request.getfixturevalue(client)
    kc.run(
        "create",
        "cronjob",
        "nightly",
        "-n",
        ns,
        f"--schedule={NEVER_SOON}",
        "--image=busybox",
        "--",
        "echo",
        "manual run",
    )
    kc.run("create", "job", "nightly-manual", "-n", ns, "--from=cronjob/nightly")
    kc.run("wait", "--for=condition=complete", "job/nightly-manual", "-n", ns, "--timeout=60s")
    job = get(kc, ns, "job", "nightly-manual")
    assert job["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"
    (owner,) = job["metadata"]["ownerReferences"]
    cronjob = get(kc, ns, "cronjob", "nightly")
    assert (owner["kind"], owner["name"], owner["uid"]) == ("CronJob", "nightly", cronjob["metadata"]["uid"])
    assert kc.run("logs", "job/nightly-manual", "-n", ns).out == "manual run\n"
    # the CronJob notices the Job it did not start, and its success
    wait_for(
        lambda: get(kc, ns, "cronjob", "nightly").get("status", {}).get("lastSuccessfulTime"),
        "lastSuccessfulTime",
    )
    assert (
        get(kc, ns, "cronjob", "nightly")["status"]["lastSuccessfulTime"] == job["status"]["completionTime"]
    )
    assert (
        "Warning",
        "UnexpectedJob",
        "Saw a job that the controller did not create or forgot: nightly-manual",
    ) in events(kc, ns, "nightly")
    assert "lastScheduleTime" not in get(kc, ns, "cronjob", "nightly")["status"]


def test_cronjob_history_limits_remove_old_jobs(k: Kubectl, ns: str) -> None:
    k.run(
        "create", "cronjob", "trimmed", "-n", ns, f"--schedule={NEVER_SOON}", "--image=busybox", "--", "true"
    )
    k.run(
        "patch",
        "cronjob",
        "trimmed",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec":{"successfulJobsHistoryLimit":1,"failedJobsHistoryLimit":0}}',
    )
    for name in ("run-1", "run-2", "run-3"):
        k.run("create", "job", name, "-n", ns, "--from=cronjob/trimmed")
        k.run("wait", "--for=condition=complete", f"job/{name}", "-n", ns, "--timeout=60s")
    wait_for(
        lambda: [j["metadata"]["name"] for j in get(k, ns, "jobs")["items"]] == ["run-3"],
        "only the newest successful job kept",
    )
    deleted = [m for t, r, m in events(k, ns, "trimmed") if r == "SuccessfulDelete"]
    assert sorted(deleted) == ["Deleted job run-1", "Deleted job run-2"]


def test_suspended_cronjob(k: Kubectl, ns: str) -> None:
    k.run("create", "cronjob", "paused", "-n", ns, "--schedule=* * * * *", "--image=busybox", "--", "true")
    k.run("patch", "cronjob", "paused", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    line = k.run("get", "cronjob", "paused", "-n", ns, "--no-headers").out.split()
    assert line[:7] == ["paused", "*", "*", "*", "*", "*", "<none>"] and line[7] == "True"
    # a manual run still works while suspended
    k.run("create", "job", "paused-now", "-n", ns, "--from=cronjob/paused")
    k.run("wait", "--for=condition=complete", "job/paused-now", "-n", ns, "--timeout=60s")

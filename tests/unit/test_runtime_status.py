"""Pod status as the kubelet writes it, checked against kubectl's printer (``pod_status_cells``): phase,
conditions, container states, and the crash-loop back-off."""

from __future__ import annotations

from typing import Any

import pytest

from vplane.kube.printers import pod_status_cells
from vplane.runtime.status import (
    Backoff,
    ContainerState,
    Terminated,
    format_duration,
    pod_conditions,
    pod_phase,
)

NOW = 1_800_000_000.0


def _pod(
    spec: dict[str, Any], states: dict[str, ContainerState], terminal: bool = False, deleting: bool = False
) -> dict[str, Any]:
    phase = pod_phase(spec, states, terminal)
    conditions = pod_conditions(spec, states, phase, True, [], NOW)
    status: dict[str, Any] = {"phase": phase, "conditions": conditions}
    inits = [c["name"] for c in spec.get("initContainers", [])]
    if inits:
        status["initContainerStatuses"] = [states[n].to_api() for n in inits]
    status["containerStatuses"] = [states[c["name"]].to_api() for c in spec["containers"]]
    meta: dict[str, Any] = {"name": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    return {"metadata": meta, "spec": spec, "status": status}


def _cells(pod: dict[str, Any]) -> tuple[str, str, str]:
    return pod_status_cells(pod, NOW)


SPEC = {"containers": [{"name": "main"}], "restartPolicy": "Always"}


def _exited(code: int) -> Terminated:
    return Terminated(
        code, "Completed" if code == 0 else "Error", NOW - 5, NOW - 10, container_id="vplane://1"
    )


def test_creating_then_running() -> None:
    creating = ContainerState("main")
    assert _cells(_pod(SPEC, {"main": creating})) == ("0/1", "ContainerCreating", "0")
    running = ContainerState("main")
    running.set_running(NOW - 3, "vplane://1")
    running.ready = True
    pod = _pod(SPEC, {"main": running})
    assert _cells(pod) == ("1/1", "Running", "0")
    assert [(c["type"], c["status"]) for c in pod["status"]["conditions"]] == [
        ("PodReadyToStartContainers", "True"),
        ("Initialized", "True"),
        ("Ready", "True"),
        ("ContainersReady", "True"),
        ("PodScheduled", "True"),
    ]


def test_running_but_not_ready_reads_containers_not_ready() -> None:
    state = ContainerState("main")
    state.set_running(NOW - 3, "vplane://1")
    pod = _pod(SPEC, {"main": state})
    assert _cells(pod) == ("0/1", "Running", "0")
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["reason"], ready["message"]) == (
        "ContainersNotReady",
        "containers with unready status: [main]",
    )


@pytest.mark.parametrize(
    ("policy", "code", "phase", "shown"),
    [
        ("Never", 0, "Succeeded", "Completed"),
        ("Never", 1, "Failed", "Error"),
        ("OnFailure", 0, "Succeeded", "Completed"),
        ("OnFailure", 2, "Running", "Error"),
        ("Always", 0, "Running", "Completed"),
    ],
)
def test_an_exited_container_by_restart_policy(policy: str, code: int, phase: str, shown: str) -> None:
    state = ContainerState("main")
    state.set_terminated(_exited(code))
    spec = {**SPEC, "restartPolicy": policy}
    pod = _pod(spec, {"main": state}, terminal=policy != "Always" and (policy == "Never" or code == 0))
    assert pod["status"]["phase"] == phase
    assert _cells(pod)[1] == shown


def test_a_finished_pod_is_not_ready_with_pod_completed() -> None:
    state = ContainerState("main")
    state.set_terminated(_exited(0))
    pod = _pod({**SPEC, "restartPolicy": "Never"}, {"main": state}, terminal=True)
    by_type = {c["type"]: c for c in pod["status"]["conditions"]}
    assert (by_type["Ready"]["status"], by_type["Ready"]["reason"]) == ("False", "PodCompleted")
    assert by_type["ContainersReady"]["reason"] == "PodCompleted"


def test_crash_loop_back_off_keeps_the_last_state_and_counts_restarts() -> None:
    state = ContainerState("main", restart_count=3)
    state.last_terminated = _exited(1)
    state.set_waiting("CrashLoopBackOff", "back-off 20s restarting failed container=main pod=p_ns(uid)")
    pod = _pod(SPEC, {"main": state})
    assert pod["status"]["phase"] == "Running"  # a container restarting under Always
    ready, status, restarts = _cells(pod)
    assert (ready, status) == ("0/1", "CrashLoopBackOff")
    assert restarts == "3 (5s ago)"
    api = pod["status"]["containerStatuses"][0]
    assert api["lastState"]["terminated"]["exitCode"] == 1
    assert api["state"]["waiting"]["reason"] == "CrashLoopBackOff"


@pytest.mark.parametrize(
    "reason", ["ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "InvalidImageName"]
)
def test_waiting_reasons_are_the_status_and_the_pod_pending(reason: str) -> None:
    state = ContainerState("main")
    state.set_waiting(reason, "why")
    pod = _pod(SPEC, {"main": state})
    assert pod["status"]["phase"] == "Pending"
    assert _cells(pod)[1] == reason


def test_init_containers_in_order() -> None:
    spec = {
        "initContainers": [{"name": "a"}, {"name": "b"}],
        "containers": [{"name": "main"}],
        "restartPolicy": "Always",
    }
    a, b, main = ContainerState("a", init=True), ContainerState("b", init=True), ContainerState("main")
    main.waiting_reason = "PodInitializing"
    a.set_running(NOW - 1, "vplane://a")
    pod = _pod(spec, {"a": a, "b": b, "main": main})
    assert _cells(pod)[1] == "Init:0/2"
    assert pod["status"]["phase"] == "Pending"
    initialized = next(c for c in pod["status"]["conditions"] if c["type"] == "Initialized")
    assert initialized["message"] == "containers with incomplete status: [a b]"
    a.set_terminated(_exited(0))
    b.set_running(NOW - 1, "vplane://b")
    assert _cells(_pod(spec, {"a": a, "b": b, "main": main}))[1] == "Init:1/2"
    b.set_terminated(_exited(1))
    never = {**spec, "restartPolicy": "Never"}
    failed = _pod(never, {"a": a, "b": b, "main": main}, terminal=True)
    assert (failed["status"]["phase"], _cells(failed)[1]) == ("Failed", "Init:Error")
    b.last_terminated, b.terminated = b.terminated, None
    b.set_waiting("CrashLoopBackOff", "")
    assert _cells(_pod(spec, {"a": a, "b": b, "main": main}))[1] == "Init:CrashLoopBackOff"


def test_deleting_shows_terminating() -> None:
    state = ContainerState("main")
    state.set_running(NOW - 3, "vplane://1")
    state.ready = True
    assert _cells(_pod(SPEC, {"main": state}, deleting=True))[1] == "Terminating"


def test_conditions_keep_their_transition_time_while_unchanged() -> None:
    state = ContainerState("main")
    state.set_running(NOW, "vplane://1")
    first = pod_conditions(SPEC, {"main": state}, "Running", True, [], NOW)
    later = pod_conditions(SPEC, {"main": state}, "Running", True, first, NOW + 100)
    assert [c["lastTransitionTime"] for c in later] == [c["lastTransitionTime"] for c in first]
    state.ready = True
    changed = {c["type"]: c for c in pod_conditions(SPEC, {"main": state}, "Running", True, first, NOW + 100)}
    assert changed["Ready"]["lastTransitionTime"] != changed["Initialized"]["lastTransitionTime"]


def test_readiness_gates_hold_ready_back() -> None:
    state = ContainerState("main")
    state.set_running(NOW, "vplane://1")
    state.ready = True
    spec = {**SPEC, "readinessGates": [{"conditionType": "example.com/gate"}]}
    by_type = {c["type"]: c for c in pod_conditions(spec, {"main": state}, "Running", True, [], NOW)}
    assert by_type["Ready"]["reason"] == "ReadinessGatesNotReady"
    assert (
        by_type["Ready"]["message"]
        == 'corresponding condition of pod readiness gate "example.com/gate" does not exist.'
    )
    gate = {"type": "example.com/gate", "status": "True"}
    by_type = {c["type"]: c for c in pod_conditions(spec, {"main": state}, "Running", True, [gate], NOW)}
    assert by_type["Ready"]["status"] == "True"


def test_crash_back_off_starts_at_once_then_doubles_to_the_cap_and_forgets() -> None:
    now = [0.0]
    backoff = Backoff(10, 300, 600, clock=lambda: now[0])
    key = "uid/main"
    assert backoff.in_backoff_since(key, 0.0) == 0  # the first restart is immediate
    assert backoff.next(key) == 10
    now[0] = 1.0  # the second run ended at once
    assert backoff.in_backoff_since(key, 1.0) == 10
    now[0] = 11.0
    assert backoff.in_backoff_since(key, 1.0) == 0
    delays = [backoff.next(key)]
    for _ in range(6):
        delays.append(backoff.next(key))
    assert delays == [20, 40, 80, 160, 300, 300, 300]
    now[0] += 601  # ran for ten minutes since the last back-off: start over
    assert backoff.in_backoff_since(key, now[0]) == 0
    assert backoff.next(key) == 10


def test_image_pull_back_off_counts_from_the_last_failure() -> None:
    now = [100.0]
    backoff = Backoff(10, 300, 600, clock=lambda: now[0])
    backoff.next("uid_nginx")
    now[0] = 105.0
    assert backoff.in_backoff_since_update("uid_nginx") == 5
    now[0] = 111.0
    assert backoff.in_backoff_since_update("uid_nginx") == 0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(10, "10s"), (300, "5m0s"), (1.5, "1.5s"), (0.393, "393ms"), (0, "0s"), (3725, "1h2m5s")],
)
def test_durations_read_as_go_prints_them(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


SIDECAR_SPEC = {
    "initContainers": [{"name": "side", "restartPolicy": "Always"}, {"name": "setup"}],
    "containers": [{"name": "main"}],
    "restartPolicy": "Never",
}


def _running(name: str, *, started: bool = True, ready: bool = True) -> ContainerState:
    state = ContainerState(name, init=name != "main", sidecar=name == "side")
    state.set_running(NOW - 3, "vplane://1")
    state.started, state.ready = started, ready
    return state


def test_a_sidecar_must_start_before_the_pod_initializes() -> None:
    waiting = {
        "side": ContainerState("side", init=True, sidecar=True),
        "setup": ContainerState("setup", init=True),
    }
    waiting["main"] = ContainerState("main")
    pod = _pod(SIDECAR_SPEC, waiting)
    assert pod["status"]["phase"] == "Pending"
    unstarted = {**waiting, "side": _running("side", started=False, ready=False)}
    pod = _pod(SIDECAR_SPEC, unstarted)
    assert pod["status"]["phase"] == "Pending"
    initialized = next(c for c in pod["status"]["conditions"] if c["type"] == "Initialized")
    assert initialized["message"] == "containers with incomplete status: [side setup]"


def test_a_running_sidecar_counts_toward_ready_and_its_restarts_do_not_pend_the_pod() -> None:
    setup = ContainerState("setup", init=True)
    setup.set_terminated(_exited(0))
    main = _running("main")
    main.ever_started = True
    states = {"side": _running("side", ready=False), "setup": setup, "main": main}
    pod = _pod(SIDECAR_SPEC, states)
    assert pod["status"]["phase"] == "Running"
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "ContainersReady")
    assert ready["message"] == "containers with unready status: [side]"
    crashed = ContainerState("side", init=True, sidecar=True)
    crashed.last_terminated = _exited(3)
    crashed.set_waiting("CrashLoopBackOff", "back-off 10s")
    assert _pod(SIDECAR_SPEC, {**states, "side": crashed})["status"]["phase"] == "Running"


def test_a_pod_whose_containers_succeeded_succeeds_with_its_sidecar_stopped() -> None:
    setup = ContainerState("setup", init=True)
    setup.set_terminated(_exited(0))
    main = ContainerState("main")
    main.ever_started = True
    main.set_terminated(_exited(0))
    side = ContainerState("side", init=True, sidecar=True)
    side.set_terminated(_exited(137))
    assert _pod(SIDECAR_SPEC, {"side": side, "setup": setup, "main": main}, terminal=True)["status"][
        "phase"
    ] == ("Succeeded")
    still = _running("side")  # not stopped yet: the pod is still running
    assert _pod(SIDECAR_SPEC, {"side": still, "setup": setup, "main": main}, terminal=True)["status"][
        "phase"
    ] == ("Running")

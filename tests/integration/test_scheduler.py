"""``vplane scheduler`` against a real ``vplane apiserver``, driven with kubectl.

The test creates Node objects (capacity, allocatable, labels, taints) since no kubelet registers any, and
pods with kubectl; the scheduler runs as its own process with the server's kubeconfig, exactly as against
a real cluster. Each test starts from a cluster without nodes and with a namespace of its own; waits are
bounded polls, never asserted timings.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration

ZONE = "topology.kubernetes.io/zone"


class SchedulerProcess:
    def __init__(self, kubeconfig: Path, workdir: Path, **settings: Any) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        ready = workdir / "scheduler-ready"
        self.log_path = workdir / "scheduler.log"
        cmd = [sys.executable, "-m", "vplane.cli.main", "scheduler", "--kubeconfig", str(kubeconfig)]
        cmd += ["--ready-file", str(ready)]
        for name, value in settings.items():
            cmd += ["--set", f"{name}={value}"]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, self.log()
            time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    """A server of this module's own: the tests count every node in the cluster."""
    api = APIServerProcess(tmp_path_factory.mktemp("scheduler-api"))
    api.start()
    yield api
    api.stop()


@pytest.fixture
def k(server: APIServerProcess, kubectl_path: str, tmp_path: Path, request: pytest.FixtureRequest) -> Kubectl:
    """kubectl in a namespace of this test's own, on a cluster without nodes (nor earlier tests' pods)."""
    kubectl = Kubectl(kubectl_path, server.kubeconfig, tmp_path / "kubecache")
    kubectl.run("delete", "pods", "--all", "--all-namespaces", "--wait=false")
    kubectl.run("delete", "nodes", "--all", "--wait=false")
    name = "s-" + "".join(ch if ch.isalnum() else "-" for ch in request.node.name.lower())[:40].strip("-")
    kubectl.run("create", "namespace", name)
    kubectl.run("config", "set-context", "--current", f"--namespace={name}")
    return kubectl


@pytest.fixture
def scheduler(server: APIServerProcess, tmp_path: Path) -> Iterator[Callable[..., SchedulerProcess]]:
    started: list[SchedulerProcess] = []

    def start(**settings: Any) -> SchedulerProcess:
        proc = SchedulerProcess(server.kubeconfig, tmp_path / f"scheduler-{len(started)}", **settings)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


def add_node(
    k: Kubectl, name: str, cpu: str = "2", memory: str = "4Gi", pods: int = 110, **spec: Any
) -> None:
    labels = {"kubernetes.io/hostname": name, **spec.pop("labels", {})}
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"capacity": allocatable, "allocatable": allocatable},
    }
    k.apply(yaml.safe_dump(node))


def add_pod(
    k: Kubectl, name: str, cpu: str | None = None, labels: dict[str, str] | None = None, **spec: Any
) -> None:
    container: dict[str, Any] = {"name": "app", "image": "registry.k8s.io/pause:3.10"}
    if cpu:
        container["resources"] = {"requests": {"cpu": cpu}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [container], **spec},
    }
    k.apply(yaml.safe_dump(pod))


def get_pod(k: Kubectl, name: str) -> dict[str, Any] | None:
    result = k.run("get", "pod", name, "-o", "json", check=False)
    return json.loads(result.out) if result.code == 0 else None


def wait_for(check: Callable[[], Any], what: str, within: float = 30) -> Any:
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        time.sleep(0.1)


def node_of(k: Kubectl, name: str) -> str:
    pod = get_pod(k, name)
    return str((pod or {}).get("spec", {}).get("nodeName") or "")


def bound(k: Kubectl, name: str) -> str:
    return str(wait_for(lambda: node_of(k, name), f"pod {name} is bound"))


def described_with(k: Kubectl, name: str, text: str) -> str:
    """``kubectl describe pod`` once its output shows ``text`` (events are written in the background)."""

    def check() -> str | None:
        out = k.run("describe", "pod", name).out
        return out if text in out else None

    return str(wait_for(check, f"kubectl describe pod {name} shows {text!r}"))


def scheduled_condition(k: Kubectl, name: str) -> dict[str, Any]:
    def condition() -> dict[str, Any] | None:
        pod = get_pod(k, name) or {}
        for c in pod.get("status", {}).get("conditions", []):
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                return dict(c)
        return None

    return dict(wait_for(condition, f"pod {name} has PodScheduled=False"))


def test_a_pending_pod_is_bound_and_the_event_says_so(
    k: Kubectl, scheduler: Callable[..., SchedulerProcess]
) -> None:
    add_node(k, "node-1")
    scheduler()
    add_pod(k, "web", cpu="500m")
    assert bound(k, "web") == "node-1"
    pod = get_pod(k, "web")
    assert pod is not None
    conditions = {c["type"]: c for c in pod["status"]["conditions"]}
    assert conditions["PodScheduled"]["status"] == "True"
    namespace = pod["metadata"]["namespace"]
    described = described_with(k, "web", "Scheduled")
    assert f"Successfully assigned {namespace}/web to node-1" in described
    assert "default-scheduler" in described


def test_a_pod_that_fits_nowhere_stays_pending_with_upstreams_message(
    k: Kubectl, scheduler: Callable[..., SchedulerProcess]
) -> None:
    add_node(k, "node-1", cpu="1")
    scheduler()
    add_pod(k, "big", cpu="2")
    condition = scheduled_condition(k, "big")
    assert condition["reason"] == "Unschedulable"
    assert condition["message"] == (
        "0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, preemption: "
        "0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )
    described = described_with(k, "big", "FailedScheduling")
    assert "0/1 nodes are available: 1 Insufficient cpu." in described
    assert node_of(k, "big") == ""
    # ... and is bound as soon as a node that fits is added
    add_node(k, "node-2", cpu="4")
    assert bound(k, "big") == "node-2"


def test_a_pod_is_retried_when_the_pod_in_its_way_is_deleted(
    k: Kubectl, scheduler: Callable[..., SchedulerProcess]
) -> None:
    add_node(k, "node-1", cpu="1")
    scheduler()
    add_pod(k, "first", cpu="1")
    assert bound(k, "first") == "node-1"
    add_pod(k, "second", cpu="1")
    scheduled_condition(k, "second")
    k.run("delete", "pod", "first")
    assert bound(k, "second") == "node-1"


def test_node_selector_affinity_and_taints(k: Kubectl, scheduler: Callable[..., SchedulerProcess]) -> None:
    add_node(k, "ssd", labels={"disk": "ssd"})
    add_node(
        k,
        "gpu",
        labels={"accelerator": "gpu"},
        taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
    )
    add_node(k, "plain")
    scheduler()
    add_pod(k, "selector", nodeSelector={"disk": "ssd"})
    required = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "disk", "operator": "DoesNotExist"},
                            {"key": "accelerator", "operator": "DoesNotExist"},
                        ]
                    }
                ]
            }
        }
    }
    add_pod(k, "affinity", affinity=required)
    add_pod(k, "untolerated", nodeSelector={"accelerator": "gpu"})
    add_pod(
        k,
        "tolerated",
        nodeSelector={"accelerator": "gpu"},
        tolerations=[{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
    )
    assert bound(k, "selector") == "ssd"
    assert bound(k, "affinity") == "plain"
    assert bound(k, "tolerated") == "gpu"
    assert scheduled_condition(k, "untolerated")["message"].startswith(
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), "
        "2 node(s) didn't match Pod's node affinity/selector."
    )


def test_cordoned_nodes_take_no_pods_until_uncordoned(
    k: Kubectl, scheduler: Callable[..., SchedulerProcess]
) -> None:
    add_node(k, "node-1")
    scheduler()
    k.run("cordon", "node-1")
    add_pod(k, "waiting")
    assert scheduled_condition(k, "waiting")["message"].startswith(
        "0/1 nodes are available: 1 node(s) were unschedulable."
    )
    k.run("uncordon", "node-1")
    assert bound(k, "waiting") == "node-1"


def test_pods_for_another_scheduler_are_left_alone(
    k: Kubectl, scheduler: Callable[..., SchedulerProcess]
) -> None:
    add_node(k, "node-1")
    scheduler()
    add_pod(k, "theirs", schedulerName="my-scheduler")
    add_pod(k, "ours")
    assert bound(k, "ours") == "node-1"
    pod = get_pod(k, "theirs")
    assert pod is not None and not pod["spec"].get("nodeName") and not pod["status"].get("conditions")


def test_pod_anti_affinity_and_topology_spread(
    k: Kubectl, scheduler: Callable[..., SchedulerProcess]
) -> None:
    add_node(k, "a1", labels={ZONE: "a"})
    add_node(k, "a2", labels={ZONE: "a"})
    add_node(k, "b1", labels={ZONE: "b"})
    scheduler()
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}},
        }
    ]
    placed = []
    for i in range(4):
        add_pod(k, f"spread-{i}", labels={"app": "spread"}, topologySpreadConstraints=spread)
        placed.append(bound(k, f"spread-{i}"))
    zones = [("a" if n.startswith("a") else "b") for n in placed]
    assert zones.count("a") == zones.count("b") == 2
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "solo"}}, "topologyKey": ZONE}
            ]
        }
    }
    add_pod(k, "solo-0", labels={"app": "solo"}, affinity=anti)
    add_pod(k, "solo-1", labels={"app": "solo"}, affinity=anti)
    first, second = bound(k, "solo-0"), bound(k, "solo-1")
    assert first[0] != second[0]
    add_pod(k, "solo-2", labels={"app": "solo"}, affinity=anti)
    assert scheduled_condition(k, "solo-2")["message"].startswith(
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
    )


def test_a_higher_priority_pod_preempts_a_lower_one(
    k: Kubectl, scheduler: Callable[..., SchedulerProcess]
) -> None:
    for name, value in (("sched-low", 10), ("sched-high", 1000)):
        if k.run("get", "priorityclass", name, check=False).code != 0:
            k.run("create", "priorityclass", name, f"--value={value}")
    add_node(k, "node-1", cpu="1")
    add_node(k, "node-2", cpu="1")
    scheduler()
    add_pod(k, "low-guarded", cpu="1", labels={"app": "guarded"}, priorityClassName="sched-low")
    add_pod(k, "low-free", cpu="1", labels={"app": "free"}, priorityClassName="sched-low")
    guarded_node, free_node = bound(k, "low-guarded"), bound(k, "low-free")
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    k.apply(yaml.safe_dump(budget))
    add_pod(k, "important", cpu="1", priorityClassName="sched-high")
    # the pod without a disruption budget is the victim; the preemptor is nominated, then bound there
    wait_for(lambda: get_pod(k, "low-free") is None, "the victim is deleted")
    assert bound(k, "important") == free_node
    assert get_pod(k, "low-guarded") is not None and node_of(k, "low-guarded") == guarded_node
    important = get_pod(k, "important")
    # nominated to the node while the victim went away (a 1.34+ API server clears it again on binding)
    assert important is not None and important["status"].get("nominatedNodeName") in (free_node, None)
    events = json.loads(k.run("get", "events.events.k8s.io", "-o", "json").out)["items"]
    preempted = [e for e in events if e.get("reason") == "Preempted"]
    assert [e["regarding"]["name"] for e in preempted] == ["low-free"]
    assert preempted[0]["note"] == f"Preempted by pod {important['metadata']['uid']} on node {free_node}"


def test_unschedulable_pods_are_retried_after_the_unschedulable_timeout(
    k: Kubectl, scheduler: Callable[..., SchedulerProcess]
) -> None:
    """Nothing changes in the cluster, yet the pod is tried again (the 5-minute flush, shrunk to 1 s): its
    FailedScheduling event becomes a series."""
    add_node(k, "node-1", cpu="1")
    scheduler(
        pod_max_in_unschedulable_seconds=1, pod_initial_backoff_seconds=0.2, pod_max_backoff_seconds=0.5
    )
    add_pod(k, "big", cpu="2")

    def series() -> int:
        events = json.loads(k.run("get", "events.events.k8s.io", "-o", "json").out)["items"]
        counts = [
            int((e.get("series") or {}).get("count") or 1)
            for e in events
            if e.get("reason") == "FailedScheduling"
        ]
        return max(counts, default=0) if max(counts, default=0) >= 2 else 0

    assert wait_for(series, "a second FailedScheduling in a series") >= 2
    assert "(x2 over" in k.run("describe", "pod", "big").out or series() > 2

"""Workload controllers, the scheduler and the node runtime together on ``vplane cluster start``: a
Deployment rolled from one image tag to another really replaces every process, and a pod larger than the
machine stays Pending with the scheduler's upstream message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_runtime import Cluster, wait_until

from harness import Kubectl

pytestmark = pytest.mark.integration


@pytest.fixture
def running(tmp_path: Path, kubectl_path: str) -> Iterator[tuple[Cluster, Kubectl]]:
    cluster = Cluster(tmp_path / "cluster").start()
    try:
        yield cluster, Kubectl(kubectl_path, cluster.kubeconfig, tmp_path / "cache")
    finally:
        cluster.stop()
        cluster.assert_no_leftovers()


def pod_processes(node_dir: Path) -> dict[str, set[int]]:
    """Pod name -> pids of its container processes (the runtime gives each HOSTNAME=<pod name>)."""
    marker = f"VPLANE_NODE_ROOT={node_dir}".encode()
    found: dict[str, set[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state == "Z" or marker not in environ:
            continue
        for item in environ:
            if item.startswith(b"HOSTNAME="):
                found.setdefault(item.removeprefix(b"HOSTNAME=").decode(), set()).add(int(entry.name))
    return found


def pods(k: Kubectl, ns: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        k.run("get", "pods", "-n", ns, "-l", selector, "-o", "json").out
    )["items"]
    return items


def test_a_deployment_rolled_to_another_tag_restarts_every_pod(running: tuple[Cluster, Kubectl]) -> None:
    cluster, k = running
    k.run("create", "namespace", "apps")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "containers": [
                        {
                            "name": "web",
                            "image": "busybox:1.36",
                            "command": ["sh", "-c", 'echo "started $HOSTNAME"; exec sleep 3600'],
                            "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                        }
                    ],
                },
            },
        },
    }
    k.apply(json.dumps(deployment), "-n", "apps")
    out = k.run("rollout", "status", "deploy/web", "-n", "apps", "--timeout=90s", timeout=120).out
    assert out.strip().endswith('deployment "web" successfully rolled out')
    before = {p["metadata"]["name"]: p for p in pods(k, "apps", "app=web")}
    assert len(before) == 3
    old_processes = pod_processes(cluster.node_dir)
    for name, pod in before.items():
        assert pod["status"]["containerStatuses"][0]["image"] == "docker.io/library/busybox:1.36"
        assert old_processes.get(name), f"pod {name} runs no process"

    k.run("set", "image", "deploy/web", "web=busybox:1.37", "-n", "apps")
    out = k.run("rollout", "status", "deploy/web", "-n", "apps", "--timeout=90s", timeout=120).out
    assert out.strip().endswith('deployment "web" successfully rolled out')

    def only_new() -> list[dict[str, Any]] | None:
        current = pods(k, "apps", "app=web")
        names = {p["metadata"]["name"] for p in current}
        return current if len(current) == 3 and not names & set(before) else None

    after: list[dict[str, Any]] = wait_until(only_new, "only the new pods remain", within=60)
    for pod in after:
        status = pod["status"]["containerStatuses"][0]
        assert (status["image"], status["ready"], status["restartCount"]) == (
            "docker.io/library/busybox:1.37",
            True,
            0,
        )
        assert status["containerID"] not in {
            p["status"]["containerStatuses"][0]["containerID"] for p in before.values()
        }
        logs = k.run("logs", pod["metadata"]["name"], "-n", "apps").out
        assert logs == f"started {pod['metadata']['name']}\n"
    # Every old process ended; every new pod runs processes of its own.
    wait_until(lambda: not set(pod_processes(cluster.node_dir)) & set(before), "old processes ended")
    now = pod_processes(cluster.node_dir)
    for pod in after:
        pids = now.get(pod["metadata"]["name"])
        assert pids and not pids & set().union(*old_processes.values())
    history = k.run("rollout", "history", "deploy/web", "-n", "apps").out
    assert [line.split()[0] for line in history.strip().splitlines()[2:]] == ["1", "2"]


def test_a_pod_larger_than_the_machine_stays_pending(running: tuple[Cluster, Kubectl]) -> None:
    _, k = running
    cores = os.cpu_count() or 1
    k.run("create", "namespace", "big")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "huge"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": str(cores * 100)}},
                }
            ]
        },
    }
    k.apply(json.dumps(pod), "-n", "big")
    message = "0/1 nodes are available: 1 Insufficient cpu."
    wait_until(lambda: message in k.run("describe", "pod", "huge", "-n", "big").out, "FailedScheduling event")
    row = k.run("get", "pod", "huge", "-n", "big", "--no-headers").out.split()
    assert row[1:3] == ["0/1", "Pending"]
    got = json.loads(k.run("get", "pod", "huge", "-n", "big", "-o", "json").out)
    assert "nodeName" not in got["spec"]
    [scheduled] = [c for c in got["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert message in scheduled["message"]
    # A pod that fits, beside it, runs.
    small = {**pod, "metadata": {"name": "small"}}
    small["spec"] = {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}
    k.apply(json.dumps(small), "-n", "big")
    wait_until(
        lambda: k.run("get", "pod", "small", "-n", "big", "--no-headers").out.split()[2] == "Running",
        "the small pod runs",
    )

"""`vplane up`: the whole system on this machine, as the README's first command leaves it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import Kubectl, kill_node_processes, node_processes, replica_pids

pytestmark = pytest.mark.integration

EDGE_INITIALIZED = 'Connected cluster "edge": Initialized'
FAST_AGENT = {"readinessProbe": {"periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 2}}
FAST_NODE = {
    "pod_resync_seconds": 0.5,
    "node_status_update_frequency_seconds": 0.5,
    "stop_grace_period_seconds": 3,
    "status_batch_seconds": 0.02,
}


def test_vplane_up_starts_the_platform_and_two_tenant_clusters(tmp_path: Path, kubectl_path: str) -> None:
    """`vplane up` serves the management API and tenants `client` and `target` in project `default`, with a
    kubeconfig context for each, and leaves a login that `vplane connect` uses."""
    home = tmp_path / "home"
    ready = tmp_path / "up.ready"
    env = {**os.environ, "VPLANE_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vplane.cli.main",
                "up",
                "--listen",
                "127.0.0.1:0",
                "--ready-file",
                str(ready),
                # The connected cluster (`edge`): its agent's readiness and the Cluster loop, shrunk.
                "--set",
                "cluster_resync_seconds=1",
                "--set",
                "cluster_failed_requeue_seconds=1",
                "--set",
                "cluster_offline_requeue_seconds=0.5",
                "--set",
                f"agent_values={json.dumps(FAST_AGENT)}",
                *(a for name, value in FAST_NODE.items() for a in ("--cluster-set", f"{name}={value}")),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        kubeconfig = Path(ready.read_text().strip())
        assert kubeconfig == home / "up" / "kubeconfig.yaml"
        printed = log.read_text()
        assert "vplane is up." in printed
        assert (
            "vplane connect target --driver platform --project default -- kubectl get namespaces" in printed
        )
        k = Kubectl(kubectl_path, kubeconfig, tmp_path / "cache")
        # The connected cluster comes up in the background, and says so once Initialized.
        while EDGE_INITIALIZED not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline + 60, log.read_text()[-8000:]
            time.sleep(0.2)
        printed = log.read_text()
        assert "kubectl --context vplane_edge get pods -n vcluster-platform -l app=loft" in printed
        contexts = k.run("config", "get-contexts", "-o", "name").stdout.split()
        assert sorted(contexts) == [
            "vplane_client_default",
            "vplane_edge",
            "vplane_host",
            "vplane_management",
            "vplane_target_default",
        ]
        # Connected as an operator connects one: its agent is a pod there, the Cluster Initialized.
        agents = k.run(
            "--context",
            "vplane_edge",
            "get",
            "pods",
            "-n",
            "vcluster-platform",
            "-l",
            "app=loft",
            "--no-headers",
        ).stdout
        assert [line.split()[1:3] for line in agents.splitlines()] == [["1/1", "Running"]], agents
        phase = k.run(
            "--context",
            "vplane_management",
            "get",
            "cluster.management.loft.sh",
            "edge",
            "-o",
            "jsonpath={.spec.networkPeer} {.status.phase}",
        ).stdout
        assert phase == "true Initialized"
        # Its port is recorded, so the next `vplane up` starts it there again (adopted pods name it).
        server = k.run(
            "config", "view", "-o", "jsonpath={.clusters[?(@.name=='vplane_edge')].cluster.server}"
        ).stdout
        assert server.endswith(":" + (home / "up" / "clusters" / "edge.port").read_text().strip()), server
        # The tenants' control planes are pods of the platform's cluster: the runbook's commands, as printed.
        assert "kubectl --context vplane_host get pods -n vcluster-target" in printed
        assert (
            "kubectl --context vplane_host logs -n vcluster-client -l app=vcluster --tail=100 --prefix"
            in printed
        )
        rows = k.run(
            "--context", "vplane_host", "get", "pods", "-n", "vcluster-target", "--no-headers"
        ).stdout
        assert [line.split()[:3] for line in rows.splitlines()] == [["target-0", "1/1", "Running"]]
        lines = k.run(
            "--context",
            "vplane_host",
            "logs",
            "-n",
            "vcluster-client",
            "-l",
            "app=vcluster",
            "--tail=100",
            "--prefix",
        ).stdout.splitlines()
        assert lines and all(line.startswith("[pod/client-0/syncer] ") for line in lines)
        vcis = k.run(
            "--context", "vplane_management", "get", "virtualclusterinstances", "-n", "p-default"
        ).stdout
        assert "client" in vcis and "target" in vcis and vcis.count("Ready") == 2
        k.run("--context", "vplane_target_default", "create", "configmap", "up-check")
        connect = subprocess.run(
            [
                sys.executable,
                "-m",
                "vplane.cli.main",
                "connect",
                "target",
                "--driver",
                "platform",
                "--project",
                "default",
                "--",
                kubectl_path,
                "get",
                "configmap",
                "up-check",
                "-o",
                "name",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert connect.stdout.strip() == "configmap/up-check", connect.stderr
        assert "kube-system" in k.run("--context", "vplane_client_default", "get", "namespaces").stdout
        # The printed resource-proxy example, run as printed (with this test's kubectl and kubeconfig):
        example = next(
            line.strip()
            for line in printed.splitlines()
            if "widgets.demo.vplane.io" not in line
            and "kubectl --context vplane_client_default apply" in line
        )
        shown = subprocess.run(
            example.replace(
                "kubectl ", f"{kubectl_path} --kubeconfig {kubeconfig} --cache-dir {tmp_path}/c "
            ),
            shell=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert "w1" in shown.stdout
        assert "vcluster.com/owner-project=default,vcluster.com/owner-vcluster=client" in shown.stdout

        def doctor() -> str:
            result = subprocess.run(
                [sys.executable, "-m", "vplane.cli.main", "doctor", "proxy", "client", "--interval", "0.2"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 0, result.stderr
            return result.stdout

        healthy = doctor()
        assert "default/target for demo.vplane.io/v1: Ready, 1/1 replicas ready" in healthy
        assert "replica 0:" in healthy and "verdict: No proxy degradation" in healthy
        k.run(
            "--context", "vplane_management", "delete", "virtualclusterinstance", "target", "-n", "p-default"
        )
        down = doctor()
        assert "verdict: The target is down. Fix the target." in down
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    leftovers = [
        p for p in (home / "up").glob("platform/tenants/*/*/replica-*.pid") if _alive(int(p.read_text()))
    ]
    assert leftovers == [], "stopping vplane up stops its tenant clusters"
    pods = node_processes(home / "up" / "platform" / "node")
    kill_node_processes(home / "up" / "platform" / "node")
    assert pods == [], "stopping vplane up stops its tenant clusters' pods"
    assert replica_pids(home / "up" / "platform" / "tenants" / "p-default" / "client") == {}
    # The connected cluster's `vplane cluster start` and its pods (the agent) are gone too.
    edge = kill_node_processes(home / "up" / "clusters" / "edge" / "node")  # pods, shims
    edge += kill_node_processes(home / "up" / "clusters" / "edge")  # the cluster's own process
    assert edge == [], "stopping vplane up stops its connected cluster"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_vplane_up_refuses_a_connected_cluster_name_it_uses_for_another_context(tmp_path: Path) -> None:
    """The connected cluster's context is vplane_<name>: `host` would replace the platform's own cluster's."""
    env = {**os.environ, "VPLANE_HOME": str(tmp_path / "home")}
    result = subprocess.run(
        [sys.executable, "-m", "vplane.cli.main", "up", "--connected-cluster", "host"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Invalid value for --connected-cluster: 'host' is taken" in result.stderr
    assert not (tmp_path / "home" / "up").exists()

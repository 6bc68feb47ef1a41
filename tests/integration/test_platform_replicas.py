"""Platform replicas (issue 11 item 4) with real processes: two ``vplane platform start`` on one shared store,
``vplane apiserver`` as the connected cluster, a real ``vplane agent``, helm, kubectl through each replica.

Every interval is shrunk through settings (heartbeat 0.3 s, a replica stops reporting after 2 s, idle tracking
collected after 5 s); nothing asserts timings.
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

from harness import APIServerProcess, Kubectl, PlatformProcess
from platformkit import HELM, ROOT, cluster_settings, helm

pytestmark = pytest.mark.integration

PEER_HOLDER = "loft.sh/coordinator-instance-id"


def replica_settings(shared: Path, instance: str, **extra: Any) -> dict[str, Any]:
    return cluster_settings(
        shared_dir=str(shared),
        instance_id=instance,
        replica_heartbeat_seconds=0.3,
        replica_offline_after_seconds=2,
        mesh=json.dumps({"heartbeat_interval_seconds": 0.5, "gc_after_seconds": 5}),
        **extra,
    )


def eventually(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met in time")
        time.sleep(0.2)


def install_release(cluster: APIServerProcess, key: str, url: str) -> None:
    if not HELM.exists():
        pytest.skip("helm is not installed (scripts/bootstrap installs it)")
    args = ["upgrade", "loft", str(ROOT / "charts" / "vplane-agent")]
    args += ["--install", "--namespace", "vcluster-platform", "--create-namespace", "--set", "replicas=0"]
    args += ["--set-string", f"token={key}", "--set-string", f"url={url}"]
    helm(cluster.kubeconfig, cluster.data_dir.parent / "helm-cache", *args)


class Agent:
    """``vplane agent`` with the cluster's kubeconfig, against one replica's URL."""

    def __init__(self, tmp: Path, cluster: APIServerProcess, ca: Path, key: str) -> None:
        self.tmp, self.cluster, self.ca, self.key = tmp, cluster, ca, key
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = tmp / "agent.log"

    def start(self, url: str) -> Agent:
        mesh = {"heartbeat_interval_seconds": 0.5, "session_silence_timeout_seconds": 3}
        mesh |= {"reconnect_backoff_min_seconds": 0.1, "reconnect_backoff_max_seconds": 0.5}
        args = [sys.executable, "-m", "vplane.cli.main", "agent", "--token", self.key, "--url", url]
        args += [
            "--ca-file",
            str(self.ca),
            "--kubeconfig",
            str(self.cluster.kubeconfig),
            "--name",
            "loft-7d9f8-abcde",
        ]
        args += ["--set", f"mesh={json.dumps(mesh)}", "--set", "probe_retry_seconds=0.2"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOFT_AGENT_")}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, env=env | {"PYTHONUNBUFFERED": "1"}
            )
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Replica:
    def __init__(self, proc: PlatformProcess, kubectl_path: str, tmp: Path) -> None:
        self.proc = proc
        self.k = Kubectl(kubectl_path, proc.kubeconfig, tmp / f"{proc.data_dir.name}-kcache")
        self.stopped = False

    def status(self, cluster: str) -> tuple[str, str, str]:
        """The runbook's command (and status.online), through this replica."""
        out = self.k.run(
            "get",
            "cluster.management.loft.sh",
            cluster,
            "-o",
            "jsonpath={.status.phase}|{.status.reason}|{.status.online}",
        ).stdout
        phase, reason, online = out.split("|")
        return phase, reason, online

    def peers(self, cluster: str) -> list[dict[str, Any]]:
        items = json.loads(self.k.run("get", "networkpeers.management.loft.sh", "-o", "json").stdout)["items"]
        return [p for p in items if p["metadata"]["annotations"].get("loft.sh/cluster-name") == cluster]

    def reporting(self) -> list[str]:
        out = self.k.run(
            "get",
            "leases",
            "-n",
            "kube-system",
            "-l",
            "vplane.io/platform-replica=true",
            "-o",
            "jsonpath={.items[*].spec.holderIdentity}",
        ).stdout
        return sorted(out.split())

    def pause(self) -> None:
        assert self.proc.proc is not None
        os.kill(self.proc.proc.pid, signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        if self.stopped and self.proc.proc is not None:
            os.kill(self.proc.proc.pid, signal.SIGCONT)
        self.stopped = False


@pytest.fixture
def replicas(tmp_path: Path, kubectl_path: str) -> Iterator[tuple[Replica, Replica]]:
    shared = tmp_path / "shared"
    a = Replica(PlatformProcess(tmp_path / "a", replica_settings(shared, "a")), kubectl_path, tmp_path)
    # Tenant control planes are local processes of one replica: the other runs no tenant controllers.
    b = Replica(
        PlatformProcess(tmp_path / "b", replica_settings(shared, "b", tenant_controllers="false")),
        kubectl_path,
        tmp_path,
    )
    try:
        a.proc.start()
        b.proc.start()
        yield a, b
    finally:
        for r in (a, b):
            r.resume()
            r.proc.stop()


def test_a_stopped_replica_leaves_its_sessions_offline_and_another_takes_them(
    replicas: tuple[Replica, Replica], tmp_path: Path
) -> None:
    """Two replicas on one store: an agent connected to replica a reads online through both; a stops reporting
    (SIGSTOP) and b marks its session offline (NoOnlinePeers, phase empty), later collects it (Offline); the
    agent reconnecting to b brings the cluster back online, held by b; a, continued, does not undo that nor
    reconcile the cluster through the session it held before its pause."""
    a, b = replicas
    eventually(lambda: b.reporting() == ["a", "b"], "both replicas report")
    shared_ca = tmp_path / "shared" / "api" / "pki" / "ca.crt"
    cluster = APIServerProcess(tmp_path / "edge-api").start()
    agent: Agent | None = None
    try:
        a.k.apply(
            yaml.safe_dump(
                {
                    "apiVersion": "management.loft.sh/v1",
                    "kind": "Cluster",
                    "metadata": {"name": "edge"},
                    "spec": {"networkPeer": True, "managementNamespace": "vcluster-platform"},
                }
            )
        )
        raw = b.k.run("get", "--raw", "/apis/management.loft.sh/v1/clusters/edge/accesskey").stdout
        key = json.loads(raw)["accessKey"]
        # The agent's release, as `vplane platform connect cluster` installs it (without pods: the agent
        # runs as a process here); a connected agent without one reads InitializeCluster instead.
        install_release(cluster, key, a.proc.url)
        agent = Agent(tmp_path, cluster, shared_ca, key).start(a.proc.url)

        # Online, through both replicas; a holds the session and reconciles the cluster through it.
        for r in (a, b):
            eventually(
                lambda r=r: r.status("edge") == ("Initialized", "NotFound", "true"), f"edge online via {r}"
            )
        [peer] = b.peers("edge")
        assert peer["metadata"]["annotations"][PEER_HOLDER] == "a" and peer["status"]["online"] is True

        # a stops reporting: b marks the session offline, then reconciles the cluster itself.
        a.pause()
        eventually(
            lambda: [p["status"]["online"] for p in b.peers("edge")] == [False], "session offline via b"
        )
        assert b.peers("edge")[0]["status"]["lastSeen"]
        eventually(lambda: b.status("edge") == ("", "NoOnlinePeers", "false"), "NoOnlinePeers via b")

        # Idle tracking is collected (the peer and a's Lease); the cluster reads as never connected.
        eventually(lambda: b.peers("edge") == [] and b.reporting() == ["b"], "idle tracking collected")
        eventually(lambda: b.status("edge") == ("", "Offline", "false"), "Offline via b")

        # The agent reconnects, to b: tracking recreated, held by b, the cluster back online.
        agent.kill()
        agent.start(b.proc.url)
        eventually(lambda: b.status("edge") == ("Initialized", "NotFound", "true"), "edge online again via b")
        [peer] = b.peers("edge")
        assert peer["metadata"]["annotations"][PEER_HOLDER] == "b" and peer["status"]["online"] is True

        # a continues: its old session ends (the agent it had is gone), and it reports again; the peer
        # b holds stays b's and online.
        version = peer["metadata"]["resourceVersion"]
        ended = a.proc.log().count("mesh node offline")
        written = a.proc.log().count("cluster status")
        a.resume()
        eventually(lambda: a.proc.log().count("mesh node offline") > ended, "a notices its old session ended")
        eventually(lambda: b.reporting() == ["a", "b"], "a reports again")
        for r in (a, b):
            [peer] = r.peers("edge")
            assert peer["metadata"]["annotations"][PEER_HOLDER] == "b" and peer["status"]["online"] is True
            assert peer["metadata"]["resourceVersion"] == version  # not even briefly overwritten
            assert r.status("edge") == ("Initialized", "NotFound", "true")
        # ... and a never took the cluster for its own on the strength of its stale session.
        assert a.proc.log().count("cluster status") == written
    finally:
        if agent is not None:
            agent.kill()
        cluster.stop()

"""The agent as pods of a real cluster: ``vplane platform start``, ``vplane cluster start`` (API server,
controller manager, scheduler and the node runtime that runs pods as processes), the agent chart installed
with the real ``helm``, kubectl on both sides.

The runbook's checks are run as written: ``kubectl get pods -n vcluster-platform -l app=loft`` and
``kubectl logs -n vcluster-platform deploy/loft`` against the connected cluster, the status jsonpath
against the management API, ``kubectl get deployments -n vcluster-platform loft proxy-only-agent`` and
``helm history -n vcluster-platform loft`` for upgrades. Pod conditions come from the runtime's own pod
status. Intervals are shrunk through settings; nothing asserts timings.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_connected_clusters import NS, Env, direct_secret, eventually

import platformkit
from harness import Kubectl
from platformkit import HELM

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("agent-pods")]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "vplane-agent"
BAD_IMAGE = "example.invalid/no-such-agent"
NODE_SETTINGS = {
    "node_name": "edge-node",
    "crash_backoff_seconds": 1,
    "crash_backoff_max_seconds": 2,
    "image_pull_backoff_seconds": 1,
    "image_pull_backoff_max_seconds": 2,
    "pod_resync_seconds": 0.5,
    "node_lease_renew_interval_seconds": 0.5,
    "node_status_update_frequency_seconds": 0.5,
    "minimum_grace_period_seconds": 1,
    "stop_grace_period_seconds": 3,
    "volume_resync_seconds": 1,
    "status_batch_seconds": 0.02,
    "volume_retry_seconds": 0.2,
}
FAST_PROBE = {"readinessProbe": {"periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 2}}


def platform_settings(**extra: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        # The agents run as pods here: the tests' default of no replicas is not wanted.
        "agent_values": json.dumps(FAST_PROBE),
        "agent_release_recheck_seconds": 1,
        "agent_release_stuck_seconds": 3,
    }
    settings.update(extra)
    return settings


# -- the connected cluster ----------------------------------------------------------------------------------


class NodeCluster:
    """``vplane cluster start`` in a subprocess."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = directory.parent / f"{directory.name}.log"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig.yaml"

    @property
    def node_dir(self) -> Path:
        return self.directory / "node"

    def start(self) -> NodeCluster:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        ready = self.directory.parent / f"{self.directory.name}.ready"
        ready.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "vplane.cli.main", "cluster", "start", "--data-dir", str(self.directory)]
        cmd += ["--listen", "127.0.0.1:0", "--ready-file", str(ready)]
        for name, value in NODE_SETTINGS.items():
            cmd += ["--set", f"{name}={value}"]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"vplane cluster start did not become ready:\n{self.log()}")
            time.sleep(0.05)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-20000:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def stop_leaving_nothing(self, within: float) -> None:
        """Stop, then fail if a process of its pods outlives it by ``within`` seconds (those are killed)."""
        self.stop()
        deadline = time.monotonic() + within
        while self.leftovers() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = self.leftovers()
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        assert not left, f"processes left behind by the node: {left}"

    def leftovers(self) -> list[int]:
        """Processes of the node's pods still alive (their environment names the node's directory)."""
        marker = f"VPLANE_NODE_ROOT={self.node_dir}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes()
                cmdline = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
            except OSError:
                continue
            if state != "Z" and (marker in environ.split(b"\0") or str(self.node_dir).encode() in cmdline):
                found.append(int(entry.name))
        return found


def helm_on(cluster: NodeCluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return platformkit.helm(cluster.kubeconfig, cluster.directory.parent / "helm-cache", *args, check=check)


def old_chart(tmp: Path, version: str = "0.0.9") -> Path:
    """A copy of the agent chart with another version: an agent a platform of another version installed."""
    copy = tmp / f"vplane-agent-{version}"
    shutil.copytree(CHART, copy)
    chart = yaml.safe_load((copy / "Chart.yaml").read_text())
    chart["version"] = version
    (copy / "Chart.yaml").write_text(yaml.safe_dump(chart))
    return copy


# -- fixtures ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    if not HELM.exists():
        pytest.skip("helm is not installed; run scripts/bootstrap")
    cluster = NodeCluster(tmp_path_factory.mktemp("agent-pods") / "cluster").start()
    yield cluster
    cluster.stop_leaving_nothing(within=5)


@pytest.fixture(scope="module")
def plat(
    tmp_path_factory: pytest.TempPathFactory, kubectl_path: str, node_cluster: NodeCluster
) -> Iterator[Env]:
    e = Env(tmp_path_factory.mktemp("agent-pods-platform"), kubectl_path, **platform_settings())
    yield e
    e.stop()


@pytest.fixture
def ck(node_cluster: NodeCluster, kubectl_path: str, tmp_path: Path) -> Kubectl:
    """kubectl against the connected cluster's own API (the runbook's "switch kubectl context")."""
    return Kubectl(kubectl_path, node_cluster.kubeconfig, tmp_path / "ccache")


def connect(e: Env, cluster: NodeCluster, name: str, chart: Path | None = None) -> None:
    """`vplane platform connect cluster NAME --context vplane` with the cluster in $KUBECONFIG."""
    extra = {"KUBECONFIG": str(cluster.kubeconfig)}
    if chart is not None:
        extra["VPLANE_AGENT_CHART"] = str(chart)
    e.vplane("platform", "connect", "cluster", name, "--context", "vplane", env=extra)


def disconnect(e: Env, cluster: NodeCluster, ck: Kubectl, name: str, namespace: str = NS) -> None:
    """Delete the Cluster, uninstall its agent and wait for its pods and the bridge to be gone (the next
    test connects the same physical cluster under another name)."""
    e.k.run("delete", "cluster.management.loft.sh", name, "--ignore-not-found", "--wait=false")
    eventually(
        lambda: e.k.run("get", "cluster.management.loft.sh", name, check=False).code != 0, 30, "cluster gone"
    )
    helm_on(cluster, "uninstall", "loft", "-n", namespace, "--ignore-not-found", check=False)
    ck.run("delete", "deployment", "proxy-only-agent", "-n", namespace, "--ignore-not-found", check=False)
    eventually(
        lambda: not ck.run("get", "pods", "-n", namespace, "-o", "name", check=False).stdout.strip(),
        60,
        f"agent pods in {namespace} gone",
    )


def pods_json(ck: Kubectl, selector: str = "app=loft", namespace: str = NS) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        ck.run("get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout
    )["items"]
    return items


def ready_pods(ck: Kubectl, selector: str = "app=loft", namespace: str = NS) -> list[str]:
    out = []
    for pod in pods_json(ck, selector, namespace):
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        if pod.get("status", {}).get("phase") == "Running" and conditions.get("Ready") == "True":
            out.append(pod["metadata"]["name"])
    return out


def platform_log(e: Env) -> str:
    return e.proc.log_path.read_text(errors="replace")


# -- item 1: the agent as a pod ----------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_agent_runs_as_a_pod_and_connects(plat: Env, node_cluster: NodeCluster, ck: Kubectl) -> None:
    """Connecting a `vplane cluster start` cluster installs the chart; the runtime runs Deployment loft as
    a pod that runs `vplane agent`, becomes Ready once its tunnel is registered, and the Cluster is
    Initialized through that tunnel. The runbook's pod and log commands read it. Then: hand-edited values
    are put back (the runbook's drift loop cause), and a scaled-down agent reads NoOnlinePeers."""
    connect(plat, node_cluster, "edge")
    try:
        plat.wait_status("edge", "Initialized", "", timeout=90)
        assert plat.online("edge") == "true"
        eventually(lambda: len(ready_pods(ck)) == 1, 60, "the agent pod Ready")
        table = ck.run("get", "pods", "-n", NS, "-l", "app=loft").stdout
        assert "1/1" in table and "Running" in table, table
        (pod,) = pods_json(ck)
        container = pod["spec"]["containers"][0]
        assert container["image"] == "ghcr.io/vplane/vplane:0.1.0" and container["command"] == [
            "vplane",
            "agent",
        ]
        logs = ck.run("logs", "-n", NS, "deploy/loft").stdout
        assert "agent starting" in logs and "mesh session registered" in logs, logs
        assert pod["metadata"]["name"] in logs  # its mesh node name is the pod's name
        assert "Install complete" in helm_on(node_cluster, "history", "-n", NS, "loft").stdout

        # Hand-edited values drift from the platform's: the next check upgrades them back.
        helm_on(
            node_cluster,
            "upgrade",
            "loft",
            str(CHART),
            "-n",
            NS,
            "--reuse-values",
            "--set",
            "podLabels.edited=yes",
        )
        eventually(
            lambda: (
                "edited" not in helm_on(node_cluster, "get", "values", "loft", "-n", NS, "-o", "json").stdout
            ),
            60,
            "drifted values put back",
        )
        assert "the agent values drifted: podLabels" in platform_log(plat)
        plat.wait_status("edge", "Initialized", "")

        # The agent pod gone (scaled to zero): its sessions stop answering.
        ck.run("scale", "deployment", "loft", "-n", NS, "--replicas=0")
        plat.wait_status("edge", "", "NoOnlinePeers")
        assert plat.online("edge") == "false"
        ck.run("scale", "deployment", "loft", "-n", NS, "--replicas=1")
        plat.wait_status("edge", "Initialized", "", timeout=90)
    finally:
        disconnect(plat, node_cluster, ck, "edge")


@pytest.mark.timeout(300)
def test_agent_pod_conditions_from_the_runtime(plat: Env, node_cluster: NodeCluster, ck: Kubectl) -> None:
    """The pod-condition rows read from what the runtime writes: a direct-kubeconfig cluster (the platform
    reaches it while its agent is unhealthy) whose Extra Agent Values name an image the node cannot pull
    (ImagePullBackOff), then an image without `vplane` (CrashLoopBackOff), then none (healthy). A disabled
    access key makes the agent crash: CrashLoopBackOff, `kubectl logs --previous` says why."""
    direct_secret(plat, "node-kubeconfig", node_cluster.kubeconfig.read_text())
    plat.k.apply(
        yaml.safe_dump(
            {
                "apiVersion": "management.loft.sh/v1",
                "kind": "Cluster",
                "metadata": {
                    "name": "direct",
                    "annotations": {"loft.sh/agent-values": f"image:\n  repository: {BAD_IMAGE}\n"},
                },
                "spec": {"config": {"secretName": "node-kubeconfig", "secretNamespace": NS, "key": "config"}},
            }
        )
    )
    try:
        message = plat.wait_status("direct", "Initialized", "ImagePullBackOff", timeout=90)
        assert BAD_IMAGE in message, message
        table = ck.run("get", "pods", "-n", NS, "-l", "app=loft").stdout
        assert "ImagePullBackOff" in table or "ErrImagePull" in table, table

        plat.k.run(
            "annotate",
            "cluster.management.loft.sh",
            "direct",
            "--overwrite",
            "loft.sh/agent-values=image:\n  repository: busybox\n",
        )
        message = plat.wait_status("direct", "Initialized", "CrashLoopBackOff", timeout=90)
        assert "back-off" in message, message

        plat.k.run("annotate", "cluster.management.loft.sh", "direct", "loft.sh/agent-values-")
        plat.wait_status("direct", "Initialized", "", timeout=90)
        eventually(lambda: len(ready_pods(ck)) >= 1, 60, "a Ready agent pod")

        # Registration refused: the agent exits, kubelet restarts it, it crash-loops.
        ready_before = set(ready_pods(ck))
        plat.k.run("patch", "accesskey", "cluster-direct", "--type=merge", "-p", '{"spec":{"disabled":true}}')
        plat.wait_status("direct", "Initialized", "CrashLoopBackOff", timeout=90)
        (crashing,) = [p for p in pods_json(ck) if p["metadata"]["name"] in ready_before]
        previous = ck.run("logs", "-n", NS, crashing["metadata"]["name"], "--previous").stdout
        assert "access key" in previous, previous
        plat.k.run(
            "patch", "accesskey", "cluster-direct", "--type=merge", "-p", '{"spec":{"disabled":false}}'
        )
        plat.wait_status("direct", "Initialized", "", timeout=90)
    finally:
        disconnect(plat, node_cluster, ck, "direct")


# -- item 7: upgrades through the bridge proxy-only-agent --------------------------------------------------


def deployments(ck: Kubectl, namespace: str = NS) -> set[str]:
    """The runbook's `kubectl get deployments -n vcluster-platform loft proxy-only-agent`, as names."""
    out = ck.run(
        "get", "deployments", "-n", namespace, "loft", "proxy-only-agent", "-o", "name", check=False
    ).stdout
    return {line.split("/", 1)[1] for line in out.split()}


def history(cluster: NodeCluster, namespace: str = NS) -> list[dict[str, Any]]:
    out = helm_on(cluster, "history", "loft", "-n", namespace, "-o", "json").stdout
    entries: list[dict[str, Any]] = json.loads(out)
    return entries


@pytest.mark.timeout(300)
def test_upgrade_through_the_bridge(
    plat: Env, node_cluster: NodeCluster, ck: Kubectl, tmp_path: Path
) -> None:
    """An agent installed from a chart of another version: the platform deploys proxy-only-agent, upgrades
    the release through the bridge's own tunnel session, and removes it; `helm history` shows the upgrade
    and no bridge is left."""
    connect(plat, node_cluster, "upgraded", chart=old_chart(tmp_path))
    try:
        plat.wait_status("upgraded", "Initialized", "", timeout=120)
        eventually(
            lambda: any(
                r["chart"] == "vplane-agent-0.1.0" and r["status"] == "deployed"
                for r in history(node_cluster)
            ),
            60,
            "the release upgraded to the platform's chart",
        )
        revisions = history(node_cluster)
        assert revisions[0]["chart"] == "vplane-agent-0.0.9"
        assert revisions[-1]["description"].startswith("Upgrade complete by vplane-platform ("), revisions
        assert revisions[-1]["description"].endswith("the agent chart is 0.0.9, the platform is 0.1.0"), (
            revisions
        )
        eventually(lambda: deployments(ck) == {"loft"}, 60, "the bridge removed")
        log = platform_log(plat)
        assert "bridge deployed" in log
        assert "upgrading the agent release through the bridge" in log
        assert "agent release upgraded through the bridge; removing it" in log
        plat.wait_status("upgraded", "Initialized", "")
    finally:
        disconnect(plat, node_cluster, ck, "upgraded")


@pytest.mark.timeout(420)
def test_bridge_that_cannot_come_online(
    tmp_path: Path, kubectl_path: str, node_cluster: NodeCluster, ck: Kubectl
) -> None:
    """While the bridge cannot come online (its image cannot be pulled) it is left, the agent is not
    touched and the status keeps what it said, also past the (shrunk) timeout, after which the platform's
    log names ImagePullBackOff (the runbook: waiting sets no reason; the pods' events say why); with a good
    image the upgrade completes."""
    e = Env(tmp_path / "p", kubectl_path, **platform_settings())
    try:
        connect(e, node_cluster, "stuck")
        e.wait_status("stuck", "Initialized", "", timeout=90)
        # An older platform's agent: the release downgraded by hand while the platform is away.
        e.proc.stop()
        helm_on(node_cluster, "upgrade", "loft", str(old_chart(tmp_path)), "-n", NS, "--reuse-values")
        agent_pods = {p["metadata"]["name"] for p in pods_json(ck)}

        # The platform's Extra Agent Values now name an image the node cannot pull: so does the bridge.
        bad = json.dumps({**FAST_PROBE, "image": {"repository": BAD_IMAGE}})
        e.proc.start(agent_values=bad)
        eventually(lambda: "proxy-only-agent" in deployments(ck), 60, "the bridge deployed")
        eventually(
            lambda: any(
                "ImagePull" in json.dumps(p.get("status", {})) for p in pods_json(ck, "app=proxy-only-agent")
            ),
            60,
            "the bridge's pod failing to pull",
        )
        eventually(lambda: "waiting for the bridge's tunnel session" in platform_log(e), 30, "waiting")
        # The wait writes nothing: the status keeps what the pass before the upgrade wrote (here the
        # Offline of the moment the restarted platform had no session yet, as the runbook warns).
        before = e.status("stuck")
        assert before[1] != "DeployProxyOnlyAgent"
        for _ in range(5):
            time.sleep(0.5)
            assert e.status("stuck") == before
        assert deployments(ck) == {"loft", "proxy-only-agent"}
        assert history(node_cluster)[-1]["chart"] == "vplane-agent-0.0.9"
        assert set(ready_pods(ck)) == agent_pods  # the primary agent untouched (Ready: it is connected)

        e.proc.stop()
        e.proc.start(agent_bridge_timeout_seconds=1)

        def problem_logged() -> bool:
            return any(
                "waiting for the bridge's tunnel session" in line and "ImagePullBackOff" in line
                for line in platform_log(e).splitlines()
            )

        eventually(problem_logged, 60, "the bridge's problem in the platform's log")
        line = next(
            line
            for line in platform_log(e).splitlines()
            if "waiting for the bridge's tunnel session" in line and "ImagePullBackOff" in line
        )
        assert "warning" in line.lower() and BAD_IMAGE in line
        phase, reason = e.status("stuck")[:2]
        assert reason != "DeployProxyOnlyAgent" and phase != "Failed", (phase, reason)
        assert deployments(ck) == {"loft", "proxy-only-agent"}

        e.proc.stop()
        e.proc.start(agent_values=json.dumps(FAST_PROBE), agent_bridge_timeout_seconds=300)
        e.wait_status("stuck", "Initialized", "", timeout=120)
        eventually(lambda: history(node_cluster)[-1]["chart"] == "vplane-agent-0.1.0", 60, "upgraded")
        eventually(lambda: deployments(ck) == {"loft"}, 60, "the bridge removed")
        assert "bridge refreshed" in platform_log(e)
    finally:
        disconnect(e, node_cluster, ck, "stuck")
        e.stop()


@pytest.mark.timeout(300)
def test_stuck_pending_upgrade_is_rolled_back(plat: Env, node_cluster: NodeCluster, ck: Kubectl) -> None:
    """A helm upgrade interrupted while it waited leaves the release pending-upgrade (every later upgrade
    fails with "another operation is in progress"): after agent_release_stuck_seconds the platform rolls it
    back to the last deployed revision, and the agent is as the platform wants it again."""
    connect(plat, node_cluster, "pending")
    try:
        plat.wait_status("pending", "Initialized", "", timeout=90)
        helm_cmd = [str(HELM), "--kubeconfig", str(node_cluster.kubeconfig), "upgrade", "loft", str(CHART)]
        helm_cmd += ["-n", NS, "--reuse-values", "--set", f"image.repository={BAD_IMAGE}"]
        helm_cmd += ["--wait", "--timeout", "10m"]
        proc = subprocess.Popen(helm_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            eventually(lambda: history(node_cluster)[-1]["status"] == "pending-upgrade", 60, "pending")
        finally:
            proc.kill()  # interrupted: the release stays pending-upgrade
            proc.wait()
        eventually(
            lambda: (
                history(node_cluster)[-1]["description"].startswith("Rollback to")
                and history(node_cluster)[-1]["status"] == "deployed"
            ),
            60,
            "rolled back",
        )
        entries = history(node_cluster)
        assert entries[-2]["status"] == "pending-upgrade" and entries[-1]["status"] == "deployed", entries
        log = platform_log(plat)
        assert "the agent release has an operation pending; waiting before recovering it" in log
        assert "the agent release is stuck; rolling back" in log
        image = ck.run(
            "get", "deployment", "loft", "-n", NS, "-o", "jsonpath={.spec.template.spec.containers[0].image}"
        ).stdout
        assert image == "ghcr.io/vplane/vplane:0.1.0"
        plat.wait_status("pending", "Initialized", "")
    finally:
        disconnect(plat, node_cluster, ck, "pending")


@pytest.mark.timeout(300)
def test_management_namespace_mismatch(plat: Env, node_cluster: NodeCluster, ck: Kubectl) -> None:
    """The agent installed in a custom namespace the Cluster does not name: InitializeCluster says the
    release does not exist where it looked and where the agent runs (no fallback beyond loft and
    vcluster-platform); naming it clears that. Moved to the legacy `loft`, the fallback finds it."""
    printed = plat.vplane("platform", "connect", "cluster", "moved").stdout
    command = shlex.split(printed.splitlines()[-1])
    assert command[:2] == ["helm", "upgrade"]

    def install(namespace: str) -> None:
        args = [a if a != NS else namespace for a in command[1:]]
        helm_on(node_cluster, *args)

    install("agents")
    try:
        message = plat.wait_status("moved", "Failed", "InitializeCluster", timeout=90)
        assert 'Helm release "loft" does not exist in namespace vcluster-platform, loft' in message
        assert "the connected agent runs in namespace agents" in message
        plat.k.run(
            "patch",
            "cluster.management.loft.sh",
            "moved",
            "--type=merge",
            "-p",
            '{"spec":{"managementNamespace":"agents"}}',
        )
        plat.wait_status("moved", "Initialized", "", timeout=60)

        # The legacy namespace: found although spec.managementNamespace says vcluster-platform.
        helm_on(node_cluster, "uninstall", "loft", "-n", "agents")
        install("loft")
        plat.k.run(
            "patch",
            "cluster.management.loft.sh",
            "moved",
            "--type=merge",
            "-p",
            '{"spec":{"managementNamespace":"vcluster-platform"}}',
        )
        eventually(lambda: len(ready_pods(ck, namespace="loft")) == 1, 90, "the agent in loft Ready")
        plat.wait_status("moved", "Initialized", "", timeout=90)
        assert "the agent release is in a default namespace" in platform_log(plat)
    finally:
        disconnect(plat, node_cluster, ck, "moved", namespace="loft")
        helm_on(node_cluster, "uninstall", "loft", "-n", "agents", "--ignore-not-found", check=False)


RECHECK_LOG = "asking helm again where the agent release lives"


@pytest.mark.timeout(300)
def test_agent_moved_by_hand_is_noticed_before_the_recheck_period(
    tmp_path: Path, kubectl_path: str, node_cluster: NodeCluster, ck: Kubectl
) -> None:
    """The runbook's "Keep managementNamespace in sync after manual namespace changes": the agent moved by
    hand (its release uninstalled, installed again with the same values in `agents`) while
    spec.managementNamespace still names vcluster-platform. The platform remembers where the release lives
    for agent_release_recheck_seconds (an hour here), but the agent's session from `agents` makes it ask
    helm again at once: the status reads the "Helm release that doesn't exist" row, not a pod condition of
    the old namespace. While nothing looks wrong, the passes ask helm nothing."""
    e = Env(tmp_path / "p", kubectl_path, **platform_settings(agent_release_recheck_seconds=3600))
    try:
        connect(e, node_cluster, "relocated")
        e.wait_status("relocated", "Initialized", "", timeout=90)
        eventually(lambda: len(ready_pods(ck)) == 1, 60, "the agent pod Ready")
        # Steady: several resync passes (0.5 s apart) reuse the remembered namespace.
        before = platform_log(e).count(RECHECK_LOG)
        time.sleep(2)
        e.wait_status("relocated", "Initialized", "")
        assert platform_log(e).count(RECHECK_LOG) == before

        values = tmp_path / "values.yaml"
        values.write_text(helm_on(node_cluster, "get", "values", "loft", "-n", NS, "-o", "yaml").stdout)
        helm_on(node_cluster, "uninstall", "loft", "-n", NS, "--wait")
        helm_on(
            node_cluster,
            *("install", "loft", str(CHART), "-n", "agents", "--create-namespace", "--values", str(values)),
        )
        message = e.wait_status("relocated", "Failed", "InitializeCluster", timeout=90)
        assert 'Helm release "loft" does not exist in namespace vcluster-platform, loft' in message, message
        assert "the connected agent runs in namespace agents" in message, message
        assert "the agent's tunnel sessions run in namespace agents" in platform_log(e)

        e.k.run(
            "patch",
            "cluster.management.loft.sh",
            "relocated",
            "--type=merge",
            "-p",
            '{"spec":{"managementNamespace":"agents"}}',
        )
        e.wait_status("relocated", "Initialized", "", timeout=90)
    finally:
        disconnect(e, node_cluster, ck, "relocated", namespace="agents")
        helm_on(node_cluster, "uninstall", "loft", "-n", NS, "--ignore-not-found", check=False)
        e.stop()


HOLD = '{"metadata":{"finalizers":["vplane.test/hold"]}}'
UNHOLD = '{"metadata":{"finalizers":null}}'


def waited_for_uninstall(e: Env, cluster: str) -> bool:
    """The platform's log says a pass saw the release uninstalling and waited."""
    return any(
        "waiting before recovering it" in line
        and f"cluster={cluster} " in line
        and "status=uninstalling" in line
        for line in platform_log(e).splitlines()
    )


@pytest.mark.timeout(300)
def test_a_direct_clusters_agent_moved_by_hand_is_not_installed_twice(
    tmp_path: Path, plat: Env, node_cluster: NodeCluster, ck: Kubectl
) -> None:
    """The same move on a direct-kubeconfig cluster: the platform could install the agent itself, but its
    agent is connected from `agents`, so a second agent in vcluster-platform would not fix the mismatch.
    The status reads the "Helm release that doesn't exist" row, and no agent appears in vcluster-platform."""
    direct_secret(plat, "moved-kubeconfig", node_cluster.kubeconfig.read_text())
    spec = {"config": {"secretName": "moved-kubeconfig", "secretNamespace": NS, "key": "config"}}
    cluster = {"apiVersion": "management.loft.sh/v1", "kind": "Cluster", "metadata": {"name": "moved"}}
    plat.k.apply(yaml.safe_dump({**cluster, "spec": spec}))
    try:
        plat.wait_status("moved", "Initialized", "", timeout=90)
        eventually(lambda: len(ready_pods(ck)) == 1, 60, "the agent pod Ready")
        values = tmp_path / "values.yaml"
        values.write_text(helm_on(node_cluster, "get", "values", "loft", "-n", NS, "-o", "yaml").stdout)
        # Installed in `agents` before the old one goes: in between, a direct cluster with no agent at all
        # rightly gets its agent installed again.
        helm_on(
            node_cluster,
            *("install", "loft", str(CHART), "-n", "agents", "--create-namespace", "--values", str(values)),
        )
        eventually(lambda: len(ready_pods(ck, namespace="agents")) == 1, 60, "the moved agent pod Ready")
        # A finalizer holds the uninstall in `uninstalling` after the old agent's pod is gone, the window in
        # which a pass used to "upgrade" the release being uninstalled (a second agent, the status flipping
        # back to Initialized): the platform waits it out instead.
        ck.run("patch", "serviceaccount", "loft", "-n", NS, "--type=merge", "-p", HOLD)
        uninstall = subprocess.Popen(
            [
                str(HELM),
                "--kubeconfig",
                str(node_cluster.kubeconfig),
                "uninstall",
                "loft",
                "-n",
                NS,
                "--wait",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            eventually(
                lambda: waited_for_uninstall(plat, "moved"), 60, "the platform waiting out the uninstall"
            )
        finally:
            ck.run("patch", "serviceaccount", "loft", "-n", NS, "--type=merge", "-p", UNHOLD, check=False)
            uninstall.wait(timeout=60)
        message = plat.wait_status("moved", "Failed", "InitializeCluster", timeout=90)
        assert "the agent release is uninstalling" not in platform_log(plat)
        assert 'Helm release "loft" does not exist in namespace vcluster-platform, loft' in message, message
        assert "the connected agent runs in namespace agents" in message, message
        assert "loft" not in deployments(ck), "a second agent was installed in vcluster-platform"
        assert helm_on(node_cluster, "status", "loft", "-n", NS, check=False).returncode != 0
    finally:
        disconnect(plat, node_cluster, ck, "moved", namespace="agents")
        helm_on(node_cluster, "uninstall", "loft", "-n", NS, "--ignore-not-found", check=False)


# -- item 8: vplane doctor cluster ---------------------------------------------------------------------------


def doctor(e: Env, name: str, *args: str) -> str:
    result = e.vplane("doctor", "cluster", name, *args)
    return result.stdout


@pytest.mark.timeout(420)
def test_doctor_cluster(plat: Env, node_cluster: NodeCluster, ck: Kubectl) -> None:
    """`vplane doctor cluster` against real states, read through the platform: a healthy tunnel cluster, still
    healthy after the connect command ran again, looping once its values are edited by hand again and again;
    its agent's key disabled (NoOnlinePeers; the platform cannot reach the cluster, the cluster's own context
    shows the agent's refused registration); a cluster whose agent never connected (Offline); a direct
    cluster whose agent image cannot be pulled (ImagePullBackOff)."""
    connect(plat, node_cluster, "doc")
    try:
        plat.wait_status("doc", "Initialized", "", timeout=90)
        eventually(lambda: len(ready_pods(ck)) == 1, 60, "the agent pod Ready")
        out = doctor(plat, "doc")
        assert "Runbook row: Check the connection status / Initialized with no reason" in out, out
        assert "agent pods (app=loft): 1" in out and "1/1  Running" in out, out
        assert "helm revision 1: deployed vplane-agent-0.1.0 (Install complete)" in out, out
        assert "bridge proxy-only-agent: none" in out, out

        # The connect command run again (the runbook allows it) writes the platform's own chart and values:
        # an "Upgrade complete" revision each time, nothing for the platform to put back, and no loop.
        for _ in range(4):
            connect(plat, node_cluster, "doc")
        assert [r["description"] for r in history(node_cluster)] == [
            "Install complete",
            *["Upgrade complete"] * 4,
        ]
        out = doctor(plat, "doc")
        assert "Runbook row: Check the connection status / Initialized with no reason" in out, out
        assert "loop indefinitely" not in out, out

        # Values changed by hand again and again, each time put back by the platform: a loop.
        for n in range(3):
            helm_on(
                node_cluster, "upgrade", "loft", str(CHART), "-n", NS, "--reuse-values", "--set", f"edit={n}"
            )
            eventually(
                lambda: history(node_cluster)[-1]["description"].startswith(
                    "Upgrade complete by vplane-platform"
                ),
                60,
                "hand-edited values put back",
            )
        out = doctor(plat, "doc")
        assert (
            "Runbook row: Agent stuck mid-upgrade / The upgrade seems to loop indefinitely, repeatedly "
            "reinstalling the agent" in out
        ), out
        assert "wrote the same chart and values again 2 times in the last 5 revisions" in out, out
        assert "(the agent values drifted: edit), after revision" in out, out

        plat.k.run("patch", "accesskey", "cluster-doc", "--type=merge", "-p", '{"spec":{"disabled":true}}')
        plat.wait_status("doc", "", "NoOnlinePeers", timeout=60)
        out = doctor(plat, "doc")
        assert "Runbook row: Failures during reconciliation / status.reason NoOnlinePeers" in out, out
        assert "cannot be read" in out and "no online agent session" in out, out
        eventually(
            lambda: "invalid access key" in ck.run("logs", "-n", NS, "deploy/loft", check=False).stdout,
            60,
            "the agent refused",
        )
        out = doctor(plat, "doc", "--context", "vplane", "--kubeconfig", str(node_cluster.kubeconfig))
        assert "The platform cannot reach the cluster" in out, out
        assert (
            "Runbook row: Failures before the first connection / Registration fails on an invalid" in out
        ), out
        assert "Also matches: Failures during reconciliation / status.reason NoOnlinePeers" in out, out
        assert "invalid access key: disabled" in out, out
    finally:
        disconnect(plat, node_cluster, ck, "doc")

    plat.vplane("platform", "connect", "cluster", "never")  # prints the command; nobody runs it
    try:
        plat.wait_status("never", "", "Offline")
        out = doctor(plat, "never")
        assert "Runbook row: Failures during reconciliation / status.reason Offline" in out, out
        assert "tunnel sessions: 0 known to the platform, 0 online" in out, out
        assert "Failures before the first connection" in out, out
    finally:
        plat.k.run("delete", "cluster.management.loft.sh", "never", "--wait=false")

    direct_secret(plat, "doctor-kubeconfig", node_cluster.kubeconfig.read_text())
    plat.k.apply(
        yaml.safe_dump(
            {
                "apiVersion": "management.loft.sh/v1",
                "kind": "Cluster",
                "metadata": {
                    "name": "pulling",
                    "annotations": {"loft.sh/agent-values": f"image:\n  repository: {BAD_IMAGE}\n"},
                },
                "spec": {
                    "config": {"secretName": "doctor-kubeconfig", "secretNamespace": NS, "key": "config"}
                },
            }
        )
    )
    try:
        plat.wait_status("pulling", "Initialized", "ImagePullBackOff", timeout=90)
        out = doctor(plat, "pulling")
        assert "Runbook row: Failures during reconciliation / A pod condition: ImagePullBackOff" in out, out
        assert BAD_IMAGE in out and "(direct," in out, out
        assert "resolution: A standard pod health problem" in out, out
    finally:
        disconnect(plat, node_cluster, ck, "pulling")

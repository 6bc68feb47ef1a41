"""Connected clusters with real processes: ``vplane platform start``, ``vplane apiserver`` as the connected
cluster, ``vplane agent`` run the way the agent chart's container runs it, the real ``helm`` and kubectl.

One test per runbook row reproducible today (the node runtime that runs pods does not exist yet: the
agent runs as a plain process started from the Deployment's container spec, and the tests write the
agent pods' status as a kubelet would). Status is read with the runbook's own command against the
management API. Every interval is shrunk through settings; nothing asserts timings.
"""

from __future__ import annotations

import base64
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

import platformkit
from harness import APIServerProcess, Kubectl, PlatformProcess
from platformkit import HELM, cluster_settings

pytestmark = pytest.mark.integration

NS = "vcluster-platform"
COORDINATOR_UNREACHABLE = (
    "Failed to reach the coordinator server. Make sure that the agent can reach the control-plane"
)
FAST_MESH = {
    "heartbeat_interval_seconds": 0.5,
    "session_silence_timeout_seconds": 3,
    "reconnect_backoff_min_seconds": 0.1,
    "reconnect_backoff_max_seconds": 0.5,
}


def eventually(check: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met in time")
        time.sleep(0.2)


# -- the pieces --------------------------------------------------------------------------------------------


class Env:
    """A platform, the management kubectl, and the `vplane` CLI logged in to it."""

    def __init__(self, tmp: Path, kubectl_path: str, **settings: Any) -> None:
        self.tmp = tmp
        self.kubectl_path = kubectl_path
        self.proc = PlatformProcess(tmp / "platform", cluster_settings(**settings))
        self.proc.start()
        self.home = tmp / "home"
        token = yaml.safe_load(self.proc.kubeconfig.read_text())["users"][0]["user"]["token"]
        self.vplane("platform", "login", self.proc.url, "--access-key", token, "--ca-file", str(self.proc.ca))
        # The runbook's management context, made the runbook's way.
        self.kubeconfig = tmp / "management-kubeconfig.yaml"
        self.vplane("platform", "connect", "management", "--kubeconfig", str(self.kubeconfig))
        self.k = Kubectl(kubectl_path, self.kubeconfig, tmp / "kcache")

    def vplane(
        self, *args: str, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, "VPLANE_HOME": str(self.home), **(env or {})}
        if HELM.exists():
            full_env["VPLANE_HELM"] = str(HELM)
        result = subprocess.run(
            [sys.executable, "-m", "vplane.cli.main", *args],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"vplane {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result

    def status(self, name: str) -> tuple[str, str, str]:
        """The runbook's command, against the management API."""
        out = self.k.run(
            "get",
            "cluster.management.loft.sh",
            name,
            "-o",
            'jsonpath={.status.phase}{"\\n"}{.status.reason}{"\\n"}{.status.message}{"\\n"}',
        ).stdout
        phase, reason, message = (out.split("\n") + ["", "", ""])[:3]
        return phase, reason, message

    def wait_status(self, name: str, phase: str, reason: str, timeout: float = 60.0) -> str:
        seen: list[tuple[str, str, str]] = []

        def check() -> bool:
            seen.append(self.status(name))
            return seen[-1][:2] == (phase, reason)

        try:
            eventually(check, timeout, f"cluster {name} phase={phase!r} reason={reason!r}")
        except AssertionError:
            raise AssertionError(
                f"cluster {name}: wanted ({phase!r}, {reason!r}), last {seen[-1] if seen else None}\n"
                f"{self.proc.log()[-6000:]}"
            ) from None
        return seen[-1][2]

    def online(self, name: str) -> str:
        return self.k.run("get", "cluster.management.loft.sh", name, "-o", "jsonpath={.status.online}").stdout

    def stop(self) -> None:
        self.proc.stop()


def cluster_kubectl(api: APIServerProcess, kubectl_path: str, tmp: Path) -> Kubectl:
    return Kubectl(kubectl_path, api.kubeconfig, tmp / f"cache-{api.data_dir.name}")


def helm(api: APIServerProcess, *args: str) -> str:
    return platformkit.helm(api.kubeconfig, api.data_dir.parent / "helm-cache", *args).stdout


def direct_secret(env: Env, name: str, kubeconfig: str) -> None:
    env.k.run("create", "namespace", NS, check=False)
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "data": {"config": base64.b64encode(kubeconfig.encode()).decode()},
    }
    env.k.apply(yaml.safe_dump(manifest))


def direct_cluster(env: Env, name: str, secret: str) -> None:
    env.k.apply(
        yaml.safe_dump(
            {
                "apiVersion": "management.loft.sh/v1",
                "kind": "Cluster",
                "metadata": {"name": name},
                "spec": {"config": {"secretName": secret, "secretNamespace": NS, "key": "config"}},
            }
        )
    )


class AgentProcess:
    """`vplane agent` as a pod's container runs it: the Deployment's command and env (values and secret
    references resolved from the cluster), the service account's token in a service-account directory, and
    the cluster's API as KUBERNETES_SERVICE_HOST/PORT."""

    def __init__(self, api: APIServerProcess, k: Kubectl, tmp: Path, pod: str = "loft-7d9f8-abcde") -> None:
        self.api = api
        self.k = k
        self.tmp = tmp
        self.pod = pod
        self.log_path = tmp / f"agent-{pod}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _container(self) -> tuple[list[str], dict[str, str], str]:
        deploy = json.loads(self.k.run("get", "deployment", "loft", "-n", NS, "-o", "json").stdout)
        spec = deploy["spec"]["template"]["spec"]
        container = spec["containers"][0]
        env: dict[str, str] = {}
        secrets: dict[str, dict[str, str]] = {}
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
                continue
            source = item.get("valueFrom") or {}
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                if ref["name"] not in secrets:
                    got = self.k.run("get", "secret", ref["name"], "-n", NS, "-o", "json", check=False)
                    secrets[ref["name"]] = json.loads(got.stdout).get("data") or {} if got.code == 0 else {}
                data = secrets[ref["name"]].get(ref["key"])
                if data is not None:
                    env[item["name"]] = base64.b64decode(data).decode()
            elif "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                env[item["name"]] = {"metadata.name": self.pod, "status.podIP": "127.0.0.1"}.get(path, NS)
        return container["command"], env, spec.get("serviceAccountName") or "default"

    def start(self, *settings: str, env_override: dict[str, str] | None = None) -> AgentProcess:
        command, env, account = self._container()
        assert command[:2] == ["vplane", "agent"], command
        sa_dir = self.tmp / f"sa-{self.pod}"
        sa_dir.mkdir(exist_ok=True)
        (sa_dir / "token").write_text(self.k.run("create", "token", account, "-n", NS).stdout.strip())
        ca = self.api.config()["clusters"][0]["cluster"]["certificate-authority-data"]
        (sa_dir / "ca.crt").write_bytes(base64.b64decode(ca))
        host, port = self.api.url.removeprefix("https://").rsplit(":", 1)
        full_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("LOFT_AGENT_")},
            **env,
            "VPLANE_AGENT_HEALTH_PORT": "0",  # several agents share this machine's address here
            **(env_override or {}),
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "PYTHONUNBUFFERED": "1",
        }
        args = [sys.executable, "-m", "vplane.cli.main", *command[1:], "--service-account-dir", str(sa_dir)]
        args += ["--set", f"mesh={json.dumps(FAST_MESH)}", "--set", "probe_retry_seconds=0.2", *settings]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=full_env)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_log(self, text: str, count: int = 1, timeout: float = 60.0) -> None:
        try:
            eventually(
                lambda: self.log().count(text) >= count, timeout, f"{text!r} x{count} in the agent log"
            )
        except AssertionError:
            raise AssertionError(f"{text!r} x{count} not in the agent log:\n{self.log()[-6000:]}") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def agent_pod(name: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "loft"}},
            "spec": {
                "serviceAccountName": "loft",
                "containers": [{"name": "agent", "image": "vplane/vplane:0.1.0"}],
            },
        }
    )


def set_pod_status(k: Kubectl, name: str, status: dict[str, Any]) -> None:
    """What a kubelet writes."""
    k.run(
        "patch",
        "pod",
        name,
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def running(ready: bool) -> dict[str, Any]:
    return {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False", "message": "probe failed"}],
        "containerStatuses": [
            {
                "name": "agent",
                "ready": ready,
                "restartCount": 0,
                "image": "vplane/vplane:0.1.0",
                "imageID": "",
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            }
        ],
    }


def waiting(phase: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [
            {
                "name": "agent",
                "ready": False,
                "restartCount": 3,
                "image": "vplane/vplane:0.1.0",
                "imageID": "",
                "state": {"waiting": {"reason": reason, "message": message}},
            }
        ],
    }


# -- fixtures ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, kubectl_path: str) -> Iterator[Env]:
    if not HELM.exists():
        pytest.skip("helm is not installed; run scripts/bootstrap")
    e = Env(tmp_path_factory.mktemp("connected"), kubectl_path)
    yield e
    e.stop()


@pytest.fixture
def cluster_api(tmp_path: Path) -> Iterator[APIServerProcess]:
    """A connected cluster of this test's own (one physical cluster: one kube-system UID)."""
    server = APIServerProcess(tmp_path / "cluster")
    server.start()
    yield server
    server.stop()


def delete_cluster(env: Env, name: str) -> None:
    env.k.run("delete", "cluster.management.loft.sh", name, "--ignore-not-found", "--wait=false")


# -- the connect flow and the tunnel -------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_connect_offline_initialized_and_connection_loss(
    env: Env, cluster_api: APIServerProcess, kubectl_path: str, tmp_path: Path
) -> None:
    """Offline before the agent connects; the chart installed with helm (`helm history` reads it);
    Initialized through the tunnel once the agent runs; the pod reasons from its status; Extra Agent Values
    upgrade the release through the tunnel; NoOnlinePeers (phase back to empty) when the agent dies."""
    k = cluster_kubectl(cluster_api, kubectl_path, tmp_path)
    printed = env.vplane("platform", "connect", "cluster", "edge").stdout
    assert (
        "helm upgrade loft" in printed and "--set-string token=" in printed and "--set-string url=" in printed
    )
    spec = json.loads(env.k.run("get", "cluster.management.loft.sh", "edge", "-o", "json").stdout)["spec"]
    assert spec["networkPeer"] is True and spec["managementNamespace"] == NS
    assert env.wait_status("edge", "", "Offline")

    env.vplane("platform", "connect", "cluster", "edge", "--kubeconfig", str(cluster_api.kubeconfig))
    history = helm(cluster_api, "history", "-n", NS, "loft")
    assert "deployed" in history and "vplane-agent-0.1.0" in history and "Install complete" in history
    token = base64.b64decode(
        k.run("get", "secret", "loft-agent-connection", "-n", NS, "-o", "jsonpath={.data.token}").stdout
    ).decode()
    assert f"--set-string token={token}" in printed  # connecting again reused the access key
    assert (
        k.run("get", "deployment", "-n", NS, "-l", "app=loft", "-o", "name").stdout.strip()
        == "deployment.apps/loft"
    )
    assert env.status("edge")[:2] == ("", "Offline")

    agent = AgentProcess(cluster_api, k, tmp_path).start()
    try:
        env.wait_status("edge", "Initialized", "NotFound")
        assert env.online("edge") == "true"
        k.apply(agent_pod("loft-7d9f8-abcde"))
        set_pod_status(k, "loft-7d9f8-abcde", running(ready=True))
        env.wait_status("edge", "Initialized", "")

        # Extra Agent Values: the platform upgrades the release through the agent's tunnel.
        env.k.run(
            "annotate",
            "cluster.management.loft.sh",
            "edge",
            "loft.sh/agent-values=env:\n  LOFT_LOG_TSNET_AGENT: true\n",
        )
        eventually(
            lambda: "Upgrade complete" in helm(cluster_api, "history", "-n", NS, "loft"), 60, "upgrade"
        )
        names = k.run(
            "get",
            "deployment",
            "loft",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].env[*].name}",
        ).stdout
        assert "LOFT_LOG_TSNET_AGENT" in names.split()
        assert env.status("edge")[:2] == ("Initialized", "")

        agent.kill()
        env.wait_status("edge", "", "NoOnlinePeers")
        assert env.online("edge") == "false"
        agent = AgentProcess(cluster_api, k, tmp_path, pod="loft-7d9f8-fghij").start()
        env.wait_status("edge", "Initialized", "")
        assert env.online("edge") == "true"
        # The Deployment now sets LOFT_LOG_TSNET_AGENT: verbose tunnel logs, and the session holds.
        agent.wait_log("mesh frame received")
        assert "mesh session lost" not in agent.log()
        history = helm(cluster_api, "history", "-n", NS, "loft")
        assert history.count("deployed") == 1 and "superseded" in history  # no upgrade on every pass

        # LocalClient: the platform's own mesh node refused (its key disabled), then back.
        env.k.run("patch", "accesskey", "loft-platform", "--type=merge", "-p", '{"spec":{"disabled":true}}')
        message = env.wait_status("edge", "Failed", "LocalClient")
        assert "mesh client is not connected" in message and "registration refused" in message
        env.k.run("patch", "accesskey", "loft-platform", "--type=merge", "-p", '{"spec":{"disabled":false}}')
        env.wait_status("edge", "Initialized", "")

        # Deleting the Cluster revokes its agent key: the agent's session ends.
        delete_cluster(env, "edge")
        eventually(
            lambda: env.k.run("get", "accesskey", "cluster-edge", check=False).code != 0, 30, "key gone"
        )
        assert agent.proc is not None and agent.proc.wait(30) != 0
    finally:
        agent.stop()
        delete_cluster(env, "edge")


# -- pod conditions ------------------------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_agent_pod_conditions(
    env: Env, cluster_api: APIServerProcess, kubectl_path: str, tmp_path: Path
) -> None:
    """A direct-kubeconfig cluster (the release installed by the platform with helm through that
    kubeconfig); each pod condition appears as status.reason with phase Initialized and clears."""
    k = cluster_kubectl(cluster_api, kubectl_path, tmp_path)
    direct_secret(env, "pods-kubeconfig", cluster_api.kubeconfig.read_text())
    direct_cluster(env, "pods", "pods-kubeconfig")
    try:
        message = env.wait_status("pods", "Initialized", "NotFound")
        assert "app=loft" in message
        assert env.online("pods") == ""  # Online has no meaning without spec.networkPeer
        assert "Install complete" in helm(cluster_api, "history", "-n", NS, "loft")

        pod = "loft-5c6d7-xyz12"
        k.apply(agent_pod(pod))
        env.wait_status("pods", "Initialized", "Pending")
        set_pod_status(
            k, pod, waiting("Pending", "ImagePullBackOff", 'Back-off pulling image "vplane/vplane:0.1.0"')
        )
        assert "Back-off pulling image" in env.wait_status("pods", "Initialized", "ImagePullBackOff")
        set_pod_status(
            k, pod, waiting("Running", "CrashLoopBackOff", "back-off 40s restarting failed container")
        )
        assert "back-off 40s" in env.wait_status("pods", "Initialized", "CrashLoopBackOff")
        set_pod_status(k, pod, running(ready=False))
        env.wait_status("pods", "Initialized", "NotReady")
        set_pod_status(k, pod, running(ready=True))
        env.wait_status("pods", "Initialized", "")
        k.run(
            "patch",
            "pod",
            pod,
            "-n",
            NS,
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":["vplane.io/test"]}}',
        )
        k.run("delete", "pod", pod, "-n", NS, "--wait=false")
        env.wait_status("pods", "Initialized", "Terminating")
        k.run("patch", "pod", pod, "-n", NS, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
        env.wait_status("pods", "Initialized", "NotFound")
    finally:
        delete_cluster(env, "pods")


# -- ClusterUID, InitializeCluster, HealthCheckCluster ------------------------------------------------------


@pytest.mark.timeout(240)
def test_two_clusters_on_one_physical_cluster(env: Env, cluster_api: APIServerProcess) -> None:
    """ClusterUID: the second Cluster object on the same kube-system namespace UID fails; deleting the
    first lets the second connect."""
    direct_secret(env, "uid-kubeconfig", cluster_api.kubeconfig.read_text())
    direct_cluster(env, "uid-a", "uid-kubeconfig")
    try:
        env.wait_status("uid-a", "Initialized", "NotFound")
        uid = env.k.run(
            "get",
            "cluster.management.loft.sh",
            "uid-a",
            "-o",
            "jsonpath={.metadata.annotations.loft\\.sh/cluster-uid}",
        ).stdout
        assert uid
        direct_cluster(env, "uid-b", "uid-kubeconfig")
        message = env.wait_status("uid-b", "Failed", "ClusterUID")
        assert 'Cluster "uid-a"' in message and uid in message
        delete_cluster(env, "uid-a")
        env.wait_status("uid-b", "Initialized", "NotFound")
    finally:
        delete_cluster(env, "uid-a")
        delete_cluster(env, "uid-b")


@pytest.mark.timeout(240)
def test_initialize_cluster_with_bad_credentials(env: Env, cluster_api: APIServerProcess) -> None:
    """InitializeCluster, client build: the kubeconfig the platform holds has invalid credentials; fixing
    the Secret clears it."""
    good = cluster_api.kubeconfig.read_text()
    doc = yaml.safe_load(good)
    doc["users"][0]["user"]["token"] = "not-a-valid-token"
    direct_secret(env, "bad-kubeconfig", yaml.safe_dump(doc))
    direct_cluster(env, "badcreds", "bad-kubeconfig")
    try:
        message = env.wait_status("badcreds", "Failed", "InitializeCluster")
        assert "build a client" in message and "Unauthorized" in message
        direct_secret(env, "bad-kubeconfig", good)
        env.wait_status("badcreds", "Initialized", "NotFound")
    finally:
        delete_cluster(env, "badcreds")


RESTRICTED_ROLE = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: platform-restricted}
rules:
- apiGroups: [""]
  resources: [namespaces, secrets, serviceaccounts, configmaps, services]
  verbs: ["*"]
- apiGroups: [apps]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [rbac.authorization.k8s.io]
  resources: ["*"]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: platform-restricted}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: platform-restricted}
subjects: [{kind: ServiceAccount, name: platform, namespace: kube-system}]
"""


@pytest.mark.timeout(240)
def test_health_check_cluster_when_pods_cannot_be_listed(
    env: Env, cluster_api: APIServerProcess, kubectl_path: str, tmp_path: Path
) -> None:
    """HealthCheckCluster: the platform's credential may do everything it installs but list pods;
    granting that clears it."""
    k = cluster_kubectl(cluster_api, kubectl_path, tmp_path)
    k.run("create", "serviceaccount", "platform", "-n", "kube-system")
    k.apply(RESTRICTED_ROLE)
    token = k.run("create", "token", "platform", "-n", "kube-system", "--duration=1h").stdout.strip()
    doc = yaml.safe_load(cluster_api.kubeconfig.read_text())
    doc["users"][0]["user"] = {"token": token}
    direct_secret(env, "restricted-kubeconfig", yaml.safe_dump(doc))
    direct_cluster(env, "restricted", "restricted-kubeconfig")
    try:
        message = env.wait_status("restricted", "Failed", "HealthCheckCluster")
        assert NS in message and "forbidden" in message
        k.run("create", "clusterrole", "read-pods", "--verb=get,list", "--resource=pods")
        k.run(
            "create",
            "clusterrolebinding",
            "read-pods",
            "--clusterrole=read-pods",
            "--serviceaccount=kube-system:platform",
        )
        env.wait_status("restricted", "Initialized", "NotFound")
    finally:
        delete_cluster(env, "restricted")


# -- admission ----------------------------------------------------------------------------------------------


def cluster_manifest(name: str, spec: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {"apiVersion": "management.loft.sh/v1", "kind": "Cluster", "metadata": {"name": name}, "spec": spec}
    )


@pytest.mark.timeout(180)
def test_cluster_admission_refusals(tmp_path: Path, kubectl_path: str) -> None:
    """No connection mode, a second spec.local, over the licence's connected-cluster limit: each refused
    with a message that says so; the local cluster does not count against the limit."""
    e = Env(tmp_path, kubectl_path, connected_cluster_limit=1)
    try:
        missing = e.k.fails("apply", "-f", "-", input=cluster_manifest("nomode", {"displayName": "x"}))
        assert "one of spec.config, spec.local or spec.networkPeer must be set" in missing.stderr
        e.k.apply(cluster_manifest("home", {"local": True}))
        second = e.k.fails("apply", "-f", "-", input=cluster_manifest("home2", {"local": True}))
        assert 'only one cluster may have spec.local set; cluster "home" already does' in second.stderr
        e.k.apply(cluster_manifest("first", {"networkPeer": True}))
        over = e.k.fails("apply", "-f", "-", input=cluster_manifest("second", {"networkPeer": True}))
        assert "exceed the license's connected-cluster limit of 1" in over.stderr
        assert "(Forbidden)" in over.stderr or "forbidden" in over.stderr
        # The platform's own cluster: Initialized without an agent (it is its own).
        e.wait_status("home", "Initialized", "")
        e.k.run("delete", "cluster.management.loft.sh", "first")
        e.k.apply(cluster_manifest("second", {"networkPeer": True}))
    finally:
        e.stop()


# -- the agent's own failures -------------------------------------------------------------------------------


def run_agent(args: list[str], env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("LOFT_AGENT_")}
    return subprocess.run(
        [sys.executable, "-m", "vplane.cli.main", "agent", *args],
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_agent_token_or_url_empty(tmp_path: Path) -> None:
    """`token is empty` / `url is empty`: the Helm values never reached the agent; it exits non-zero."""
    no_token = run_agent([], {"LOFT_AGENT_URL": "https://127.0.0.1:1"})
    assert no_token.returncode != 0 and "token is empty" in no_token.stderr
    no_url = run_agent([], {"LOFT_AGENT_TOKEN": "abc"})
    assert no_url.returncode != 0 and "url is empty" in no_url.stderr


def test_agent_logs_unreachable_coordinator_and_retries(
    tmp_path: Path, shared_apiserver: APIServerProcess
) -> None:
    """Before its tunnel the agent probes /derp/probe; with a wrong url it logs the runbook's line, again
    and again, and keeps trying."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    log_path = tmp_path / "agent.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vplane.cli.main",
                "agent",
                "--kubeconfig",
                str(shared_apiserver.kubeconfig),
                "--set",
                "probe_retry_seconds=0.1",
            ],
            env={**os.environ, "LOFT_AGENT_TOKEN": "abc", "LOFT_AGENT_URL": f"https://127.0.0.1:{port}"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        eventually(lambda: log_path.read_text().count(COORDINATOR_UNREACHABLE) >= 3, 30, "probe failures")
        assert proc.poll() is None  # still retrying
        assert "mesh session registered" not in log_path.read_text()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(300)
def test_agent_cannot_reach_platform_then_recovers(
    tmp_path: Path, kubectl_path: str, cluster_api: APIServerProcess
) -> None:
    """The liveness loop logs `Agent cannot reach platform` with an increasing counter while the platform
    is stopped, and recovers by itself when it is back. Then the registration row: a disabled access key
    ends the agent with `invalid access key`, and connecting again gives back the same (disabled) key."""
    e = Env(tmp_path / "p", kubectl_path)
    k = cluster_kubectl(cluster_api, kubectl_path, tmp_path)
    agent = AgentProcess(cluster_api, k, tmp_path)
    try:
        e.vplane("platform", "connect", "cluster", "flaky", "--kubeconfig", str(cluster_api.kubeconfig))
        agent.start("--set", "liveness_interval_seconds=0.3")
        e.wait_status("flaky", "Initialized", "NotFound")
        e.proc.stop()
        agent.wait_log("Agent cannot reach platform", count=3)
        log = agent.log()
        assert "failures=1" in log and "failures=2" in log and "failures=3" in log
        e.proc.start()
        agent.wait_log("Agent reached platform again")
        e.wait_status("flaky", "Initialized", "NotFound")

        token = base64.b64decode(
            k.run("get", "secret", "loft-agent-connection", "-n", NS, "-o", "jsonpath={.data.token}").stdout
        ).decode()
        e.k.run("patch", "accesskey", "cluster-flaky", "--type=merge", "-p", '{"spec":{"disabled":true}}')
        assert agent.proc is not None
        assert agent.proc.wait(30) != 0  # its session was ended: "access key revoked"
        # Restarted (as kubelet restarts the pod), it registers again and is refused.
        agent.start("--set", "liveness_interval_seconds=0.3")
        assert agent.proc.wait(30) != 0
        assert "invalid access key: disabled" in agent.log()
        e.wait_status("flaky", "", "NoOnlinePeers")
        printed = e.vplane("platform", "connect", "cluster", "flaky").stdout
        assert f"--set-string token={token}" in printed  # a disabled key comes back unchanged
        # ... with a warning that says so and what to do (the runbook's row), not a silent success
        assert 'warning: the agent\'s access key "cluster-flaky" is disabled' in printed
        assert "Re-enable the key, or delete it" in printed
    finally:
        agent.stop()
        e.stop()

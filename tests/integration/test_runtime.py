"""The node runtime with real processes: ``vplane cluster start`` (API server and one node), pods run as
local processes, driven with kubectl 1.36 and 1.32.

Every state ``kubectl get pods`` prints, events as ``kubectl describe`` shows them, ``kubectl logs`` in
its forms, probes, restarts, graceful deletion, the runtime killed and restarted, pod addresses and the
service proxy, and the kubelet API's authentication. Intervals are shrunk through settings; waits poll
with a bound and never assert timings. Every cluster is stopped at the end of its test or module and no
process of its pods may be left.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import Kubectl
from vplane.support import tls

pytestmark = pytest.mark.integration

NODE = "node-a"
SHRUNK = {
    "node_name": NODE,
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
    "service_account_wait_seconds": 0,  # no ServiceAccount controller here: pods run without a token at once
}


# -- harness ------------------------------------------------------------------------------------------


class Cluster:
    """``vplane cluster start`` in a subprocess; restartable on its data directory."""

    def __init__(self, directory: Path, settings: dict[str, Any] | None = None) -> None:
        self.directory = directory
        self.settings = {**SHRUNK, **(settings or {})}
        self.api_settings: dict[str, Any] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = directory.parent / f"{directory.name}.log"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig.yaml"

    @property
    def node_dir(self) -> Path:
        return self.directory / "node"

    def start(self) -> Cluster:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        ready = self.directory.parent / f"{self.directory.name}.ready"
        ready.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "vplane.cli.main", "cluster", "start", "--data-dir", str(self.directory)]
        cmd += ["--listen", "127.0.0.1:0", "--ready-file", str(ready)]
        for name, value in self.settings.items():
            cmd += ["--set", f"{name}={value}"]
        for name, value in self.api_settings.items():
            cmd += ["--apiserver-set", f"{name}={value}"]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"vplane cluster start exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"vplane cluster start did not become ready:\n{self.log()}")
            time.sleep(0.05)
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def leftovers(self) -> list[tuple[int, str]]:
        return processes_of(self.node_dir)

    def assert_no_leftovers(self) -> None:
        assert_no_processes(self.node_dir)


def processes_of(node_dir: Path) -> list[tuple[int, str]]:
    """Processes of a node's pods still alive: their environment names the node's directory, or (shims)
    their command line does."""
    marker = f"VPLANE_NODE_ROOT={node_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        if marker in environ.split(b"\0") or str(node_dir).encode() in cmdline:
            found.append((int(entry.name), cmdline.replace(b"\0", b" ").decode(errors="replace")[:200]))
    return found


def assert_no_processes(node_dir: Path) -> None:
    """No process of the node's pods may outlive it (those found are killed, and the test fails)."""
    deadline = time.monotonic() + 5
    left = processes_of(node_dir)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = processes_of(node_dir)
    for pid, _ in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind by the node: {left}"


def kubectl_for(cluster: Cluster, binary: str, tmp_path: Path) -> Kubectl:
    return Kubectl(binary, cluster.kubeconfig, tmp_path / f"cache-{Path(binary).name}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the tests that only add objects of their own (each in its own namespace)."""
    running = Cluster(tmp_path_factory.mktemp("runtime") / "cluster").start()
    yield running
    running.stop()
    running.assert_no_leftovers()


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of the test's own, which it stops, kills or restarts."""
    created = Cluster(tmp_path / "cluster")
    yield created
    created.stop()
    created.assert_no_leftovers()


@pytest.fixture
def k(cluster: Cluster, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return kubectl_for(cluster, kubectl_path, tmp_path)


@pytest.fixture
def ns(k: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards (its pods stopped as upstream deletes them)."""
    name = "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name += "-" + os.urandom(2).hex()
    k.run("create", "namespace", name)
    yield name
    k.run("delete", "namespace", name, "--wait=false", check=False)


def pod(
    name: str,
    command: str | list[str] | None = None,
    *,
    image: str = "busybox",
    node: str | None = NODE,
    **spec: Any,
) -> str:
    container: dict[str, Any] = {"name": spec.pop("container", "main"), "image": image}
    if isinstance(command, str):
        container["command"] = ["sh", "-c", command]
    elif command is not None:
        container["command"] = command
    container.update(spec.pop("container_fields", {}))
    body: dict[str, Any] = {"containers": [container], **spec}
    if node:
        body["nodeName"] = node
    labels = body.pop("labels", {"test": name})
    return json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": body}
    )


def apply(k: Kubectl, ns: str, manifest: str) -> None:
    k.run("apply", "-n", ns, "-f", "-", input=manifest)


def row(k: Kubectl, ns: str, name: str) -> tuple[str, str, str]:
    """READY, STATUS and RESTARTS as ``kubectl get pods`` prints them."""
    out = k.run("get", "pod", name, "-n", ns, "--no-headers", check=False).out.split()
    if len(out) < 4:
        return ("", "", "")
    restarts = out[3] if not out[4].startswith("(") else " ".join(out[3:6])
    return out[1], out[2], restarts


def wait_until(check: Callable[[], Any], what: str, within: float = 30, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"not within {within}s: {what} (last: {last!r})")


def wait_status(
    k: Kubectl, ns: str, name: str, status: str, ready: str | None = None, within: float = 30
) -> tuple[str, str, str]:
    def check() -> tuple[str, str, str] | None:
        current = row(k, ns, name)
        return current if current[1] == status and (ready is None or current[0] == ready) else None

    return wait_until(check, f"pod {name} {ready or ''} {status}; last row {row(k, ns, name)}", within)  # type: ignore[no-any-return]


def _watch_for(k: Kubectl, ns: str, name: str, status: str, within: float = 30) -> None:
    """Until ``kubectl get pod -w`` prints ``status`` for the pod (a state shown only briefly). A watch the
    server ends early is started again, as a controller would."""
    deadline = time.monotonic() + within
    seen: list[str] = []
    ended: list[str] = []
    while time.monotonic() < deadline:
        watch = k.popen("get", "pod", name, "-n", ns, "-w", "--no-headers")
        timer = threading.Timer(max(deadline - time.monotonic(), 0.1), watch.kill)
        timer.start()
        try:
            assert watch.stdout is not None
            for line in watch.stdout:
                seen.append(line.strip())
                if status in line.split():
                    return
        finally:
            timer.cancel()
            watch.kill()
            _, err = watch.communicate()
            ended.append(f"exit {watch.returncode}: {err.strip()[-300:]}")
    raise AssertionError(f"not within {within}s: pod {name} {status}; watched {seen}; watches ended {ended}")


def pod_json(k: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return json.loads(k.run("get", "pod", name, "-n", ns, "-o", "json").out)  # type: ignore[no-any-return]


def events(k: Kubectl, ns: str, name: str) -> list[tuple[str, str, str]]:
    items = json.loads(
        k.run("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json").out
    )["items"]
    return [
        (e["type"], e["reason"], e["message"]) for e in sorted(items, key=lambda e: e["metadata"]["name"])
    ]


# -- the node -----------------------------------------------------------------------------------------


def test_the_node_registers_posts_ready_and_heartbeats(cluster: Cluster, k: Kubectl) -> None:
    nodes = k.run("get", "nodes", "-o", "wide").out
    assert f"{NODE}   Ready" in nodes
    node = json.loads(k.run("get", "node", NODE, "-o", "json").out)
    status = node["status"]
    assert status["capacity"]["pods"] == "110"
    assert int(status["capacity"]["cpu"]) >= 1
    assert status["allocatable"]["memory"].endswith("Ki")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    )
    assert {c["type"] for c in status["conditions"]} == {
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "Ready",
    }
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0
    assert status["nodeInfo"]["containerRuntimeVersion"].startswith("vplane://")
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    lease = json.loads(k.run("get", "lease", NODE, "-n", "kube-node-lease", "-o", "json").out)
    assert lease["spec"]["holderIdentity"] == NODE
    wait_until(
        lambda: (
            json.loads(k.run("get", "lease", NODE, "-n", "kube-node-lease", "-o", "json").out)["spec"][
                "renewTime"
            ]
            != lease["spec"]["renewTime"]
        ),
        "the lease is renewed",
        within=10,
    )


# -- every STATUS kubectl prints --------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.36", "1.32"])
def test_every_status_column_as_kubectl_prints_it(
    cluster: Cluster,
    k: Kubectl,
    ns: str,
    version: str,
    kubectl_path: str,
    kubectl132_path: str,
    tmp_path: Path,
) -> None:
    kk = k if version == "1.36" else kubectl_for(cluster, kubectl132_path, tmp_path)
    manifests = [
        pod(
            "pending", "sleep 60", node=None, nodeSelector={"example.com/no-such-node": "x"}
        ),  # unschedulable
        pod("creating", "sleep 60", volumes=[{"name": "cfg", "configMap": {"name": "not-there"}}]),
        pod("running", "sleep 60"),
        pod("completed", "echo done", restartPolicy="Never"),
        pod("error", "exit 3", restartPolicy="Never"),
        pod("crashloop", "exit 1"),
        pod("pullerr", None, image="nginx:1.27"),
        pod(
            "initwait",
            "sleep 60",
            initContainers=[{"name": "init", "image": "busybox", "command": ["sleep", "60"]}],
        ),
        pod(
            "initerr",
            "sleep 60",
            restartPolicy="Never",
            initContainers=[{"name": "init", "image": "busybox", "command": ["false"]}],
        ),
        pod(
            "notready",
            "sleep 60",
            container_fields={"readinessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1}},
        ),
        pod(
            "configerr",
            "sleep 60",
            container_fields={
                "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}]
            },
        ),
    ]
    for manifest in manifests:
        apply(kk, ns, manifest)
    assert wait_status(kk, ns, "pending", "Pending")[0] == "0/1"
    assert wait_status(kk, ns, "running", "Running", "1/1")
    assert wait_status(kk, ns, "completed", "Completed", "0/1")
    assert wait_status(kk, ns, "error", "Error", "0/1")
    # RESTARTS as kubectl prints it: the count, then how long ago the last one was (the count depends on
    # how long the rows above took to appear).
    restarts = wait_status(kk, ns, "crashloop", "CrashLoopBackOff", "0/1")[2]
    assert re.fullmatch(r"[1-9][0-9]* \([0-9]+[smh]([0-9]+s)? ago\)", restarts), restarts
    # ErrImagePull shows between a failed pull and the next sync (half a second here, every back-off):
    # watched rather than polled, which can keep missing it when each poll takes about one cycle.
    _watch_for(kk, ns, "pullerr", "ErrImagePull")
    wait_status(kk, ns, "pullerr", "ImagePullBackOff")
    assert wait_status(kk, ns, "initwait", "Init:0/1", "0/1")
    assert wait_status(kk, ns, "initerr", "Init:Error", "0/1")
    assert wait_status(kk, ns, "notready", "Running", "0/1")
    assert wait_status(kk, ns, "creating", "ContainerCreating", "0/1")
    assert wait_status(kk, ns, "configerr", "CreateContainerConfigError", "0/1")
    assert pod_json(kk, ns, "error")["status"]["phase"] == "Failed"
    assert pod_json(kk, ns, "completed")["status"]["phase"] == "Succeeded"
    assert pod_json(kk, ns, "initerr")["status"]["phase"] == "Failed"
    running = pod_json(kk, ns, "running")["status"]
    assert (
        running["podIP"].startswith("127.10.") and running["hostIP"] == "127.0.0.1" and running["startTime"]
    )
    assert [c["type"] for c in running["conditions"]] == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    main = running["containerStatuses"][0]
    assert main["image"] == "docker.io/library/busybox:latest" and main["imageID"].startswith(
        "docker.io/library/busybox@sha256:"
    )
    assert main["containerID"].startswith("vplane://") and main["started"] is True

    def backing_off() -> dict[str, Any] | None:
        # Read while it waits (it restarts between back-offs, and then its state is running or terminated).
        status: dict[str, Any] = pod_json(kk, ns, "crashloop")["status"]["containerStatuses"][0]
        return status if status["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff" else None

    crash = wait_until(backing_off, "crashloop waiting in CrashLoopBackOff")
    assert crash["lastState"]["terminated"]["exitCode"] == 1
    assert crash["lastState"]["terminated"]["reason"] == "Error"
    assert crash["state"]["waiting"]["message"].startswith("back-off ")
    assert f"restarting failed container=main pod=crashloop_{ns}(" in crash["state"]["waiting"]["message"]

    def pull_back_off() -> dict[str, Any] | None:
        state = pod_json(kk, ns, "pullerr")["status"]["containerStatuses"][0]["state"]
        assert "waiting" in state, state
        return state["waiting"] if state["waiting"]["reason"] == "ImagePullBackOff" else None

    pull = wait_until(pull_back_off, "an image pull back-off")
    assert pull["message"] == (
        'Back-off pulling image "nginx:1.27": ErrImagePull: image "docker.io/library/nginx:1.27" not found in the '
        "node's image catalogue"
    )
    apply(
        kk,
        ns,
        pod("terminating", "trap '' TERM; while true; do sleep 0.1; done", terminationGracePeriodSeconds=3),
    )
    wait_status(kk, ns, "terminating", "Running", "1/1")
    kk.run("delete", "pod", "terminating", "-n", ns, "--wait=false")
    assert wait_status(kk, ns, "terminating", "Terminating")
    wait_until(
        lambda: kk.run("get", "pod", "terminating", "-n", ns, check=False).code != 0,
        "deleted after its grace period",
    )


def test_describe_shows_the_kubelets_events(cluster: Cluster, k: Kubectl, ns: str) -> None:
    apply(k, ns, pod("crash", "exit 1"))
    apply(k, ns, pod("nopull", None, image="nginx:1.27"))
    apply(k, ns, pod("tagged", "sleep 60", image="busybox:1.36"))
    wait_until(lambda: any(r == "BackOff" for _, r, _ in events(k, ns, "crash")), "a back-off event")
    crash = events(k, ns, "crash")
    assert ("Normal", "Pulling", 'Pulling image "busybox"') in crash  # imagePullPolicy Always for :latest
    assert any(r == "Pulled" and m.startswith('Successfully pulled image "busybox" in ') for _, r, m in crash)
    assert ("Normal", "Created", "Container created") in crash
    assert ("Normal", "Started", "Container started") in crash
    uid = pod_json(k, ns, "crash")["metadata"]["uid"]
    assert (
        "Warning",
        "BackOff",
        f"Back-off restarting failed container main in pod crash_{ns}({uid})",
    ) in crash
    wait_until(lambda: any(r == "BackOff" for _, r, _ in events(k, ns, "nopull")), "an image back-off event")
    nopull = events(k, ns, "nopull")
    assert (
        "Warning",
        "Failed",
        'Failed to pull image "nginx:1.27": image "docker.io/library/nginx:1.27" not found in the node\'s image catalogue',
    ) in nopull
    assert ("Warning", "Failed", "Error: ErrImagePull") in nopull
    assert ("Normal", "BackOff", 'Back-off pulling image "nginx:1.27"') in nopull
    assert ("Warning", "Failed", "Error: ImagePullBackOff") in nopull
    wait_status(k, ns, "tagged", "Running")
    assert (
        "Normal",
        "Pulled",
        'Container image "busybox:1.36" already present on machine and can be accessed by the pod',
    ) in events(k, ns, "tagged")
    described = k.run("describe", "pod", "crash", "-n", ns).out
    assert "Back-off restarting failed container main in pod" in described
    assert "kubelet" in described
    event = json.loads(
        k.run(
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            "involvedObject.name=crash,reason=Started",
            "-o",
            "json",
        ).out
    )["items"][0]
    assert event["source"] == {"component": "kubelet", "host": NODE}
    assert event["involvedObject"]["fieldPath"] == "spec.containers{main}"
    wait_until(
        lambda: (
            json.loads(
                k.run(
                    "get",
                    "events",
                    "-n",
                    ns,
                    "--field-selector",
                    "involvedObject.name=crash,reason=Started",
                    "-o",
                    "json",
                ).out
            )["items"][0]["count"]
            >= 2
        ),
        "repeated events are counted, not repeated",
    )


# -- logs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.36", "1.32"])
def test_logs_follow_tail_timestamps_previous_and_prefix(
    cluster: Cluster, k: Kubectl, ns: str, version: str, kubectl132_path: str, tmp_path: Path
) -> None:
    kk = k if version == "1.36" else kubectl_for(cluster, kubectl132_path, tmp_path)
    apply(
        kk,
        ns,
        pod("counter", "for i in 1 2 3 4 5; do echo line $i; done; echo oops >&2", restartPolicy="Never"),
    )
    wait_status(kk, ns, "counter", "Completed")
    assert kk.run("logs", "counter", "-n", ns).out == "line 1\nline 2\nline 3\nline 4\nline 5\noops\n"
    assert kk.run("logs", "counter", "-n", ns, "--tail=2").out == "line 5\noops\n"
    assert kk.run("logs", "counter", "-n", ns, "--limit-bytes=9").out == "line 1\nli"
    stamped = kk.run("logs", "counter", "-n", ns, "--timestamps").out.splitlines()
    assert stamped[0].endswith("Z line 1") and stamped[0][:4].isdigit()
    assert kk.run("logs", "counter", "-n", ns, "--since=1h").out.startswith("line 1\n")
    # follow: lines as they come, until the container ends
    apply(
        kk,
        ns,
        # Long enough to be seen Running on a loaded machine before it completes.
        pod("slow", "sleep 3; for i in 1 2 3; do echo tick $i; sleep 0.3; done", restartPolicy="Never"),
    )
    wait_status(kk, ns, "slow", "Running")
    followed = kk.run("logs", "-f", "slow", "-n", ns, timeout=30)
    assert followed.out.endswith("tick 3\n") and "tick 1\n" in followed.out
    # previous: the instance before the current one
    apply(kk, ns, pod("crasher", "echo run at $(date +%s%N); exit 1"))
    wait_until(lambda: row(kk, ns, "crasher")[2][:1] not in ("", "0"), "a restart")
    assert kk.run("logs", "crasher", "-n", ns, "--previous").out.startswith("run at ")
    # several pods, each line prefixed with its pod and container
    for name in ("web-a", "web-b"):
        apply(
            kk,
            ns,
            pod(name, f"echo hello from {name}; sleep 60", labels={"app": "web"}),
        )
    for name in ("web-a", "web-b"):
        wait_status(kk, ns, name, "Running")
    wait_until(
        lambda: (
            kk.run("logs", "-l", "app=web", "-n", ns, "--prefix", "--tail=100").out.count("hello from") == 2
        ),
        "both pods logged",
    )
    prefixed = kk.run("logs", "-l", "app=web", "-n", ns, "--prefix", "--tail=100").out.splitlines()
    assert sorted(prefixed) == ["[pod/web-a/main] hello from web-a", "[pod/web-b/main] hello from web-b"]


def test_logs_of_a_deployment_and_of_containers_by_name(cluster: Cluster, k: Kubectl, ns: str) -> None:
    """``kubectl logs deploy/x`` takes a pod of the Deployment's selector; ``-c`` picks a container."""
    apply(
        k,
        ns,
        json.dumps(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "loft"},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": "loft"}},
                    "template": {
                        "metadata": {"labels": {"app": "loft"}},
                        "spec": {"containers": [{"name": "agent", "image": "busybox"}]},
                    },
                },
            }
        ),
    )
    manifest = json.loads(
        pod("loft-1", "echo agent started; sleep 60", labels={"app": "loft"}, container="agent")
    )
    manifest["spec"]["containers"].append(
        {"name": "sidecar", "image": "busybox", "command": ["sh", "-c", "echo side; sleep 60"]}
    )
    apply(k, ns, json.dumps(manifest))
    wait_status(k, ns, "loft-1", "Running", "2/2")
    wait_until(
        lambda: k.run("logs", "deploy/loft", "-n", ns, "-c", "agent", check=False).out == "agent started\n",
        "deployment logs",
    )
    assert k.run("logs", "loft-1", "-n", ns, "-c", "sidecar").out == "side\n"
    defaulted = k.run("logs", "loft-1", "-n", ns)
    assert (defaulted.out, defaulted.stderr.strip()) == (
        "agent started\n",
        'Defaulted container "agent" out of: agent, sidecar',
    )
    failed = k.fails("get", "--raw", f"/api/v1/namespaces/{ns}/pods/loft-1/log")
    assert (
        "a container name must be specified for pod loft-1, choose one of: [agent sidecar]" in failed.stderr
    )


def test_log_errors_are_the_kubelets(cluster: Cluster, k: Kubectl, ns: str) -> None:
    apply(k, ns, pod("nopull", None, image="nginx:1.27"))
    apply(
        k,
        ns,
        pod(
            "creating",
            "sleep 60",
            volumes=[{"name": "cfg", "configMap": {"name": "gone"}}],
            container_fields={"volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]},
        ),
    )
    apply(k, ns, pod("running", "sleep 60"))
    wait_status(k, ns, "nopull", "ImagePullBackOff")
    wait_status(k, ns, "creating", "ContainerCreating")
    wait_status(k, ns, "running", "Running")
    for text in (
        "trying and failing to pull image",
        "image can't be pulled",
    ):  # ImagePullBackOff, ErrImagePull
        wanted = (
            f'Error from server (BadRequest): container "main" in pod "nopull" is waiting to start: {text}'
        )
        wait_until(
            lambda wanted=wanted: wanted in k.fails("logs", "nopull", "-n", ns).stderr, wanted, interval=0.1
        )
    assert (
        'Error from server (BadRequest): container "main" in pod "creating" is waiting to start: ContainerCreating'
        in k.fails("logs", "creating", "-n", ns).stderr
    )
    assert (
        'Error from server (BadRequest): previous terminated container "main" in pod "running" not found'
        in k.fails("logs", "running", "-n", ns, "--previous").stderr
    )
    assert (
        "tailLines: Invalid value: -1: must be greater than or equal to 0"
        in k.fails("get", "--raw", f"/api/v1/namespaces/{ns}/pods/running/log?tailLines=-1").stderr
    )
    events_text = k.run("describe", "pod", "creating", "-n", ns).out
    assert 'MountVolume.SetUp failed for volume "cfg" : configmap "gone" not found' in events_text


def test_logs_of_a_node_whose_kubelet_cannot_be_reached(cluster: Cluster, k: Kubectl, ns: str) -> None:
    """The API server's own errors, worded as Go's: a closed port, and a kubelet whose certificate is not
    of the cluster's CA (which gets nothing past the TLS handshake)."""
    import trustme

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    foreign_port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with contextlib.suppress(OSError, ssl.SSLError):
                server_ctx.wrap_socket(conn, server_side=True).close()
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        for name, port in (("ghost-closed", closed_port), ("ghost-foreign", foreign_port)):
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"{name}-{ns}"},
                "status": {
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
                },
            }
            k.run("create", "-f", "-", input=json.dumps(node))
            apply(k, ns, pod(name, "sleep 60", node=f"{name}-{ns}"))
        url = f"https://127.0.0.1:{closed_port}/containerLogs/{ns}/ghost-closed/main"
        assert (
            f'Error from server: Get "{url}": dial tcp 127.0.0.1:{closed_port}: connect: connection refused'
            in k.fails("logs", "ghost-closed", "-n", ns).stderr
        )
        url = f"https://127.0.0.1:{foreign_port}/containerLogs/{ns}/ghost-foreign/main"
        assert (
            f'Error from server: Get "{url}": tls: failed to verify certificate: x509: certificate signed by unknown authority'
            in k.fails("logs", "ghost-foreign", "-n", ns).stderr
        )
    finally:
        stop.set()
        thread.join()
        listener.close()
        for name in ("ghost-closed", "ghost-foreign"):
            k.run("delete", "node", f"{name}-{ns}", check=False)


def test_the_kubelet_api_authenticates_and_authorizes_callers(cluster: Cluster, k: Kubectl, ns: str) -> None:
    port = json.loads(k.run("get", "node", NODE, "-o", "json").out)["status"]["daemonEndpoints"][
        "kubeletEndpoint"
    ]["Port"]
    pki = cluster.directory / "apiserver" / "pki"
    ca = tls.CertPair.read(pki / "ca.crt", pki / "ca.key")
    apply(k, ns, pod("hello", "echo hi; sleep 60"))
    wait_status(k, ns, "hello", "Running")
    url = f"https://127.0.0.1:{port}/containerLogs/{ns}/hello/main"

    def get(client: tls.CertPair | None) -> tuple[int, str]:
        ctx = (
            tls.client_context(ca.cert_pem, client, cluster.directory.parent / "client-cert")
            if client
            else ssl.create_default_context(cadata=ca.cert_pem.decode())
        )
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=10) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    (cluster.directory.parent / "client-cert").mkdir(exist_ok=True)
    assert get(None) == (401, "Unauthorized")
    assert get(tls.issue_client(ca, "nobody")) == (
        403,
        "Forbidden (user=nobody, verb=get, resource=nodes, subresource=proxy)",
    )
    assert get(tls.issue_client(ca, "admin", ["system:masters"])) == (200, "hi\n")
    health = ssl.create_default_context(cadata=ca.cert_pem.decode())
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=health, timeout=10) as resp:
        assert resp.read() == b"ok"


# -- probes, restarts, deletion -------------------------------------------------------------------------


def test_a_readiness_probe_turns_the_pod_not_ready_and_back(cluster: Cluster, k: Kubectl, ns: str) -> None:
    manifest = pod(
        "flaky",
        "sleep 600",
        volumes=[{"name": "flags", "emptyDir": {}}],
        container_fields={
            "volumeMounts": [{"name": "flags", "mountPath": "/flags"}],
            "readinessProbe": {
                "exec": {"command": ["sh", "-c", 'test -f "$VPLANE_ROOT/flags/ready"']},
                "periodSeconds": 1,
            },
        },
    )
    apply(k, ns, manifest)
    wait_status(k, ns, "flaky", "Running", "0/1")
    uid = pod_json(k, ns, "flaky")["metadata"]["uid"]
    flag = cluster.node_dir / "pods" / uid / "volumes" / "flags" / "ready"
    flag.write_text("yes")
    wait_status(k, ns, "flaky", "Running", "1/1")
    ready = next(c for c in pod_json(k, ns, "flaky")["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    flag.unlink()
    wait_status(k, ns, "flaky", "Running", "0/1")
    ready = next(c for c in pod_json(k, ns, "flaky")["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["reason"], ready["message"]) == (
        "ContainersNotReady",
        "containers with unready status: [main]",
    )
    assert any(
        r == "Unhealthy" and m.startswith("Readiness probe failed:") for _, r, m in events(k, ns, "flaky")
    )


def test_a_failing_liveness_probe_restarts_the_container(cluster: Cluster, k: Kubectl, ns: str) -> None:
    manifest = pod(
        "sick",
        [
            "python",
            "-c",
            "import http.server,os\nclass H(http.server.BaseHTTPRequestHandler):\n def do_GET(self):\n  self.send_response(500); self.end_headers()\nhttp.server.HTTPServer((os.environ['POD_IP'], 8080), H).serve_forever()",
        ],
        image="python:3.11",
        container_fields={
            "livenessProbe": {
                "httpGet": {"path": "/healthz", "port": 8080},
                "periodSeconds": 1,
                "failureThreshold": 2,
            }
        },
    )
    apply(k, ns, manifest)
    wait_until(lambda: row(k, ns, "sick")[2][:1] not in ("", "0"), "a restart after failed liveness probes")
    seen = events(k, ns, "sick")
    assert ("Warning", "Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 500") in seen
    assert ("Normal", "Killing", "Container main failed liveness probe, will be restarted") in seen


def test_a_startup_probe_holds_the_other_probes_back(cluster: Cluster, k: Kubectl, ns: str) -> None:
    flag_check = 'test -f "$VPLANE_MOUNT_FLAGS/started"'
    manifest = pod(
        "slowstart",
        "sleep 600",
        volumes=[{"name": "flags", "emptyDir": {}}],
        container_fields={
            "volumeMounts": [{"name": "flags", "mountPath": "/flags"}],
            "startupProbe": {"exec": {"command": ["sh", "-c", flag_check]}, "periodSeconds": 1},
            "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
        },
    )
    apply(k, ns, manifest)
    wait_status(k, ns, "slowstart", "Running", "0/1")
    time.sleep(1.5)  # several readiness periods: none may run before the startup probe succeeds
    status = pod_json(k, ns, "slowstart")["status"]["containerStatuses"][0]
    assert (status["started"], status["ready"]) == (False, False)
    uid = pod_json(k, ns, "slowstart")["metadata"]["uid"]
    (cluster.node_dir / "pods" / uid / "volumes" / "flags" / "started").write_text("")
    wait_status(k, ns, "slowstart", "Running", "1/1")
    assert pod_json(k, ns, "slowstart")["status"]["containerStatuses"][0]["started"] is True


def test_graceful_deletion_sends_sigterm_then_sigkill(
    cluster: Cluster, k: Kubectl, ns: str, tmp_path: Path
) -> None:
    hooks = tmp_path / "hooks"
    lifecycle = {
        "postStart": {"exec": {"command": ["sh", "-c", 'echo started > "$VPLANE_MOUNT_HOOKS/poststart"']}},
        "preStop": {"exec": {"command": ["sh", "-c", 'echo stopping > "$VPLANE_MOUNT_HOOKS/prestop"']}},
    }
    polite = pod(
        "polite",
        "trap 'echo bye > \"$VPLANE_MOUNT_HOOKS/term\"; exit 0' TERM; while true; do sleep 0.1; done",
        volumes=[{"name": "hooks", "hostPath": {"path": str(hooks), "type": "DirectoryOrCreate"}}],
        container_fields={"volumeMounts": [{"name": "hooks", "mountPath": "/hooks"}], "lifecycle": lifecycle},
    )
    apply(k, ns, polite)
    apply(
        k,
        ns,
        pod("stubborn", "trap '' TERM; while true; do sleep 0.1; done", terminationGracePeriodSeconds=2),
    )
    wait_status(k, ns, "polite", "Running")
    wait_status(k, ns, "stubborn", "Running")
    k.run("delete", "pod", "polite", "stubborn", "-n", ns, "--wait=false")
    stubborn = pod_json(k, ns, "stubborn")
    assert stubborn["metadata"]["deletionGracePeriodSeconds"] == 2
    wait_until(
        lambda: k.run("get", "pod", "polite", "-n", ns, check=False).code != 0, "the polite pod is gone"
    )
    assert (hooks / "term").read_text() == "bye\n"  # its TERM trap ran: SIGTERM came first
    assert (hooks / "poststart").read_text() == "started\n"
    assert (hooks / "prestop").read_text() == "stopping\n"
    wait_until(
        lambda: k.run("get", "pod", "stubborn", "-n", ns, check=False).code != 0,
        "the stubborn pod is killed and gone",
        within=20,
    )
    assert ("Normal", "Killing", "Stopping container main") in events(k, ns, "stubborn")


def test_a_pod_force_deleted_is_killed_at_once(cluster: Cluster, k: Kubectl, ns: str) -> None:
    apply(k, ns, pod("victim", "trap '' TERM; while true; do sleep 0.1; done"))
    wait_status(k, ns, "victim", "Running")
    uid = pod_json(k, ns, "victim")["metadata"]["uid"]
    k.run("delete", "pod", "victim", "-n", ns, "--grace-period=0", "--force")
    wait_until(
        lambda: not (cluster.node_dir / "pods" / uid).exists(),
        "the pod's processes and files are gone",
        within=20,
    )


# -- the runtime stopped, killed, restarted --------------------------------------------------------------


def test_the_runtime_killed_leaves_pods_running_and_adopts_them(
    own_cluster: Cluster, kubectl_path: str, tmp_path: Path
) -> None:
    own_cluster.start()
    k = kubectl_for(own_cluster, kubectl_path, tmp_path)
    k.run(
        "apply",
        "-f",
        "-",
        input=pod("survivor", "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done"),
    )
    wait_status(k, "default", "survivor", "Running", "1/1")
    before = pod_json(k, "default", "survivor")["status"]["containerStatuses"][0]

    def kept() -> set[int]:  # the shim and the container's shell (not its short-lived sleeps)
        return {pid for pid, cmd in own_cluster.leftovers() if not cmd.startswith("sleep")}

    pids_before = kept()
    assert len(pids_before) == 2
    own_cluster.kill()
    time.sleep(1)  # the pod keeps running and logging while no runtime watches it
    assert kept() == pids_before
    own_cluster.start()
    wait_status(k, "default", "survivor", "Running", "1/1")
    after = pod_json(k, "default", "survivor")["status"]["containerStatuses"][0]
    assert (after["restartCount"], after["containerID"]) == (0, before["containerID"])
    assert kept() == pids_before
    lines = k.run("logs", "survivor").out.splitlines()
    assert [int(line.split()[1]) for line in lines] == list(
        range(1, len(lines) + 1)
    )  # nothing lost meanwhile
    assert "adopted running container" in own_cluster.log()


def test_stopping_the_runtime_stops_its_pods_and_they_restart_with_it(
    own_cluster: Cluster, kubectl_path: str, tmp_path: Path
) -> None:
    own_cluster.start()
    k = kubectl_for(own_cluster, kubectl_path, tmp_path)
    k.run("apply", "-f", "-", input=pod("always", "sleep 600"))
    wait_status(k, "default", "always", "Running", "1/1")
    own_cluster.stop()
    own_cluster.assert_no_leftovers()
    own_cluster.start()
    assert wait_status(k, "default", "always", "Running", "1/1")[2].startswith("1")
    k.run("delete", "pod", "always", "--wait=false")
    own_cluster.kill()  # the pod is being deleted while no runtime runs it
    own_cluster.start()
    wait_until(
        lambda: k.run("get", "pod", "always", check=False).code != 0,
        "the restarted runtime finishes the deletion",
    )


# -- networking -----------------------------------------------------------------------------------


SERVER = (
    "import http.server,os\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    " def do_GET(self):\n"
    "  self.send_response(200); self.end_headers(); self.wfile.write(os.environ['HOSTNAME'].encode())\n"
    " def log_message(self, *a): pass\n"
    "http.server.HTTPServer((os.environ['POD_IP'], 8080), H).serve_forever()"
)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()  # type: ignore[no-any-return]


def test_two_pods_bind_the_same_port_and_a_service_reaches_them(
    cluster: Cluster, k: Kubectl, ns: str
) -> None:
    probe = {"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}
    for name in ("web-1", "web-2"):
        apply(
            k,
            ns,
            pod(
                name,
                ["python", "-c", SERVER],
                image="python:3.11",
                labels={"app": "web"},
                container_fields=probe,
            ),
        )
    for name in ("web-1", "web-2"):
        wait_status(k, ns, name, "Running", "1/1")
    ips = {name: pod_json(k, ns, name)["status"]["podIP"] for name in ("web-1", "web-2")}
    assert ips["web-1"] != ips["web-2"]
    assert {_get(f"http://{ip}:8080/") for ip in ips.values()} == {"web-1", "web-2"}
    apply(
        k,
        ns,
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "nothing-yet"}, "ports": [{"port": 80, "targetPort": 8080}]},
            }
        ),
    )
    # The API server allocated the address at create; the runtime wrote nothing to the Service.
    svc = json.loads(k.run("get", "svc", "web", "-n", ns, "-o", "json", "--show-managed-fields").out)
    cluster_ip = svc["spec"]["clusterIP"]
    assert cluster_ip.startswith("127.96.")
    assert [f["manager"] for f in svc["metadata"]["managedFields"]] == ["kubectl-client-side-apply"]
    with pytest.raises(OSError):
        _get(f"http://{cluster_ip}:80/")  # no endpoints yet: refused
    # The endpoints controller fills the Service's Endpoints from the ready pods it now selects.
    k.run("patch", "service", "web", "-n", ns, "--type=merge", "-p", '{"spec": {"selector": {"app": "web"}}}')
    answers = wait_until(
        lambda: _answers(f"http://{cluster_ip}:80/", 6), "both pods answer through the ClusterIP"
    )
    assert answers == {"web-1", "web-2"}


def test_python_servers_that_bind_every_address_get_their_pods_own(
    cluster: Cluster, k: Kubectl, ns: str
) -> None:
    """`python -m http.server` binds every address: on one machine its second replica would find the port
    taken. The python image's programs bind their pod's address instead, and reach a Service by name."""
    probe = {"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}
    for name in ("serve-1", "serve-2"):
        server = pod(
            name,
            ["python", "-m", "http.server", "8080"],
            image="python:3.11",
            labels={"app": "serve"},
            container_fields=probe,
        )
        apply(k, ns, server)
    for name in ("serve-1", "serve-2"):
        wait_status(k, ns, name, "Running", "1/1")
    for name in ("serve-1", "serve-2"):
        ip = pod_json(k, ns, name)["status"]["podIP"]
        assert "Directory listing" in _get(f"http://{ip}:8080/")
        assert pod_json(k, ns, name)["status"]["containerStatuses"][0]["restartCount"] == 0
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "serve"},
        "spec": {"selector": {"app": "serve"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    apply(k, ns, json.dumps(service))
    fetch = "import urllib.request; print(urllib.request.urlopen('http://serve/', timeout=5).status)"
    client = 'until python -c "$FETCH"; do sleep 0.5; done'  # until the Endpoints name a ready pod
    apply(
        k,
        ns,
        pod(
            "fetch",
            client,
            image="python:3.11",
            restartPolicy="Never",
            container_fields={"env": [{"name": "FETCH", "value": fetch}]},
        ),
    )
    wait_status(k, ns, "fetch", "Completed", "0/1")
    assert k.run("logs", "fetch", "-n", ns).out.strip().splitlines()[-1] == "200"


def _answers(url: str, count: int) -> set[str] | None:
    try:
        found = {_get(url) for _ in range(count)}
    except OSError:
        return None
    return found if len(found) == 2 else None


def _can_bind_port_443() -> bool:
    if os.geteuid() == 0:
        return True
    try:
        return int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text()) <= 443
    except (OSError, ValueError):
        return False


@pytest.mark.skipif(
    not _can_bind_port_443(), reason="port 443 needs root or net.ipv4.ip_unprivileged_port_start <= 443"
)
def test_the_kubernetes_service_is_allocated_by_the_api_server(cluster: Cluster, k: Kubectl) -> None:
    """The API server allocates the ClusterIPs now: the `kubernetes` Service has the range's first address
    and the runtime patches none. (Reaching the API server through 127.96.0.1:443 is not tested here:
    every cluster on one machine wants that address, and the test workers run several clusters at once.)"""
    svc = json.loads(
        k.run("get", "svc", "kubernetes", "-n", "default", "-o", "json", "--show-managed-fields").out
    )
    assert svc["spec"]["clusterIP"] == "127.96.0.1"
    assert [f["manager"] for f in svc["metadata"]["managedFields"]] == ["kube-apiserver"]


def test_a_pods_environment_volumes_and_service_names(cluster: Cluster, k: Kubectl, ns: str) -> None:
    k.run(
        "create",
        "configmap",
        "settings",
        "-n",
        ns,
        "--from-literal=greeting=hello",
        "--from-literal=color=blue",
    )
    k.run("create", "secret", "generic", "creds", "-n", ns, "--from-literal=password=s3cret")
    wait_until(  # the ServiceAccount controller makes `default` in every namespace
        lambda: k.run("get", "serviceaccount", "default", "-n", ns, check=False).code == 0, "default SA"
    )
    k.run("create", "rolebinding", "view", "-n", ns, "--clusterrole=view", f"--serviceaccount={ns}:default")
    apply(
        k,
        ns,
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "backend"},
                "spec": {"ports": [{"name": "http", "port": 8080}]},
            }
        ),
    )
    wait_until(
        lambda: json.loads(k.run("get", "svc", "backend", "-n", ns, "-o", "json").out)["spec"].get(
            "clusterIP"
        ),
        "a ClusterIP",
    )
    script = (
        "import os, pathlib, socket\n"
        "from kubernetes import client, config\n"
        "e = os.environ\n"
        "root = pathlib.Path(e['VPLANE_ROOT'])\n"
        "print('greeting', e['GREETING'], e['APP_color'], e['PASSWORD'], e['MY_NAME'], e['CPU_M'])\n"
        "print('files', (root / 'etc/settings/greeting').read_text(), (root / 'etc/creds/password').read_text(), (root / 'etc/info/labels').read_text().replace(chr(10), ','))\n"
        "print('service', e['BACKEND_SERVICE_HOST'], e['BACKEND_SERVICE_PORT_HTTP'], e['KUBERNETES_SERVICE_HOST'])\n"
        "config.load_kube_config()\n"
        "print('in-cluster', [c.metadata.name for c in client.CoreV1Api().list_namespaced_config_map(e['NS']).items if c.metadata.name == 'settings'])\n"
        "print('resolved', socket.gethostbyname('backend'), socket.gethostbyname('backend.' + e['NS'] + '.svc.cluster.local'))\n"
        "print('cwd', os.getcwd() == str(root))\n"
    )
    manifest = pod(
        "env",
        ["python", "-c", script],
        image="python:3.11",
        restartPolicy="Never",
        labels={"app": "env", "tier": "test"},
        volumes=[
            {"name": "settings", "configMap": {"name": "settings"}},
            {"name": "creds", "secret": {"secretName": "creds"}},
            {
                "name": "info",
                "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
            },
        ],
        container_fields={
            "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "APP_"}],
            "env": [
                {
                    "name": "GREETING",
                    "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}},
                },
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {
                    "name": "CPU_M",
                    "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}},
                },
            ],
            "resources": {"limits": {"cpu": "250m"}},
            "volumeMounts": [
                {"name": "settings", "mountPath": "/etc/settings"},
                {"name": "creds", "mountPath": "/etc/creds"},
                {"name": "info", "mountPath": "/etc/info"},
            ],
        },
    )
    apply(k, ns, manifest)
    wait_status(k, ns, "env", "Completed", within=60)
    out = dict(line.split(" ", 1) for line in k.run("logs", "env", "-n", ns).out.splitlines())
    assert out["greeting"] == "hello blue s3cret env 250"
    assert out["files"] == 'hello s3cret app="env",tier="test"'
    cluster_ip = json.loads(k.run("get", "svc", "backend", "-n", ns, "-o", "json").out)["spec"]["clusterIP"]
    assert out["service"] == f"{cluster_ip} 8080 127.0.0.1"
    assert out["in-cluster"] == "['settings']"
    assert out["resolved"] == f"{cluster_ip} {cluster_ip}"
    assert out["cwd"] == "True"


def test_kubectl_run_with_the_curl_image(cluster: Cluster, k: Kubectl, ns: str) -> None:
    """The connected-cluster runbook's egress check, without -it (attach is another helper's): curl runs
    and its output is the pod's log."""
    k.run(
        "run",
        "curl-test",
        "-n",
        ns,
        "--restart=Never",
        "--image=curlimages/curl",
        "--overrides",
        json.dumps({"spec": {"nodeName": NODE}}),
        "--",
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "https://127.0.0.1:1/",
    )
    wait_status(k, ns, "curl-test", "Error")
    assert "Failed to connect to 127.0.0.1 port 1" in k.run("logs", "curl-test", "-n", ns).out


def test_kubectl_debug_runs_an_ephemeral_container_once(cluster: Cluster, k: Kubectl, ns: str) -> None:
    """`kubectl debug` adds an ephemeral container: it runs (logs, exec, attach with -i), is reported in
    ephemeralContainerStatuses, never counts toward readiness and is not restarted when it ends."""
    apply(k, ns, pod("app", "sleep 600"))
    wait_status(k, ns, "app", "Running", "1/1")
    k.run(
        "debug",
        "app",
        "-n",
        ns,
        "--image=busybox",
        "-c",
        "dbg",
        "--",
        "sh",
        "-c",
        "echo from-debug; sleep 600",
    )

    def debug_status(name: str) -> dict[str, Any] | None:
        statuses = pod_json(k, ns, "app")["status"].get("ephemeralContainerStatuses") or []
        return next((s for s in statuses if s["name"] == name), None)

    running = wait_until(lambda: (s := debug_status("dbg")) and "running" in s["state"] and s, "dbg running")
    assert running["ready"] is False and "started" not in running
    wait_until(lambda: "from-debug" in k.run("logs", "app", "-n", ns, "-c", "dbg").out, "the debug log")
    assert k.run("exec", "app", "-n", ns, "-c", "dbg", "--", "echo", "exec-ok").out.strip() == "exec-ok"
    assert row(k, ns, "app")[:2] == ("1/1", "Running")
    listed = k.run("get", "events", "-n", ns, "--field-selector", "involvedObject.name=app", "-o", "json").out
    started = [
        e["involvedObject"].get("fieldPath") for e in json.loads(listed)["items"] if e["reason"] == "Started"
    ]
    assert "spec.ephemeralContainers{dbg}" in started, started
    # -i attaches to it, as `kubectl debug -it` does; it ends and stays ended.
    done = k.run(
        "debug", "app", "-n", ns, "-i", "--image=busybox", "-c", "once", "--", "sh", "-c", "echo attached-ok"
    )
    assert "attached-ok" in done.out
    ended = wait_until(lambda: (s := debug_status("once")) and "terminated" in s["state"] and s, "once ended")
    assert ended["state"]["terminated"]["exitCode"] == 0
    time.sleep(1.5)  # two pod resyncs (0.5 s): an ephemeral container is never started again
    again = debug_status("once")
    assert again is not None and again["restartCount"] == 0 and "terminated" in again["state"]


def _sidecar_pod(name: str, sidecar: str, main: str, **spec: Any) -> str:
    body = json.loads(pod(name, main, **spec))
    body["spec"]["initContainers"] = [
        {"name": "side", "image": "busybox", "restartPolicy": "Always", "command": ["sh", "-c", sidecar]},
        {"name": "after", "image": "busybox", "command": ["sh", "-c", "echo initialized"]},
    ]
    return json.dumps(body)


def test_a_sidecar_runs_beside_the_containers_and_is_restarted(cluster: Cluster, k: Kubectl, ns: str) -> None:
    """An init container with restartPolicy Always starts before the next init container, keeps running
    beside the containers (counted in READY), and is restarted when it ends, whatever the pod's policy."""
    apply(
        k,
        ns,
        _sidecar_pod("svc", "echo side-up; sleep 1; exit 3", "sleep 600", restartPolicy="Never"),
    )
    wait_status(k, ns, "svc", "Running", "2/2")
    status = pod_json(k, ns, "svc")["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Initialized"] == "True"
    after = next(s for s in status["initContainerStatuses"] if s["name"] == "after")
    assert after["state"]["terminated"]["exitCode"] == 0
    side = wait_until(
        lambda: next(
            (s for s in pod_json(k, ns, "svc")["status"]["initContainerStatuses"] if s["restartCount"] >= 2),
            None,
        ),
        "the sidecar restarted twice",
    )
    assert side["name"] == "side" and side["lastState"]["terminated"]["exitCode"] == 3
    assert pod_json(k, ns, "svc")["status"]["phase"] == "Running"
    assert "side-up" in k.run("logs", "svc", "-n", ns, "-c", "side").out


def test_a_finished_pods_sidecar_is_stopped_and_the_pod_succeeds(
    cluster: Cluster, k: Kubectl, ns: str
) -> None:
    """A Job-style pod: when its container has succeeded the sidecar is stopped and the pod is Succeeded."""
    apply(
        k,
        ns,
        _sidecar_pod("job", "while true; do sleep 1; done", "sleep 1; echo work-done", restartPolicy="Never"),
    )
    wait_status(k, ns, "job", "Completed", "0/2", within=45)
    status = pod_json(k, ns, "job")["status"]
    assert status["phase"] == "Succeeded"
    side = next(s for s in status["initContainerStatuses"] if s["name"] == "side")
    assert "terminated" in side["state"]
    assert "work-done" in k.run("logs", "job", "-n", ns, "-c", "main").out


ECHO_SERVER = (
    "import http.server, os\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    " def answer(self):\n"
    "  if self.path == '/page':\n"
    '   page = b\'<html><body><a href="/next">next</a><img src="rel.png"></body></html>\'\n'
    "   self.send_response(200); self.send_header('Content-Type', 'text/html; charset=utf-8')\n"
    "   self.send_header('Access-Control-Allow-Origin', '*'); self.send_header('Content-Length', str(len(page)))\n"
    "   self.end_headers(); self.wfile.write(page); return\n"
    "  if self.path == '/go':\n"
    "   self.send_response(302); self.send_header('Location', '/next'); self.send_header('Content-Length', '0')\n"
    "   self.end_headers(); return\n"
    "  n = int(self.headers.get('Content-Length') or 0)\n"
    "  body = (self.command + ' ' + self.path + ' ' + self.rfile.read(n).decode() + ' auth=' + str(self.headers.get('Authorization'))).encode()\n"
    "  self.send_response(201 if self.command == 'POST' else 200); self.send_header('X-Pod', os.environ['HOSTNAME'])\n"
    "  self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)\n"
    " do_GET = do_POST = answer\n"
    " def log_message(self, *a): pass\n"
    "http.server.HTTPServer(('', 8080), H).serve_forever()"
)


def test_pods_services_and_nodes_proxy_through_the_kubelet(cluster: Cluster, k: Kubectl, ns: str) -> None:
    """pods/proxy, services/proxy (by port number and by name) and nodes/proxy answer as upstream's do: the
    API server reaches the pod through its kubelet, never with the caller's credentials."""
    probe = {"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}
    apply(
        k,
        ns,
        pod(
            "echo",
            ["python", "-c", ECHO_SERVER],
            image="python:3.11",
            labels={"app": "echo"},
            container_fields=probe,
        ),
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "echo"},
        "spec": {"selector": {"app": "echo"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }
    apply(k, ns, json.dumps(service))
    wait_status(k, ns, "echo", "Running", "1/1")
    base = f"/api/v1/namespaces/{ns}"
    assert k.run("get", "--raw", f"{base}/pods/echo:8080/proxy/a/b?x=1").out == "GET /a/b?x=1  auth=None"
    assert k.run("get", "--raw", f"{base}/pods/http:echo:8080/proxy/").out.startswith("GET / ")
    answered = wait_until(  # the Endpoints controller names the ready pod
        lambda: (
            (r := k.run("get", "--raw", f"{base}/services/echo:http/proxy/s", check=False)).code == 0
            and r.out
        ),
        "services/proxy by port name",
    )
    assert answered == "GET /s  auth=None"
    assert k.run("get", "--raw", f"{base}/services/echo:80/proxy/n").out == "GET /n  auth=None"
    posted = k.run("create", "--raw", f"{base}/pods/echo:8080/proxy/post", "-f", "-", input='{"a": 1}')
    assert posted.out == 'POST /post {"a": 1} auth=None'
    refused = k.run("get", "--raw", f"{base}/pods/echo:9/proxy/", check=False)
    assert (
        refused.code != 0
        and "(ServiceUnavailable): error trying to reach service: dial tcp " in refused.stderr
    )
    assert "connect: connection refused" in refused.stderr
    missing_port = k.run("get", "--raw", f"{base}/services/echo:nope/proxy/", check=False)
    assert 'no service port "nope" found for service "echo"' in missing_port.stderr
    assert k.run("get", "--raw", f"/api/v1/nodes/{NODE}/proxy/healthz").out == "ok"
    # Endpoints written by hand name an address, not a pod: nothing is dialled.
    manual = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "manual"},
        "spec": {"ports": [{"port": 80}]},
    }
    apply(k, ns, json.dumps(manual))
    endpoints = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "manual"},
        "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": 22}]}],
    }
    apply(k, ns, json.dumps(endpoints))
    manual_answer = k.run("get", "--raw", f"{base}/services/manual/proxy/", check=False)
    assert (
        "error trying to reach 127.0.0.1:22: the endpoint names no pod of this cluster"
        in manual_answer.stderr
    )
    # What `kubectl proxy` serves a browser: the same path under its own port.
    proxy = k.popen("proxy", "--port=0")
    try:
        assert proxy.stdout is not None
        line = proxy.stdout.readline()
        port = int(re.search(r":(\d+)", line).group(1))  # type: ignore[union-attr]
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}{base}/services/echo:http/proxy/ui", timeout=10
        ) as resp:
            assert resp.read().decode() == "GET /ui  auth=None" and resp.headers["X-Pod"] == "echo"
        # As upstream's proxy: links to the backend go through the proxy path, CORS headers are dropped, and
        # the bare proxy path redirects to itself with a slash.
        prefix = f"{base}/services/echo:http/proxy"
        web = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        web.request("GET", prefix + "/page")
        page = web.getresponse()
        assert page.read().decode() == (
            f'<html><body><a href="{prefix}/next">next</a><img src="rel.png"></body></html>'
        )
        assert page.getheader("Access-Control-Allow-Origin") is None
        web.request("GET", prefix + "/go")
        moved = web.getresponse()
        moved.read()
        assert (moved.status, moved.getheader("Location")) == (302, prefix + "/next")
        web.request("GET", prefix + "?q=1")
        bare = web.getresponse()
        bare.read()
        assert (bare.status, bare.getheader("Location")) == (301, prefix + "/?q=1")
        web.close()
    finally:
        proxy.kill()
        proxy.communicate()


# -- the embedded cluster ----------------------------------------------------------------------------


def test_cluster_start_prints_a_working_kubeconfig(cluster: Cluster) -> None:
    doc = yaml.safe_load(cluster.kubeconfig.read_text())
    assert doc["clusters"][0]["cluster"]["server"].startswith("https://127.0.0.1:")
    assert base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]).startswith(
        b"-----BEGIN"
    )
    assert "kubectl --kubeconfig" in cluster.log()
    assert oct(cluster.kubeconfig.stat().st_mode & 0o777) == "0o600"


# -- the streams seam ------------------------------------------------------------------------------


async def _read_until(session: Any, wanted: bytes, channel: int = 1) -> bytes:
    seen = b""
    async with asyncio.timeout(10):
        while wanted not in seen:
            frame = await session.read()
            assert frame is not None, f"the session ended before {wanted!r}: {seen!r}"
            if frame[0] == channel:
                seen += frame[1]
    return seen


async def test_attach_and_exec_for_the_streams_handlers(tmp_path: Path) -> None:
    """What exec/attach/port-forward build on: a container's own process reached through its shim (stdin,
    output, terminal size), and commands run in its environment."""
    from vplane.runtime.containers import ContainerProcess
    from vplane.runtime.cri import EXIT, STDOUT, AttachSession, spawn_exec
    from vplane.runtime.images import ImageCatalogue
    from vplane.runtime.pods import ExecContext

    env = {"PATH": os.environ["PATH"], "POD_IP": "127.10.0.42"}
    cat = ContainerProcess(tmp_path / "cat", tmp_path / "logs" / "cat.log", "vplane://" + "a1" * 32)
    cat.spawn(["/bin/cat"], env, tmp_path, stdin=True, stdin_once=True)
    assert await cat.wait_started() is None and cat.running
    session = await AttachSession.open(cat.attach_address)
    await session.write_stdin(b"hello\n")
    assert await _read_until(session, b"hello\n", STDOUT) == b"hello\n"
    await session.close_stdin()  # stdinOnce: the container's stdin ends, and so does cat
    ended = await _read_until(session, b"exitCode", EXIT)
    assert json.loads(ended) == {"exitCode": 0}
    await session.close()
    assert (await cat.wait()).exit_code == 0
    assert b" stdout F hello\n" in (tmp_path / "logs" / "cat.log").read_bytes()

    # A shim that has not started its process within the limit is a StartError (and is killed).
    late = ContainerProcess(tmp_path / "late", tmp_path / "logs" / "late.log", "vplane://" + "c3" * 32)
    late.spawn(["/bin/cat"], env, tmp_path, stdin=True)
    failed = await late.wait_started(0.0)
    assert failed is not None and failed.start_error == "failed to start container process: timed out"
    assert late.shim_pid is not None and not Path(f"/proc/{late.shim_pid}").exists()  # killed and reaped

    shell = ContainerProcess(tmp_path / "sh", tmp_path / "logs" / "sh.log", "vplane://" + "b2" * 32)
    shell.spawn(["/bin/sh"], env, tmp_path, tty=True, stdin=True)
    assert await shell.wait_started() is None
    session = await AttachSession.open(shell.attach_address)
    await session.resize(100, 31)
    await session.write_stdin(b"stty size; echo pod at $POD_IP\n")
    output = await _read_until(session, b"pod at 127.10.0.42")
    assert b"31 100" in output
    await session.write_stdin(b"exit 3\n")
    assert json.loads(await _read_until(session, b"exitCode", EXIT)) == {"exitCode": 3}
    await session.close()
    assert (await shell.wait()).exit_code == 3

    pulled = ImageCatalogue.load("ghcr.io/vplane/vplane").pull("busybox")
    context = ExecContext(pulled, env, tmp_path, "127.10.0.42")
    exec_process = await spawn_exec(context, ["sh", "-c", "echo $POD_IP; pwd"], tty=False, stdin=False)
    out, _ = await exec_process.process.communicate()
    assert out.decode().split() == ["127.10.0.42", str(tmp_path)]


def test_a_standalone_kubelet_joins_a_plain_api_server(
    apiserver: Any, kubectl_path: str, tmp_path: Path
) -> None:
    """``vplane kubelet`` with a kubeconfig, against ``vplane apiserver``: the node registers and runs a
    pod; the API server reads its logs only once the kubelet serves a certificate of the cluster's CA."""
    from harness import APIServerProcess

    assert isinstance(apiserver, APIServerProcess)
    apiserver.start()
    k = Kubectl(kubectl_path, apiserver.kubeconfig, tmp_path / "cache")
    node_dir = tmp_path / "node"
    node_dir.mkdir(mode=0o700)
    ready = tmp_path / "node.ready"

    def kubelet(*extra: str) -> subprocess.Popen[bytes]:
        ready.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "vplane.cli.main", "kubelet", "--kubeconfig", str(apiserver.kubeconfig)]
        cmd += ["--data-dir", str(node_dir), "--ready-file", str(ready), "--set", "node_name=solo", *extra]
        with (tmp_path / "kubelet.log").open("ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: ready.exists() or proc.poll() is not None, "the kubelet is ready")
        assert proc.poll() is None, (tmp_path / "kubelet.log").read_text()
        return proc

    proc = kubelet()  # a self-signed serving certificate
    try:
        wait_until(lambda: "solo   Ready" in k.run("get", "nodes").out, "the node is Ready")
        apply(k, "default", pod("hello", "echo hi; sleep 60", node="solo"))
        wait_status(k, "default", "hello", "Running")
        refused = k.fails("logs", "hello").stderr
        assert "tls: failed to verify certificate: x509: certificate signed by unknown authority" in refused
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    ca = tls.CertPair.read(apiserver.data_dir / "pki" / "ca.crt", apiserver.data_dir / "pki" / "ca.key")
    tls.issue_serving(ca, ["127.0.0.1", "solo"]).write(tmp_path / "kubelet.crt", tmp_path / "kubelet.key")
    proc = kubelet(
        "--set",
        f"tls_cert_file={tmp_path / 'kubelet.crt'}",
        "--set",
        f"tls_key_file={tmp_path / 'kubelet.key'}",
    )
    try:
        wait_status(k, "default", "hello", "Running")
        wait_until(
            lambda: k.run("logs", "hello", check=False).out == "hi\n", "the logs through the verified kubelet"
        )
        k.run("delete", "pod", "hello")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert_no_processes(node_dir)


def test_a_failing_init_container_backs_off(cluster: Cluster, k: Kubectl, ns: str) -> None:
    apply(
        k,
        ns,
        pod(
            "initloop",
            "sleep 60",
            initContainers=[{"name": "init", "image": "busybox", "command": ["false"]}],
        ),
    )
    wait_status(k, ns, "initloop", "Init:CrashLoopBackOff", "0/1")
    status = pod_json(k, ns, "initloop")["status"]
    init = status["initContainerStatuses"][0]
    assert init["lastState"]["terminated"]["exitCode"] == 1
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    initialized = next(c for c in status["conditions"] if c["type"] == "Initialized")
    assert (initialized["reason"], initialized["message"]) == (
        "ContainersNotInitialized",
        "containers with incomplete status: [init]",
    )


def test_a_pod_waits_for_its_service_account_token(
    own_cluster: Cluster, kubectl_path: str, tmp_path: Path
) -> None:
    """Without admission refusing the pod, a pod created before its ServiceAccount waits for the token
    (``FailedMount``), then runs with in-cluster credentials (with ``service_account_wait_seconds`` 0, as in
    the other tests, it runs at once without them)."""
    own_cluster.settings["service_account_wait_seconds"] = 60
    own_cluster.api_settings["controller_manager"] = False  # nothing else makes the ServiceAccount
    own_cluster.start()
    k = kubectl_for(own_cluster, kubectl_path, tmp_path)
    k.run("create", "namespace", "late")
    apply(k, "late", pod("client", 'echo "kubeconfig=${KUBECONFIG:-none}"; sleep 60'))
    wait_until(
        lambda: any(
            r == "FailedMount" and 'serviceaccounts "default" not found' in m
            for _, r, m in events(k, "late", "client")
        ),
        "the pod waits for its token",
    )
    assert row(k, "late", "client")[1] == "ContainerCreating"
    k.run("create", "serviceaccount", "default", "-n", "late")
    wait_status(k, "late", "client", "Running")
    assert k.run("logs", "client", "-n", "late").out.startswith("kubeconfig=/")

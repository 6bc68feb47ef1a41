"""Tenant control planes as pods (issue 10 item 3): with ``tenant_placement: pods`` the platform runs each
VirtualClusterInstance as StatefulSet ``<name>`` in namespace ``vcluster-<name>`` of its own cluster, and the
runbook's commands read what they would for a real vcluster: ``kubectl get pods -n vcluster-<name>``, ``kubectl
logs -l app=vcluster --tail=100 --prefix``, restart counts, the namespace going with the instance.

One platform for the module (`xdist_group` keeps it on one worker); the last test kills and restarts it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from harness import Kubectl, PlatformProcess, node_processes, replica_pid, replica_pids
from platformkit import FAST, TWO_REPLICAS, Platform, eventually, vci_manifest, wait_ready
from vplane.cli import doctor
from vplane.support import tls

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("tenant_pods")]

PODS = {
    **FAST,
    "tenant_placement": "pods",
    "tenant_readiness_period_seconds": 1,
    # Shorter than a pod takes to stop: deleting an instance reaches it and is retried until the namespace is
    # gone (test_deleting_the_instance_removes_its_namespace).
    "tenant_namespace_delete_timeout_seconds": 0.2,
}


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory, kubectl_path: str) -> Iterator[Platform]:
    tmp = tmp_path_factory.mktemp("tenantpods")
    proc = PlatformProcess(tmp / "platform", PODS).start()
    k = Kubectl(kubectl_path, proc.kubeconfig, tmp / "cache")
    k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: default}\n")
    eventually(lambda: k.run("get", "namespace", "p-default", check=False).code == 0)
    platform = Platform(proc, k, tmp / "home")
    try:
        yield platform
    finally:
        proc.stop()
        left = node_processes(proc.data_dir / "node")
        proc.kill_tenants()
    assert left == [], f"stopping the platform leaves its tenants' pods running: {left}"


def pods(k: Kubectl, namespace: str) -> dict[str, list[str]]:
    """``kubectl get pods`` rows by name: READY, STATUS, RESTARTS (the way kubectl prints them)."""
    out = k.run("get", "pods", "-n", namespace, "--no-headers").stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return {row[0]: row[1:4] for row in rows}


def pod(k: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(k.run("get", "pod", name, "-n", namespace, "-o", "json").stdout)
    return found


def vci_status(k: Kubectl, name: str) -> dict[str, Any]:
    obj = json.loads(k.run("get", "vci", name, "-n", "p-default", "-o", "json").stdout)
    status: dict[str, Any] = obj.get("status") or {}
    return status


def create(platform: Platform, name: str, values: str = "") -> None:
    platform.k.apply(vci_manifest(name, values))
    wait_ready(platform.k, name)


def running_ready(k: Kubectl, namespace: str, names: list[str]) -> bool:
    rows = pods(k, namespace)
    return all(rows.get(n, [""])[:2] == ["1/1", "Running"] for n in names)


def test_a_tenant_is_a_statefulset_whose_pod_is_ready(platform: Platform, tmp_path: Path) -> None:
    """VCI Ready; `kubectl get pods -n vcluster-target` shows target-0 1/1 Running; the replica serves on its
    pod IP, which the instance's endpoints, its NetworkPeer and the platform's tenant path follow."""
    k = platform.k
    create(platform, "target")
    eventually(lambda: running_ready(k, "vcluster-target", ["target-0"]), timeout=60)
    assert pods(k, "vcluster-target")["target-0"] == ["1/1", "Running", "0"]
    sts = json.loads(k.run("get", "statefulset", "target", "-n", "vcluster-target", "-o", "json").stdout)
    assert sts["metadata"]["labels"]["app"] == "vcluster"
    assert sts["status"]["readyReplicas"] == 1
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert container["args"][:2] == ["tenant", "start"]
    assert "target" in k.run("get", "service", "-n", "vcluster-target", "-o", "name").stdout
    ip = pod(k, "vcluster-target", "target-0")["status"]["podIP"]
    assert ipaddress.ip_address(ip) in ipaddress.ip_network("127.10.0.0/16")
    endpoints = vci_status(k, "target")["endpoints"]
    assert [e.rsplit(":", 1)[0] for e in endpoints] == [f"https://{ip}"]
    # The replica's direct mesh listener is on the pod IP too, with a certificate naming it.
    peers = yaml.safe_load(k.run("get", "networkpeers", "-l", "vplane.io/tenant=target", "-o", "yaml").stdout)
    assert [e.rsplit(":", 1)[0] for e in peers["items"][0]["spec"]["endpoints"]] == [ip]
    directory = platform.proc.tenant_dir("default", "target")
    assert ip in tls.certificate_names((directory / "mesh-0.crt").read_bytes())
    logs = k.run("logs", "-n", "vcluster-target", "target-0").stdout
    assert "tenant control plane serving" in logs
    assert "no mesh certificate" not in logs
    tenant = platform.tenant_kubectl("target", None, tmp_path)
    tenant.run("create", "configmap", "through-the-platform")
    assert "through-the-platform" in tenant.run("get", "configmaps", "-o", "name").stdout


def test_logs_by_label_are_prefixed_by_pod(platform: Platform) -> None:
    """The runbook's `kubectl logs -n vcluster-<name> -l app=vcluster --tail=100 --prefix`."""
    k = platform.k
    create(platform, "logs")
    lines = k.run(
        "logs", "-n", "vcluster-logs", "-l", "app=vcluster", "--tail=100", "--prefix"
    ).stdout.splitlines()
    assert 0 < len(lines) <= 100
    assert all(line.startswith("[pod/logs-0/syncer] ") for line in lines), lines[:5]
    # `vplane doctor proxy` reads a replica's log lines from its pod when no log file names it.
    token = yaml.safe_load(platform.proc.kubeconfig.read_text())["users"][0]["user"]["token"]

    async def doctor_lines() -> list[str]:
        ctx = ssl.create_default_context(cafile=str(platform.proc.ca))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            return await doctor._pod_log_lines(
                session, platform.proc.url, {"Authorization": f"Bearer {token}"}, "logs", 0
            )

    assert any("tenant control plane serving" in line for line in asyncio.run(doctor_lines()))


def test_two_replicas_are_two_ready_pods_and_one_leader(platform: Platform, tmp_path: Path) -> None:
    k = platform.k
    create(platform, "ha", TWO_REPLICAS)
    eventually(lambda: running_ready(k, "vcluster-ha", ["ha-0", "ha-1"]), timeout=60)
    assert sorted(pods(k, "vcluster-ha")) == ["ha-0", "ha-1"]
    status = vci_status(k, "ha")
    assert status["readyReplicas"] == 2 and len(set(status["endpoints"])) == 2
    tenant = platform.tenant_kubectl("ha", None, tmp_path)
    lease = json.loads(
        tenant.run("get", "lease", "vcluster-ha-controller", "-n", "kube-system", "-o", "json").stdout
    )
    leader = lease["spec"]["holderIdentity"]
    assert leader in ("ha-0", "ha-1")
    lines = k.run(
        "logs", "-n", "vcluster-ha", "-l", "app=vcluster", "--tail=-1", "--prefix"
    ).stdout.splitlines()
    assert {line.split(" ", 1)[0] for line in lines} == {"[pod/ha-0/syncer]", "[pod/ha-1/syncer]"}
    leading = {line.split(" ", 1)[0] for line in lines if "became leader" in line}
    assert leading == {f"[pod/{leader}/syncer]"}
    # Both replicas serve the shared store: a write through one is read through each (the header names the
    # replica the platform relays to).
    tenant.run("create", "configmap", "shared")
    path = "/kubernetes/project/default/virtualcluster/ha/api/v1/namespaces/default/configmaps/shared"
    for index in (0, 1):
        eventually(lambda i=index: _get(platform, path, {"X-Vplane-Replica": str(i)})[0] == 200, timeout=10)


def _get(platform: Platform, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    token = yaml.safe_load(platform.proc.kubeconfig.read_text())["users"][0]["user"]["token"]
    request = urllib.request.Request(
        platform.proc.url + path, headers={"Authorization": f"Bearer {token}", **headers}
    )
    ctx = ssl.create_default_context(cafile=str(platform.proc.ca))
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_killing_a_replicas_process_restarts_its_container(platform: Platform, tmp_path: Path) -> None:
    """SIGKILL of the replica's process: the pod's restart count goes to 1, it is Ready again, the tenant
    serves again through the platform."""
    k = platform.k
    create(platform, "crash")
    directory = platform.proc.tenant_dir("default", "crash")
    eventually(lambda: running_ready(k, "vcluster-crash", ["crash-0"]), timeout=60)
    before = replica_pid(directory)
    os.kill(before, signal.SIGKILL)

    def restarted() -> bool:
        row = pods(k, "vcluster-crash").get("crash-0", [])
        return row[:3] == ["1/1", "Running", "1"]

    eventually(restarted, timeout=60)
    assert replica_pid(directory) != before
    status = pod(k, "vcluster-crash", "crash-0")["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 137
    wait_ready(k, "crash")
    tenant = platform.tenant_kubectl("crash", None, tmp_path)
    eventually(lambda: tenant.run("get", "namespaces", check=False).code == 0, timeout=30)


def test_deleting_the_instance_removes_its_namespace(platform: Platform) -> None:
    k = platform.k
    create(platform, "gone")
    directory = platform.proc.tenant_dir("default", "gone")
    eventually(lambda: running_ready(k, "vcluster-gone", ["gone-0"]), timeout=60)
    pid = replica_pid(directory)
    # An object whose finalizer holds the namespace's deletion makes the platform's wait for it run out
    # (tenant_namespace_delete_timeout_seconds, 0.2 s here) whatever the machine's speed; it retries.
    k.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: held, namespace: vcluster-gone, "
        "finalizers: [vplane.test/hold]}\n"
    )
    k.run("delete", "vci", "gone", "-n", "p-default", "--wait=false")
    timed_out = 'namespace "vcluster-gone" was not deleted within 0.2s'
    try:
        eventually(lambda: timed_out in platform.proc.log(), timeout=60)
    finally:
        k.run(
            "patch",
            "configmap",
            "held",
            "-n",
            "vcluster-gone",
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
            check=False,
        )
    k.run("wait", "--for=delete", "vci/gone", "-n", "p-default", "--timeout=90s", timeout=100)
    assert "NotFound" in k.fails("get", "namespace", "vcluster-gone").stderr
    assert not directory.exists()
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert replica_pids(directory) == {}


def test_an_instance_of_the_same_name_in_another_project_says_whose_namespace_it_is(
    platform: Platform,
) -> None:
    """Namespaces are named after the instance alone (as upstream's `vcluster-<name>`): a second project's
    instance of a taken name fails saying so, and the first keeps running."""
    k = platform.k
    create(platform, "dup")
    k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: other}\n")
    eventually(lambda: k.run("get", "namespace", "p-other", check=False).code == 0)
    k.apply(vci_manifest("dup", project="other"))

    def failed() -> str:
        obj = json.loads(k.run("get", "vci", "dup", "-n", "p-other", "-o", "json").stdout)
        status = obj.get("status") or {}
        return str(status.get("message", "")) if status.get("phase") == "Failed" else ""

    eventually(lambda: bool(failed()), timeout=30)
    assert (
        failed()
        == 'namespace "vcluster-dup" of the platform\'s cluster belongs to tenant cluster p-default/dup'
    )
    k.run("delete", "vci", "dup", "-n", "p-other", "--timeout=60s", timeout=70)
    assert running_ready(k, "vcluster-dup", ["dup-0"])
    assert vci_status(k, "dup")["phase"] == "Ready"


def test_a_replica_on_an_address_without_a_mesh_certificate_waits_then_serves(
    platform: Platform, tmp_path: Path
) -> None:
    """A replica on an address of its own gets a serving certificate naming it; it waits
    `mesh_cert_wait_seconds` for the mesh certificate the platform issues for that address, and without one
    serves anyway (peers use the relay), saying so. Run by hand beside a pod replica of the same tenant."""
    create(platform, "extra")
    directory = platform.proc.tenant_dir("default", "extra")
    with socket.socket() as s:
        s.bind(("127.10.250.7", 0))
        port = s.getsockname()[1]
    ready = tmp_path / "extra.ready"
    log_path = tmp_path / "extra.log"
    cmd = [
        sys.executable,
        "-m",
        "vplane.cli.main",
        "tenant",
        "start",
        "--data-dir",
        str(directory),
        "--name",
        "extra",
        "--project",
        "default",
        "--project-namespace",
        "p-default",
        "--replica",
        "7",
        "--listen",
        f"127.10.250.7:{port}",
        "--platform-url",
        platform.proc.url,
        "--platform-ca",
        str(directory / "platform-ca.crt"),
        "--access-key-file",
        str(directory / "access-key"),
        "--ready-file",
        str(ready),
        "--set",
        "mesh_cert_wait_seconds=0.5",
    ]
    with log_path.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        eventually(lambda: ready.exists() or proc.poll() is not None, timeout=60)
        assert proc.poll() is None, log_path.read_text()
        log = log_path.read_text()
        assert "no mesh certificate for this replica's address" in log
        assert "127.10.250.7" in tls.certificate_names((directory / "pki" / "serving-7.crt").read_bytes())
        ctx = ssl.create_default_context(cafile=str(directory / "pki" / "ca.crt"))
        with urllib.request.urlopen(f"https://127.10.250.7:{port}/readyz", context=ctx, timeout=10) as resp:
            assert resp.status == 200
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_changed_vcluster_yaml_rolls_the_pods(platform: Platform) -> None:
    """As a changed helm release restarts upstream's control plane: the pod template's checksum changes and
    the StatefulSet replaces the pod; the new replica reads the new vcluster.yaml."""
    k = platform.k
    create(platform, "cfg")
    eventually(lambda: running_ready(k, "vcluster-cfg", ["cfg-0"]), timeout=60)
    uid = pod(k, "vcluster-cfg", "cfg-0")["metadata"]["uid"]
    pid = replica_pid(platform.proc.tenant_dir("default", "cfg"))
    k.run(
        "patch",
        "vci",
        "cfg",
        "-n",
        "p-default",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"template": {"helmRelease": {"values": "sync: {}\n"}}}}),
    )

    def replaced() -> bool:
        got = k.run("get", "pod", "cfg-0", "-n", "vcluster-cfg", "-o", "json", check=False)
        if got.code != 0:
            return False
        current = json.loads(got.stdout)
        return current["metadata"]["uid"] != uid and any(
            c["type"] == "Ready" and c["status"] == "True" for c in current["status"].get("conditions", [])
        )

    eventually(replaced, timeout=90)
    assert (platform.proc.tenant_dir("default", "cfg") / "vcluster.yaml").read_text() == "sync: {}\n"
    assert replica_pid(platform.proc.tenant_dir("default", "cfg")) != pid
    wait_ready(k, "cfg")


def test_a_killed_platform_restarted_keeps_its_tenants_pods(platform: Platform, tmp_path: Path) -> None:
    """SIGKILL of the platform (its node runtime with it): the pods' processes keep running; the restarted
    platform's runtime adopts them (same pids, no restart) and the tenant keeps serving."""
    k = platform.k
    create(platform, "survivor")
    directory = platform.proc.tenant_dir("default", "survivor")
    eventually(lambda: running_ready(k, "vcluster-survivor", ["survivor-0"]), timeout=60)
    tenant = platform.tenant_kubectl("survivor", None, tmp_path)
    tenant.run("create", "configmap", "before-the-kill")
    pid = replica_pid(directory)
    platform.proc.kill()
    assert replica_pid(directory) == pid  # outlived the platform
    platform.proc.start()
    wait_ready(k, "survivor")
    eventually(lambda: running_ready(k, "vcluster-survivor", ["survivor-0"]), timeout=60)
    assert pods(k, "vcluster-survivor")["survivor-0"] == ["1/1", "Running", "0"]
    assert replica_pid(directory) == pid
    eventually(lambda: tenant.run("get", "configmap", "before-the-kill", check=False).code == 0, timeout=30)
    assert "adopted running container" in platform.proc.log()

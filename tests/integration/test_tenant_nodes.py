"""Tenant clusters run their pods (issue 10): each tenant's leader replica runs a node runtime, so a Deployment
created in a tenant gets Running, Ready pods on the tenant's node, and ``kubectl logs``/``exec`` work through
the platform's ``/kubernetes/project/<p>/virtualcluster/<n>`` path. Each tenant has pod and Service ranges of
its own; a killed leader's pods are adopted by the next; deleting a tenant leaves none of its processes.

One platform (process placement) for the module, with tenants ``a`` and ``b``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import Kubectl, PlatformProcess, node_processes, replica_pid
from platformkit import FAST, Platform, eventually, stop_platform, vci_manifest, wait_ready

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("tenant_nodes")]

NODE = json.dumps(
    {
        "node_status_update_frequency_seconds": 1,
        "pod_resync_seconds": 1,
        "crash_backoff_seconds": 1,
        "volume_retry_seconds": 0.2,
        "service_account_wait_seconds": 2,
    }
)


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory, kubectl_path: str) -> Iterator[Platform]:
    tmp = tmp_path_factory.mktemp("tenantnodes")
    fast_nodes = {**FAST, "tenant_node": True, "tenant_node_settings": NODE}
    proc = PlatformProcess(tmp / "platform", fast_nodes).start()
    k = Kubectl(kubectl_path, proc.kubeconfig, tmp / "cache")
    k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: default}\n")
    eventually(lambda: k.run("get", "namespace", "p-default", check=False).code == 0)
    p = Platform(proc, k, tmp / "home")
    try:
        for name in ("a", "b"):
            k.apply(vci_manifest(name))
        for name in ("a", "b"):
            wait_ready(k, name)
        yield p
    finally:
        dirs = [proc.tenant_dir("default", n) / "node" for n in ("a", "b")]
        stop_platform(p)
        left = [found for d in dirs for found in node_processes(d)]
        for pid, _ in left:
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"stopping the platform leaves tenant pods running: {left}"


def tenant(platform: Platform, name: str, tmp: Path) -> Kubectl:
    return platform.tenant_kubectl(name, None, tmp)


def deploy(tk: Kubectl, name: str, command: str) -> dict[str, Any]:
    """A Deployment of one busybox pod running ``command``; returns its pod once Ready."""
    tk.run("create", "deployment", name, "--image=busybox", "--", "sh", "-c", command)
    tk.run("rollout", "status", f"deployment/{name}", "--timeout=90s", timeout=100)
    pods = json.loads(tk.run("get", "pods", "-l", f"app={name}", "-o", "json").stdout)["items"]
    assert len(pods) == 1
    pod: dict[str, Any] = pods[0]
    return pod


def test_a_deployment_runs_on_the_tenant_node_with_logs_and_exec(platform: Platform, tmp_path: Path) -> None:
    tk = tenant(platform, "a", tmp_path)
    # The tenant reads Ready once its API answers; its leader registers the node just after (like a kubelet
    # joining a fresh cluster), so the node is awaited rather than read once.
    eventually(lambda: tk.run("get", "nodes", "--no-headers").stdout.split()[:2] == ["a-node", "Ready"])
    pod = deploy(tk, "web", "echo hello-from-tenant; exec sleep 3600")
    name = pod["metadata"]["name"]
    assert pod["spec"]["nodeName"] == "a-node"
    assert pod["status"]["phase"] == "Running"
    eventually(lambda: "hello-from-tenant" in tk.run("logs", name).stdout)
    assert tk.run("exec", name, "--", "sh", "-c", "echo from-exec-$((40+2))").stdout.strip() == "from-exec-42"
    # The pod's address is in the tenant's own pod range, recorded by the platform.
    network = json.loads((platform.proc.tenant_dir("default", "a") / "network.json").read_text())
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(network["podCIDR"])


def test_two_tenants_pods_and_cluster_ips_do_not_collide(platform: Platform, tmp_path: Path) -> None:
    ranges = {}
    ips = {}
    for name in ("a", "b"):
        tk = tenant(platform, name, tmp_path)
        network = json.loads((platform.proc.tenant_dir("default", name) / "network.json").read_text())
        ranges[name] = {k: ipaddress.ip_network(v) for k, v in network.items()}
        pod = deploy(tk, "iptest", "exec sleep 3600")
        tk.run("expose", "deployment", "iptest", "--port=8080")
        cluster_ip = tk.run("get", "service", "iptest", "-o", "jsonpath={.spec.clusterIP}").stdout
        kube_ip = tk.run("get", "service", "kubernetes", "-o", "jsonpath={.spec.clusterIP}").stdout
        ips[name] = (ipaddress.ip_address(pod["status"]["podIP"]), ipaddress.ip_address(cluster_ip))
        assert ips[name][0] in ranges[name]["podCIDR"]
        assert ips[name][1] in ranges[name]["serviceCIDR"]
        assert ipaddress.ip_address(kube_ip) in ranges[name]["serviceCIDR"]
    every = [r for name in ("a", "b") for r in ranges[name].values()]
    host = [ipaddress.ip_network("127.10.0.0/16"), ipaddress.ip_network("127.96.0.0/16")]
    for i, one in enumerate(every):
        for other in every[i + 1 :] + host:
            assert not one.overlaps(other), (one, other)
    assert ips["a"][0] != ips["b"][0] and ips["a"][1] != ips["b"][1]


def test_a_killed_leader_s_pods_are_adopted_not_restarted(platform: Platform, tmp_path: Path) -> None:
    """The replica (the leader, with the node) is killed; the platform restarts it and its node adopts the
    running pod: same process, no restart, Ready again."""
    tk = tenant(platform, "b", tmp_path)
    pod = deploy(tk, "survivor", "exec sleep 3600")
    name = pod["metadata"]["name"]
    node_dir = platform.proc.tenant_dir("default", "b") / "node"
    before = {pid for pid, cmd in node_processes(node_dir) if cmd.startswith("sleep")}
    assert before, node_processes(node_dir)
    old = replica_pid(platform.proc.tenant_dir("default", "b"))
    os.kill(old, signal.SIGKILL)
    eventually(lambda: replica_pid(platform.proc.tenant_dir("default", "b")) != old, timeout=60)
    wait_ready(platform.k, "b")
    # The new runtime reports the pod again (its Node heartbeats and the pod Ready).
    eventually(
        lambda: (
            tk.run(
                "get", "pod", name, "-o", "jsonpath={.status.containerStatuses[0].ready}", check=False
            ).stdout
            == "true"
        ),
        timeout=60,
    )
    after = {pid for pid, cmd in node_processes(node_dir) if cmd.startswith("sleep")}
    assert after == before, "the pod's process was restarted rather than adopted"
    restarts = tk.run("get", "pod", name, "-o", "jsonpath={.status.containerStatuses[0].restartCount}").stdout
    assert restarts == "0"
    assert tk.run("exec", name, "--", "echo", "still-here").stdout.strip() == "still-here"


def test_deleting_a_tenant_leaves_no_pod_processes(platform: Platform, tmp_path: Path) -> None:
    platform.k.apply(vci_manifest("gone"))
    wait_ready(platform.k, "gone")
    tk = tenant(platform, "gone", tmp_path)
    deploy(tk, "doomed", "exec sleep 3600")
    node_dir = platform.proc.tenant_dir("default", "gone") / "node"
    assert any(cmd.startswith("sleep") for _, cmd in node_processes(node_dir))
    platform.k.run("delete", "vci", "gone", "-n", "p-default", "--timeout=60s", timeout=70)
    eventually(lambda: node_processes(node_dir) == [], timeout=30)
    assert not node_dir.exists()


def test_pods_placement_tenant_runs_its_pods(tmp_path: Path, kubectl_path: str) -> None:
    """With ``tenant_placement: pods`` the tenant replica is itself a pod of the platform's node; its own node
    runs the tenant's pods (in the tenant's ranges, apart from the host cluster's), with logs and exec through
    the tenant path; stopping the platform stops both."""
    settings = {
        **FAST,
        "tenant_node": True,
        "tenant_node_settings": NODE,
        "tenant_placement": "pods",
        "tenant_readiness_period_seconds": 1,
    }
    proc = PlatformProcess(tmp_path / "platform", settings).start()
    tenant_node = proc.tenant_dir("default", "inpods") / "node"
    try:
        k = Kubectl(kubectl_path, proc.kubeconfig, tmp_path / "cache")
        k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: default}\n")
        eventually(lambda: k.run("get", "namespace", "p-default", check=False).code == 0)
        p = Platform(proc, k, tmp_path / "home")
        k.apply(vci_manifest("inpods"))
        wait_ready(k, "inpods")
        replica = k.run(
            "get", "pods", "-n", "vcluster-inpods", "-o", "jsonpath={.items[0].status.podIP}"
        ).stdout
        tk = tenant(p, "inpods", tmp_path)
        pod = deploy(tk, "web", "echo hello-from-pods-placement; exec sleep 3600")
        name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] == "inpods-node"
        network = json.loads((proc.tenant_dir("default", "inpods") / "network.json").read_text())
        assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(network["podCIDR"])
        assert ipaddress.ip_address(replica) not in ipaddress.ip_network(network["podCIDR"])
        eventually(lambda: "hello-from-pods-placement" in tk.run("logs", name).stdout)
        assert tk.run("exec", name, "--", "echo", "exec-ok").stdout.strip() == "exec-ok"
        assert any(cmd.startswith("sleep") for _, cmd in node_processes(tenant_node))
    finally:
        proc.stop()
        left = node_processes(tenant_node) + node_processes(proc.data_dir / "node")
        proc.kill_tenants()
    assert left == [], f"stopping the platform leaves pods running: {left}"

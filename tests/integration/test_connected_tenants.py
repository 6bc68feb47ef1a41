"""Tenant clusters on connected clusters (issue 11 item 6): a VirtualClusterInstance whose
``spec.clusterRef.cluster`` names a connected cluster runs as pods there, applied through the agent's tunnel;
kubectl reaches it through the platform (over the mesh); with the agent cut its pods keep running and the
instance reads Unmanaged, and it is Ready again once the agent is back.

Real processes: ``vplane platform start``, ``vplane cluster start`` (its node runtime runs the agent and the
tenant's pods), the agent chart installed by the real helm, kubectl on both sides.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_agent_pods import NodeCluster, connect, platform_settings, ready_pods
from test_connected_clusters import HELM, NS, Env, eventually

from harness import Kubectl
from platformkit import Platform

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("connected-tenants")]

TENANT = "edge-tenant"
WEB_SCRIPT = (
    "import http.server, os\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = ('served ' + self.path).encode()\n"
    "        self.send_response(200); self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers(); self.wfile.write(body)\n"
    "http.server.HTTPServer((os.environ['POD_IP'], 8080), H).serve_forever()\n"
)
WEB_POD = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "python",
                    "command": ["python", "-c", WEB_SCRIPT],
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                }
            ]
        },
    }
)
TENANT_NS = f"vcluster-{TENANT}"


@pytest.fixture(scope="module")
def node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    if not HELM.exists():
        pytest.skip("helm is not installed; run scripts/bootstrap")
    cluster = NodeCluster(tmp_path_factory.mktemp("connected-tenants") / "cluster").start()
    yield cluster
    cluster.stop_leaving_nothing(within=10)


@pytest.fixture(scope="module")
def plat(
    tmp_path_factory: pytest.TempPathFactory, kubectl_path: str, node_cluster: NodeCluster
) -> Iterator[Env]:
    e = Env(
        tmp_path_factory.mktemp("connected-tenants-platform"),
        kubectl_path,
        **platform_settings(connected_tenant_requeue_seconds=0.5, tenant_readiness_period_seconds=1),
    )
    e.k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: default}\n")
    eventually(lambda: e.k.run("get", "namespace", "p-default", check=False).code == 0)
    yield e
    e.stop()


@pytest.fixture
def ck(node_cluster: NodeCluster, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, node_cluster.kubeconfig, tmp_path / "ccache")


def vci(name: str, cluster: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "management.loft.sh/v1",
            "kind": "VirtualClusterInstance",
            "metadata": {"name": name, "namespace": "p-default"},
            "spec": {
                "template": {"helmRelease": {"values": ""}},
                "networkPeer": True,
                "clusterRef": {"cluster": cluster},
            },
        }
    )


def vci_status(e: Env, name: str) -> dict[str, Any]:
    out = e.k.run("get", "vci", name, "-n", "p-default", "-o", "json", check=False)
    if out.code != 0:
        return {}
    status: dict[str, Any] = json.loads(out.stdout).get("status") or {}
    return status


def wait_vci(e: Env, name: str, phase: str, reason: str, timeout: float = 120) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    def check() -> bool:
        seen.append(vci_status(e, name))
        return (seen[-1].get("phase"), seen[-1].get("reason") or "") == (phase, reason)

    try:
        eventually(check, timeout, f"instance {name} phase={phase} reason={reason}")
    except AssertionError:
        raise AssertionError(
            f"instance {name}: wanted ({phase!r}, {reason!r}), last {seen[-1] if seen else None}\n"
            f"{e.proc.log()[-6000:]}"
        ) from None
    return seen[-1]


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def tenant_kubectl(e: Env, tmp: Path) -> Kubectl:
    return Platform(e.proc, e.k, e.home).tenant_kubectl(TENANT, None, tmp)


@pytest.mark.timeout(600)
def test_a_tenant_on_a_connected_cluster_survives_its_agent(
    plat: Env, node_cluster: NodeCluster, ck: Kubectl, tmp_path: Path
) -> None:
    """Its pods Ready on the connected cluster; kubectl through the platform works; the agent cut (scaled to
    zero) leaves the pods running and the instance Unmanaged, still reachable; the agent back makes it Ready."""
    connect(plat, node_cluster, "edge")
    plat.wait_status("edge", "Initialized", "", timeout=120)
    eventually(lambda: len(ready_pods(ck)) == 1, 60, "the agent pod Ready")

    plat.k.apply(vci(TENANT, "edge"))
    status = wait_vci(plat, TENANT, "Ready", "", timeout=180)
    assert condition(status, "VirtualClusterOnline")["status"] == "True"
    assert condition(status, "VirtualClusterDeployed")["status"] == "True"
    # Its pods are the connected cluster's: StatefulSet, Services, the files Secret and the store's claim.
    assert ready_pods(ck, "app=vcluster", TENANT_NS) == [f"{TENANT}-0"]
    sts = json.loads(ck.run("get", "statefulset", TENANT, "-n", TENANT_NS, "-o", "json").stdout)
    assert sts["metadata"]["labels"]["app"] == "vcluster"
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": f"data-{TENANT}"}
    assert volumes["platform"]["secret"]["secretName"] == f"{TENANT}-platform"
    assert f"data-{TENANT}" in ck.run("get", "pvc", "-n", TENANT_NS, "-o", "name").stdout
    # Its store is on the connected cluster's node (the claim's directory), not in the platform's data.
    claim_dir = node_cluster.node_dir / "claims" / TENANT_NS / f"data-{TENANT}"
    assert (claim_dir / "pki" / "ca.crt").exists(), list(claim_dir.iterdir())
    assert not (plat.proc.tenant_dir("default", TENANT) / "pki").exists()
    logs = ck.run("logs", "-n", TENANT_NS, f"{TENANT}-0").stdout
    assert "tenant control plane serving" in logs, logs

    tenant = tenant_kubectl(plat, tmp_path)
    tenant.run("create", "configmap", "through-the-platform")
    assert "through-the-platform" in tenant.run("get", "configmaps", "-o", "name").stdout

    # The agent cut: the cluster is offline, the instance unmanaged, its pods untouched and still reachable.
    ck.run("scale", "deployment", "loft", "-n", NS, "--replicas=0")
    plat.wait_status("edge", "", "NoOnlinePeers", timeout=60)
    status = wait_vci(plat, TENANT, "Unmanaged", "ClusterOffline", timeout=60)
    assert 'cluster "edge" is offline (NoOnlinePeers' in status["message"], status["message"]
    assert condition(status, "VirtualClusterOnline")["status"] == "False"
    assert condition(status, "VirtualClusterReady")["status"] == "Unknown"
    assert status["readyReplicas"] == 1  # the last it knew
    pod = json.loads(ck.run("get", "pod", f"{TENANT}-0", "-n", TENANT_NS, "-o", "json").stdout)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert ready_pods(ck, "app=vcluster", TENANT_NS) == [f"{TENANT}-0"]
    tenant.run("create", "configmap", "while-unmanaged")
    assert "while-unmanaged" in tenant.run("get", "configmaps", "-o", "name").stdout

    # The agent back: managed again.
    ck.run("scale", "deployment", "loft", "-n", NS, "--replicas=1")
    plat.wait_status("edge", "Initialized", "", timeout=120)
    status = wait_vci(plat, TENANT, "Ready", "", timeout=60)
    assert condition(status, "VirtualClusterOnline")["status"] == "True"
    pod = json.loads(ck.run("get", "pod", f"{TENANT}-0", "-n", TENANT_NS, "-o", "json").stdout)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0

    # Deleting the instance deletes its namespace on the connected cluster.
    plat.k.run("delete", "vci", TENANT, "-n", "p-default", "--timeout=120s")
    eventually(
        lambda: ck.run("get", "namespace", TENANT_NS, check=False).code != 0, 120, "tenant namespace gone"
    )


def test_an_instance_naming_a_missing_or_uninitialized_cluster_says_so(plat: Env) -> None:
    """No Cluster of that name: Pending with ClusterNotFound; the Cluster created but without an agent (never
    Initialized): Pending with ClusterNotInitialized and the Cluster's reason. No crash loop, nothing applied
    anywhere, and the instance can be deleted."""
    plat.k.apply(vci("nowhere", "ghost"))
    try:
        status = wait_vci(plat, "nowhere", "Pending", "ClusterNotFound", timeout=60)
        assert 'cluster "ghost" does not exist' in status["message"], status["message"]
        assert condition(status, "VirtualClusterOnline")["status"] == "False"
        plat.k.apply(
            "apiVersion: management.loft.sh/v1\nkind: Cluster\nmetadata: {name: ghost}\n"
            "spec: {networkPeer: true}\n"
        )
        plat.wait_status("ghost", "", "Offline")
        status = wait_vci(plat, "nowhere", "Pending", "ClusterNotInitialized", timeout=60)
        assert status["message"].startswith('cluster "ghost" is not initialized (Offline'), status["message"]
        assert "Traceback" not in plat.proc.log()
        plat.k.run("delete", "vci", "nowhere", "-n", "p-default", "--timeout=60s")
    finally:
        plat.k.run("delete", "vci", "nowhere", "-n", "p-default", "--timeout=60s", check=False)
        plat.k.run("delete", "cluster.management.loft.sh", "ghost", "--ignore-not-found", check=False)


@pytest.mark.timeout(600)
def test_exec_and_port_forward_to_a_tenant_on_a_connected_cluster(
    plat: Env, node_cluster: NodeCluster, ck: Kubectl, tmp_path: Path
) -> None:
    """Connection upgrades through the platform's tenant path reach a tenant on a connected cluster over the
    mesh, as they reach a local one: `kubectl exec` into a pod of the tenant (on the tenant's own node, there)
    and `kubectl port-forward` to it."""
    name = "exec-tenant"
    connect(plat, node_cluster, "edge")
    plat.wait_status("edge", "Initialized", "", timeout=120)
    plat.k.apply(vci(name, "edge"))
    try:
        wait_vci(plat, name, "Ready", "", timeout=180)
        tk = Platform(plat.proc, plat.k, plat.home).tenant_kubectl(name, None, tmp_path)
        tk.apply(WEB_POD)
        tk.run("wait", "--for=condition=Ready", "pod/web", "--timeout=120s", timeout=130)
        pod = "web"
        out = tk.run("exec", pod, "--", "sh", "-c", "echo from-exec-$((40+2))").stdout
        assert out.strip() == "from-exec-42"
        forward = tk.popen("port-forward", f"pod/{pod}", ":8080")
        try:
            assert forward.stdout is not None
            line = forward.stdout.readline()  # Forwarding from 127.0.0.1:<port> -> 8080
            assert "Forwarding from 127.0.0.1:" in line, line
            port = int(line.split("127.0.0.1:", 1)[1].split()[0])

            def served() -> bool:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/edge", timeout=30) as resp:
                        return bool(resp.read() == b"served /edge")
                except OSError:
                    return False  # the server in the pod may not listen yet

            eventually(served, 60, "a page through the port-forward")
        finally:
            forward.terminate()
            forward.communicate(timeout=30)
    finally:
        plat.k.run("delete", "vci", name, "-n", "p-default", "--timeout=120s", check=False)

"""The platform with real processes: management API, tenant clusters, access keys and identities, the mesh.

Driven with kubectl, ``vplane`` commands and a mesh node built from vplane's own client library (the same
code a tenant or agent runs), against ``vplane platform start`` and the tenant processes it starts.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from harness import Kubectl
from platformkit import (
    TWO_REPLICAS,
    Platform,
    eventually,
    start_platform,
    stop_platform,
    vci_manifest,
    wait_ready,
)
from vplane.mesh import Dialer, RegistrationError
from vplane.support import tls

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory, kubectl_path: str) -> Iterator[Platform]:
    """One platform with tenant clusters `client` and `target` in project `default`."""
    tmp = tmp_path_factory.mktemp("platform")
    p = start_platform(tmp, kubectl_path)
    for name in ("client", "target"):
        p.k.apply(vci_manifest(name))
    for name in ("client", "target"):
        wait_ready(p.k, name)
    p.vplane(
        "platform",
        "login",
        p.proc.url,
        "--access-key",
        yaml.safe_load(p.proc.kubeconfig.read_text())["users"][0]["user"]["token"],
        "--ca-file",
        str(p.proc.ca),
    )
    yield p
    stop_platform(p)


def test_vplane_create_applies_a_vcluster_yaml_and_upgrade_replaces_it(
    platform: Platform, tmp_path: Path
) -> None:
    """`vplane create NAME --driver platform --project P -f vcluster.yaml` makes the VirtualClusterInstance
    with those values; run again it refuses without --upgrade; --upgrade gives it new values (how an
    operator "applies the updated vcluster.yaml"); values the platform refuses are reported with the
    field and change nothing; a missing project is named."""
    k = platform.k

    def values() -> str:
        return k.run(
            "get", "vci", "made", "-n", "p-default", "-o", "jsonpath={.spec.template.helmRelease.values}"
        ).stdout

    first, second, bad = tmp_path / "first.yaml", tmp_path / "second.yaml", tmp_path / "bad.yaml"
    first.write_text("# mine\ncontrolPlane:\n  statefulSet:\n    highAvailability: {replicas: 1}\n")
    second.write_text("sync:\n  toHost:\n    pods: {enabled: true}\n")
    bad.write_text(
        "experimental:\n  proxy:\n    customResources:\n"
        "      myresources.example.com/v1: {enabled: true, accessResources: some, targetVirtualCluster: {name: t}}\n"
    )
    create = ("create", "made", "--driver", "platform", "--project", "default")
    try:
        out = platform.vplane(*create, "-f", str(first)).stdout
        assert 'tenant cluster "made" created in project "default"' in out
        assert "vplane connect made --project default" in out
        assert values() == first.read_text()  # as written, comment included
        again = platform.vplane(*create, "-f", str(second), check=False)
        assert again.returncode == 1
        assert 'already exists in project "default": use --upgrade' in again.stderr
        assert values() == first.read_text()

        out = platform.vplane(*create, "--upgrade", "-f", str(first), "-f", str(second)).stdout
        assert "upgraded" in out
        assert yaml.safe_load(values()) == {
            "controlPlane": {"statefulSet": {"highAvailability": {"replicas": 1}}},
            "sync": {"toHost": {"pods": {"enabled": True}}},
        }
        before = values()
        refused = platform.vplane(*create, "--upgrade", "-f", str(bad), check=False)
        assert refused.returncode == 1
        assert "answered 422" in refused.stderr
        assert (
            "experimental.proxy.customResources['myresources.example.com/v1'].accessResources"
            in refused.stderr
        )
        assert values() == before

        missing = platform.vplane("create", "x", "--project", "nope", "-f", str(first), check=False)
        assert missing.returncode == 1 and 'project "nope" not found' in missing.stderr
    finally:
        k.run("delete", "vci", "made", "-n", "p-default", "--ignore-not-found", "--wait=false")


def test_derp_probe_answers_200_without_credentials(platform: Platform) -> None:
    """`GET /derp/probe` answers 200, as the agent and the runbook's curl check expect."""
    import urllib.request

    ctx = tls.client_context(platform.proc.ca.read_bytes())
    with urllib.request.urlopen(f"{platform.proc.url}/derp/probe", context=ctx, timeout=10) as resp:
        assert resp.status == 200


def test_projects_own_their_namespaces(platform: Platform) -> None:
    """A Project gets namespace p-<name>; deleting the project removes it."""
    k = platform.k
    k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: demo}\n")
    eventually(lambda: k.run("get", "namespace", "p-demo", check=False).code == 0)
    assert (
        k.run("get", "namespace", "p-demo", "-o", "jsonpath={.metadata.labels.loft\\.sh/project}").stdout
        == "demo"
    )
    assert k.run("get", "project", "demo", "-o", "jsonpath={.status.namespace}").stdout == "p-demo"
    k.run("delete", "project", "demo")
    eventually(lambda: k.run("get", "namespace", "p-demo", check=False).code != 0)


def test_management_api_is_also_served_under_kubernetes_management(platform: Platform) -> None:
    """The management API answers under /kubernetes/management too (upstream's platform path)."""
    out = json.loads(
        platform.k.run("get", "--raw", "/kubernetes/management/apis/management.loft.sh/v1/projects").stdout
    )
    assert "default" in [p["metadata"]["name"] for p in out["items"]]


def test_tenant_clusters_serve_through_the_platform_and_vplane_connect(
    platform: Platform, tmp_path: Path
) -> None:
    """`vplane connect <tenant> --driver platform --project <p> -- kubectl ...` runs against the tenant."""
    result = platform.vplane(
        "connect",
        "target",
        "--driver",
        "platform",
        "--project",
        "default",
        "--",
        platform.k.binary,
        "create",
        "configmap",
        "from-connect",
        "--from-literal=a=b",
    )
    assert "configmap/from-connect created" in result.stdout
    tk = platform.tenant_kubectl("target", None, tmp_path)
    assert "from-connect" in tk.run("get", "configmaps").stdout
    ck = platform.tenant_kubectl("client", None, tmp_path)
    assert "from-connect" not in ck.run("get", "configmaps").stdout, "tenants have separate stores"
    who = tk.run("auth", "whoami").stdout
    assert "admin" in who and "loft:admins" in who


def test_platform_connect_management_adds_a_context(platform: Platform, tmp_path: Path) -> None:
    """`vplane platform connect management` writes a context for the management API and switches to it."""
    kubeconfig = tmp_path / "config"
    out = platform.vplane("platform", "connect", "management", "--kubeconfig", str(kubeconfig)).stdout
    assert 'Switched to context "vplane_management"' in out
    k = Kubectl(platform.k.binary, kubeconfig, tmp_path / "cache")
    assert "client" in k.run("get", "virtualclusterinstances", "-n", "p-default").stdout


def test_invalid_tenant_config_is_rejected_with_its_path(platform: Platform) -> None:
    """A VirtualClusterInstance whose vcluster.yaml does not validate is refused (422) and names the field."""
    bad = vci_manifest("bad", "controlPlane:\n  statefulSet:\n    highAvailability:\n      replicas: zero\n")
    result = platform.k.fails("apply", "-f", "-", input=bad)
    assert "is invalid" in result.stderr
    assert (
        "spec.template.helmRelease.values[controlPlane.statefulSet.highAvailability.replicas]"
        in result.stderr
    )


def test_cluster_needs_a_connection_mode_and_only_one_local(platform: Platform) -> None:
    """Cluster creation without config, local or networkPeer is rejected; so is a second local cluster."""
    k = platform.k
    r = k.fails(
        "apply",
        "-f",
        "-",
        input="apiVersion: management.loft.sh/v1\nkind: Cluster\nmetadata: {name: nomode}\nspec: {}\n",
    )
    assert "one of spec.config, spec.local or spec.networkPeer must be set" in r.stderr
    k.apply("apiVersion: management.loft.sh/v1\nkind: Cluster\nmetadata: {name: loc1}\nspec: {local: true}\n")
    r = k.fails(
        "apply",
        "-f",
        "-",
        input="apiVersion: management.loft.sh/v1\nkind: Cluster\nmetadata: {name: loc2}\nspec: {local: true}\n",
    )
    assert 'only one cluster may have spec.local set; cluster "loc1" already does' in r.stderr


def test_platform_rbac_use_verb_on_virtualclusterinstances(platform: Platform) -> None:
    """The runbook's `kubectl auth can-i use virtualclusterinstances...` check, before and after granting it."""
    k = platform.k
    args = ("auth", "can-i", "use", "virtualclusterinstances.management.loft.sh/target", "-n", "p-default")
    assert k.run(*args).stdout.strip() == "yes"
    denied = k.run(*args, "--as=loft:vcluster:p-default:client", check=False)
    assert denied.stdout.strip() == "no"
    k.apply("""apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: vcluster-proxy-target-access, namespace: p-default}
rules: [{apiGroups: [management.loft.sh], resources: [virtualclusterinstances], resourceNames: [target], verbs: [use]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: vcluster-proxy-target-access, namespace: p-default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: vcluster-proxy-target-access}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "loft:vcluster:p-default:client"}]
""")
    assert k.run(*args, "--as=loft:vcluster:p-default:client").stdout.strip() == "yes"


def test_tenant_accepts_a_platform_access_key_as_its_identity(platform: Platform, tmp_path: Path) -> None:
    """A tenant-cluster key works as a bearer token on a peer tenant: identity loft:vcluster:<ns>:<name>,
    authorized by the peer's own RBAC; a bad key gets 401 `auth failed`; a disabled key stops working."""
    key = platform.access_key("client")
    assert key == platform.access_key("client"), "fetching the key again reuses it"
    as_client = platform.tenant_kubectl("target", key, tmp_path)
    who = as_client.run("auth", "whoami").stdout
    assert "loft:vcluster:p-default:client" in who
    admin = platform.tenant_kubectl("target", None, tmp_path)
    assert (
        admin.run(
            "auth", "can-i", "create", "configmaps", "--as=loft:vcluster:p-default:client", check=False
        ).stdout.strip()
        == "no"
    )
    assert "forbidden" in as_client.fails("create", "configmap", "nope").stderr
    admin.run(
        "create",
        "clusterrolebinding",
        "client-edit",
        "--clusterrole=edit",
        "--user=loft:vcluster:p-default:client",
    )
    eventually(lambda: as_client.run("create", "configmap", "by-client", check=False).code == 0, timeout=10)
    bad = platform.tenant_kubectl("target", "not-a-key", tmp_path)
    assert "error: You must be logged in to the server" in bad.fails("get", "configmaps").stderr
    raw = bad.run("get", "--raw", "/api/v1/namespaces", check=False)
    assert "error: You must be logged in to the server (auth failed)" in raw.stderr
    key_name = platform.k.run(
        "get",
        "accesskeys",
        "-l",
        "loft.sh/virtualcluster-instance=client,loft.sh/project-namespace=p-default",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ).stdout
    platform.k.run("patch", "accesskey", key_name, "--type=merge", "-p", '{"spec":{"disabled":true}}')
    try:
        eventually(lambda: as_client.run("get", "configmaps", check=False).code != 0, timeout=10)
        assert "You must be logged in to the server" in as_client.fails("get", "configmaps").stderr
    finally:
        platform.k.run("patch", "accesskey", key_name, "--type=merge", "-p", '{"spec":{"disabled":false}}')


async def test_registration_rejections_have_the_documented_text(platform: Platform) -> None:
    """Registering with an empty, unknown, disabled or expired key fails with the documented reason."""
    k = platform.k
    k.apply("""apiVersion: management.loft.sh/v1
kind: AccessKey
metadata: {name: reg-disabled}
spec: {type: VirtualCluster, subject: "loft:vcluster:p-default:x", key: disabled-key-123, disabled: true, scope: {roles: [{role: vcluster}]}}
---
apiVersion: management.loft.sh/v1
kind: AccessKey
metadata: {name: reg-expiring}
spec: {type: VirtualCluster, subject: "loft:vcluster:p-default:y", key: expiring-key-123, ttl: 1, scope: {roles: [{role: vcluster}]}}
""")
    await asyncio.sleep(2.1)
    for key, text in (
        ("", "no auth key provided"),
        ("nobody-has-this-key", "invalid access key: not found"),
        ("disabled-key-123", "invalid access key: disabled"),
        ("expiring-key-123", "invalid access key: expired"),
    ):
        node = platform.node(key, "reg-test")
        await node.start()
        with pytest.raises(RegistrationError) as err:
            async with asyncio.timeout(15):
                await node.wait_ready()
        assert text in str(err.value)
        await node.close()


async def _get_version_over_mesh(platform: Platform, environ: dict[str, str]) -> tuple[str, dict[str, str]]:
    node = platform.node(platform.access_key("client"), f"probe-{len(environ)}", environ)
    await node.start()
    try:
        async with asyncio.timeout(15):
            netmap = await node.wait_ready()
        targets = [p for p in netmap.peers.values() if p.labels.get("vplane.io/tenant") == "target"]
        assert targets, f"no target peer in {netmap.peers}"
        dialer = Dialer(node, platform.mesh_settings(), environ=environ)
        async with (
            aiohttp.ClientSession(connector=dialer.connector()) as http,
            http.get(f"http://{targets[0].id}/version") as resp,
        ):
            assert resp.status == 200
            version = await resp.json()
        assert sum(dialer.paths_used.values()) >= 1
        path = next(iter(k for k, v in dialer.paths_used.items() if v))
        return path, version
    finally:
        await node.close()


async def test_dial_prefers_the_direct_path(platform: Platform) -> None:
    """A peer dial tries the node's direct endpoint first; with it reachable, traffic goes direct."""
    path, version = await _get_version_over_mesh(platform, {})
    assert path == "direct"
    assert version["gitVersion"].startswith("v1.")


async def test_relay_carries_traffic_when_direct_dialing_is_disabled(platform: Platform) -> None:
    """With TS_DEBUG_DIAL_DIRECT=false the same request goes through the platform relay."""
    path, version = await _get_version_over_mesh(platform, {"TS_DEBUG_DIAL_DIRECT": "false"})
    assert path == "relay"
    assert version["gitVersion"].startswith("v1.")


async def test_tenant_restart_publishes_new_peers(platform: Platform) -> None:
    """When a tenant replica restarts, subscribers see its peer leave and come back in pushed netmaps."""
    node = platform.node(platform.access_key("client"), "watcher")
    await node.start()
    try:
        async with asyncio.timeout(15):
            await node.wait_ready()
        target_ids = {p.id for p in node.peers.values() if p.labels.get("vplane.io/tenant") == "target"}
        assert target_ids
        seen: list[set[str]] = []

        async def follow() -> None:
            async for netmap in node.subscribe():
                seen.append(
                    {p.id for p in netmap.peers.values() if p.labels.get("vplane.io/tenant") == "target"}
                )
                if len(seen) >= 2 and not seen[-2] & target_ids and seen[-1] >= target_ids:
                    return

        follower = asyncio.create_task(follow())
        pid = int((platform.proc.tenant_dir("default", "target") / "replica-0.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        async with asyncio.timeout(60):
            await follower
        assert any(not ids & target_ids for ids in seen), "the peer left the netmap"
        assert seen[-1] >= target_ids, "the restarted replica is back"
    finally:
        await node.close()
    wait_ready(platform.k, "target")


def test_replicas_share_one_store_and_elect_one_leader(platform: Platform, tmp_path: Path) -> None:
    """A tenant with two replicas: writes through one are read through the other; one Lease holder."""
    k = platform.k
    k.apply(vci_manifest("ha", TWO_REPLICAS))
    wait_ready(k, "ha")
    assert (
        k.run("get", "vci", "ha", "-n", "p-default", "-o", "jsonpath={.status.readyReplicas}").stdout == "2"
    )
    directory = platform.proc.tenant_dir("default", "ha")
    r0 = Kubectl(k.binary, directory / "kubeconfig-0.yaml", tmp_path / "c0")
    r1 = Kubectl(k.binary, directory / "kubeconfig-1.yaml", tmp_path / "c1")
    assert (
        r0.run("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}").stdout
        != r1.run("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}").stdout
    )
    r0.run("create", "configmap", "shared", "--from-literal=a=b")
    eventually(lambda: r1.run("get", "configmap", "shared", check=False).code == 0, timeout=10)
    eventually(
        lambda: (
            r1.run(
                "get",
                "lease",
                "-n",
                "kube-system",
                "vcluster-ha-controller",
                "-o",
                "jsonpath={.spec.holderIdentity}",
                check=False,
            ).stdout
            in ("ha-0", "ha-1")
        ),
        timeout=60,
    )
    peers = json.loads(k.run("get", "networkpeers", "-o", "json").stdout)["items"]
    ha_peers = [p for p in peers if p["metadata"]["labels"].get("vplane.io/tenant") == "ha"]
    assert len(ha_peers) == 2 and all(p["status"]["online"] for p in ha_peers)
    k.run("delete", "vci", "ha", "-n", "p-default", "--timeout=60s")
    eventually(lambda: not directory.exists(), timeout=30)


def test_platform_restart_lets_every_node_reconnect(tmp_path: Path, kubectl_path: str) -> None:
    """Kill the platform; tenants keep running; the restarted platform adopts them and their mesh sessions
    reconnect by themselves (NetworkPeers online again, owned by the new platform instance)."""
    p = start_platform(tmp_path, kubectl_path, "restart")
    try:
        p.k.apply(vci_manifest("solo"))
        wait_ready(p.k, "solo")

        def peers() -> list[dict[str, object]]:
            items: list[dict[str, object]] = json.loads(p.k.run("get", "networkpeers", "-o", "json").stdout)[
                "items"
            ]
            return items

        eventually(lambda: len(peers()) == 1)
        before = peers()[0]
        pid = int((p.proc.tenant_dir("default", "solo") / "replica-0.pid").read_text())
        p.proc.kill()
        os.kill(pid, 0)  # the tenant survived the platform
        p.proc.start()
        eventually(lambda: p.k.run("get", "--raw", "/readyz", check=False).code == 0)

        def reconnected() -> bool:
            items = peers()
            if len(items) != 1:
                return False
            annotations = items[0]["metadata"]["annotations"]  # type: ignore[index]
            return (
                bool(items[0]["status"]["online"])
                and annotations["loft.sh/coordinator-instance-id"]
                != before["metadata"]["annotations"]["loft.sh/coordinator-instance-id"]
            )  # type: ignore[index]

        eventually(reconnected, timeout=60)
        os.kill(pid, 0)  # adopted, not replaced
        assert int((p.proc.tenant_dir("default", "solo") / "replica-0.pid").read_text()) == pid
        wait_ready(p.k, "solo")
    finally:
        stop_platform(p)


def test_cluster_accesskey_subresource(platform: Platform) -> None:
    """`clusters/<name>/accesskey` returns an agent key, the platform host and its CA; fetching again reuses it."""
    k = platform.k
    k.apply(
        "apiVersion: management.loft.sh/v1\nkind: Cluster\nmetadata: {name: edge}\nspec: {networkPeer: true, managementNamespace: vplane-platform}\n"
    )
    first = json.loads(k.run("get", "--raw", "/apis/management.loft.sh/v1/clusters/edge/accesskey").stdout)
    again = json.loads(
        k.run(
            "get", "--raw", "/kubernetes/management/apis/management.loft.sh/v1/clusters/edge/accesskey"
        ).stdout
    )
    assert first["kind"] == "ClusterAccessKey" and first["accessKey"] == again["accessKey"]
    assert first["loftHost"] == platform.proc.url.removeprefix("https://")
    assert first["caCert"].startswith("-----BEGIN CERTIFICATE-----")
    assert (
        k.run("get", "accesskey", "cluster-edge", "-o", "jsonpath={.spec.subject}").stdout
        == "loft:cluster:edge"
    )


def test_platform_users_authenticate_with_their_access_keys(platform: Platform, tmp_path: Path) -> None:
    """A User's access key is a bearer token for the management API; platform RBAC decides what it may do;
    an expired user key stops working."""
    k = platform.k
    k.apply("""apiVersion: management.loft.sh/v1
kind: User
metadata: {name: alice}
spec: {username: alice, groups: [devs]}
---
apiVersion: management.loft.sh/v1
kind: AccessKey
metadata: {name: alice-key}
spec: {type: User, user: alice, key: alice-secret-key-0001}
""")
    doc = yaml.safe_load(platform.proc.kubeconfig.read_text())
    doc["users"][0]["user"] = {"token": "alice-secret-key-0001"}
    path = tmp_path / "alice.yaml"
    path.write_text(yaml.safe_dump(doc))
    alice = Kubectl(k.binary, path, tmp_path / "alice-cache")
    who = alice.run("auth", "whoami").stdout
    assert "alice" in who and "devs" in who and "loft:users" in who
    assert "forbidden" in alice.fails("get", "projects").stderr
    k.run(
        "create", "clusterrole", "project-viewer", "--verb=get,list", "--resource=projects.management.loft.sh"
    )
    k.run(
        "create", "clusterrolebinding", "devs-view-projects", "--clusterrole=project-viewer", "--group=devs"
    )
    assert "default" in alice.run("get", "projects").stdout
    k.run("patch", "accesskey", "alice-key", "--type=merge", "-p", '{"spec":{"ttl":1}}')
    time.sleep(1.5)
    assert "You must be logged in to the server" in alice.fails("get", "projects").stderr


async def test_network_peers_reflect_nodes_online_and_last_seen(platform: Platform) -> None:
    """A node's NetworkPeer is online while its session is up, and records lastSeen when it goes away."""
    platform.k.apply("""apiVersion: management.loft.sh/v1
kind: AccessKey
metadata: {name: peer-probe}
spec: {type: VirtualCluster, subject: "loft:vcluster:p-default:peer-probe", key: peer-probe-key-0001, scope: {roles: [{role: vcluster}]}}
""")
    node = platform.node("peer-probe-key-0001", "peer-probe-host")
    await node.start()
    async with asyncio.timeout(15):
        await node.wait_ready()
    node_id = node.node_id
    assert node_id

    def peer() -> dict[str, object] | None:
        result = platform.k.run("get", "networkpeer", node_id, "-o", "json", check=False)
        return json.loads(result.stdout) if result.code == 0 else None

    await asyncio.to_thread(eventually, lambda: (peer() or {}).get("status", {}).get("online") is True)  # type: ignore[union-attr]
    online = peer()
    assert online is not None
    annotations = online["metadata"]["annotations"]  # type: ignore[index]
    assert annotations["loft.sh/coordinator-instance-id"]
    assert "lastSeen" not in online["status"]  # type: ignore[operator]
    await node.close()
    await asyncio.to_thread(eventually, lambda: (peer() or {}).get("status", {}).get("online") is False)  # type: ignore[union-attr]
    offline = peer()
    assert offline is not None
    assert offline["status"]["lastSeen"].endswith("Z")  # type: ignore[index]


def test_a_tenant_cluster_runs_its_controllers_and_scheduler(platform: Platform, tmp_path: Path) -> None:
    """The leader replica runs the controller manager and the scheduler, as a standard cluster does: a
    Deployment makes a ReplicaSet and pods, a ServiceAccount `default` appears in a new namespace, and
    with no node to run on (``tenant_node`` off, as the tests' platforms have it) the pods stay Pending with
    the scheduler's reason."""
    tk = platform.tenant_kubectl("target", None, tmp_path)
    tk.run("create", "namespace", "work")
    eventually(lambda: tk.run("get", "serviceaccount", "default", "-n", "work", check=False).code == 0)
    tk.run("create", "deployment", "web", "--image=busybox", "--replicas=2", "-n", "work")
    eventually(
        lambda: (
            tk.run("get", "deployment", "web", "-n", "work", "-o", "jsonpath={.status.replicas}").stdout
            == "2"
        )
    )
    assert len(tk.run("get", "replicasets", "-n", "work", "-l", "app=web", "-o", "name").stdout.split()) == 1
    pods = json.loads(tk.run("get", "pods", "-n", "work", "-l", "app=web", "-o", "json").stdout)["items"]
    assert len(pods) == 2 and all(p["status"]["phase"] == "Pending" for p in pods)
    eventually(
        lambda: (
            "no nodes available to schedule pods"
            in tk.run("get", "events", "-n", "work", "--field-selector", "reason=FailedScheduling").stdout
        )
    )
    tk.run("delete", "namespace", "work", "--wait=false")

"""Issue 11 item 6: what an instance on a connected cluster says (vplane.platform.clusters.tenantstatus), and
what the platform applies there (vplane.platform.clusters.tenants), pure."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from vplane.mesh.coordinator import NodeInfo
from vplane.platform.clusters import tenantstatus as ts
from vplane.platform.clusters.tenants import mesh_nodes, remote_args, remote_manifests
from vplane.platform.placement import TenantSpec
from vplane.platform.settings import PlatformSettings
from vplane.platform.tenantpods import PodParams


def instance(cluster: str = "edge", deployed: str = "", namespace: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "t", "namespace": "p-default"}
    if deployed:
        meta["annotations"] = {ts.DEPLOYED_ANNOTATION: deployed}
    ref = {"cluster": cluster, **({"namespace": namespace} if namespace else {})}
    return {"metadata": meta, "spec": {"clusterRef": ref} if cluster else {}}


def cluster(phase: str = "Initialized", reason: str = "", message: str = "", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "edge"},
        "spec": {"networkPeer": True, **spec},
        "status": {"phase": phase, "reason": reason, "message": message},
    }


def test_no_cluster_ref_is_the_platforms_own_placement() -> None:
    assert ts.route(instance(cluster=""), None).kind == "local"


def test_the_local_cluster_is_the_platforms_own_placement() -> None:
    assert ts.route(instance(), cluster(local=True)).kind == "local"


def test_an_initialized_cluster_runs_it() -> None:
    route = ts.route(instance(namespace="custom"), cluster(reason="NotReady"))
    assert (route.kind, route.cluster, route.namespace) == ("connected", "edge", "custom")


def test_a_missing_cluster_is_pending_with_a_clear_message() -> None:
    route = ts.route(instance(), None)
    assert (route.kind, route.phase, route.reason) == ("wait", "Pending", "ClusterNotFound")
    assert 'cluster "edge" does not exist' in route.message
    assert "vplane platform connect cluster edge" in route.message


def test_a_cluster_being_deleted_counts_as_missing() -> None:
    doomed = cluster()
    doomed["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert ts.route(instance(), doomed).reason == "ClusterNotFound"


def test_a_cluster_not_initialized_yet_is_pending_with_its_reason() -> None:
    route = ts.route(instance(), cluster(phase="", reason="Offline"))
    assert (route.kind, route.phase, route.reason) == ("wait", "Pending", "ClusterNotInitialized")
    assert "(Offline)" in route.message
    blank = ts.route(instance(), cluster(phase=""))
    assert "(initializing)" in blank.message


def test_a_deployed_instance_on_an_offline_cluster_is_unmanaged() -> None:
    route = ts.route(
        instance(deployed="edge"), cluster(phase="", reason="NoOnlinePeers", message="none answer")
    )
    assert (route.kind, route.phase, route.reason) == ("unmanaged", "Unmanaged", "ClusterOffline")
    assert route.message.startswith('cluster "edge" is offline (NoOnlinePeers: none answer)')
    assert "keep running" in route.message


def test_a_deployed_instance_on_a_failed_cluster_is_unmanaged() -> None:
    route = ts.route(instance(deployed="edge"), cluster(phase="Failed", reason="LocalClient"))
    assert (route.kind, route.reason) == ("unmanaged", "ClusterOffline")
    # Reachable but stuck (a bridge that never came online): not offline, which would point at the tunnel.
    stuck = ts.route(
        instance(deployed="edge"), cluster(phase="Failed", reason="DeployProxyOnlyAgent", message="bad image")
    )
    assert (stuck.kind, stuck.phase, stuck.reason) == ("unmanaged", "Unmanaged", "ClusterNotInitialized")
    assert stuck.message.startswith('cluster "edge" is not initialized (DeployProxyOnlyAgent: bad image)')


def test_a_deployed_instance_whose_cluster_is_gone_is_unmanaged_not_found() -> None:
    route = ts.route(instance(deployed="edge"), None)
    assert (route.kind, route.phase, route.reason) == ("unmanaged", "Unmanaged", "ClusterNotFound")


def test_moving_a_deployed_instance_is_refused() -> None:
    route = ts.route(instance(cluster="other", deployed="edge"), cluster())
    assert (route.kind, route.phase, route.reason) == ("failed", "Failed", "ClusterRefChanged")
    assert route.cluster == "edge"
    back = ts.route(instance(cluster="", deployed="edge"), cluster())
    assert back.reason == "ClusterRefChanged" and "the platform" in back.message


def test_conditions_keep_their_transition_time_while_unchanged() -> None:
    first = ts.conditions([], {ts.ONLINE: ("True", "", "")}, "T1")
    assert first == [
        {"type": ts.ONLINE, "status": "True", "lastTransitionTime": "T1", "reason": "", "message": ""}
    ]
    same = ts.conditions(first, {ts.ONLINE: ("True", "", "")}, "T2")
    assert same[0]["lastTransitionTime"] == "T1"
    offline = ts.conditions(same, {ts.ONLINE: ("False", "ClusterOffline", "gone")}, "T3")
    assert (offline[0]["status"], offline[0]["lastTransitionTime"], offline[0]["reason"]) == (
        "False",
        "T3",
        "ClusterOffline",
    )
    # Other conditions are kept as they were.
    both = ts.conditions([{"type": "Other", "status": "True"}], {ts.ONLINE: ("True", "", "")}, "T4")
    assert [c["type"] for c in both] == ["Other", ts.ONLINE]


def test_condition_updates_per_route() -> None:
    assert ts.condition_updates(ts.Route("local")) == {}
    connected = ts.condition_updates(ts.Route("connected", "edge"))
    assert connected[ts.ONLINE][0] == "True" and connected[ts.DEPLOYED][0] == "True"
    lost = ts.condition_updates(ts.unmanaged("edge", "", "gone"))
    assert lost[ts.ONLINE][:2] == ("False", "ClusterOffline")
    assert lost[ts.READY][0] == "Unknown"
    waiting = ts.condition_updates(ts.route(instance(), None))
    assert waiting == {ts.ONLINE: ("False", "ClusterNotFound", waiting[ts.ONLINE][2])}


# -- what is applied on the connected cluster -------------------------------------------------------


SPEC = TenantSpec("default", "p-default", "t", 2, "key-123", "x: 1\n", cluster="edge")


def params(args: list[str]) -> PodParams:
    return PodParams(image="img", port=9443, service_port=443, directory="", args=tuple(args))


def test_remote_args_read_files_from_the_secret_volume_and_data_from_the_claim() -> None:
    args = remote_args(SPEC, PlatformSettings(data_dir=Path("/nonexistent")), 9443, "https://platform:8443")
    joined = " ".join(args)
    assert "--data-dir $(VPLANE_MOUNT_DATA)" in joined
    assert "--access-key-file $(VPLANE_MOUNT_PLATFORM)/access-key" in joined
    assert "config_file=$(VPLANE_MOUNT_PLATFORM)/vcluster.yaml" in joined
    assert "--platform-ca $(VPLANE_MOUNT_PLATFORM)/platform-ca.crt" in joined
    assert "--listen $(POD_IP):9443" in joined and "--platform-url https://platform:8443" in joined


def test_remote_manifests_use_a_claim_and_a_secret_in_the_chosen_namespace() -> None:
    ns, objects = remote_manifests(SPEC, params(["tenant", "start"]), "custom", b"CA", "1Gi")
    assert ns["metadata"]["name"] == "custom"
    assert ns["metadata"]["annotations"]["vplane.io/tenant"] == "p-default/t"
    kinds = [o["kind"] for o in objects]
    assert kinds == ["Secret", "PersistentVolumeClaim", "Service", "Service", "StatefulSet"]
    assert all(o["metadata"]["namespace"] == "custom" for o in objects)
    secret = objects[0]
    assert {k: base64.b64decode(v) for k, v in secret["data"].items()} == {
        "access-key": b"key-123",
        "vcluster.yaml": b"x: 1\n",
        "platform-ca.crt": b"CA",
    }
    assert objects[1]["spec"]["resources"]["requests"]["storage"] == "1Gi"
    pod = objects[-1]["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["data", "platform"]
    assert "hostPath" not in str(pod)
    assert objects[-1]["spec"]["replicas"] == 2


def node(
    node_id: str, tenant: str, project: str, replica: str, online: bool = True, at: float = 1.0
) -> NodeInfo:
    return NodeInfo(
        node_id,
        f"n-{node_id}",
        "loft:vcluster",
        "vcluster",
        {"vplane.io/tenant": tenant, "vplane.io/project": project, "replica": replica},
        (),
        online,
        0.0,
        at,
        "c",
    )


def test_mesh_nodes_are_the_tenants_online_replicas_newest_first() -> None:
    nodes = [
        node("a", "t", "default", "0", at=1.0),
        node("b", "t", "default", "0", at=2.0),  # the same replica reconnected
        node("c", "t", "default", "1", online=False),
        node("d", "t", "other", "1"),
        node("e", "u", "default", "1"),
        node("f", "t", "default", "x"),
    ]
    assert mesh_nodes(nodes, "t", "default") == {0: "b"}


def test_an_unmanaged_instance_is_adopted_with_the_replicas_holding_a_mesh_session(tmp_path: Path) -> None:
    """After a platform restart, the tenant path reaches an instance whose cluster is away through the
    replicas' own mesh sessions; a tenant already placed keeps what it knows."""
    import asyncio

    from vplane.platform.clusters.tenants import ConnectedTenants

    nodes = [node("a", "t", "default", "0"), node("b", "t", "default", "1", online=False)]
    connected = ConnectedTenants(
        PlatformSettings(data_dir=tmp_path),
        access=None,  # type: ignore[arg-type]  # never reached: adopt does not call the cluster
        nodes=lambda: nodes,
        platform_url="https://platform",
        platform_ca=tmp_path / "ca.crt",
        changed=asyncio.Event(),
    )
    connected.adopt(TenantSpec("default", "p-default", "t", 2, "", ""))
    tenant = connected.get("p-default", "t")
    assert tenant is not None
    assert [(r.index, r.ready) for r in tenant.replicas.values()] == [(0, True)]
    assert connected.node_for("p-default", "t", 0) == "a"
    assert connected.node_for("p-default", "t", 1) is None
    connected.adopt(TenantSpec("default", "p-default", "t", 2, "", ""))
    assert connected.get("p-default", "t") is tenant


def test_remote_args_give_the_tenants_node_its_own_ranges() -> None:
    from vplane.platform.tenantnet import TenantNetwork

    network = TenantNetwork(pod_cidr="127.16.16.0/20", service_cidr="127.112.16.0/20")
    args = remote_args(SPEC, PlatformSettings(data_dir=Path("/nonexistent")), 9443, "https://p:8443", network)
    joined = " ".join(args)
    assert "node_pod_cidr=127.16.16.0/20" in joined
    assert "service_cluster_ip_range=127.112.16.0/20" in joined

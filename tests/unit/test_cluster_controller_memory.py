"""What the Cluster loop remembers between passes: its own UID record until the informer delivers it, the
precondition of the status write after its own patch, and forgetting a deleted Cluster everywhere.

The management API is a fake that records patches (pure memory decisions; the loop against a real platform
is in ``tests/integration/test_connected_clusters.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from vplane.controllers.client import Resource
from vplane.kube import errors
from vplane.kube.objects import Obj
from vplane.platform.clusters import status as st
from vplane.platform.clusters.controller import ClusterController, ClusterDeps
from vplane.platform.clusters.release import ReleaseChange
from vplane.platform.clusters.upgrade import UpgradeBridge
from vplane.platform.settings import PlatformSettings


class FakeManagement:
    """The Cluster at ``version`` (a patch on another version is a conflict, as the API server's), the
    objects ``get`` finds, and what was deleted."""

    def __init__(self) -> None:
        self.version = 10
        self.patches: list[tuple[str, Obj, str | None]] = []
        self.conflict = False
        self.objects: dict[tuple[str, str], Obj] = {}
        self.deleted: list[tuple[str, str, str | None]] = []

    async def patch(
        self, resource: Resource, name: str, patch: Obj, *, subresource: str | None = None, **_: Any
    ) -> Obj:
        self.patches.append((name, patch, subresource))
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if self.conflict or (wanted is not None and wanted != str(self.version)):
            raise errors.conflict("clusters", name, "management.loft.sh")
        self.version += 1
        return {"metadata": {"name": name, "resourceVersion": str(self.version)}}

    async def get(self, resource: Resource, name: str, **_: Any) -> Obj:
        found = self.objects.get((resource.plural, name))
        if found is None:
            raise errors.not_found(resource.plural, name)
        return found

    async def delete(
        self, resource: Resource, name: str, *, precondition_uid: str | None = None, **_: Any
    ) -> None:
        self.deleted.append((resource.plural, name, precondition_uid))


class RecordingApplier:
    def __init__(self) -> None:
        self.forgotten: list[str] = []

    async def apply(self, change: ReleaseChange) -> None:
        raise AssertionError("not applied in these tests")

    async def settle(self, change: ReleaseChange) -> None:
        return None

    def forget(self, cluster: str) -> None:
        self.forgotten.append(cluster)


def make(tmp_path: Path, applier: Any = None) -> tuple[ClusterController, FakeManagement]:
    management = FakeManagement()
    deps = ClusterDeps(
        management=cast(Any, management),
        settings=PlatformSettings(data_dir=tmp_path),
        local=cast(Any, None),
        gateway=cast(Any, None),
        nodes=list,
        platform_url="https://platform:8443",
        ca_pem=b"",
        agent_key=cast(Any, None),
        local_kubeconfig=tmp_path / "kubeconfig",
        version="0.0.0",
        data_dir=tmp_path,
    )
    if applier is None:
        return ClusterController(deps), management
    return ClusterController(deps, apply_release=applier), management


def cluster(version: str, uid: str = "", status: Obj | None = None) -> Obj:
    annotations = {st.CLUSTER_UID_ANNOTATION: uid} if uid else {}
    return {
        "metadata": {"name": "c1", "resourceVersion": version, "annotations": annotations},
        "spec": {"networkPeer": True},
        "status": status or {},
    }


async def test_own_record_stands_in_until_the_informer_delivers_it_then_the_annotation_rules(
    tmp_path: Path,
) -> None:
    controller, management = make(tmp_path)
    assert await controller._claim_uid("c1", cluster("10"), "uid-a") is None
    assert management.patches[0][1] == {
        "metadata": {"annotations": {st.CLUSTER_UID_ANNOTATION: "uid-a"}, "resourceVersion": "10"}
    }
    # The informer still holds version 10 (no annotation): the memory is the record.
    assert controller._recorded_uid(cluster("10")) == "uid-a"
    # It delivered the patch (version 11): the annotation is the record ...
    assert controller._recorded_uid(cluster("11", "uid-a")) == "uid-a"
    # ... so a user removing it later clears the record (before: the memory kept it for the process's life).
    assert controller._recorded_uid(cluster("12")) == ""
    # A different recorded UID still fails the gate.
    failure = await controller._claim_uid("c1", cluster("12", "uid-a"), "uid-b")
    assert failure is not None and failure.reason == st.CLUSTER_UID


async def test_the_uid_record_is_written_on_the_version_the_pass_read(tmp_path: Path) -> None:
    """The Cluster changed since the pass read it (another replica's status, an edited spec): the record is
    refused and the pass ends silently, rather than its later status write overwriting that change."""
    controller, management = make(tmp_path)
    management.version = 12
    assert await controller._claim_uid("c1", cluster("10"), "uid-a") is st.SILENT
    assert controller._recorded_uid(cluster("10")) == ""  # nothing recorded
    assert await controller._write(cluster("10"), st.SILENT, online=True)
    assert [p[2] for p in management.patches] == [None]  # and no status written


async def test_status_write_after_own_patch_uses_that_patch_as_precondition(tmp_path: Path) -> None:
    controller, management = make(tmp_path)
    read = cluster("10")
    await controller._claim_uid("c1", read, "uid-a")
    assert await controller._write(read, st.initialized(), online=True)
    name, body, subresource = management.patches[-1]
    assert subresource == "status" and body["metadata"] == {"resourceVersion": "11"}
    # The next pass (nothing patched) uses the version it read.
    assert await controller._write(cluster("12"), st.requeue(st.OFFLINE, "gone"), online=False)
    assert management.patches[-1][1]["metadata"] == {"resourceVersion": "12"}


async def test_a_later_pass_writes_on_the_version_it_read_not_the_patch_before(tmp_path: Path) -> None:
    controller, management = make(tmp_path)
    done = {"phase": "Initialized", "reason": "", "message": "", "online": True}
    await controller._claim_uid("c1", cluster("10"), "uid-a")
    assert await controller._write(cluster("10", status=done), st.initialized(), online=True)
    assert len(management.patches) == 1  # unchanged status: no write
    # A later pass must not carry the stale "11" (it would 409 once for nothing).
    management.version = 20
    assert await controller._write(cluster("20"), st.requeue(st.OFFLINE, "gone"), online=False)
    assert management.patches[-1][1]["metadata"] == {"resourceVersion": "20"}


async def test_refused_write_says_so(tmp_path: Path) -> None:
    controller, management = make(tmp_path)
    management.conflict = True
    assert not await controller._write(cluster("10"), st.initialized(), online=True)


def key(label_uid: str) -> Obj:
    labels = {"vplane.io/cluster-object-uid": label_uid} if label_uid else {}
    return {"metadata": {"name": "cluster-c1", "uid": "key-uid", "labels": labels}}


async def test_forget_reaches_the_release_applier_and_revokes_the_deleted_clusters_key(
    tmp_path: Path,
) -> None:
    applier = RecordingApplier()
    controller, management = make(tmp_path, applier)
    await controller._claim_uid("c1", cluster("10"), "uid-a")
    management.objects[("accesskeys", "cluster-c1")] = key("uid-a")
    await controller._forget("c1", deleted=True)
    assert applier.forgotten == ["c1"]
    assert controller._recorded_uid(cluster("10")) == ""  # the memory went with it
    assert management.deleted == [("accesskeys", "cluster-c1", "key-uid")]  # that key object only


@pytest.mark.parametrize(("label", "revoked"), [("uid-new", False), ("uid-old", True), ("", True)])
async def test_a_late_delete_event_spares_the_key_of_a_cluster_made_again(
    tmp_path: Path, label: str, revoked: bool
) -> None:
    """The informer delivered the delete, not yet the Cluster made again under the name: its key (labelled
    with its UID) stays; an earlier Cluster's key goes."""
    controller, management = make(tmp_path)
    management.objects[("clusters", "c1")] = {"metadata": {"name": "c1", "uid": "uid-new"}}
    management.objects[("accesskeys", "cluster-c1")] = key(label)
    await controller._forget("c1", deleted=True)
    assert bool(management.deleted) is revoked


def test_upgrade_bridge_forgets_a_deleted_clusters_wait(tmp_path: Path) -> None:
    bridge = UpgradeBridge(PlatformSettings(data_dir=tmp_path))
    bridge._waiting_since[("c1", "digest")] = 1.0
    bridge._waiting_since[("c2", "digest")] = 1.0
    bridge.forget("c1")
    assert list(bridge._waiting_since) == [("c2", "digest")]


@pytest.mark.parametrize(
    "message",
    [
        'build a client for the cluster: reading namespace kube-system: cluster "c1" '
        + st.GATEWAY_NO_SESSION,
        'cannot reach cluster "c1" ' + st.GATEWAY_UNREACHABLE + " connection reset",
    ],
)
def test_a_tunnel_lost_mid_pass_is_no_online_peers_not_failed(message: str) -> None:
    failed = st.failed(st.INITIALIZE_CLUSTER, message)
    outcome = st.tunnel_lost(st.Mode.TUNNEL, failed)
    assert (outcome.phase, outcome.reason, outcome.kind) == ("", st.NO_ONLINE_PEERS, "requeue")
    assert message in outcome.message
    # Also while creating the upgrade bridge through the tunnel (not a bridge error).
    bridge = st.failed(
        st.DEPLOY_PROXY_ONLY_AGENT, "creating the bridge deployment proxy-only-agent: " + message
    )
    assert st.tunnel_lost(st.Mode.TUNNEL, bridge).reason == st.NO_ONLINE_PEERS
    # A direct cluster's failure, or any other reason, stands as it is.
    assert st.tunnel_lost(st.Mode.DIRECT, failed) is failed
    other = st.failed(st.CLUSTER_UID, message)
    assert st.tunnel_lost(st.Mode.TUNNEL, other) is other
    plain = st.step_failed(st.Step.RBAC, "forbidden")
    assert st.tunnel_lost(st.Mode.TUNNEL, plain) is plain


async def test_a_status_write_refused_otherwise_is_retried_and_a_deleted_cluster_is_not(
    tmp_path: Path,
) -> None:
    controller, management = make(tmp_path)

    async def refuse(code: int) -> bool:
        async def patch(*_: Any, **__: Any) -> Obj:
            raise errors.StatusError(code, "InternalError" if code == 500 else "NotFound", "refused")

        management.patch = patch  # type: ignore[method-assign]
        return await controller._write(cluster("10"), st.initialized(), online=True)

    assert not await refuse(500)  # requeued soon (before: dropped silently, as if written)
    assert await refuse(404)


class CountingLocal:
    """The platform's mesh node, answering every health check it is asked (and counting them)."""

    def __init__(self) -> None:
        self.checked: list[str] = []

    def http(self) -> Any:
        return self

    async def wait_peer(self, node_id: str, timeout: float) -> bool:  # noqa: ASYNC109 (its signature)
        self.checked.append(node_id)
        return False  # not reachable: what a session of another replica is


async def test_only_sessions_this_replica_holds_are_health_checked(tmp_path: Path) -> None:
    """The relay does not cross replicas: a session another replica holds would only wait out the check's
    timeout on every pass."""
    from dataclasses import replace

    from vplane.mesh.coordinator import NodeInfo

    def session(node_id: str, holder: str) -> NodeInfo:
        return NodeInfo(node_id, node_id, "loft:cluster:c1", "agent", {}, (), True, 0.0, 0.0, holder)

    controller, _ = make(tmp_path)
    local = CountingLocal()
    mine, theirs = session("n-mine", "a"), session("n-theirs", "b")
    controller.deps = replace(
        controller.deps,
        local=cast(Any, local),
        nodes=lambda: [mine, theirs],
        holds=lambda node: node.coordinator_id == "a",
    )
    assert await controller._reachable("n-theirs") is False
    assert local.checked == []
    assert await controller._reachable("n-mine") is False
    assert local.checked == ["n-mine"]

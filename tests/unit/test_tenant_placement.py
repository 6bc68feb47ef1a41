"""The pods placement's pure parts: what it asks the cluster for, and what it reads back from pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vplane.kube import tenantconfig
from vplane.platform.placement import TenantSpec, tenant_args
from vplane.platform.settings import PlatformSettings
from vplane.platform.tenantpods import (
    CHECKSUM_ANNOTATION,
    OWNER_ANNOTATION,
    PodParams,
    config_checksum,
    digest,
    manifests,
    pod_ordinal,
    replicas_from_pods,
)
from vplane.platform.tenants import replica_env

SPEC = TenantSpec("default", "p-default", "target", 2, "k" * 64, "")
NOW = 1_000_000.0


def params(**overrides: Any) -> PodParams:
    base: dict[str, Any] = {
        "image": "ghcr.io/vplane/vplane:v0.1.0",
        "port": 8443,
        "service_port": 443,
        "directory": "/data/platform/tenants/p-default/target",
        "args": ("tenant", "start"),
    }
    return PodParams(**{**base, **overrides})


def test_the_layout_is_upstreams_vcluster() -> None:
    namespace, objects = manifests(SPEC, params())
    assert namespace["metadata"]["name"] == "vcluster-target"
    assert namespace["metadata"]["annotations"][OWNER_ANNOTATION] == "p-default/target"
    service, headless, sts = objects
    assert (service["kind"], service["metadata"]["name"], service["metadata"]["namespace"]) == (
        "Service",
        "target",
        "vcluster-target",
    )
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}
    ]
    assert headless["spec"]["clusterIP"] == "None"
    assert sts["kind"] == "StatefulSet" and sts["metadata"]["name"] == "target"
    assert sts["spec"]["replicas"] == 2
    assert sts["spec"]["serviceName"] == "target-headless"
    assert sts["spec"]["podManagementPolicy"] == "OrderedReady"  # replica 0 creates the shared PKI first
    template = sts["spec"]["template"]
    assert template["metadata"]["labels"] == {"app": "vcluster", "release": "target"}
    assert sts["spec"]["selector"]["matchLabels"] == template["metadata"]["labels"]
    assert service["spec"]["selector"] == template["metadata"]["labels"]
    (container,) = template["spec"]["containers"]
    assert container["name"] == "syncer"
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert template["spec"]["volumes"] == [
        {"name": "data", "hostPath": {"path": "/data/platform/tenants/p-default/target", "type": "Directory"}}
    ]
    assert template["spec"]["automountServiceAccountToken"] is False
    replica_env = container["env"][0]
    assert replica_env["name"] == "VPLANE_REPLICA"
    assert (
        replica_env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    )


def test_pod_arguments_name_the_pods_own_address_and_mount() -> None:
    settings = PlatformSettings(data_dir=Path("/x"), tenant_apiserver={"durable": False})
    args = tenant_args(
        SPEC,
        settings,
        data_dir="$(VPLANE_MOUNT_DATA)",
        replica="$(VPLANE_REPLICA)",
        listen="$(POD_IP):8443",
        platform_url="https://127.0.0.1:10443",
        platform_ca="$(VPLANE_MOUNT_DATA)/platform-ca.crt",
    )
    pairs = dict(zip(args[2::2], args[3::2], strict=False))
    assert args[:2] == ["tenant", "start"]
    assert pairs["--data-dir"] == "$(VPLANE_MOUNT_DATA)"
    assert pairs["--replica"] == "$(VPLANE_REPLICA)"
    assert pairs["--listen"] == "$(POD_IP):8443"
    assert pairs["--access-key-file"] == "$(VPLANE_MOUNT_DATA)/access-key"
    assert "--replicas" not in args  # scaling must not change the pod template (it would roll every pod)
    assert "--ready-file" not in args
    assert "config_file=$(VPLANE_MOUNT_DATA)/vcluster.yaml" in args
    assert "durable=False" in args


def test_a_new_key_or_configuration_rolls_the_pods_and_scaling_does_not() -> None:
    def template(spec: TenantSpec) -> Any:
        return manifests(spec, params())[1][2]["spec"]["template"]

    base = template(SPEC)
    assert base["metadata"]["annotations"][CHECKSUM_ANNOTATION] == config_checksum(SPEC)
    assert template(TenantSpec("default", "p-default", "target", 3, "k" * 64, "")) == base
    assert template(TenantSpec("default", "p-default", "target", 2, "j" * 64, "")) != base
    assert template(TenantSpec("default", "p-default", "target", 2, "k" * 64, "sync: {}\n")) != base
    # Scaling leaves the pod template alone but is still a change to apply (the digest of what is applied).
    scaled = TenantSpec("default", "p-default", "target", 3, "k" * 64, "")
    assert digest(list(manifests(scaled, params()))) != digest(list(manifests(SPEC, params())))


def pod(
    name: str,
    *,
    ip: str = "127.10.0.5",
    ready: bool = True,
    waiting: dict[str, str] | None = None,
    started: str | None = None,
    restarts: int = 0,
    deleting: bool = False,
) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if waiting is not None:
        state["waiting"] = waiting
    else:
        state["running"] = {"startedAt": started or "1970-01-12T13:46:00Z"}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "vcluster-target",
        "labels": {"apps.kubernetes.io/pod-index": name.rsplit("-", 1)[1]},
    }
    if deleting:
        meta["deletionTimestamp"] = "1970-01-12T13:46:40Z"
    return {
        "metadata": meta,
        "status": {
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": "syncer", "state": state, "restartCount": restarts}],
        },
    }


def test_replicas_are_the_pods_ips_and_readiness() -> None:
    replicas, failed = replicas_from_pods(
        [pod("target-1", ip="127.10.0.9", ready=False), pod("target-0", restarts=2)], 2, 8443, NOW, 60
    )
    assert failed == ""
    assert sorted(replicas) == [0, 1]
    assert (replicas[0].url, replicas[0].ready, replicas[0].restarts) == ("https://127.10.0.5:8443", True, 2)
    assert (replicas[1].url, replicas[1].ready) == ("https://127.10.0.9:8443", False)


def test_pods_above_the_replica_count_and_terminating_pods_serve_nothing() -> None:
    replicas, _ = replicas_from_pods([pod("target-0", deleting=True), pod("target-2")], 2, 8443, NOW, 60)
    assert sorted(replicas) == [0]
    assert replicas[0].ready is False


def test_a_pod_without_an_ip_is_no_endpoint_yet() -> None:
    replicas, _ = replicas_from_pods([pod("target-0", ip="", ready=True)], 1, 8443, NOW, 60)
    assert replicas == {}
    waiting = {"reason": "ErrImagePull", "message": "not found"}
    _, failed = replicas_from_pods([pod("target-0", ip="", ready=False, waiting=waiting)], 1, 8443, NOW, 60)
    assert failed == "replica 0 (pod vcluster-target/target-0): ErrImagePull: not found"


def test_a_replica_that_will_not_start_by_itself_fails_the_instance() -> None:
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "nope:1"'}
    _, failed = replicas_from_pods([pod("target-0", ready=False, waiting=waiting)], 1, 8443, NOW, 60)
    assert failed == (
        'replica 0 (pod vcluster-target/target-0): ImagePullBackOff: Back-off pulling image "nope:1"'
    )
    _, creating = replicas_from_pods(
        [pod("target-0", ready=False, waiting={"reason": "ContainerCreating"})], 1, 8443, NOW, 60
    )
    assert creating == ""


def test_a_replica_running_unready_past_the_timeout_fails_the_instance() -> None:
    # NOW is 1970-01-12T13:46:40Z; started 100 s earlier.
    started = "1970-01-12T13:45:00Z"
    _, failed = replicas_from_pods([pod("target-0", ready=False, started=started)], 1, 8443, NOW, 60)
    assert failed == "replica 0 did not become ready within 60s"
    _, waiting = replicas_from_pods([pod("target-0", ready=False, started=started)], 1, 8443, NOW, 120)
    assert waiting == ""


def test_ordinals_come_from_the_pod_index_label_or_the_name() -> None:
    assert pod_ordinal({"metadata": {"name": "x-3", "labels": {"apps.kubernetes.io/pod-index": "7"}}}) == 7
    assert pod_ordinal({"metadata": {"name": "my-tenant-12"}}) == 12
    assert pod_ordinal({"metadata": {"name": "nothing"}}) is None


def test_the_replica_has_a_sane_liveness_probe() -> None:
    """Issue 10 item 4: a hung replica is restarted; the probe reads the public, unauthenticated ``/livez``
    (which answers once the server listens, unlike ``/readyz``, which waits for the mesh) and gives a
    replica more time to start and to fail than its readiness probe does."""
    _, objects = manifests(SPEC, params())
    container = objects[2]["spec"]["template"]["spec"]["containers"][0]
    live, ready = container["livenessProbe"], container["readinessProbe"]
    assert live["httpGet"] == {"path": "/livez", "port": "https", "scheme": "HTTPS"}
    assert live["httpGet"]["port"] in [p["name"] for p in container["ports"]]
    assert live["initialDelaySeconds"] >= 30
    assert (
        live["periodSeconds"] * live["failureThreshold"] > ready["periodSeconds"] * ready["failureThreshold"]
    )
    assert live["timeoutSeconds"] < live["periodSeconds"] * live["failureThreshold"]


def test_control_plane_environment_is_upstreams_key_with_literal_values() -> None:
    """``controlPlane.statefulSet.env`` (upstream's key): how an operator sets ``TS_DEBUG_DIAL_DIRECT=false`` or
    ``LOFT_LOG_TSNET_AGENT=true`` on a tenant's control plane; ``valueFrom`` has nothing to read here."""
    values = (
        "controlPlane:\n  statefulSet:\n    env:\n"
        "    - {name: TS_DEBUG_DIAL_DIRECT, value: 'false'}\n    - {name: LOFT_LOG_TSNET_AGENT, value: 'true'}\n"
    )
    config = tenantconfig.parse(values)
    assert config.env == [("TS_DEBUG_DIAL_DIRECT", "false"), ("LOFT_LOG_TSNET_AGENT", "true")]
    assert TenantSpec("p-default", "p-default", "c", 1, "k", values).env == tuple(config.env)
    (cause,) = tenantconfig.validate(
        "controlPlane:\n  statefulSet:\n    env:\n    - {name: X, valueFrom: {fieldRef: {fieldPath: a}}}\n"
    )
    assert cause["field"] == "spec.template.helmRelease.values[controlPlane.statefulSet.env.0]"
    assert "valueFrom is not supported" in cause["message"]
    (cause,) = tenantconfig.validate(
        "controlPlane:\n  statefulSet:\n    env:\n    - {name: '1 x', value: a}\n"
    )
    assert cause["field"].endswith("[controlPlane.statefulSet.env.0.name]")
    # Only the switches the control plane reads: it is the platform's own process on the platform's machine.
    for other in ("LD_PRELOAD", "PYTHONPATH", "PYTHONWARNINGS", "BROWSER", "PATH", "VPLANE_MOUNT_DATA", "X"):
        (cause,) = tenantconfig.validate(
            f"controlPlane:\n  statefulSet:\n    env:\n    - {{name: {other}}}\n"
        )
        assert f"{other} is not an environment variable the control plane reads" in cause["message"]
        assert "allowed: TS_DEBUG_DIAL_DIRECT, LOFT_LOG_TSNET_AGENT, DEBUG" in cause["message"]
    # Values admitted before this rule existed give a placement no environment at all.
    legacy = "controlPlane:\n  statefulSet:\n    env:\n    - {name: LD_PRELOAD, value: /tmp/x.so}\n"
    assert TenantSpec("p-default", "p-default", "c", 1, "k", legacy).env == ()


def test_a_process_replica_takes_the_control_plane_switches_from_its_config_only() -> None:
    """The platform's own shell may have DEBUG=true (a common variable): a process replica does not inherit
    it, or any other switch its vcluster.yaml sets; everything else of the platform's environment passes."""
    platform = {
        "DEBUG": "true",
        "TS_DEBUG_DIAL_DIRECT": "false",
        "TS_DEBUG_TLS_DIAL_INSECURE_SKIP_VERIFY": "true",
        "VPLANE_LOG_LEVEL": "info",
        "PATH": "/bin",
    }
    env = replica_env(platform, ())
    assert not {"DEBUG", "TS_DEBUG_DIAL_DIRECT", "TS_DEBUG_TLS_DIAL_INSECURE_SKIP_VERIFY"} & set(env)
    assert env["VPLANE_LOG_LEVEL"] == "info" and env["PATH"] == "/bin" and env["PYTHONUNBUFFERED"] == "1"
    assert replica_env(platform, [("DEBUG", "true")])["DEBUG"] == "true"

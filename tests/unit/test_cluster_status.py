"""The Cluster status decisions, one test per row of the connected-cluster runbook's tables (pure, with an
injected clock), and the pure pieces around them: agent values, release decisions, accepted kubeconfigs,
the licence limit, the agent's configuration checks and liveness counter, the chart's version."""

from __future__ import annotations

import base64
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

import vplane
from vplane.agent.agent import TOKEN_EMPTY, URL_EMPTY, ConfigError, check_config
from vplane.agent.liveness import Liveness
from vplane.agent.settings import AgentSettings
from vplane.platform.admission import cluster_limit_message, over_cluster_limit
from vplane.platform.clusters import status as st
from vplane.platform.clusters import values as av
from vplane.platform.kinds import ClusterStrategy

ROOT = Path(__file__).resolve().parents[2]
GRACE = 10.0


def pod(
    name: str = "loft-1",
    phase: str = "Running",
    ready: bool = True,
    waiting: str | None = None,
    deleting: bool = False,
    created: str = "2026-01-01T00:00:00Z",
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if waiting:
        status["containerStatuses"] = [
            {"name": "agent", "state": {"waiting": {"reason": waiting, "message": f"{waiting} detail"}}}
        ]
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return {"metadata": meta, "status": status}


# -- modes -----------------------------------------------------------------------------------------------


def test_mode_of_each_connection_mode() -> None:
    assert st.mode_of({"local": True}) is st.Mode.LOCAL
    assert st.mode_of({"config": {"secretName": "kc"}}) is st.Mode.DIRECT
    assert st.mode_of({"config": {"secretName": "kc"}, "networkPeer": True}) is st.Mode.DIRECT
    assert st.mode_of({"networkPeer": True}) is st.Mode.TUNNEL
    assert st.mode_of({}) is None
    assert st.management_namespace({}) == "vcluster-platform"
    assert st.management_namespace({"managementNamespace": "loft"}) == "loft"


# -- LocalClient ---------------------------------------------------------------------------------------


def test_local_client_down_fails_tunnel_clusters_only() -> None:
    outcome = st.local_client_gate(
        st.Mode.TUNNEL, False, "registration refused: invalid access key: disabled"
    )
    assert outcome is not None
    assert (outcome.phase, outcome.reason) == ("Failed", "LocalClient")
    assert "invalid access key: disabled" in outcome.message
    assert st.local_client_gate(st.Mode.TUNNEL, True) is None
    assert st.local_client_gate(st.Mode.LOCAL, False) is None  # the platform's own cluster: never surfaces
    assert st.local_client_gate(st.Mode.DIRECT, False) is None


# -- before and after the first connection -------------------------------------------------------------


def test_reason_is_blank_early_then_offline() -> None:
    none = st.Peers(0, 0, 0)
    created = 1000.0
    early = st.peer_gate(st.Mode.TUNNEL, none, created, created + 1, GRACE)
    assert early is not None and (early.phase, early.reason) == ("", "")
    assert st.offline_grace_left(st.Mode.TUNNEL, none, created, created + 1, GRACE) == pytest.approx(9.0)
    later = st.peer_gate(st.Mode.TUNNEL, none, created, created + GRACE, GRACE)
    assert later is not None and (later.phase, later.reason) == ("", "Offline")
    assert later.kind == "requeue"
    assert st.offline_grace_left(st.Mode.TUNNEL, none, created, created + GRACE, GRACE) is None


def test_offline_after_the_platform_forgot_a_cluster_it_reached_before() -> None:
    """Sessions offline for about 15 minutes are forgotten: no session on record then is not "yet"."""
    none = st.Peers(0, 0, 0)
    created = 1000.0
    early = st.peer_gate(st.Mode.TUNNEL, none, created, created + 1, GRACE, connected_before=True)
    assert early is not None and (early.phase, early.reason, early.kind) == ("", "Offline", "requeue")
    assert "yet" not in early.message and "connected before" in early.message
    left = st.offline_grace_left(st.Mode.TUNNEL, none, created, created + 1, GRACE, connected_before=True)
    assert left is None
    first = st.peer_gate(st.Mode.TUNNEL, none, created, created + GRACE, GRACE)
    assert first is not None and first.message.endswith("yet")


def test_offline_only_without_a_direct_kubeconfig() -> None:
    none = st.Peers(0, 0, 0)
    assert st.peer_gate(st.Mode.DIRECT, none, 0.0, 100.0, GRACE) is None
    assert st.peer_gate(st.Mode.LOCAL, none, 0.0, 100.0, GRACE) is None


def test_no_online_peers_after_registering_once() -> None:
    offline = st.peer_gate(st.Mode.TUNNEL, st.Peers(1, 0, 0), 0.0, 100.0, GRACE)
    assert offline is not None and (offline.phase, offline.reason) == ("", "NoOnlinePeers")
    silent = st.peer_gate(st.Mode.TUNNEL, st.Peers(2, 2, 0), 0.0, 100.0, GRACE)
    assert silent is not None and silent.reason == "NoOnlinePeers"
    assert "answered" in silent.message
    assert st.peer_gate(st.Mode.TUNNEL, st.Peers(2, 2, 1), 0.0, 100.0, GRACE) is None


def test_peer_health_check_error_is_a_hard_failure() -> None:
    outcome = st.peer_check_failed("boom")
    assert (outcome.phase, outcome.reason, outcome.kind) == ("Failed", "PeerHealthCheck", "failed")
    assert "boom" in outcome.message


# -- InitializeCluster: the message says which step -----------------------------------------------------


@pytest.mark.parametrize(
    ("step", "words"),
    [
        (st.Step.CLIENT, "build a client"),
        (st.Step.NAMESPACE, "management namespace"),
        (st.Step.RELEASE, "Helm release"),
        (st.Step.RBAC, "RBAC"),
    ],
)
def test_initialize_cluster_names_the_step(step: st.Step, words: str) -> None:
    outcome = st.step_failed(step, 'namespaces is forbidden: User "x" cannot create resource')
    assert (outcome.phase, outcome.reason) == ("Failed", "InitializeCluster")
    assert words in outcome.message and "forbidden" in outcome.message


def test_deploy_proxy_only_agent_is_a_hard_failure() -> None:
    outcome = st.deploy_proxy_only_agent_failed("creating deployment proxy-only-agent: forbidden")
    assert (outcome.phase, outcome.reason) == ("Failed", "DeployProxyOnlyAgent")


# -- ClusterUID ------------------------------------------------------------------------------------------


def test_cluster_uid_first_claim_is_recorded() -> None:
    assert st.cluster_uid_gate("a", "uid-1", "", {}) == (None, True)
    assert st.cluster_uid_gate("a", "uid-1", "uid-1", {"b": "uid-2"}) == (None, False)


def test_cluster_uid_two_clusters_on_one_physical_cluster() -> None:
    outcome, record = st.cluster_uid_gate("b", "uid-1", "", {"a": "uid-1"})
    assert outcome is not None and not record
    assert (outcome.phase, outcome.reason) == ("Failed", "ClusterUID")
    assert 'Cluster "a"' in outcome.message and "uid-1" in outcome.message


def test_cluster_uid_token_copied_from_another_cluster() -> None:
    outcome, record = st.cluster_uid_gate("a", "uid-2", "uid-1", {})
    assert outcome is not None and outcome.reason == "ClusterUID" and not record
    assert "copied" in outcome.message


def test_health_check_cluster() -> None:
    outcome = st.health_check_failed("vcluster-platform", 'pods is forbidden: User "x" cannot list')
    assert (outcome.phase, outcome.reason) == ("Failed", "HealthCheckCluster")
    assert "vcluster-platform" in outcome.message and "forbidden" in outcome.message


# -- pod conditions ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent_pod", "reason"),
    [
        (pod(), ""),
        (pod(phase="Pending", ready=False), "Pending"),
        (pod(deleting=True), "Terminating"),
        (pod(ready=False), "NotReady"),
        (pod(phase="Failed", ready=False), "NotReady"),
        (pod(ready=False, waiting="CrashLoopBackOff"), "CrashLoopBackOff"),
        (pod(phase="Pending", ready=False, waiting="ImagePullBackOff"), "ImagePullBackOff"),
        (pod(phase="Pending", ready=False, waiting="ErrImagePull"), "ImagePullBackOff"),
        (pod(phase="Pending", ready=False, waiting="ContainerCreating"), "Pending"),
    ],
)
def test_pod_health(agent_pod: dict[str, Any], reason: str) -> None:
    assert st.pod_health(agent_pod)[0] == reason


def test_pod_conditions_complete_the_pass_as_initialized() -> None:
    missing = st.pods_outcome([], "vcluster-platform")
    assert (missing.phase, missing.reason) == ("Initialized", "NotFound")
    assert "app=loft" in missing.message
    crash = st.pods_outcome([pod(ready=False, waiting="CrashLoopBackOff")], "vcluster-platform")
    assert (crash.phase, crash.reason, crash.kind) == ("Initialized", "CrashLoopBackOff", "done")
    assert "CrashLoopBackOff detail" in crash.message


def test_one_healthy_pod_is_enough_else_the_newest_speaks() -> None:
    rollout = [pod("old", deleting=True), pod("new")]
    assert st.pods_outcome(rollout, "ns").reason == ""
    unhealthy = [
        pod("old", ready=False, created="2026-01-01T00:00:00Z"),
        pod("new", phase="Pending", ready=False, waiting="ImagePullBackOff", created="2026-01-02T00:00:00Z"),
    ]
    assert st.pods_outcome(unhealthy, "ns").reason == "ImagePullBackOff"


# -- the status document -------------------------------------------------------------------------------


def test_phase_resets_to_empty_on_connection_loss() -> None:
    current = {"phase": "Initialized", "reason": "", "message": "", "online": True}
    outcome = st.peer_gate(st.Mode.TUNNEL, st.Peers(1, 0, 0), 0.0, 100.0, GRACE)
    assert outcome is not None
    patch = st.status_patch(current, outcome, online=False)
    assert patch is not None and patch["phase"] == "" and patch["reason"] == "NoOnlinePeers"
    assert patch["online"] is False


def test_status_unchanged_writes_nothing_and_online_only_for_network_peers() -> None:
    current = {"phase": "Initialized", "reason": "", "message": "", "online": True}
    assert st.status_patch(current, st.initialized(), online=True) is None
    assert st.status_patch(current, st.SILENT, online=True) is None
    direct = st.status_patch(current, st.initialized(), online=None)
    assert direct is not None and direct["online"] is None  # removes the field (merge patch)


def test_requeue_intervals() -> None:
    kw = {"waiting": 1.0, "failing": 5.0, "resync": 30.0}
    assert st.requeue_after(st.requeue("Offline", ""), **kw) == 1.0
    assert st.requeue_after(st.failed("ClusterUID", ""), **kw) == 5.0
    assert st.requeue_after(st.initialized(), **kw) == 30.0
    assert st.requeue_after(st.requeue("", ""), grace_left=0.25, **kw) == 0.25


# -- agent values ----------------------------------------------------------------------------------------


def test_agent_values_precedence() -> None:
    defaults = {"replicas": 1, "env": {"A": "default", "B": "default"}}
    platform = {"env": {"B": "platform", "C": "platform"}, "replicas": 2}
    annotation = "env:\n  C: annotation\nreplicas: 3\ntoken: stolen\n"
    merged = av.extra_values(defaults, platform, annotation)
    assert merged == {"replicas": 3, "env": {"A": "default", "B": "platform", "C": "annotation"}}
    connection = av.connection_values("key", "https://platform", b"PEM")
    desired = av.desired_values(merged, connection)
    assert desired["token"] == "key" and desired["url"] == "https://platform"
    assert base64.b64decode(desired["additionalCA"]) == b"PEM"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("env: [unclosed", "not valid YAML"),
        ("- a\n- b\n", "must be a YAML mapping"),
        ("a: &x 1\nb: *x\n", "aliases are not supported"),
        ("1: a\n", "not a string at 1"),
        ("env:\n  true: x\n", "not a string at env.True"),
        ("tolerations:\n- {2: x}\n", r"not a string at tolerations\[0\]\.2"),
    ],
)
def test_malformed_agent_values_name_the_cause(text: str, words: str) -> None:
    with pytest.raises(av.AgentValuesInvalid, match=words) as info:
        av.parse_agent_values(text)
    assert "loft.sh/agent-values" in str(info.value)


def test_release_decisions() -> None:
    values = {"token": "k", "url": "u"}
    assert av.release_action(None, values, "0.1.0")[0] == "install"
    same = av.Release(1, "deployed", "vplane-agent-0.1.0", dict(values))
    assert av.release_action(same, values, "0.1.0") == ("none", "")
    newer = av.Release(1, "deployed", "vplane-agent-0.2.0", dict(values))
    action, why = av.release_action(newer, values, "0.1.0")
    assert action == "upgrade" and "0.2.0" in why  # exact match, not a minimum
    drifted = av.Release(1, "deployed", "vplane-agent-0.1.0", {**values, "env": {"X": "1"}})
    action, why = av.release_action(drifted, values, "0.1.0")
    assert action == "upgrade" and "env" in why
    failed = av.Release(2, "failed", "vplane-agent-0.1.0", dict(values))
    assert av.release_action(failed, values, "0.1.0")[0] == "upgrade"


# -- kubeconfigs in spec.config Secrets ----------------------------------------------------------------


def _kubeconfig(user: dict[str, Any], cluster: dict[str, Any] | None = None) -> str:
    return yaml.safe_dump(
        {
            "clusters": [{"name": "c", "cluster": cluster or {"server": "https://x:6443"}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "ctx",
        }
    )


def test_inline_kubeconfig_is_accepted() -> None:
    doc = av.sanitize_kubeconfig(_kubeconfig({"token": "t"}))
    assert doc["users"][0]["user"] == {"token": "t"}
    assert doc["clusters"][0]["cluster"]["server"] == "https://x:6443"


@pytest.mark.parametrize(
    ("user", "cluster"),
    [
        ({"exec": {"command": "/bin/sh"}}, None),
        ({"auth-provider": {"name": "gcp"}}, None),
        ({"tokenFile": "/etc/shadow"}, None),
        ({"token": "t"}, {"server": "https://x", "certificate-authority": "/etc/passwd"}),
    ],
)
def test_kubeconfig_with_commands_or_files_is_refused(
    user: dict[str, Any], cluster: dict[str, Any] | None
) -> None:
    with pytest.raises(av.KubeconfigRefused, match="inline credentials only"):
        av.sanitize_kubeconfig(_kubeconfig(user, cluster))


# -- admission: the licence limit ------------------------------------------------------------------------


def test_connected_cluster_limit() -> None:
    clusters = [
        {"metadata": {"name": "local"}, "spec": {"local": True}},
        {"metadata": {"name": "a"}, "spec": {"networkPeer": True}},
    ]
    assert over_cluster_limit(clusters, "b", None) is None
    assert over_cluster_limit(clusters, "b", 2) is None  # the local cluster does not count
    assert over_cluster_limit(clusters, "b", 1) == 1
    assert over_cluster_limit(clusters, "a", 1) is None  # an update of a counted cluster


def test_connected_cluster_limit_message_is_spelled_as_the_runbook() -> None:
    """The runbook's row reads "exceeding the license limit": an operator searching for it finds the refusal."""
    assert cluster_limit_message(2, 2) == (
        "connecting this cluster would exceed the license's connected-cluster limit of 2 (2 connected already); "
        "disconnect an unused cluster or raise the limit"
    )


# -- the agent ---------------------------------------------------------------------------------------------


def test_agent_configuration_checks() -> None:
    with pytest.raises(ConfigError, match=TOKEN_EMPTY):
        check_config(AgentSettings(url="https://p"))
    with pytest.raises(ConfigError, match=URL_EMPTY):
        check_config(AgentSettings(token="k"))
    check_config(AgentSettings(token="k", url="https://p"))


def test_liveness_counter_increases_then_recovers() -> None:
    liveness = Liveness()
    assert liveness.observe(True) is None
    events = [liveness.observe(False) for _ in range(3)]
    assert [(e.kind, e.failures) for e in events if e] == [("failed", 1), ("failed", 2), ("failed", 3)]
    recovered = liveness.observe(True)
    assert recovered is not None and (recovered.kind, recovered.failures) == ("recovered", 3)
    again = liveness.observe(False)
    assert again is not None and again.failures == 1


# -- the chart ---------------------------------------------------------------------------------------------


def test_chart_version_is_vplane_version() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "vplane-agent" / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2"
    assert chart["version"] == project["version"] == vplane.__version__
    assert chart["appVersion"] == project["version"]


def test_online_agrees_with_no_online_peers() -> None:
    """Sessions registered but none answering (an agent frozen): the reason says NoOnlinePeers, so
    ``status.online`` does not say true beside it."""
    silent = st.peer_gate(st.Mode.TUNNEL, st.Peers(1, 1, 0), 0.0, 100.0, GRACE)
    assert silent is not None
    patch = st.status_patch({"online": True}, silent, online=True)
    assert patch is not None and patch["reason"] == "NoOnlinePeers" and patch["online"] is False
    healthy = st.status_patch({}, st.initialized(), online=True)
    assert healthy is not None and healthy["online"] is True


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({}, "spec"),
        ({"config": {"secretNamespace": "x"}}, "spec.config.secretName"),
        ({"config": {"key": "config"}}, "spec.config.secretName"),
    ],
)
def test_cluster_admission_needs_a_way_to_connect(spec: dict[str, Any], field: str) -> None:
    strategy = ClusterStrategy()
    causes = strategy.validate({"metadata": {"name": "c"}, "spec": spec}, None)
    assert [c.get("field") for c in causes] == [field]


def test_cluster_admission_lets_an_update_that_leaves_the_connection_alone_pass() -> None:
    """A Cluster admitted before the secretName rule keeps taking label and finalizer edits."""
    strategy = ClusterStrategy()
    old = {"metadata": {"name": "c"}, "spec": {"config": {"key": "config"}}}
    new = {"metadata": {"name": "c", "labels": {"a": "b"}}, "spec": {"config": {"key": "config"}}}
    assert strategy.validate(new, old) == []
    changed = {"metadata": {"name": "c"}, "spec": {"config": {"key": "other"}}}
    assert [c.get("field") for c in strategy.validate(changed, old)] == ["spec.config.secretName"]


def test_cluster_admission_accepts_each_mode() -> None:
    strategy = ClusterStrategy()
    for spec in (
        {"local": True},
        {"networkPeer": True},
        {"config": {"secretName": "kc"}},
        {"config": {}, "networkPeer": True},
    ):
        assert strategy.validate({"metadata": {"name": "c"}, "spec": spec}, None) == []

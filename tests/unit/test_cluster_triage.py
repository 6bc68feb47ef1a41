"""``vplane doctor cluster``'s matching (``vplane.platform.clusters.triage``): one case per runbook row, from
a Cluster status and a diagnostics document as the platform serves them."""

from __future__ import annotations

from typing import Any

import pytest

from vplane.platform.clusters import triage as tr
from vplane.platform.clusters import values as av


def cluster(phase: str = "", reason: str = "", message: str = "") -> dict[str, Any]:
    return {"metadata": {"name": "edge"}, "status": {"phase": phase, "reason": reason, "message": message}}


def pod(
    name: str = "loft-1",
    ready: bool = True,
    phase: str = "Running",
    log: list[str] | None = None,
    health: str = "",
    last: str = "",
) -> dict[str, Any]:
    return {
        "name": name,
        "phase": phase,
        "ready": ready,
        "restarts": 0,
        "health": {"reason": health, "message": f"{health} detail" if health else ""},
        "lastTerminated": {
            "reason": "Error" if last else "",
            "exitCode": 1 if last else None,
            "message": last,
        },
        "log": log or [],
        "logError": "",
    }


def diagnostics(
    pods: list[dict[str, Any]] | None = None,
    *,
    sessions: int = 1,
    online: int = 1,
    bridge: dict[str, Any] | None = None,
    history: list[dict[str, Any]] | None = None,
    reachable: bool = True,
) -> dict[str, Any]:
    side: dict[str, Any] = {
        "via": "platform",
        "namespace": "vcluster-platform",
        "reachable": reachable,
        "error": "" if reachable else 'cluster "edge" has no online agent session',
    }
    if reachable:
        side.update(
            {
                "agentPods": pods if pods is not None else [pod()],
                "bridge": bridge,
                "helm": {
                    "history": history
                    or [
                        {
                            "revision": 1,
                            "status": "deployed",
                            "chart": "vplane-agent-0.1.0",
                            "description": "Install complete",
                        }
                    ],
                    "error": "",
                },
            }
        )
    return {
        "mode": "tunnel",
        "managementNamespace": "vcluster-platform",
        "localClient": {"connected": True, "error": ""},
        "sessions": [
            {"hostname": f"loft-{i}", "online": i < online, "lastSeen": "2026-01-01T00:00:00Z"}
            for i in range(sessions)
        ],
        "cluster": side,
    }


def rows(c: dict[str, Any], d: dict[str, Any]) -> list[str]:
    return [f"{v.section} / {v.row}" for v in tr.triage(c, d)]


def test_healthy() -> None:
    (verdict,) = tr.triage(cluster("Initialized"), diagnostics())
    assert verdict.row.startswith("Initialized with no reason")
    assert any("1/1 ready" in e for e in verdict.evidence)


def test_healthy_with_the_agent_outside_spec_management_namespace_says_so() -> None:
    """The platform finds an agent in a default namespace whatever spec.managementNamespace says (runbook
    003's upgrade table), so the cluster is healthy; the mismatch is shown, as the runbook's last section asks
    to keep them in sync."""
    d = diagnostics()
    d["managementNamespace"] = "wrong-ns"
    d["sessions"][0]["namespace"] = "vcluster-platform"  # the agent's session says where it runs
    (verdict,) = tr.triage(cluster("Initialized"), d)
    assert verdict.row.startswith("Initialized with no reason")
    assert (
        "the agent runs in namespace vcluster-platform; spec.managementNamespace is wrong-ns"
        in verdict.evidence
    )
    assert "keep spec.managementNamespace in sync" in verdict.resolution
    d["managementNamespace"] = "vcluster-platform"
    (in_sync,) = tr.triage(cluster("Initialized"), d)
    assert in_sync.resolution == "Nothing to do."


def test_still_initializing() -> None:
    assert rows(cluster(), diagnostics(sessions=0, online=0, reachable=False)) == [
        f"{tr.BEFORE} / Still initializing (empty phase and reason)"
    ]


@pytest.mark.parametrize(
    ("reason", "message", "row"),
    [
        ("Offline", "no agent", "status.reason Offline"),
        ("NoOnlinePeers", "none online", "status.reason NoOnlinePeers"),
        ("PeerHealthCheck", "boom", "status.reason PeerHealthCheck"),
        ("LocalClient", "down", "status.reason LocalClient"),
        ("ClusterUID", "same cluster", "status.reason ClusterUID"),
        ("HealthCheckCluster", "forbidden", "status.reason HealthCheckCluster"),
        ("DeployProxyOnlyAgent", "creating the bridge: forbidden", "status.reason DeployProxyOnlyAgent"),
        (
            "InitializeCluster",
            "build a client for the cluster: Unauthorized",
            "status.reason InitializeCluster (build a client for the cluster)",
        ),
        (
            "InitializeCluster",
            "install the platform's RBAC roles: forbidden",
            "status.reason InitializeCluster (install the platform's RBAC roles)",
        ),
    ],
)
def test_each_reason_is_its_row(reason: str, message: str, row: str) -> None:
    phase = "" if reason in ("Offline", "NoOnlinePeers") else "Failed"
    assert rows(cluster(phase, reason, message), diagnostics())[0] == f"{tr.DURING} / {row}"


@pytest.mark.parametrize(
    "reason", ["NotFound", "Pending", "Terminating", "NotReady", "CrashLoopBackOff", "ImagePullBackOff"]
)
def test_pod_conditions(reason: str) -> None:
    (verdict,) = tr.triage(
        cluster("Initialized", reason, "agent pod loft-1 ..."),
        diagnostics([pod(ready=False, health=reason, log=["last words"])]),
    )
    assert verdict.row == f"A pod condition: {reason}"
    assert any(f"{reason} detail" in e for e in verdict.evidence)
    assert any("last words" in e for e in verdict.evidence)


@pytest.mark.parametrize(
    ("line", "row"),
    [
        (
            "Failed to reach the coordinator server. Make sure that the agent can reach the control-plane",
            "Agent logs report the coordinator is unreachable",
        ),
        ("token is empty", "Agent logs report token is empty or url is empty"),
        ("url is empty", "Agent logs report token is empty or url is empty"),
        ("error='no auth key provided'", "Registration fails with no auth key provided"),
        ("error='invalid access key: expired'", "Registration fails on an invalid access key"),
    ],
)
def test_agent_log_rows_come_first_while_offline(line: str, row: str) -> None:
    d = diagnostics([pod(ready=False, log=["starting", line])], online=0)
    assert rows(cluster("", "NoOnlinePeers"), d) == [
        f"{tr.BEFORE} / {row}",
        f"{tr.DURING} / status.reason NoOnlinePeers",
    ]


def test_a_crashed_agents_last_words_are_read_from_its_status() -> None:
    d = diagnostics([pod(ready=False, last="x\nerror='invalid access key: disabled'\n")], online=0)
    assert (
        rows(cluster("", "NoOnlinePeers"), d)[0]
        == f"{tr.BEFORE} / Registration fails on an invalid access key"
    )


@pytest.mark.parametrize(
    "line",
    [
        "Agent cannot reach platform failures={n}",
        '{{"event": "Agent cannot reach platform", "failures": {n}, "level": "warning"}}',  # VPLANE_LOG_FORMAT=json
    ],
)
def test_flapping_counts_the_failures(line: str) -> None:
    lines = [line.format(n=n) for n in (1, 2, 3)]
    verdicts = tr.triage(cluster("Initialized"), diagnostics([pod(log=lines)]))
    (flap,) = [v for v in verdicts if v.section == tr.LOSS]
    assert flap.row == "The cluster repeatedly flips online and offline"
    assert flap.evidence == ["agent logs: Agent cannot reach platform 3 times, failure counter up to 3"]


def test_offline_while_the_agent_pod_looks_healthy_is_the_platforms_side() -> None:
    assert rows(cluster("", "NoOnlinePeers"), diagnostics([pod()], online=0))[-1] == (
        f"{tr.LOSS} / The cluster shows offline, but the agent pod looks healthy"
    )


def bridge(ready: int, problem: str = "") -> dict[str, Any]:
    return {
        "created": "t",
        "target": "vplane-agent-0.1.0",
        "replicas": 1,
        "readyReplicas": ready,
        "problem": problem,
        "pods": [],
    }


def test_bridge_rows() -> None:
    stall = rows(cluster("Initialized"), diagnostics(bridge=bridge(1)))
    assert stall == [f"{tr.UPGRADE} / proxy-only-agent deployment exists, but status.reason never changes"]
    never = tr.triage(cluster("Initialized"), diagnostics(bridge=bridge(0, "ImagePullBackOff: pod b: x")))
    assert never[0].row == "proxy-only-agent deployment never becomes ready"
    assert "the bridge's problem: ImagePullBackOff: pod b: x" in never[0].evidence
    failed = rows(
        cluster("Failed", "DeployProxyOnlyAgent", "has not come online"), diagnostics(bridge=bridge(0))
    )
    assert failed == [f"{tr.UPGRADE} / status.reason is DeployProxyOnlyAgent"]


def test_release_loop_rows() -> None:
    pending = [
        {"revision": 1, "status": "superseded", "chart": "c", "description": "Install complete"},
        {"revision": 2, "status": "pending-upgrade", "chart": "c", "description": "Preparing upgrade"},
    ]
    assert rows(cluster("Initialized"), diagnostics(history=pending))[0] == (
        f"{tr.UPGRADE} / The upgrade seems to loop: a stuck or partially applied Helm release"
    )
    missing = cluster(
        "Failed",
        "InitializeCluster",
        "install or upgrade the agent's CRDs and Helm release: the agent's Helm release \"loft\" does not exist "
        "in namespace vcluster-platform, loft",
    )
    assert rows(missing, diagnostics())[:2] == [
        f"{tr.UPGRADE} / The upgrade loops with errors about a Helm release that doesn't exist",
        f"{tr.DURING} / status.reason InitializeCluster (install or upgrade the agent's CRDs and Helm release)",
    ]


# -- the upgrade loop: who wrote each revision ---------------------------------------------------------------

LOOP = f"{tr.UPGRADE} / The upgrade seems to loop indefinitely, repeatedly reinstalling the agent"
WANTED = {"token": "k", "url": "https://platform", "env": {"A": "1"}}
DRIFT = "the agent values drifted: podLabels"


def by_hand(revision: int, description: str = "Upgrade complete") -> dict[str, Any]:
    """A revision helm wrote for anyone but the platform: the connect command, a hand-run helm upgrade."""
    return {
        "revision": revision,
        "status": "superseded",
        "chart": "vplane-agent-0.1.0",
        "description": description,
    }


def by_platform(
    revision: int, why: str = DRIFT, values: dict[str, Any] = WANTED, action: av.Action = "upgrade"
) -> dict[str, Any]:
    """A revision the platform wrote, described as its release writes describe them."""
    description = av.release_description(action, why, "0.1.0", values)
    return {
        "revision": revision,
        "status": "superseded",
        "chart": "vplane-agent-0.1.0",
        "description": description,
    }


def deployed(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [*history[:-1], {**history[-1], "status": "deployed"}]


def test_repeated_connects_are_not_a_loop() -> None:
    """An operator re-running `vplane platform connect cluster` (as the runbook allows) writes the
    platform's own values each time: five "Upgrade complete" revisions, and the platform wrote none."""
    history = deployed([by_hand(1, "Install complete"), *(by_hand(n) for n in range(2, 7))])
    assert rows(cluster("Initialized"), diagnostics(history=history)) == [
        f"{tr.HEALTHY} / Initialized with no reason: connected and healthy"
    ]


def test_the_platform_putting_back_what_someone_keeps_changing_is_a_loop() -> None:
    """Values edited by hand (or re-applied by some other tool) again and again; each time the platform
    writes back the same chart and values."""
    history = deployed(
        [by_hand(1, "Install complete"), by_hand(2), by_platform(3), by_hand(4), by_platform(5), by_hand(6)]
        + [by_platform(7)]
    )
    verdicts = tr.triage(cluster("Initialized"), diagnostics(history=history))
    assert f"{verdicts[0].section} / {verdicts[0].row}" == LOOP
    assert verdicts[0].evidence == [
        "helm history: vplane-platform wrote the same chart and values again 2 times in the last 5 revisions",
        f"revision 5 by vplane-platform ({DRIFT}), after revision 4 superseded (Upgrade complete)",
        f"revision 7 by vplane-platform ({DRIFT}), after revision 6 superseded (Upgrade complete)",
    ]
    assert "leave the release to the platform" in verdicts[0].resolution


def test_the_platform_rewriting_its_own_release_is_a_loop() -> None:
    """Nobody else writes, yet every check upgrades again (a chart that is not the platform's version):
    the platform's own write never satisfies it."""
    why = "the agent chart is 0.0.9, the platform is 0.1.0"
    history = deployed([by_platform(1, why, action="install"), *(by_platform(n, why) for n in range(2, 6))])
    (verdict, *_) = tr.triage(cluster("Initialized"), diagnostics(history=history))
    assert f"{verdict.section} / {verdict.row}" == LOOP
    assert verdict.evidence[0].endswith("again 4 times in the last 5 revisions")
    assert f"revision 5 by vplane-platform ({why}), right after its own previous write" in verdict.evidence
    assert "its own write does not satisfy it" in verdict.resolution


def test_the_platform_following_new_extra_agent_values_is_not_a_loop() -> None:
    """Each annotation change is a new upgrade of new values, even when it goes back to earlier ones."""
    on, off = {**WANTED, "env": {"LOFT_LOG_TSNET_AGENT": True}}, WANTED
    history = deployed(
        [by_platform(1, values=off, action="install")]
        + [by_platform(n, "the agent values drifted: env", on if n % 2 else off) for n in range(2, 7)]
    )
    assert LOOP not in rows(cluster("Initialized"), diagnostics(history=history))


def test_one_put_back_is_not_a_loop_and_old_ones_are_forgotten() -> None:
    once = deployed([by_hand(1, "Install complete"), by_platform(2), by_hand(3), by_platform(4)])
    assert LOOP not in rows(cluster("Initialized"), diagnostics(history=once))
    settled = deployed(
        [by_platform(1), by_hand(2), by_platform(3), by_hand(4), by_platform(5)]
        + [by_hand(n) for n in range(6, 10)]
    )
    assert LOOP not in rows(cluster("Initialized"), diagnostics(history=settled))


def test_revision_descriptions_name_the_platform_what_and_why() -> None:
    text = av.release_description("upgrade", "the agent values drifted: env,\nurl", "0.1.0", WANTED)
    assert text.startswith("Upgrade complete by vplane-platform (")
    assert "\n" not in text
    mark = av.platform_revision(text)
    assert mark == av.PlatformRevision(
        av.content_digest("0.1.0", WANTED), "the agent values drifted: env, url"
    )
    assert av.release_description("install", "", "0.1.0", WANTED).startswith("Install complete by")
    assert av.content_digest("0.2.0", WANTED) != mark.digest
    assert av.content_digest("0.1.0", {**WANTED, "token": "other"}) != mark.digest
    for other in ("Upgrade complete", "Install complete", "Rollback to 3", 'Upgrade "loft" failed: x'):
        assert av.platform_revision(other) is None

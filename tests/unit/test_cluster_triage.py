"""``vplane doctor cluster``'s matching (``vplane.platform.clusters.triage``): one case per runbook row, from
a Cluster status and a diagnostics document as the platform serves them."""

from __future__ import annotations

from typing import Any

import pytest

from vplane.platform.clusters import triage as tr


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


def test_flapping_counts_the_failures() -> None:
    lines = [f"Agent cannot reach platform failures={n}" for n in (1, 2, 3)]
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
    upgrades = [
        {"revision": n, "status": "superseded", "chart": "c", "description": "Upgrade complete"}
        for n in range(1, 6)
    ]
    assert rows(cluster("Initialized"), diagnostics(history=upgrades))[0] == (
        f"{tr.UPGRADE} / The upgrade seems to loop indefinitely, repeatedly reinstalling the agent"
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

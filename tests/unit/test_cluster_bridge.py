"""The upgrade bridge's pure decisions (``vplane.platform.clusters.bridge``): when a release change needs the
bridge, how it is built from the chart's agent Deployment, when waiting for it turns into
DeployProxyOnlyAgent, where the release is looked for, and how a stuck pending release is recovered."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from vplane.platform.clusters import bridge as br
from vplane.platform.clusters import status as st
from vplane.platform.clusters import values as av


def release(chart: str = "vplane-agent-0.1.0", status: str = "deployed") -> av.Release:
    return av.Release(revision=1, status=status, chart=chart, values={})


def agent(image: str = "ghcr.io/vplane/vplane:0.1.0") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "loft", "labels": {"app": "loft"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "loft"}},
            "template": {
                "metadata": {"labels": {"app": "loft", "extra": "kept"}, "annotations": {"a": "b"}},
                "spec": {
                    "serviceAccountName": "loft",
                    "containers": [
                        {"name": "agent", "image": image, "command": ["vplane", "agent"], "args": ["--x"]}
                    ],
                },
            },
        },
    }


def test_only_a_tunnel_cluster_of_another_chart_version_needs_the_bridge() -> None:
    assert br.needs_bridge(st.Mode.TUNNEL, release("vplane-agent-0.0.9"), "0.1.0")
    assert br.needs_bridge(st.Mode.TUNNEL, release("vplane-agent-0.1.1"), "0.1.0")  # exact, not a minimum
    assert not br.needs_bridge(st.Mode.TUNNEL, release("vplane-agent-0.1.0"), "0.1.0")  # values only
    assert not br.needs_bridge(st.Mode.DIRECT, release("vplane-agent-0.0.9"), "0.1.0")
    assert not br.needs_bridge(st.Mode.TUNNEL, None, "0.1.0")


def test_release_namespaces_fall_back_to_the_two_defaults_only() -> None:
    assert br.release_namespaces("vcluster-platform") == ["vcluster-platform", "loft"]
    assert br.release_namespaces("loft") == ["loft", "vcluster-platform"]
    assert br.release_namespaces("agents") == ["agents", "loft", "vcluster-platform"]


def test_missing_release_names_where_it_looked_and_where_the_agent_runs() -> None:
    text = br.missing_release_message(["vcluster-platform", "loft"], ["agents", "", "loft"])
    assert 'Helm release "loft" does not exist in namespace vcluster-platform, loft' in text
    assert "the connected agent runs in namespace agents:" in text
    assert "spec.managementNamespace" in text
    assert "runs in namespace" not in br.missing_release_message(["vcluster-platform", "loft"], [])


def test_agents_elsewhere_are_the_namespaces_not_searched() -> None:
    """What keeps a direct cluster's moved agent from being installed a second time."""
    assert br.agents_elsewhere(["vcluster-platform", "loft"], ["agents", "", "loft", "agents"]) == ["agents"]
    assert br.agents_elsewhere(["vcluster-platform", "loft"], ["vcluster-platform"]) == []


def test_the_agent_deployment_is_found_in_rendered_manifests() -> None:
    docs = [{"kind": "ServiceAccount", "metadata": {"name": "loft"}}, agent(), None]
    assert br.agent_deployment(yaml.safe_dump_all(docs))["metadata"]["name"] == "loft"
    with pytest.raises(br.BridgeBuildError, match="renders no Deployment 'loft'"):
        br.agent_deployment(yaml.safe_dump_all(docs[:1]))
    with pytest.raises(br.BridgeBuildError, match="reading the rendered chart"):
        br.agent_deployment("a: [")


def test_bridge_is_the_new_agent_pod_in_proxy_only_mode() -> None:
    built = br.bridge_deployment(agent(), "vcluster-platform", "vplane-agent-0.1.0")
    assert built["metadata"]["name"] == "proxy-only-agent"
    assert built["metadata"]["namespace"] == "vcluster-platform"
    assert built["metadata"]["annotations"][br.TARGET_ANNOTATION] == "vplane-agent-0.1.0"
    spec = built["spec"]
    assert spec["replicas"] == 1
    assert spec["selector"] == {"matchLabels": {"app": "proxy-only-agent"}}
    labels = spec["template"]["metadata"]["labels"]
    assert labels == {"app": "proxy-only-agent", "extra": "kept"}  # not app=loft: not the agent pod check's
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "loft"
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/vplane/vplane:0.1.0"
    assert container["command"] == ["vplane", "agent"] and container["args"] == ["--x", "--proxy-only"]


def test_bridge_is_refreshed_when_what_it_should_be_changes() -> None:
    first = br.bridge_deployment(agent(), "ns", "vplane-agent-0.1.0")
    assert br.bridge_current(None, first) == "create"
    assert br.bridge_current(first, br.bridge_deployment(agent(), "ns", "vplane-agent-0.1.0")) == "keep"
    other = br.bridge_deployment(agent(image="ghcr.io/vplane/vplane:0.2.0"), "ns", "vplane-agent-0.1.0")
    assert br.bridge_current(first, other) == "replace"


def test_bridge_and_primary_sessions() -> None:
    def session(ident: str, mode: str | None, online: bool = True, at: float = 0.0) -> br.Session:
        labels = {br.MODE_LABEL: mode} if mode else {}
        return br.Session(ident, ident, labels, online, at)

    sessions = [
        session("old-bridge", "proxy-only", at=1),
        session("bridge", "proxy-only", at=5),
        session("gone-bridge", "proxy-only", online=False, at=9),
        session("agent", "agent"),
        session("unlabelled", None),
    ]
    assert [s.id for s in br.bridge_sessions(sessions)] == ["bridge", "old-bridge"]
    assert [s.id for s in br.primary_sessions(sessions)] == ["agent", "unlabelled"]


def pod(name: str, created: str, waiting: str | None = None, phase: str = "Pending") -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if waiting:
        status["containerStatuses"] = [
            {"name": "agent", "state": {"waiting": {"reason": waiting, "message": f"{waiting} detail"}}}
        ]
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": status}


def test_real_errors_of_the_bridge() -> None:
    failing = {
        "status": {
            "conditions": [
                {
                    "type": "ReplicaFailure",
                    "status": "True",
                    "reason": "FailedCreate",
                    "message": 'serviceaccount "loft" not found',
                }
            ]
        }
    }
    assert "FailedCreate" in br.bridge_problem(failing, [])
    assert 'serviceaccount "loft" not found' in br.bridge_problem(failing, [])
    deadline = {
        "status": {
            "conditions": [
                {
                    "type": "Progressing",
                    "status": "False",
                    "reason": "ProgressDeadlineExceeded",
                    "message": "m",
                }
            ]
        }
    }
    assert "progress deadline" in br.bridge_problem(deadline, [])
    pulling = [pod("b-1", "2026-01-01T00:00:00Z", "ImagePullBackOff")]
    assert br.bridge_problem({}, pulling).startswith("ImagePullBackOff: pod b-1")
    crashing = [pod("b-1", "2026-01-01T00:00:00Z", "CrashLoopBackOff", "Running")]
    assert br.bridge_problem({}, crashing).startswith("CrashLoopBackOff")
    # The newest pod speaks; a pod that is merely pending or starting is no error.
    newer = [*pulling, pod("b-2", "2026-01-01T00:01:00Z")]
    assert br.bridge_problem({}, newer) == ""
    assert br.bridge_problem(None, []) == ""


def test_a_stuck_pending_release_is_rolled_back_or_forgotten() -> None:
    history = [
        br.Revision(1, "superseded", "vplane-agent-0.1.0"),
        br.Revision(2, "deployed", "vplane-agent-0.1.0"),
        br.Revision(3, "pending-upgrade", "vplane-agent-0.1.0"),
    ]
    assert br.pending_recovery(history, 10, 600) == ("wait", None)
    assert br.pending_recovery(history, 600, 600) == ("rollback", 2)
    install = [br.Revision(1, "pending-install", "vplane-agent-0.1.0")]
    assert br.pending_recovery(install, 600, 600) == ("forget", 1)
    after_failures = [br.Revision(1, "failed", "c"), br.Revision(2, "pending-upgrade", "c")]
    assert br.pending_recovery(after_failures, 600, 600) == ("forget", 2)


def test_an_uninstall_in_progress_is_waited_for_then_finished() -> None:
    """A release someone is uninstalling is not written meanwhile (the write would race the uninstall);
    one cut short is finished once stuck."""
    history = [br.Revision(1, "superseded", "c"), br.Revision(2, br.UNINSTALLING, "c")]
    assert br.UNINSTALLING in br.IN_PROGRESS
    assert br.pending_recovery(history, 10, 600) == ("wait", None)
    assert br.pending_recovery(history, 600, 600) == ("uninstall", None)

"""``vplane doctor cluster``: which row of the connected-cluster runbook a cluster is in (pure).

Input: the Cluster object (its status as the management API serves it) and its ``diagnostics``
document (:mod:`.diagnostics`: sessions, agent pods and logs, the bridge, the Helm history). Output: the
rows that match, the most specific first, each with the evidence that matched and the resolution. The
runbook's tables, in the order they are checked here:

1. "Agent stuck mid-upgrade": a ``proxy-only-agent`` deployment exists, a release stuck pending, a
   release that does not exist where the Cluster says, the platform writing the same release again and
   again (:func:`reinstalls`).
2. "Failures during reconciliation": ``status.reason`` (LocalClient, PeerHealthCheck, ClusterUID,
   InitializeCluster with its step, DeployProxyOnlyAgent, HealthCheckCluster, the pod conditions,
   NoOnlinePeers, Offline).
3. "Failures before the first connection" and "Connection loss": what the agent's logs say (coordinator
   unreachable, token or url empty, no auth key, invalid access key, ``Agent cannot reach platform``), and
   an offline cluster whose agent pod looks healthy.
4. Healthy, or still initializing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vplane.platform.clusters import bridge as br
from vplane.platform.clusters import status as st
from vplane.platform.clusters import values as av

BEFORE = "Failures before the first connection"
DURING = "Failures during reconciliation"
LOSS = "Connection loss after a successful connect"
UPGRADE = "Agent stuck mid-upgrade"
HEALTHY = "Check the connection status"

COORDINATOR_UNREACHABLE = "Failed to reach the coordinator server"
CANNOT_REACH = "Agent cannot reach platform"
_FAILURES = re.compile(r"""failures(?:=|"\s*:\s*)(\d+)""")
"""The count on an agent's line, in its console format (``failures=3``) or JSON (``"failures": 3``)."""


@dataclass(frozen=True)
class Verdict:
    section: str
    row: str
    evidence: list[str] = field(default_factory=list)
    resolution: str = ""


# -- the upgrade loop ----------------------------------------------------------------------------------------
# Every helm write reads "Upgrade complete", whoever made it: an operator re-running the connect command (as
# the runbook allows; it writes the platform's own chart and values) makes as many as a loop does. What makes
# a loop is the platform writing again what it last wrote: the release had moved away from it in between
# (someone else wrote, or its write never matched what it wants) and it put it back. Its revisions say so
# in their description (``values.release_description``); a platform older than that mark shows no loop.

LOOP_WINDOW = 5
"""The last revisions looked at (helm keeps ten by default)."""
LOOP_REINSTALLS = 2
"""Re-installs among them that make a loop: the platform wrote the same release three times."""


@dataclass(frozen=True)
class Reinstall:
    revision: int
    why: str
    """Why the platform upgraded, as its description says."""
    between: list[str]
    """The revisions since its previous write: someone else's, or a failed, pending or rolled back operation
    (helm replaces those descriptions)."""

    def line(self) -> str:
        shown = self.between[-3:]
        if len(self.between) > len(shown):
            shown = [f"{len(self.between) - len(shown)} earlier revisions", *shown]
        after = f"after {', '.join(shown)}" if shown else "right after its own previous write"
        return f"revision {self.revision} by {av.PLATFORM_WRITER} ({self.why}), {after}"


def _revision(entry: Mapping[str, Any]) -> int:
    try:
        return int(entry.get("revision") or 0)
    except (TypeError, ValueError):
        return 0


def reinstalls(history: Sequence[Mapping[str, Any]]) -> list[Reinstall]:
    """The platform's revisions among the last :data:`LOOP_WINDOW` that wrote the chart and values of its
    previous write. Revisions it did not write never count: they are what may have moved the release, and a
    revision that changes what the platform wants (new Extra Agent Values, a new version) is a new write,
    not a re-install, even back to earlier values."""
    ordered = sorted(history, key=_revision)
    window = {_revision(r) for r in ordered[-LOOP_WINDOW:]}
    found: list[Reinstall] = []
    previous = ""
    between: list[str] = []
    for entry in ordered:
        mark = av.platform_revision(str(entry.get("description") or ""))
        if mark is None:
            said = str(entry.get("description") or "")[:120]  # a failed one's is helm's whole error
            between.append(f"revision {_revision(entry)} {entry.get('status')} ({said})")
            continue
        if mark.digest == previous and _revision(entry) in window:
            found.append(Reinstall(_revision(entry), mark.why, between))
        previous, between = mark.digest, []
    return found


def _pods(cluster_side: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list((cluster_side or {}).get("agentPods") or [])


def _log_lines(pods: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Each pod's log, then what its last crashed container left in its status (the chart's
    ``FallbackToLogsOnError``): a restarted agent's refusal is there when its new log is still empty."""
    lines = [(str(p.get("name")), str(line)) for p in pods for line in p.get("log") or []]
    for pod in pods:
        last = str((pod.get("lastTerminated") or {}).get("message") or "")
        lines += [(f"{pod.get('name')} (last terminated)", line) for line in last.splitlines()]
    return lines


def _pod_line(pod: Mapping[str, Any]) -> str:
    ready = "1/1" if pod.get("ready") else "0/1"
    health = pod.get("health") or {}
    what = health.get("reason") or str(pod.get("phase") or "")
    text = f"pod {pod.get('name')}: {pod.get('phase')}, {ready} ready, {pod.get('restarts', 0)} restarts"
    if health.get("reason"):
        text += f"; {what}: {health.get('message')}"
    if pod.get("logError"):
        text += f"; its log cannot be read: {pod.get('logError')}"
    return text


def _first(lines: Sequence[tuple[str, str]], needle: str) -> str | None:
    for pod, line in lines:
        if needle in line:
            return f"{pod} logs: {line.strip()}"
    return None


def _step(message: str) -> str:
    for step in st.Step:
        if message.startswith(step.value):
            return step.value
    return ""


_RESOLUTIONS = {
    st.OFFLINE: (
        "Expected for a short while after connecting. If it lasts, the agent never registered: work through "
        '"Failures before the first connection" (its pod and logs in the connected cluster).'
    ),
    st.NO_ONLINE_PEERS: (
        "The agent registered before but none of its sessions answers now: its pod probably crashed or "
        "restarted. Check the agent pod's status and logs in its namespace."
    ),
    st.PEER_HEALTH_CHECK: "A platform-side error: read the platform's own logs.",
    st.LOCAL_CLIENT: (
        "The platform's own mesh client is down: a platform-side problem. Check the platform's health and "
        "logs (and its access key loft-platform)."
    ),
    st.CLUSTER_UID: (
        "Use a fresh connect command per physical cluster. If one cluster was connected twice, delete the "
        "duplicate Cluster object instead of reusing its token."
    ),
    st.HEALTH_CHECK_CLUSTER: (
        "The platform could not list the agent pods: read status.message, then check that the platform can "
        "still reach the cluster's API and may list pods in the agent namespace."
    ),
    st.DEPLOY_PROXY_ONLY_AGENT: (
        "Deploying or refreshing the bridge failed for real: read status.message and fix that cause (the "
        "bridge runs the new agent's image with the agent's service account)."
    ),
}
_INIT_RESOLUTIONS = {
    st.Step.CLIENT.value: (
        "The connected cluster's API is unreachable or its credentials are invalid; for a spec.config "
        "cluster that is the kubeconfig the platform holds in the referenced Secret."
    ),
    st.Step.NAMESPACE.value: "Usually a permissions problem (Forbidden) of the platform's credentials there.",
    st.Step.RELEASE.value: (
        "Usually a permissions problem (Forbidden) installing the chart, or helm's own error in the message."
    ),
    st.Step.RBAC.value: "Usually a permissions problem (Forbidden) creating the platform's RBAC roles.",
}
_POD_RESOLUTION = (
    "A standard pod health problem: check the agent pod's events and logs in its namespace and fix the "
    "scheduling, image or crash cause. status.phase Initialized does not mean healthy."
)


def _namespace_drift(diagnostics: Mapping[str, Any], online: list[Mapping[str, Any]]) -> str:
    """An evidence line when the online agents run in a namespace other than spec.managementNamespace."""
    wanted = str(diagnostics.get("managementNamespace") or "")
    elsewhere = sorted({str(s.get("namespace")) for s in online if s.get("namespace")} - {wanted})
    if not wanted or not elsewhere:
        return ""
    return f"the agent runs in namespace {', '.join(elsewhere)}; spec.managementNamespace is {wanted}"


def triage(cluster: Mapping[str, Any], diagnostics: Mapping[str, Any]) -> list[Verdict]:
    status = cluster.get("status") or {}
    phase, reason, message = (str(status.get(k) or "") for k in ("phase", "reason", "message"))
    reported = f"status.phase={phase!r} status.reason={reason!r}" + (f": {message}" if message else "")
    side = diagnostics.get("cluster")
    pods = _pods(side)
    logs = _log_lines(pods)
    sessions = list(diagnostics.get("sessions") or [])
    online = [s for s in sessions if s.get("online")]
    verdicts: list[Verdict] = []

    # -- 1. upgrades ---------------------------------------------------------------------------------
    bridge = (side or {}).get("bridge")
    if bridge and not bridge.get("error"):
        ready = f"{bridge.get('readyReplicas', 0)}/{bridge.get('replicas', 0)} ready"
        evidence = [f"deployment {br.BRIDGE_NAME} exists ({ready}, created {bridge.get('created')})"]
        evidence += [_pod_line(p) for p in bridge.get("pods") or []]
        if reason == st.DEPLOY_PROXY_ONLY_AGENT:
            verdicts.append(
                Verdict(
                    UPGRADE,
                    "status.reason is DeployProxyOnlyAgent",
                    [reported, *evidence],
                    _RESOLUTIONS[st.DEPLOY_PROXY_ONLY_AGENT],
                )
            )
        elif bridge.get("problem") or not bridge.get("readyReplicas"):
            if bridge.get("problem"):
                evidence.append(f"the bridge's problem: {bridge['problem']}")
            verdicts.append(
                Verdict(
                    UPGRADE,
                    f"{br.BRIDGE_NAME} deployment never becomes ready",
                    evidence,
                    "The bridge runs with the agent's service account and the new agent's image, so it fails "
                    "for the reasons the agent would: check its pod's events and logs as you would the "
                    "agent's (image, namespace resources, service account permissions).",
                )
            )
        else:
            verdicts.append(
                Verdict(
                    UPGRADE,
                    f"{br.BRIDGE_NAME} deployment exists, but status.reason never changes",
                    [*evidence, f"the status keeps what it said before the upgrade: {reported}"],
                    "The common stall: the platform waits silently for the bridge's tunnel session. Give it "
                    "a few minutes; if it stays, check the bridge pod and the tunnel path with verbose agent "
                    "logs (Extra Agent Values env LOFT_LOG_TSNET_AGENT: true).",
                )
            )
    history = list(((side or {}).get("helm") or {}).get("history") or [])
    if history:
        last = max(history, key=lambda r: int(r.get("revision") or 0))
        if str(last.get("status")) in br.PENDING:
            verdicts.append(
                Verdict(
                    UPGRADE,
                    "The upgrade seems to loop: a stuck or partially applied Helm release",
                    [
                        f"helm history: revision {last.get('revision')} is {last.get('status')} "
                        f"({last.get('chart')}, {last.get('description')})"
                    ],
                    "Every later upgrade fails while it is pending. The platform rolls it back to the last "
                    "good revision once it has stayed pending for agent_release_stuck_seconds; by hand: "
                    "helm rollback loft <last deployed revision> -n <namespace>. Do not edit the chart "
                    "version or the values the platform manages.",
                )
            )
        again = reinstalls(history)
        if len(again) >= LOOP_REINSTALLS:
            resolution = (
                "Something keeps changing the release away from what the platform wants (a chart version "
                "or values edited by hand or re-applied by another tool, drifting Extra Agent Values): "
                "change the Cluster's loft.sh/agent-values annotation instead, and leave the release to the "
                "platform."
            )
            if any(not r.between for r in again):
                resolution += (
                    " Where nothing else wrote in between, its own write does not satisfy it: the chart it "
                    "installs must be exactly its version (the agent_chart setting), and the values must "
                    "read back from helm as written; its log says why it upgrades."
                )
            verdicts.append(
                Verdict(
                    UPGRADE,
                    "The upgrade seems to loop indefinitely, repeatedly reinstalling the agent",
                    [
                        f"helm history: {av.PLATFORM_WRITER} wrote the same chart and values again "
                        f"{len(again)} times in the last {LOOP_WINDOW} revisions",
                        *(r.line() for r in again),
                    ],
                    resolution,
                )
            )
    if reason == st.INITIALIZE_CLUSTER and "does not exist in namespace" in message:
        verdicts.append(
            Verdict(
                UPGRADE,
                "The upgrade loops with errors about a Helm release that doesn't exist",
                [reported, f"spec.managementNamespace is {diagnostics.get('managementNamespace')}"],
                "Set spec.managementNamespace to the namespace the agent's Deployment runs in; besides it "
                "the platform only looks in loft and vcluster-platform.",
            )
        )

    # -- 2. status.reason ----------------------------------------------------------------------------
    bridge_said_it = any(v.row == "status.reason is DeployProxyOnlyAgent" for v in verdicts)
    if reason in _RESOLUTIONS and not bridge_said_it:
        evidence = [reported]
        if reason in (st.OFFLINE, st.NO_ONLINE_PEERS):
            evidence.append(
                f"tunnel sessions: {len(sessions)} known to the platform, {len(online)} online"
                + "".join(f"; {s.get('hostname')} last seen {s.get('lastSeen')}" for s in sessions[:3])
            )
            if side is not None and not side.get("reachable"):
                evidence.append(
                    f"the cluster cannot be read ({side.get('via')}): {side.get('error')}; give the "
                    "connected cluster's own context (--context) to read its agent there"
                )
        if reason == st.LOCAL_CLIENT:
            local = diagnostics.get("localClient") or {}
            evidence.append(
                f"the platform's mesh client: connected={local.get('connected')} {local.get('error')}"
            )
        verdicts.append(Verdict(DURING, f"status.reason {reason}", evidence, _RESOLUTIONS[reason]))
    elif reason == st.INITIALIZE_CLUSTER:
        step = _step(message)
        verdicts.append(
            Verdict(
                DURING,
                f"status.reason InitializeCluster ({step or 'see the message'})",
                [reported],
                _INIT_RESOLUTIONS.get(step, "Read status.message: it names the step that failed."),
            )
        )
    elif reason in (
        st.POD_NOT_FOUND,
        st.POD_PENDING,
        st.POD_TERMINATING,
        st.POD_NOT_READY,
        st.POD_CRASH_LOOP,
        st.POD_IMAGE_PULL,
    ):
        evidence = [reported, *(_pod_line(p) for p in pods)]
        for pod in pods[:1]:
            evidence += [f"{pod.get('name')} logs: {line}" for line in (pod.get("log") or [])[-3:]]
        verdicts.append(Verdict(DURING, f"A pod condition: {reason}", evidence, _POD_RESOLUTION))

    # -- 3. what the agent's logs say -------------------------------------------------------------------
    # While the cluster is offline its agent's logs tell why: those rows come first.
    reason_rows = len(verdicts)
    offline = reason in (st.OFFLINE, st.NO_ONLINE_PEERS)
    found = _first(logs, COORDINATOR_UNREACHABLE)
    if found:
        verdicts.append(
            Verdict(
                BEFORE,
                "Agent logs report the coordinator is unreachable",
                [found],
                "Allow outbound HTTPS from the connected cluster to the platform's host (firewall, egress "
                "policy, proxy); check it with curl -kv https://<platform>/derp/probe from a pod there "
                "(-k: the platform's certificate is signed by vplane's own CA).",
            )
        )
    found = _first(logs, "token is empty") or _first(logs, "url is empty")
    if found:
        verdicts.append(
            Verdict(
                BEFORE,
                "Agent logs report token is empty or url is empty",
                [found],
                "The Helm values never reached the agent: regenerate the connect command (vplane platform "
                "connect cluster) and apply it unedited.",
            )
        )
    found = _first(logs, "no auth key provided")
    if found:
        verdicts.append(
            Verdict(
                BEFORE,
                "Registration fails with no auth key provided",
                [found],
                "The token was empty when it registered: regenerate and reapply the connect command.",
            )
        )
    found = _first(logs, "invalid access key") or _first(logs, "access key revoked")
    if found:
        verdicts.append(
            Verdict(
                BEFORE,
                "Registration fails on an invalid access key",
                [found],
                "The key was deleted, disabled or expired. Connecting again reuses the same key, so re-enable "
                "it (AccessKey cluster-<name>) or delete it so the next connect command makes a new one, "
                "then reapply the command.",
            )
        )
    counts = [
        int(m.group(1)) for _, line in logs if CANNOT_REACH in line for m in [_FAILURES.search(line)] if m
    ]
    if counts:
        verdicts.append(
            Verdict(
                LOSS,
                "The cluster repeatedly flips online and offline",
                [f"agent logs: {CANNOT_REACH} {len(counts)} times, failure counter up to {max(counts)}"],
                "One occurrence is a blip; repeated ones point at an unstable path to the platform "
                "(intermittent egress, TLS-inspecting proxy, flaky load balancer): escalate to whoever owns "
                "the cluster's egress.",
            )
        )
    if offline and len(verdicts) > reason_rows:
        verdicts = [*verdicts[reason_rows:], *verdicts[:reason_rows]]
    healthy_pods = [p for p in pods if p.get("ready") and p.get("phase") == "Running"]
    if (
        reason in (st.OFFLINE, st.NO_ONLINE_PEERS)
        and healthy_pods
        and not any(v.section == BEFORE for v in verdicts)
    ):
        verdicts.append(
            Verdict(
                LOSS,
                "The cluster shows offline, but the agent pod looks healthy",
                [_pod_line(p) for p in healthy_pods],
                "Check the platform itself (its pods, a restart or rollout): it marks a session offline when "
                "the platform component that held it stops reporting, whatever the agent's health.",
            )
        )

    # -- 4. nothing wrong -----------------------------------------------------------------------------
    if not verdicts:
        if phase == st.PHASE_INITIALIZED and not reason:
            evidence = [reported, *(_pod_line(p) for p in pods)]
            if diagnostics.get("mode") == st.Mode.TUNNEL.value:
                evidence.append(f"tunnel sessions: {len(online)} online")
            resolution = "Nothing to do."
            moved = _namespace_drift(diagnostics, online)
            if moved:
                evidence.append(moved)
                resolution = (
                    "Nothing to do now; but keep spec.managementNamespace in sync with where the agent runs "
                    "(the runbook's last section): a mismatch surfaces later as an upgrade loop."
                )
            verdicts.append(
                Verdict(HEALTHY, "Initialized with no reason: connected and healthy", evidence, resolution)
            )
        elif not phase and not reason:
            verdicts.append(
                Verdict(
                    BEFORE,
                    "Still initializing (empty phase and reason)",
                    [reported],
                    "Expected briefly for a new cluster; if it lasts, check the agent's pod and logs.",
                )
            )
        else:
            verdicts.append(Verdict(HEALTHY, "No runbook row matches", [reported], "Read status.message."))
    return verdicts

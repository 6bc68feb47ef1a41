"""The upgrade bridge ``proxy-only-agent`` and the release's stuck states: pure decisions, no I/O.

When the agent's chart version is not exactly the platform's (spec §13), the platform upgrades the release
through a temporary Deployment ``proxy-only-agent`` in the agent's namespace: the new release's agent pod
(same service account and image, rendered from the chart the platform installs) with ``--proxy-only``, so
it only holds a tunnel session. The upgrade runs through that session, the bridge is removed when it
succeeds. Because the bridge runs the new agent's image and configuration, a bridge that cannot come
online is a preview of an agent that would not: the primary is left alone until the bridge works.

Waiting for the bridge's session never writes the status (the runbook: the bridge "simply waiting to come
online ... doesn't set a reason", and a bridge that never becomes ready is read from its pods' events):
status stays what it said, so the phase does not turn Failed and the cluster's tenants stay managed while
the old agent still works. After ``agent_bridge_timeout_seconds`` the platform's log line of each wait
names a cause that waiting will not cure (its pod in ImagePullBackOff or CrashLoopBackOff, its ReplicaSet
unable to create pods, the Deployment past its progress deadline), as ``vplane doctor cluster`` does.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson
import yaml

from vplane.kube.objects import Obj
from vplane.platform.clusters import status as st
from vplane.platform.clusters import values as av

BRIDGE_NAME = "proxy-only-agent"
BRIDGE_LABEL = ("app", "proxy-only-agent")
"""The bridge's pods do not carry ``app=loft``: they are not the agent the pod check reads."""
AGENT_DEPLOYMENT = "loft"
SPEC_ANNOTATION = "vplane.io/bridge-spec"
"""A digest of what the platform built; a different one means the bridge is refreshed (replaced)."""
TARGET_ANNOTATION = "vplane.io/bridge-target-chart"
MANAGED_BY = ("app.kubernetes.io/managed-by", "vplane-platform")
PROXY_ONLY_ARG = "--proxy-only"
MODE_LABEL = "agent-mode"
"""The label an agent's session carries (``vplane.agent.agent.MODE_LABEL``; the layers share no module)."""
MODE_PROXY_ONLY = "proxy-only"
NAMESPACE_LABEL = "agent-namespace"
"""The agent's own namespace as its session tells it (``vplane.agent.agent.NAMESPACE_LABEL``)."""

LEGACY_NAMESPACES = ("loft", "vcluster-platform")
"""Where the platform also looks for the agent release (spec §13.6): the legacy and the current default.
No other namespace is guessed."""


class BridgeBuildError(ValueError):
    """The bridge Deployment cannot be built from the chart (DeployProxyOnlyAgent)."""


def needs_bridge(mode: st.Mode, current: av.Release | None, version: str) -> bool:
    """Only tunnel clusters need the bridge (their API is reached through the agent that is upgraded), and
    only for a chart version change: a values change is a rolling update of the same chart, which keeps
    the old agent until the new one is Ready (its readiness is its tunnel session)."""
    if mode is not st.Mode.TUNNEL or current is None:
        return False
    return av.chart_version_of(current.chart) != version


def release_namespaces(spec_namespace: str) -> list[str]:
    """The namespaces to look for the release in, in order: ``spec.managementNamespace``, then the two
    defaults."""
    return [spec_namespace, *(ns for ns in LEGACY_NAMESPACES if ns != spec_namespace)]


def agents_elsewhere(searched: Sequence[str], agent_namespaces: Sequence[str]) -> list[str]:
    """The namespaces connected agents say they run in, besides those the release is looked for in."""
    return sorted({ns for ns in agent_namespaces if ns and ns not in searched})


def missing_release_message(searched: Sequence[str], agent_namespaces: Sequence[str]) -> str:
    """Why a cluster's release cannot be upgraded: it is in none of the namespaces looked at."""
    where = ", ".join(searched)
    text = f'the agent\'s Helm release "{av.RELEASE_NAME}" does not exist in namespace {where}'
    elsewhere = agents_elsewhere(searched, agent_namespaces)
    if elsewhere:
        text += f"; the connected agent runs in namespace {', '.join(elsewhere)}"
    return text + (
        ": set the Cluster's spec.managementNamespace to the namespace the agent's Deployment runs in "
        "(only loft and vcluster-platform are looked at besides it)"
    )


# -- building the bridge -----------------------------------------------------------------------------


def agent_deployment(manifests: str) -> Obj:
    """The agent Deployment in ``helm template`` output (the platform's own chart: trusted YAML)."""
    try:
        docs = list(yaml.safe_load_all(manifests))
    except yaml.YAMLError as exc:
        raise BridgeBuildError(f"reading the rendered chart: {exc}") from None
    for doc in docs:
        if (
            isinstance(doc, dict)
            and doc.get("kind") == "Deployment"
            and (doc.get("metadata") or {}).get("name") == AGENT_DEPLOYMENT
        ):
            return doc
    raise BridgeBuildError(f"the chart renders no Deployment {AGENT_DEPLOYMENT!r}")


def _digest(obj: Any) -> str:
    return hashlib.sha256(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def bridge_deployment(agent: Obj, namespace: str, target_chart: str) -> Obj:
    """The bridge, made of the agent Deployment the platform is about to install: its pod spec (service
    account, image, environment, probes, security context) with ``--proxy-only``, one replica, and
    labels of its own."""
    template = copy.deepcopy((agent.get("spec") or {}).get("template") or {})
    pod_spec = template.get("spec") or {}
    containers = pod_spec.get("containers") or []
    if not containers:
        raise BridgeBuildError(f"the chart's Deployment {AGENT_DEPLOYMENT!r} has no container")
    agent_container = containers[0]
    args = list(agent_container.get("args") or [])
    if PROXY_ONLY_ARG not in args:
        args.append(PROXY_ONLY_ARG)
    agent_container["args"] = args
    pod_spec["containers"] = [agent_container]
    meta = template.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != st.AGENT_LABEL[0]}
    labels[BRIDGE_LABEL[0]] = BRIDGE_LABEL[1]
    template["metadata"] = {**meta, "labels": labels}
    spec: dict[str, Any] = {
        "replicas": 1,
        "selector": {"matchLabels": {BRIDGE_LABEL[0]: BRIDGE_LABEL[1]}},
        "template": template,
    }
    digest = _digest(spec)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": BRIDGE_NAME,
            "namespace": namespace,
            "labels": {BRIDGE_LABEL[0]: BRIDGE_LABEL[1], MANAGED_BY[0]: MANAGED_BY[1]},
            "annotations": {SPEC_ANNOTATION: digest, TARGET_ANNOTATION: target_chart},
        },
        "spec": spec,
    }


def bridge_current(existing: Obj | None, wanted: Obj) -> Literal["create", "replace", "keep"]:
    """Create the bridge, refresh it (the chart or values changed since it was made), or keep it."""
    if existing is None:
        return "create"
    have = ((existing.get("metadata") or {}).get("annotations") or {}).get(SPEC_ANNOTATION)
    want = wanted["metadata"]["annotations"][SPEC_ANNOTATION]
    return "keep" if have == want else "replace"


# -- waiting for it ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Session:
    """An agent session as the platform sees it (decoupled from the coordinator's type)."""

    id: str
    hostname: str
    labels: Mapping[str, str]
    online: bool
    connected_at: float


def bridge_sessions(sessions: Sequence[Session]) -> list[Session]:
    """The bridge's online sessions, newest first."""
    mine = [s for s in sessions if s.online and s.labels.get(MODE_LABEL) == MODE_PROXY_ONLY]
    return sorted(mine, key=lambda s: -s.connected_at)


def primary_sessions(sessions: Sequence[Session]) -> list[Session]:
    """The primary agent's online sessions (anything but the bridge)."""
    return [s for s in sessions if s.online and s.labels.get(MODE_LABEL) != MODE_PROXY_ONLY]


_REAL_POD_ERRORS = frozenset({st.POD_CRASH_LOOP, st.POD_IMAGE_PULL})


def bridge_problem(deployment: Obj | None, pods: Sequence[Obj]) -> str:
    """A cause that waiting will not cure, or ``""``: the Deployment cannot create pods (ReplicaFailure)
    or is past its progress deadline, or its newest pod is in ImagePullBackOff or CrashLoopBackOff."""
    for condition in ((deployment or {}).get("status") or {}).get("conditions") or []:
        kind, state = condition.get("type"), condition.get("status")
        reason, message = str(condition.get("reason") or ""), str(condition.get("message") or "")
        if kind == "ReplicaFailure" and state == "True":
            return f"its pods cannot be created: {reason}: {message}".rstrip(": ")
        if kind == "Progressing" and state == "False" and reason == "ProgressDeadlineExceeded":
            return f"its rollout is past its progress deadline: {message}".rstrip(": ")
    if not pods:
        return ""

    def newest(pod: Obj) -> tuple[str, str]:
        meta = pod.get("metadata") or {}
        return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")

    pod = max(pods, key=newest)
    reason, message = st.pod_health(pod)
    if reason in _REAL_POD_ERRORS:
        return f"{reason}: {message.replace('agent pod', 'pod', 1)}"
    return ""


# -- a release stuck in a pending state ---------------------------------------------------------------

PENDING = frozenset({"pending-install", "pending-upgrade", "pending-rollback"})
UNINSTALLING = "uninstalling"
"""Someone runs ``helm uninstall`` (or one was cut short): writing the release meanwhile would race the
uninstall, which then purges the new revision's record and leaves its objects behind or half-deleted."""
UNINSTALLED = "uninstalled"
"""What ``helm uninstall --keep-history`` leaves: the release is gone, only its history stays."""
IN_PROGRESS = PENDING | {UNINSTALLING}


@dataclass(frozen=True)
class Revision:
    """One entry of ``helm history -o json``."""

    revision: int
    status: str
    chart: str
    description: str = ""


Recovery = Literal["wait", "rollback", "forget", "uninstall"]


def pending_recovery(
    history: Sequence[Revision], pending_for: float, stuck_after: float
) -> tuple[Recovery, int | None]:
    """What to do with a release whose last operation is still in progress: wait while it may be running
    (another helm, another platform replica), then roll back to the last good revision (the runbook's
    resolution for a stuck pending-upgrade), or, with none to roll back to (an interrupted install),
    forget the pending record so the next install adopts what it left. A stuck uninstall is finished, as
    whoever started it meant: what follows it is decided as for a release that is not there."""
    if pending_for < stuck_after:
        return "wait", None
    latest = max(history, key=lambda r: r.revision) if history else None
    if latest is not None and latest.status == UNINSTALLING:
        return "uninstall", None
    good = [
        r.revision
        for r in history
        if r.status in ("deployed", "superseded") and (latest is None or r.revision < latest.revision)
    ]
    if good:
        return "rollback", max(good)
    return "forget", latest.revision if latest is not None else None

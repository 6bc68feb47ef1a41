"""What a Cluster's status says: pure decisions, an injectable clock, no I/O.

The reconcile loop (:mod:`vplane.platform.clusters.controller`) runs its steps in order and hands each
result to a function here; the first one that returns an :class:`Outcome` ends the pass and becomes
``status.phase`` / ``status.reason`` / ``status.message``. The mapping is the connected-cluster runbook's
("Failures during reconciliation"):

- ``Offline`` and ``NoOnlinePeers`` requeue: ``phase`` is empty, also after the cluster was
  ``Initialized`` (the phase resets on connection loss).
- ``PeerHealthCheck``, ``InitializeCluster``, ``DeployProxyOnlyAgent``, ``ClusterUID``,
  ``HealthCheckCluster`` and ``LocalClient`` are hard errors: ``phase`` is ``Failed``.
- A pod condition (``NotFound``, ``Pending``, ``Terminating``, ``NotReady``, ``CrashLoopBackOff``,
  ``ImagePullBackOff``) completes the pass: ``phase`` is ``Initialized`` with that reason; a healthy
  agent gives ``Initialized`` with no reason.

The order of the checks is ours (upstream's is not published; docs/connected-clusters.md records it).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from vplane.kube import errors
from vplane.kube.objects import Obj

# -- phases and reasons (runbook wording) ------------------------------------------------------------

PHASE_INITIALIZING = ""
PHASE_INITIALIZED = "Initialized"
PHASE_FAILED = "Failed"

OFFLINE = "Offline"
NO_ONLINE_PEERS = "NoOnlinePeers"
PEER_HEALTH_CHECK = "PeerHealthCheck"
INITIALIZE_CLUSTER = "InitializeCluster"
DEPLOY_PROXY_ONLY_AGENT = "DeployProxyOnlyAgent"
CLUSTER_UID = "ClusterUID"
HEALTH_CHECK_CLUSTER = "HealthCheckCluster"
LOCAL_CLIENT = "LocalClient"

POD_NOT_FOUND = "NotFound"
POD_PENDING = "Pending"
POD_TERMINATING = "Terminating"
POD_NOT_READY = "NotReady"
POD_CRASH_LOOP = "CrashLoopBackOff"
POD_IMAGE_PULL = "ImagePullBackOff"

AGENT_LABEL = ("app", "loft")
"""The agent pods' label (``kubectl get pods -n vcluster-platform -l app=loft``)."""
DEFAULT_MANAGEMENT_NAMESPACE = "vcluster-platform"
CLUSTER_UID_ANNOTATION = "loft.sh/cluster-uid"
AGENT_VALUES_ANNOTATION = "loft.sh/agent-values"


class Mode(enum.Enum):
    """How the platform reaches a cluster's API."""

    LOCAL = "local"
    """``spec.local``: the platform's own API server; no agent, no tunnel."""
    DIRECT = "direct"
    """``spec.config``: a kubeconfig the platform holds in a Secret."""
    TUNNEL = "tunnel"
    """``spec.networkPeer`` without ``spec.config``: through the agent's tunnel session."""


def mode_of(spec: Mapping[str, Any]) -> Mode | None:
    """The connection mode; None when the spec names none (admission refuses such a Cluster)."""
    if spec.get("local"):
        return Mode.LOCAL
    config = spec.get("config")
    if isinstance(config, Mapping) and config.get("secretName"):
        return Mode.DIRECT
    if spec.get("networkPeer"):
        return Mode.TUNNEL
    return None


def management_namespace(spec: Mapping[str, Any]) -> str:
    return str(spec.get("managementNamespace") or DEFAULT_MANAGEMENT_NAMESPACE)


@dataclass(frozen=True)
class Outcome:
    phase: str
    reason: str
    message: str
    kind: Literal["requeue", "failed", "done"]
    """What the pass ended on: a wait for the connection, a hard error, or a completed pass."""


def describe(exc: BaseException) -> str:
    """An error as a status message says it: a Kubernetes error's own message, else the exception's."""
    if isinstance(exc, errors.StatusError):
        return exc.message
    return str(exc) or type(exc).__name__


def requeue(reason: str, message: str) -> Outcome:
    return Outcome(PHASE_INITIALIZING, reason, message, "requeue")


def failed(reason: str, message: str) -> Outcome:
    return Outcome(PHASE_FAILED, reason, message, "failed")


def initialized(reason: str = "", message: str = "") -> Outcome:
    return Outcome(PHASE_INITIALIZED, reason, message, "done")


SILENT = Outcome(PHASE_INITIALIZING, "", "", "requeue")
"""Requeue without writing anything (the status keeps what it says)."""


# -- gates, in the order the loop runs them ----------------------------------------------------------


def local_client_gate(mode: Mode, local_client_up: bool, error: str = "") -> Outcome | None:
    """The platform's own mesh node (its "local client") must be up to reach agent tunnels.

    Only tunnel clusters need it. The runbook's "for the cluster the platform itself runs on, the same
    failure is retried silently" holds trivially: a ``spec.local`` cluster never uses the tunnel."""
    if mode is not Mode.TUNNEL or local_client_up:
        return None
    return failed(
        LOCAL_CLIENT,
        "the platform's own mesh client is not connected to its coordinator"
        + (f": {error}" if error else "")
        + "; check the platform's logs",
    )


@dataclass(frozen=True)
class Peers:
    """What the platform knows of one cluster's agent tunnel sessions."""

    registered: int
    """Sessions the coordinator knows of, online or not (forgotten after its GC period)."""
    online: int
    """Sessions currently registered and online."""
    responding: int
    """Online sessions that answered the platform's health check through the tunnel."""


def peer_gate(
    mode: Mode,
    peers: Peers,
    created_at: float | None,
    now: float,
    offline_grace_seconds: float,
    *,
    connected_before: bool = False,
) -> Outcome | None:
    """Offline / NoOnlinePeers for a tunnel cluster; None when a session responds.

    A new cluster's reason stays blank for ``offline_grace_seconds`` after its creation (the runbook:
    "status.reason itself is also blank during the earliest part of the wait, then becomes Offline once
    the platform can confirm there's no online agent tunnel yet"). ``connected_before``: the platform has
    reached the cluster before (it recorded its UID), so no session on record means the platform forgot
    the idle ones (after about 15 minutes offline), not that the agent never came."""
    if mode is not Mode.TUNNEL:
        return None
    if peers.responding > 0:
        return None
    if peers.registered == 0:
        if connected_before:
            return requeue(
                OFFLINE,
                "the agent connected before, but it has been offline long enough that the platform forgot "
                "its tunnel sessions; it is picked up again when the agent reconnects",
            )
        if created_at is not None and now - created_at < offline_grace_seconds:
            return requeue("", "")
        return requeue(OFFLINE, "no agent has connected to the platform for this cluster yet")
    if peers.online == 0:
        return requeue(
            NO_ONLINE_PEERS,
            f"the agent registered before, but none of its {peers.registered} tunnel session(s) is online",
        )
    return requeue(
        NO_ONLINE_PEERS,
        f"none of the agent's {peers.online} online tunnel session(s) answered the platform's health check",
    )


def offline_grace_left(
    mode: Mode,
    peers: Peers,
    created_at: float | None,
    now: float,
    offline_grace_seconds: float,
    *,
    connected_before: bool = False,
) -> float | None:
    """Seconds until a blank reason should turn into Offline (to requeue exactly then), if it will."""
    if mode is not Mode.TUNNEL or peers.registered or created_at is None or connected_before:
        return None
    left = created_at + offline_grace_seconds - now
    return left if left > 0 else None


GATEWAY_NO_SESSION = "has no online agent session"
"""In the gateway's 503 when the cluster's tunnel session went away (``gateway.py`` writes it)."""
GATEWAY_UNREACHABLE = "through its agent:"
"""In the gateway's 503 when the relay to the agent failed."""


def tunnel_lost(mode: Mode | None, outcome: Outcome) -> Outcome:
    """A tunnel cluster's step that failed because the tunnel went away after the health check passed is
    the tunnel's state, not a fault of the step: NoOnlinePeers, requeued, rather than a Failed phase that
    would stand until the next pass."""
    steps = (INITIALIZE_CLUSTER, HEALTH_CHECK_CLUSTER, DEPLOY_PROXY_ONLY_AGENT)
    if mode is not Mode.TUNNEL or outcome.reason not in steps:
        return outcome
    if GATEWAY_NO_SESSION not in outcome.message and GATEWAY_UNREACHABLE not in outcome.message:
        return outcome
    return requeue(NO_ONLINE_PEERS, f"the agent's tunnel went away during the pass: {outcome.message}")


def peer_check_failed(error: str) -> Outcome:
    return failed(PEER_HEALTH_CHECK, f"health-checking the agent's tunnel sessions failed: {error}")


class Step(enum.Enum):
    """The steps of InitializeCluster; the message says which one failed."""

    CLIENT = "build a client for the cluster"
    NAMESPACE = "create the management namespace"
    RELEASE = "install or upgrade the agent's CRDs and Helm release"
    RBAC = "install the platform's RBAC roles"


def step_failed(step: Step, error: str, detail: str = "") -> Outcome:
    what = step.value + (f" {detail}" if detail else "")
    return failed(INITIALIZE_CLUSTER, f"{what}: {error}")


def cluster_uid_gate(
    name: str, uid: str, recorded: str, others: Mapping[str, str]
) -> tuple[Outcome | None, bool]:
    """Refuse two Cluster objects on one physical cluster (its ``kube-system`` namespace UID).

    ``recorded`` is this Cluster's ``loft.sh/cluster-uid`` annotation, ``others`` maps the other
    Clusters' names to theirs. Returns the failure (or None) and whether to record ``uid`` now."""
    if not uid:
        return failed(CLUSTER_UID, "the cluster's kube-system namespace has no UID"), False
    for other, other_uid in sorted(others.items()):
        if other != name and other_uid == uid:
            return (
                failed(
                    CLUSTER_UID,
                    f'this is the same cluster as Cluster "{other}" (kube-system namespace UID {uid}); '
                    "one physical cluster can be connected only once: delete the duplicate Cluster and "
                    "use a fresh connect command per cluster",
                ),
                False,
            )
    if recorded and recorded != uid:
        return (
            failed(
                CLUSTER_UID,
                f"this Cluster was connected to the cluster with kube-system namespace UID {recorded}, but "
                f"its connection now reaches the one with UID {uid}: the agent's token was probably copied "
                "from another cluster's connect command",
            ),
            False,
        )
    return None, not recorded


def health_check_failed(namespace: str, error: str) -> Outcome:
    return failed(HEALTH_CHECK_CLUSTER, f"listing the agent pods in namespace {namespace}: {error}")


def deploy_proxy_only_agent_failed(error: str) -> Outcome:
    """The upgrade flow's bridge failed for real (the upgrade flow arrives with issue 11 item 7)."""
    return failed(DEPLOY_PROXY_ONLY_AGENT, error)


# -- agent pods, as a kubelet reports them -----------------------------------------------------------

_IMAGE_PULL_WAITING = frozenset({"ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull", "InvalidImageName"})


def pod_health(pod: Obj) -> tuple[str, str]:
    """``(reason, message)`` for one agent pod; the reason is empty when the pod is healthy.

    Read from what a kubelet writes: ``metadata.deletionTimestamp`` (Terminating), the containers'
    ``state.waiting.reason`` (``CrashLoopBackOff``; ``ErrImagePull`` and the other pull failures read as
    ``ImagePullBackOff``, the state kubelet settles in), ``status.phase`` (Pending) and the ``Ready``
    condition (NotReady)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    name = str(meta.get("name", ""))
    if meta.get("deletionTimestamp"):
        return POD_TERMINATING, f"agent pod {name} is terminating"
    containers = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    for cs in containers:
        waiting = ((cs or {}).get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        detail = str(waiting.get("message") or reason)
        if reason == POD_CRASH_LOOP:
            return POD_CRASH_LOOP, f"agent pod {name}, container {cs.get('name', '')}: {detail}"
        if reason in _IMAGE_PULL_WAITING:
            return POD_IMAGE_PULL, f"agent pod {name}, container {cs.get('name', '')}: {detail}"
    phase = str(status.get("phase") or "Pending")
    conditions = {str(c.get("type")): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    if phase == "Pending":
        scheduled = conditions.get("PodScheduled") or {}
        detail = str(scheduled.get("message") or "") if scheduled.get("status") == "False" else ""
        return POD_PENDING, f"agent pod {name} is pending" + (f": {detail}" if detail else "")
    if phase != "Running":
        return POD_NOT_READY, f"agent pod {name} has phase {phase}"
    ready = conditions.get("Ready") or {}
    if ready.get("status") != "True":
        detail = str(ready.get("message") or "its containers are not ready")
        return POD_NOT_READY, f"agent pod {name} is not ready: {detail}"
    return "", ""


def pods_outcome(pods: Sequence[Obj], namespace: str) -> Outcome:
    """One healthy agent pod is enough (a rollout has old and new pods at once); otherwise the newest
    pod's condition is the reason."""
    if not pods:
        return initialized(
            POD_NOT_FOUND,
            f"no agent pod with label {AGENT_LABEL[0]}={AGENT_LABEL[1]} in namespace {namespace}",
        )
    verdicts = [(pod, pod_health(pod)) for pod in pods]
    if any(reason == "" for _, (reason, _) in verdicts):
        return initialized()

    def newest(item: tuple[Obj, tuple[str, str]]) -> tuple[str, str]:
        meta = item[0].get("metadata") or {}
        return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")

    _, (reason, message) = max(verdicts, key=newest)
    return initialized(reason, message)


# -- the status document -------------------------------------------------------------------------------


def status_patch(
    current: Mapping[str, Any] | None, outcome: Outcome, online: bool | None
) -> dict[str, Any] | None:
    """The ``status`` to write, or None when it already says this. ``online`` is None for clusters where
    it means nothing (direct-kubeconfig and local ones): the field is then removed. A cluster whose
    sessions are registered but none answers (``NoOnlinePeers``) is not online to a reader of the status:
    ``online`` agrees with the reason beside it."""
    if outcome is SILENT:
        return None
    desired: dict[str, Any] = {"phase": outcome.phase, "reason": outcome.reason, "message": outcome.message}
    desired["online"] = False if online and outcome.reason == NO_ONLINE_PEERS else online
    now = dict(current or {})
    if all(now.get(k) == v for k, v in desired.items()):
        return None
    return desired


def requeue_after(
    outcome: Outcome, *, waiting: float, failing: float, resync: float, grace_left: float | None = None
) -> float:
    """When to look again: soon while waiting for a connection, later after a hard error, at the resync
    period once initialized; never after the moment a blank reason must become Offline."""
    delay = {"requeue": waiting, "failed": failing, "done": resync}[outcome.kind]
    if grace_left is not None:
        delay = min(delay, grace_left)
    return max(delay, 0.0)

"""Issue 11 item 6: what a VirtualClusterInstance whose ``spec.clusterRef.cluster`` names a connected cluster
says, decided from the Cluster object and what the instance last recorded (pure; the time is passed in).

Upstream publishes the instance's condition types (``VirtualClusterDeployed``, ``VirtualClusterReady``,
``VirtualClusterOnline``, ...) and the runbook's "tenant clusters ... briefly show as unmanaged", not the
phases or reasons a connected cluster's state gives; these are ours (docs/connected-clusters.md):

| the cluster                                  | deployed there before | phase       | reason                  |
|----------------------------------------------|-----------------------|-------------|-------------------------|
| no Cluster of that name (or being deleted)   | no                    | Pending     | ClusterNotFound         |
| not ``Initialized`` (Offline, Failed, ...)   | no                    | Pending     | ClusterNotInitialized   |
| gone, or unreachable (offline reasons)       | yes                   | Unmanaged   | ClusterNotFound/ClusterOffline |
| reachable but not ``Initialized`` (Failed)    | yes                   | Unmanaged   | ClusterNotInitialized   |
| ``Initialized``                              | -                     | as the replicas say (Ready, Pending, Failed) |
| another cluster than the one it runs on      | yes                   | Failed      | ClusterRefChanged       |

Unmanaged: the tenant's pods keep running on the cluster (nothing deletes them) and stay reachable through
the mesh (their own sessions with the platform do not go through the agent); the platform only cannot apply
changes or read their pods until the cluster is ``Initialized`` again, when the instance is ``Ready`` again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from vplane.kube.objects import Obj
from vplane.platform.clusters import status as st

DEPLOYED_ANNOTATION = "vplane.io/cluster"
"""On the instance: the connected cluster its objects were applied to (so deletion and a platform restart
know where it runs)."""

PHASE_UNMANAGED = "Unmanaged"
REASON_NOT_FOUND = "ClusterNotFound"
REASON_NOT_INITIALIZED = "ClusterNotInitialized"
REASON_OFFLINE = "ClusterOffline"
REASON_REF_CHANGED = "ClusterRefChanged"
OFFLINE_REASONS = frozenset({st.OFFLINE, st.NO_ONLINE_PEERS, st.LOCAL_CLIENT})
"""A Cluster's reasons that mean the platform cannot reach it (the others, say ``DeployProxyOnlyAgent`` or
``InitializeCluster``, come from a cluster it reaches)."""
ONLINE = "VirtualClusterOnline"
DEPLOYED = "VirtualClusterDeployed"
READY = "VirtualClusterReady"

Kind = Literal["local", "connected", "wait", "unmanaged", "failed"]


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Route:
    """Where the instance's replicas run and, when the platform cannot manage them now, what it says."""

    kind: Kind
    cluster: str = ""
    namespace: str = ""
    """With a cluster: ``spec.clusterRef.namespace`` (empty: ``vcluster-<name>``)."""
    phase: str = ""
    reason: str = ""
    message: str = ""


def cluster_ref(vci: Obj) -> tuple[str, str]:
    ref = _d(_d(vci.get("spec")).get("clusterRef"))
    return str(ref.get("cluster") or ""), str(ref.get("namespace") or "")


def deployed_on(vci: Obj) -> str:
    return str(_d(_d(vci.get("metadata")).get("annotations")).get(DEPLOYED_ANNOTATION) or "")


def route(vci: Obj, cluster: Obj | None) -> Route:
    """Decide from the instance and the Cluster its ``spec.clusterRef.cluster`` names (None: no such Cluster)."""
    name, namespace = cluster_ref(vci)
    deployed = deployed_on(vci)
    if not name and not deployed:
        return Route("local")
    if deployed and name != deployed:
        return Route(
            "failed",
            deployed,
            namespace,
            "Failed",
            REASON_REF_CHANGED,
            f'the tenant cluster runs on cluster "{deployed}"; moving it to '
            f"{'the platform' if not name else f'cluster {name!r}'} is not supported: set "
            f'spec.clusterRef.cluster back to "{deployed}", or recreate the instance',
        )
    if cluster is not None and _d(cluster.get("spec")).get("local") and not deployed:
        return Route("local")  # the platform's own cluster: its own placement runs the tenant
    if cluster is None or _d(cluster.get("metadata")).get("deletionTimestamp"):
        state = "does not exist" if cluster is None else "is being deleted"
        if deployed:
            return unmanaged(
                name,
                namespace,
                f'cluster "{name}" {state}: the tenant cluster may still run there, unmanaged',
                REASON_NOT_FOUND,
            )
        return Route(
            "wait",
            name,
            namespace,
            "Pending",
            REASON_NOT_FOUND,
            f'cluster "{name}" {state}: connect it (vplane platform connect cluster {name}) or name a '
            "connected cluster in spec.clusterRef.cluster",
        )
    status = _d(cluster.get("status"))
    phase = str(status.get("phase") or "")
    if phase != "Initialized":
        why = str(status.get("reason") or "") or "initializing"
        detail = str(status.get("message") or "")
        said = f"{why}: {detail}" if detail else why
        if deployed and status.get("reason") and status.get("reason") not in OFFLINE_REASONS:
            # Reachable but stuck (a failed upgrade, a refused release): not offline, which would send the
            # operator after the connection; the platform still applies nothing until it is Initialized.
            return unmanaged(
                name, namespace, f'cluster "{name}" is not initialized ({said})', REASON_NOT_INITIALIZED
            )
        if deployed:
            return unmanaged(name, namespace, f'cluster "{name}" is offline ({said})')
        return Route(
            "wait",
            name,
            namespace,
            "Pending",
            REASON_NOT_INITIALIZED,
            f'cluster "{name}" is not initialized ({said}); the tenant cluster is placed there once it is',
        )
    return Route("connected", name, namespace)


def unmanaged(cluster: str, namespace: str, why: str, reason: str = REASON_OFFLINE) -> Route:
    return Route(
        "unmanaged",
        cluster,
        namespace,
        PHASE_UNMANAGED,
        reason,
        f"{why}; its pods keep running there and the platform manages it again once the cluster is back",
    )


def conditions(
    previous: list[Any], updates: dict[str, tuple[str, str, str]], now: str
) -> list[dict[str, Any]]:
    """``previous`` with each ``type -> (status, reason, message)`` of ``updates`` set; a condition keeps its
    ``lastTransitionTime`` while its status does not change."""
    by_type: dict[str, dict[str, Any]] = {}
    for c in previous:
        if isinstance(c, dict) and c.get("type"):
            by_type[str(c["type"])] = dict(c)
    for kind, (status, reason, message) in updates.items():
        before = by_type.get(kind)
        since = before.get("lastTransitionTime") if before and before.get("status") == status else now
        by_type[kind] = {
            "type": kind,
            "status": status,
            "lastTransitionTime": since or now,
            "reason": reason,
            "message": message,
        }
    return list(by_type.values())


def condition_updates(route: Route) -> dict[str, tuple[str, str, str]]:
    """The conditions a connected instance's state sets (besides ``VirtualClusterReady``, which the phase
    gives, except while unmanaged: then nobody can tell, so it is Unknown)."""
    if route.kind == "connected":
        where = f'cluster "{route.cluster}"'
        return {
            DEPLOYED: ("True", "Deployed", f"the control plane's objects are applied on {where}"),
            ONLINE: ("True", "", ""),
        }
    if route.kind == "unmanaged":
        return {
            ONLINE: ("False", route.reason, route.message),
            READY: ("Unknown", route.reason, route.message),
        }
    if route.kind in ("wait", "failed"):
        return {ONLINE: ("False", route.reason, route.message)}
    return {}

"""What ``vplane doctor cluster`` reads of a connected cluster: its agent pods with their logs, the upgrade
bridge, and the agent release's Helm history.

The platform collects it through its own connection to the cluster (the tunnel's gateway, or the
``spec.config`` kubeconfig) and serves it as the Cluster's ``diagnostics`` subresource, so an operator
needs only the management API. When the platform cannot reach the cluster (an agent that never connected),
``vplane doctor cluster --context`` collects the same document with the cluster's own kubeconfig, as the
runbook's "switch kubectl context" does. The document is plain JSON (see :func:`collect`).
"""

from __future__ import annotations

from typing import Any

from vplane.controllers.client import KubeClient, Resource, TransportError
from vplane.kube import errors
from vplane.kube.objects import Obj
from vplane.platform.clusters import bridge as br
from vplane.platform.clusters import status as st
from vplane.platform.clusters.helm import Helm, HelmError

PODS = Resource("v1", "Pod", "pods", True)
DEPLOYMENTS = Resource("apps/v1", "Deployment", "deployments", True)
LOG_TAIL = 40
"""Lines of each pod's log in the document."""
MAX_PODS = 3
"""Pods of one kind described (newest first): a rollout or a crash loop leaves a few."""


def _newest_first(pods: list[Obj]) -> list[Obj]:
    return sorted(
        pods,
        key=lambda p: (str(p["metadata"].get("creationTimestamp") or ""), str(p["metadata"].get("name"))),
        reverse=True,
    )


async def _pod(client: KubeClient, pod: Obj) -> dict[str, Any]:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    first = statuses[0] if statuses else {}
    state = first.get("state") or {}
    waiting = state.get("waiting") or {}
    terminated = (first.get("lastState") or {}).get("terminated") or state.get("terminated") or {}
    conditions = {str(c.get("type")): c for c in status.get("conditions") or []}
    reason, message = st.pod_health(pod)
    doc: dict[str, Any] = {
        "name": meta.get("name", ""),
        "created": meta.get("creationTimestamp", ""),
        "deleting": bool(meta.get("deletionTimestamp")),
        "phase": status.get("phase", ""),
        "ready": (conditions.get("Ready") or {}).get("status") == "True",
        "restarts": int(first.get("restartCount") or 0),
        "image": first.get("image")
        or ((pod.get("spec") or {}).get("containers") or [{}])[0].get("image", ""),
        "waiting": {"reason": waiting.get("reason", ""), "message": waiting.get("message", "")},
        "lastTerminated": {
            "reason": terminated.get("reason", ""),
            "exitCode": terminated.get("exitCode"),
            "message": terminated.get("message", ""),
        },
        "health": {"reason": reason, "message": message},
        "log": [],
        "logError": "",
    }
    try:
        text = await client.logs(
            str(meta.get("name")), namespace=str(meta.get("namespace")), tail_lines=LOG_TAIL
        )
        doc["log"] = text.splitlines()[-LOG_TAIL:]
    except (errors.StatusError, TransportError) as exc:
        doc["logError"] = st.describe(exc)
    return doc


async def collect(client: KubeClient, helm: Helm | None, namespace: str, via: str) -> dict[str, Any]:
    """The cluster side of the diagnosis: ``reachable``/``error``, ``agentPods``, ``bridge`` and ``helm``,
    read in ``namespace`` (where the release lives) by ``via`` (who read it, for the report)."""
    doc: dict[str, Any] = {"via": via, "namespace": namespace, "reachable": True, "error": ""}
    try:
        listed = await client.list(PODS, namespace=namespace, label_selector=dict([st.AGENT_LABEL]))
    except (errors.StatusError, TransportError) as exc:
        return {**doc, "reachable": False, "error": st.describe(exc)}
    doc["agentPods"] = [await _pod(client, p) for p in _newest_first(listed.items)[:MAX_PODS]]
    doc["bridge"] = await _bridge(client, namespace)
    doc["helm"] = await _history(helm, namespace)
    return doc


async def _bridge(client: KubeClient, namespace: str) -> dict[str, Any] | None:
    try:
        deployment = await client.get(DEPLOYMENTS, br.BRIDGE_NAME, namespace=namespace)
    except errors.StatusError as exc:
        if exc.code == 404:
            return None
        return {"error": exc.message}
    except TransportError as exc:
        return {"error": str(exc)}
    status = deployment.get("status") or {}
    try:
        raw = (await client.list(PODS, namespace=namespace, label_selector=dict([br.BRIDGE_LABEL]))).items
    except (errors.StatusError, TransportError):
        raw = []
    pods = [await _pod(client, p) for p in _newest_first(raw)[:MAX_PODS]]
    return {
        "created": (deployment.get("metadata") or {}).get("creationTimestamp", ""),
        "target": ((deployment.get("metadata") or {}).get("annotations") or {}).get(br.TARGET_ANNOTATION, ""),
        "replicas": int((deployment.get("spec") or {}).get("replicas") or 0),
        "readyReplicas": int(status.get("readyReplicas") or 0),
        "problem": br.bridge_problem(deployment, raw),
        "pods": pods,
    }


async def _history(helm: Helm | None, namespace: str) -> dict[str, Any]:
    if helm is None:
        return {"history": [], "error": "helm is not available"}
    try:
        history = await helm.history(namespace)
    except (HelmError, OSError, TimeoutError) as exc:
        return {"history": [], "error": str(exc) or type(exc).__name__}
    return {
        "history": [
            {"revision": r.revision, "status": r.status, "chart": r.chart, "description": r.description}
            for r in history
        ],
        "error": "",
    }

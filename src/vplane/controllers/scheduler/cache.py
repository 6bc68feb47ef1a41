"""The scheduler's view of the cluster (upstream ``internal/cache`` plus the nominator), fed by informers.

Bound pods count on their node; a pod the scheduler has chosen a node for counts there too ("assumed")
until the informer shows it bound, or the binding fails and it is forgotten. Pods that ended
(``Succeeded``/``Failed``) count nowhere. Pending pods with ``status.nominatedNodeName`` are remembered
per node, so the filters can hold room for them. Pods bound to a node the cache has not seen are kept on
a placeholder that becomes real when the node arrives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vplane.controllers.scheduler.algorithm import Snapshot
from vplane.controllers.scheduler.model import NodeInfo, PodInfo
from vplane.controllers.scheduler.preemption import Budget
from vplane.kube.objects import Obj

TERMINAL_PHASES = ("Succeeded", "Failed")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def is_terminal(pod: Obj) -> bool:
    return _d(pod.get("status")).get("phase") in TERMINAL_PHASES


def is_bound(pod: Obj) -> bool:
    return bool(_d(pod.get("spec")).get("nodeName"))


@dataclass(slots=True)
class SchedulerCache:
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    pod_node: dict[str, str] = field(default_factory=dict)
    """Pods counted on a node (bound or assumed), by key."""
    assumed: set[str] = field(default_factory=set)
    nominated: dict[str, PodInfo] = field(default_factory=dict)
    """Pending pods with a nominated node, by key."""
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    budgets: dict[str, Budget] = field(default_factory=dict)
    _order: list[str] | None = None

    # -- nodes -----------------------------------------------------------------------------------------

    def set_node(self, node: Obj) -> None:
        name = str(_d(node.get("metadata")).get("name") or "")
        info = self.nodes.get(name)
        if info is None:
            info = self.nodes[name] = NodeInfo(name)
        if info.node is None:
            self._order = None
        info.set_node(node)

    def remove_node(self, name: str) -> None:
        info = self.nodes.get(name)
        if info is None:
            return
        self._order = None
        if info.pods:
            info.set_node(None)  # its pods still count, should the node come back
        else:
            del self.nodes[name]

    # -- pods ------------------------------------------------------------------------------------------

    def _count_on(self, pod: PodInfo, node_name: str) -> None:
        self._uncount(pod.key)
        info = self.nodes.get(node_name)
        if info is None:
            info = self.nodes[node_name] = NodeInfo(node_name)
        info.add_pod(pod)
        self.pod_node[pod.key] = node_name

    def _uncount(self, key: str) -> None:
        node_name = self.pod_node.pop(key, None)
        if node_name is None:
            return
        info = self.nodes.get(node_name)
        if info is None:
            return
        info.remove_pod(key)
        if info.node is None and not info.pods:
            del self.nodes[node_name]

    def set_pod(self, pod: Obj) -> PodInfo:
        """A pod was added or changed; returns its parsed form."""
        info = PodInfo.of(pod)
        if is_terminal(pod):
            self.remove_pod(info.key)
            return info
        if info.node_name:
            self.assumed.discard(info.key)
            self.nominated.pop(info.key, None)
            self._count_on(info, info.node_name)
        elif info.key in self.assumed:
            pass  # our binding is on its way; the informer has not seen it yet
        else:
            self._uncount(info.key)
        if not info.node_name:
            if info.nominated_node_name:
                self.nominated[info.key] = info
            else:
                self.nominated.pop(info.key, None)
        return info

    def remove_pod(self, key: str) -> None:
        self.assumed.discard(key)
        self.nominated.pop(key, None)
        self._uncount(key)

    def assume(self, pod: PodInfo, node_name: str) -> None:
        """Count ``pod`` on ``node_name`` while its binding is in flight."""
        self.nominated.pop(pod.key, None)
        self.assumed.add(pod.key)
        self._count_on(pod, node_name)

    def forget(self, key: str) -> None:
        """The binding failed: the pod no longer counts anywhere."""
        if key in self.assumed:
            self.assumed.discard(key)
            self._uncount(key)

    def nominate(self, pod: PodInfo, node_name: str) -> None:
        """Remember a nomination at once, before the status write comes back through the informer."""
        if node_name:
            pod.nominated_node_name = node_name
            self.nominated[pod.key] = pod
        else:
            self.nominated.pop(pod.key, None)

    # -- namespaces and budgets ------------------------------------------------------------------------

    def set_namespace(self, namespace: Obj) -> None:
        meta = _d(namespace.get("metadata"))
        self.namespaces[str(meta.get("name") or "")] = {
            str(k): str(v) for k, v in _d(meta.get("labels")).items()
        }

    def remove_namespace(self, name: str) -> None:
        self.namespaces.pop(name, None)

    def namespace_labels(self, name: str) -> Mapping[str, str]:
        return self.namespaces.get(name, {})

    def set_budget(self, key: str, pdb: Obj) -> None:
        self.budgets[key] = Budget.of(pdb)

    def remove_budget(self, key: str) -> None:
        self.budgets.pop(key, None)

    # -- the cycle's view ------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        if self._order is None:
            self._order = sorted(name for name, info in self.nodes.items() if info.node is not None)
        nodes = [self.nodes[name] for name in self._order]
        nominated: dict[str, list[PodInfo]] = {}
        for pod in self.nominated.values():
            nominated.setdefault(pod.nominated_node_name, []).append(pod)
        return Snapshot(nodes, nominated, self.namespace_labels)

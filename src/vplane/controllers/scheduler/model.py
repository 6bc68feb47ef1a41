"""Pods and nodes as the scheduling algorithm sees them (upstream ``framework.PodInfo`` and ``NodeInfo``).

A :class:`PodInfo` is computed once per pod version: its requests, priority, host ports and parsed
affinity terms. A :class:`NodeInfo` aggregates the pods on one node (bound, or assumed while their binding
is in flight): requested resources, the non-zero requests scoring uses, used host ports, and how many of
its pods carry affinity terms, so plugins can skip nodes without any.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vplane.controllers.scheduler import resources
from vplane.controllers.scheduler.resources import Resources
from vplane.kube import labels
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_BIND_ALL_HOST_IP = "0.0.0.0"


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _d(value).items()}


def pod_key(pod: Obj) -> str:
    meta = _d(pod.get("metadata"))
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pod_priority(pod: Obj) -> int:
    """``corev1helpers.PodPriority``: ``spec.priority``, or 0 for a pod admitted without one."""
    value = _d(pod.get("spec")).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A parsed ``PodAffinityTerm`` (upstream ``fwk.AffinityTerm``)."""

    namespaces: frozenset[str]
    namespace_selector: labels.Selector
    selector: labels.Selector
    topology_key: str

    def matches(self, namespace: str, pod_labels: Mapping[str, str], ns_labels: Mapping[str, str]) -> bool:
        """The term selects a pod in ``namespace`` with ``pod_labels`` (its namespace labelled ``ns_labels``)."""
        if namespace in self.namespaces or self.namespace_selector.matches(ns_labels):
            return self.selector.matches(pod_labels)
        return False

    def matches_pod(self, pod: PodInfo, ns_labels: Mapping[str, str]) -> bool:
        return self.matches(pod.namespace, pod.labels, ns_labels)


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    term: AffinityTerm
    weight: int


def _selector(value: Any) -> labels.Selector:
    # LabelSelectorAsSelector: nil selects nothing, {} selects everything; raises StatusError when invalid.
    return labels.from_label_selector(value if isinstance(value, Mapping) else None)


def _affinity_term(namespace: str, term: Mapping[str, Any]) -> AffinityTerm:
    names = [str(n) for n in _l(term.get("namespaces"))]
    ns_selector = term.get("namespaceSelector")
    if not names and ns_selector is None:
        names = [namespace]
    return AffinityTerm(
        namespaces=frozenset(names),
        namespace_selector=_selector(ns_selector),
        selector=_selector(term.get("labelSelector")),
        topology_key=str(term.get("topologyKey") or ""),
    )


def _terms(namespace: str, raw: Any, errors: list[str]) -> tuple[AffinityTerm, ...]:
    out = []
    for term in _l(raw):
        try:
            out.append(_affinity_term(namespace, _d(term)))
        except StatusError as exc:
            errors.append(exc.message)
    return tuple(out)


def _weighted(namespace: str, raw: Any, errors: list[str]) -> tuple[WeightedTerm, ...]:
    out = []
    for item in _l(raw):
        item = _d(item)
        try:
            term = _affinity_term(namespace, _d(item.get("podAffinityTerm")))
        except StatusError as exc:
            errors.append(exc.message)
            continue
        weight = item.get("weight")
        out.append(WeightedTerm(term, weight if isinstance(weight, int) else 0))
    return tuple(out)


def _host_ports(spec: Mapping[str, Any]) -> tuple[tuple[str, str, int], ...]:
    """Host ports of the containers and of restartable init containers (which keep running)."""
    ports = []
    containers = list(_l(spec.get("containers")))
    containers += [c for c in _l(spec.get("initContainers")) if _d(c).get("restartPolicy") == "Always"]
    for container in containers:
        for port in _l(_d(container).get("ports")):
            port = _d(port)
            host_port = port.get("hostPort")
            if isinstance(host_port, int) and host_port > 0:
                ip = str(port.get("hostIP") or DEFAULT_BIND_ALL_HOST_IP)
                ports.append((ip, str(port.get("protocol") or "TCP"), host_port))
    return tuple(ports)


@dataclass(eq=False, slots=True)
class PodInfo:
    pod: Obj
    key: str
    uid: str
    namespace: str
    name: str
    labels: dict[str, str]
    priority: int
    requests: Resources
    non_zero_cpu: int
    non_zero_memory: int
    host_ports: tuple[tuple[str, str, int], ...]
    required_affinity: tuple[AffinityTerm, ...]
    required_anti_affinity: tuple[AffinityTerm, ...]
    preferred_affinity: tuple[WeightedTerm, ...]
    preferred_anti_affinity: tuple[WeightedTerm, ...]
    parse_errors: tuple[str, ...]
    node_name: str
    nominated_node_name: str
    deleting: bool

    @classmethod
    def of(cls, pod: Obj) -> PodInfo:
        meta, spec, status = _d(pod.get("metadata")), _d(pod.get("spec")), _d(pod.get("status"))
        namespace = str(meta.get("namespace") or "")
        affinity = _d(spec.get("affinity"))
        pod_affinity, anti = _d(affinity.get("podAffinity")), _d(affinity.get("podAntiAffinity"))
        errors: list[str] = []
        non_zero = resources.pod_requests(spec, non_zero=True)
        return cls(
            pod=pod,
            key=f"{namespace}/{meta.get('name', '')}",
            uid=str(meta.get("uid") or ""),
            namespace=namespace,
            name=str(meta.get("name") or ""),
            labels=_str_map(meta.get("labels")),
            priority=pod_priority(pod),
            requests=resources.pod_requests(spec),
            non_zero_cpu=non_zero.get(resources.CPU, 0),
            non_zero_memory=non_zero.get(resources.MEMORY, 0),
            host_ports=_host_ports(spec),
            required_affinity=_terms(
                namespace, pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), errors
            ),
            required_anti_affinity=_terms(
                namespace, anti.get("requiredDuringSchedulingIgnoredDuringExecution"), errors
            ),
            preferred_affinity=_weighted(
                namespace, pod_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), errors
            ),
            preferred_anti_affinity=_weighted(
                namespace, anti.get("preferredDuringSchedulingIgnoredDuringExecution"), errors
            ),
            parse_errors=tuple(errors),
            node_name=str(spec.get("nodeName") or ""),
            nominated_node_name=str(status.get("nominatedNodeName") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
        )

    @property
    def spec(self) -> dict[str, Any]:
        return _d(self.pod.get("spec"))

    @property
    def has_affinity(self) -> bool:
        return bool(
            self.required_affinity
            or self.required_anti_affinity
            or self.preferred_affinity
            or self.preferred_anti_affinity
        )


@dataclass(eq=False, slots=True)
class NodeInfo:
    """One node and the pods on it; ``node`` is None for a node the cache has pods for but has not seen."""

    name: str
    node: Obj | None = None
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, Any], ...] = ()
    unschedulable: bool = False
    allocatable: Resources = field(default_factory=dict)
    pods: dict[str, PodInfo] = field(default_factory=dict)
    requested: Resources = field(default_factory=dict)
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    used_ports: dict[tuple[str, str, int], int] = field(default_factory=dict)
    pods_with_affinity: int = 0
    pods_with_required_anti_affinity: int = 0

    def set_node(self, node: Obj | None) -> None:
        self.node = node
        if node is None:
            self.labels, self.taints, self.unschedulable, self.allocatable = {}, (), False, {}
            return
        spec = _d(node.get("spec"))
        self.labels = _str_map(_d(node.get("metadata")).get("labels"))
        self.taints = tuple(_d(t) for t in _l(spec.get("taints")))
        self.unschedulable = bool(spec.get("unschedulable"))
        self.allocatable = resources.allocatable(node)

    def add_pod(self, pod: PodInfo) -> None:
        self.pods[pod.key] = pod
        self._account(pod, 1)

    def remove_pod(self, key: str) -> PodInfo | None:
        pod = self.pods.pop(key, None)
        if pod is not None:
            self._account(pod, -1)
        return pod

    def _account(self, pod: PodInfo, sign: int) -> None:
        for name, value in pod.requests.items():
            self.requested[name] = self.requested.get(name, 0) + sign * value
        self.non_zero_cpu += sign * pod.non_zero_cpu
        self.non_zero_memory += sign * pod.non_zero_memory
        for port in pod.host_ports:
            count = self.used_ports.get(port, 0) + sign
            if count > 0:
                self.used_ports[port] = count
            else:
                self.used_ports.pop(port, None)
        if pod.has_affinity:
            self.pods_with_affinity += sign
        if pod.required_anti_affinity:
            self.pods_with_required_anti_affinity += sign

    def clone(self) -> NodeInfo:
        return NodeInfo(
            name=self.name,
            node=self.node,
            labels=self.labels,
            taints=self.taints,
            unschedulable=self.unschedulable,
            allocatable=self.allocatable,
            pods=dict(self.pods),
            requested=dict(self.requested),
            non_zero_cpu=self.non_zero_cpu,
            non_zero_memory=self.non_zero_memory,
            used_ports=dict(self.used_ports),
            pods_with_affinity=self.pods_with_affinity,
            pods_with_required_anti_affinity=self.pods_with_required_anti_affinity,
        )

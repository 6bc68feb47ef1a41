"""Builders of nodes, pods and clusters for the scheduler's unit tests (imported by the other test files)."""

from __future__ import annotations

import random
from typing import Any

from vplane.controllers.scheduler.algorithm import Algorithm, Result, Snapshot
from vplane.controllers.scheduler.cache import SchedulerCache
from vplane.controllers.scheduler.model import PodInfo
from vplane.kube.objects import Obj


def node(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    **extra: str,
) -> Obj:
    allocatable: dict[str, Any] = {"cpu": cpu, "memory": memory, "pods": str(pods), **extra}
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"capacity": dict(allocatable), "allocatable": allocatable},
    }


def pod(
    name: str,
    namespace: str = "default",
    cpu: str | None = None,
    memory: str | None = None,
    labels: dict[str, str] | None = None,
    priority: int | None = None,
    node_name: str | None = None,
    **spec: Any,
) -> Obj:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    container: dict[str, Any] = {
        "name": "c",
        "image": "nginx",
        "resources": {"requests": requests} if requests else {},
    }
    body: dict[str, Any] = {"containers": [container], "schedulerName": "default-scheduler", **spec}
    if priority is not None:
        body["priority"] = priority
    if node_name:
        body["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": labels or {},
        },
        "spec": body,
        "status": {"phase": "Pending"},
    }


def cluster(
    nodes: list[Obj], pods: list[Obj] | None = None, namespaces: dict[str, dict[str, str]] | None = None
) -> SchedulerCache:
    cache = SchedulerCache()
    for n in nodes:
        cache.set_node(n)
    for p in pods or []:
        cache.set_pod(p)
    for name, labels in (namespaces or {}).items():
        cache.set_namespace({"metadata": {"name": name, "labels": labels}})
    return cache


def schedule(cache: SchedulerCache, incoming: Obj, seed: int = 0) -> Result:
    return Algorithm(rng=random.Random(seed)).schedule(PodInfo.of(incoming), cache.snapshot())


def snapshot(nodes: list[Obj], pods: list[Obj] | None = None) -> Snapshot:
    return cluster(nodes, pods).snapshot()


def test_builders_make_schedulable_objects() -> None:
    cache = cluster([node("n1")], [pod("a", node_name="n1", cpu="1")])
    assert cache.nodes["n1"].requested["cpu"] == 1000
    assert schedule(cache, pod("b", cpu="1")).node == "n1"

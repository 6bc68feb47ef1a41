"""The collections the controller manager reads and writes: URL facts only, nothing discovered."""

from __future__ import annotations

from vplane.controllers.client import CONFIGMAPS, NAMESPACES, Resource

__all__ = [
    "CONFIGMAPS",
    "DEPLOYMENTS",
    "ENDPOINTS",
    "EVENTS",
    "NAMESPACES",
    "PODS",
    "REPLICASETS",
    "REPLICATIONCONTROLLERS",
    "SERVICEACCOUNTS",
    "SERVICES",
]

PODS = Resource("v1", "Pod", "pods", namespaced=True)
SERVICES = Resource("v1", "Service", "services", namespaced=True)
ENDPOINTS = Resource("v1", "Endpoints", "endpoints", namespaced=True)
EVENTS = Resource("v1", "Event", "events", namespaced=True)
SERVICEACCOUNTS = Resource("v1", "ServiceAccount", "serviceaccounts", namespaced=True)
REPLICATIONCONTROLLERS = Resource("v1", "ReplicationController", "replicationcontrollers", namespaced=True)
DEPLOYMENTS = Resource("apps/v1", "Deployment", "deployments", namespaced=True)
REPLICASETS = Resource("apps/v1", "ReplicaSet", "replicasets", namespaced=True)

"""Which workload objects a pod event concerns: upstream's ``resolveControllerRef``, ``getPodXSets`` and
``addPod``, written out once in each of its ReplicaSet, StatefulSet, DaemonSet and Job controllers, here once
for them (and the ReplicationController); the Deployment controller resolves its ReplicaSets' owners with
the same lookup."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from vplane.controllers.informer import object_key
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.expectations import Expectations
from vplane.kube import labels as labelsel
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj


class OwnerKind(Protocol):
    def owns(self, ref: Obj) -> bool:
        """Is this controller reference one of ours (kind and API group)?"""
        ...

    def selector(self, obj: Obj) -> labelsel.Selector:
        """The object's pod selector (raises ``StatusError`` when it cannot be parsed)."""
        ...


class Lookup(Protocol):
    def get(self, key: str) -> Obj | None: ...


class NamespaceLookup(Protocol):
    def get(self, namespace: str) -> Iterable[Obj]: ...


class PodOwners:
    """The owner objects of one kind (an informer and its namespace index) as pod events see them."""

    def __init__(self, kind: OwnerKind, owners: Lookup, by_namespace: NamespaceLookup) -> None:
        self.kind = kind
        self.owners = owners
        self.by_namespace = by_namespace

    def resolve(self, namespace: str, ref: Obj | None) -> Obj | None:
        """The object a controller reference names, if it is ours and still the same object (UID)."""
        if ref is None or not self.kind.owns(ref):
            return None
        owner = self.owners.get(f"{namespace}/{ref.get('name')}")
        if owner is None or podutil.uid_of(owner) != ref.get("uid"):
            return None
        return owner

    def matching(self, obj: Obj) -> list[Obj]:
        """The objects of ``obj``'s namespace whose selector (not empty, parsable) matches its labels: who
        may adopt an orphan."""
        obj_labels = podutil.labels_of(obj)
        if not obj_labels:
            return []
        found = []
        for owner in self.by_namespace.get(podutil.namespace_of(obj)):
            try:
                selector = self.kind.selector(owner)
            except StatusError:
                continue
            if not selector.empty and selector.matches(obj_labels):
                found.append(owner)
        return found

    def pod_added(
        self,
        pod: Obj,
        expectations: Expectations,
        enqueue: Callable[[str], None],
        deleted: Callable[[Obj], None],
    ) -> None:
        """A new pod: its owner saw the creation it expected; an orphan wakes whoever may adopt it; a pod
        already being deleted counts as deleted."""
        if podutil.is_deleting(pod):
            deleted(pod)
            return
        ref = podutil.controller_ref(pod)
        if ref is not None:
            owner = self.resolve(podutil.namespace_of(pod), ref)
            if owner is not None:
                key = object_key(owner)
                expectations.creation_observed(key)
                enqueue(key)
            return
        for owner in self.matching(pod):
            enqueue(object_key(owner))

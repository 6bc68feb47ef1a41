"""The ReplicaSet controller (upstream ``pkg/controller/replicaset``), and through a thin adapter the
ReplicationController manager.

Each sync of a ReplicaSet: claim pods (adopt orphans its selector matches, release its own that no longer
match), then, unless its earlier creates and deletes have not all been seen yet (expectations), create or
delete pods to reach ``spec.replicas`` (at most ``burst_replicas`` per sync, creates in slow-start batches
of 1, 2, 4, ...; deletes in upstream's preference order), and finally write ``status`` (replicas,
fullyLabeledReplicas, readyReplicas, availableReplicas, observedGeneration and the ``ReplicaFailure``
condition). Events are upstream's: ``SuccessfulCreate`` "Created pod: x", ``FailedCreate`` "Error
creating: <the API's error>", ``SuccessfulDelete`` "Deleted pod: x", ``FailedDelete`` "Error deleting: ...".

Everything kind-specific lives in :class:`WorkloadKind`, so the ReplicationController manager is the same
controller with :data:`REPLICATION_CONTROLLER_KIND` (core/v1, a plain map selector, its own event source).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from vplane.controllers.client import Resource
from vplane.controllers.informer import object_key, split_key
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.events import NORMAL, WARNING
from vplane.controllers.kcm.expectations import Expectations
from vplane.controllers.kcm.podowners import PodOwners
from vplane.controllers.kcm.refmanager import claim, recheck_alive
from vplane.controllers.kcm.resources import PODS, REPLICASETS, REPLICATIONCONTROLLERS
from vplane.controllers.kcm.timefmt import format_time
from vplane.kube import labels as labelsel
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

# --- what differs between ReplicaSets and ReplicationControllers ----------------------------------------


def spec_selector(obj: Obj) -> labelsel.Selector:
    """``spec.selector`` as a label selector (ReplicaSets, StatefulSets, DaemonSets)."""
    return labelsel.from_label_selector(podutil.spec(obj).get("selector"))


def _rc_selector(obj: Obj) -> labelsel.Selector:
    selector = podutil.spec(obj).get("selector")
    if not isinstance(selector, dict):
        return labelsel.Selector.nothing()
    return labelsel.exact(selector)


@dataclass(frozen=True)
class WorkloadKind:
    resource: Resource
    controller_name: str
    """The name in ``--controllers`` and the event source (``source.component``)."""
    selector: Callable[[Obj], labelsel.Selector]
    owner_group: str

    @property
    def kind(self) -> str:
        return self.resource.kind

    def owns(self, ref: Obj) -> bool:
        """Is this controller reference one of ours (kind and API group)?"""
        group = str(ref.get("apiVersion") or "").rpartition("/")[0]
        return ref.get("kind") == self.kind and group == self.owner_group


REPLICA_SET_KIND = WorkloadKind(REPLICASETS, "replicaset-controller", spec_selector, "apps")
REPLICATION_CONTROLLER_KIND = WorkloadKind(REPLICATIONCONTROLLERS, "replication-controller", _rc_selector, "")


# --- pure decisions ------------------------------------------------------------------------------------


def replicas_of(obj: Obj) -> int:
    """``spec.replicas``, which the API defaults to 1."""
    value = podutil.spec(obj).get("replicas")
    return int(value) if isinstance(value, int) else 1


def slow_start_batches(count: int, initial: int) -> list[int]:
    """``slowStartBatch``'s batch sizes: initial, doubling, never more than what remains."""
    sizes: list[int] = []
    remaining = count
    size = min(remaining, initial)
    while size > 0:
        sizes.append(size)
        remaining -= size
        size = min(2 * size, remaining)
    return sizes


def replica_failure(status: Obj) -> Obj | None:
    for cond in status.get("conditions") or ():
        if cond.get("type") == "ReplicaFailure":
            return dict(cond)
    return None


def calculate_status(
    rs: Obj, active_pods: list[Obj], manage_error: Exception | None, now: float, terminating: int = 0
) -> Obj:
    """``calculateStatus``: the counts and the ``ReplicaFailure`` condition (observedGeneration is left
    to :func:`status_for_write`). ``terminatingReplicas`` (DeploymentReplicaSetTerminatingReplicas, on by
    default since 1.35) is written only when some of the set's pods are being deleted, as upstream's nil
    list of terminating pods leaves it out."""
    spec = podutil.spec(rs)
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    template_selector = labelsel.exact(template_labels)
    min_ready = int(spec.get("minReadySeconds") or 0)
    fully_labeled = ready = available = 0
    for pod in active_pods:
        if template_selector.matches(podutil.labels_of(pod)):
            fully_labeled += 1
        if podutil.is_pod_ready(pod):
            ready += 1
            if podutil.is_pod_available(pod, min_ready, now):
                available += 1
    status = copy.deepcopy(podutil.status(rs))
    conditions = [c for c in status.get("conditions") or () if isinstance(c, dict)]
    failure = replica_failure(status)
    if manage_error is not None and failure is None:
        diff = len(active_pods) - replicas_of(rs)
        reason = "FailedCreate" if diff < 0 else "FailedDelete" if diff > 0 else ""
        conditions.append(
            {
                "type": "ReplicaFailure",
                "status": "True",
                "lastTransitionTime": format_time(now),
                "reason": reason,
                "message": error_text(manage_error),
            }
        )
    elif manage_error is None and failure is not None:
        conditions = [c for c in conditions if c.get("type") != "ReplicaFailure"]
    status["replicas"] = len(active_pods)
    status["fullyLabeledReplicas"] = fully_labeled
    status["readyReplicas"] = ready
    status["availableReplicas"] = available
    if terminating:
        status["terminatingReplicas"] = terminating
    else:
        status.pop("terminatingReplicas", None)
    if conditions:
        status["conditions"] = conditions
    else:
        status.pop("conditions", None)
    return status


def _omit_zero(status: Obj) -> Obj:
    """The wire form upstream's ``omitempty`` gives: zero counts and empty lists are absent."""
    return {k: v for k, v in status.items() if v not in (0, None, [], {})}


def status_for_write(rs: Obj, status: Obj) -> Obj | None:
    """The status to write, or None when the stored one already says the same for this generation."""
    current = _omit_zero(podutil.status(rs))
    wanted = _omit_zero({**status, "observedGeneration": podutil.meta(rs).get("generation", 0)})
    if current == wanted:
        return None
    return wanted


def error_text(exc: BaseException) -> str:
    """What Go's ``%v`` of the error prints: an API error is its message."""
    return exc.message if isinstance(exc, StatusError) else str(exc)


def namespace_terminating(exc: BaseException) -> bool:
    if not isinstance(exc, StatusError):
        return False
    causes = (exc.details or {}).get("causes") or []
    if any(c.get("reason") == "NamespaceTerminating" for c in causes if isinstance(c, dict)):
        return True
    return exc.code == 403 and "because it is being terminated" in exc.message


# --- the controller --------------------------------------------------------------------------------------


class ReplicaSetController(ManagedController):
    def __init__(self, ctx: ControllerContext, kind: WorkloadKind = REPLICA_SET_KIND) -> None:
        self.kind = kind
        self.name = kind.controller_name
        self.event_source = kind.controller_name
        informers = ctx.informers
        self.sets = informers.informer(kind.resource)
        self.pods = informers.informer(PODS)
        self.sets_by_namespace = informers.namespace_index(kind.resource)
        self.owners = PodOwners(kind, self.sets, self.sets_by_namespace)
        self.pods_by_owner = informers.controller_index(PODS)
        self.orphan_pods = informers.orphan_index(PODS)
        workers = (
            ctx.settings.concurrent_replicaset_syncs
            if kind is REPLICA_SET_KIND
            else ctx.settings.concurrent_rc_syncs
        )
        super().__init__(ctx, self.sets, [self.pods], workers)
        self.expectations = Expectations(ctx.clock, ctx.settings.expectations_timeout_seconds)
        self.pods.add_handlers(
            on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted
        )

    # -- pod events -> keys ------------------------------------------------------------------------

    def _pod_added(self, pod: Obj) -> None:
        self.owners.pod_added(pod, self.expectations, self.enqueue, self._pod_deleted)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if podutil.meta(old).get("resourceVersion") == podutil.meta(new).get("resourceVersion"):
            return
        labels_changed = podutil.labels_of(old) != podutil.labels_of(new)
        if podutil.is_deleting(new):
            self._pod_deleted(new)
            if labels_changed:
                self._pod_deleted(old)
            return
        new_ref, old_ref = podutil.controller_ref(new), podutil.controller_ref(old)
        if new_ref != old_ref and old_ref is not None:
            owner = self.owners.resolve(podutil.namespace_of(old), old_ref)
            if owner is not None:
                self.enqueue(object_key(owner))
        if new_ref is not None:
            owner = self.owners.resolve(podutil.namespace_of(new), new_ref)
            if owner is not None:
                self.enqueue(object_key(owner))
            return
        if labels_changed or new_ref != old_ref:
            for owner in self.owners.matching(new):
                self.enqueue(object_key(owner))

    def _pod_deleted(self, pod: Obj) -> None:
        owner = self.owners.resolve(podutil.namespace_of(pod), podutil.controller_ref(pod))
        if owner is None:
            return
        key = object_key(owner)
        self.expectations.deletion_observed(key, object_key(pod))
        self.enqueue(key)

    # -- sync ----------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        cached = self.sets.get(key)
        if cached is None:
            self.expectations.forget(key)
            return None
        rs = copy.deepcopy(cached)
        try:
            selector = self.kind.selector(rs)
        except StatusError as exc:
            self.log.error("invalid selector", key=key, error=exc.message)
            return None
        needs_sync = self.expectations.satisfied(key)
        namespace, _ = split_key(key)
        candidates = {
            object_key(p): p
            for p in (*self.pods_by_owner.get(podutil.uid_of(rs)), *self.orphan_pods.get(namespace or ""))
            if podutil.is_pod_active(p)
        }

        async def can_adopt() -> None:
            await recheck_alive(self.client, self.kind.resource, rs)

        active = await claim(self.client, PODS, rs, selector, candidates.values(), can_adopt=can_adopt)
        manage_error: Exception | None = None
        if needs_sync and not podutil.is_deleting(rs):
            try:
                await self._manage(rs, key, active)
            except (StatusError, RuntimeError) as exc:
                manage_error = exc
        now = self.clock()
        terminating = sum(
            1
            for p in self.pods_by_owner.get(podutil.uid_of(rs))
            if podutil.is_deleting(p)
            and not podutil.is_pod_terminal(p)
            and selector.matches(podutil.labels_of(p))
        )
        status = calculate_status(rs, active, manage_error, now, terminating)
        await self._write_status(rs, status)
        if manage_error is not None:
            raise manage_error
        spec = podutil.spec(rs)
        min_ready = int(spec.get("minReadySeconds") or 0)
        return podutil.available_in(active, min_ready, now)

    async def _manage(self, rs: Obj, key: str, active: list[Obj]) -> None:
        """``manageReplicas``: create or delete the difference (at most ``burst_replicas``)."""
        diff = len(active) - replicas_of(rs)
        burst = self.ctx.settings.burst_replicas
        if diff < 0:
            count = min(-diff, burst)
            self.expectations.expect_creations(key, count)
            created, error = await self._slow_start(count, lambda: self._create_pod(rs))
            for _ in range(count - created):
                self.expectations.creation_observed(key)
            if error is not None:
                raise error
        elif diff > 0:
            count = min(diff, burst)
            related = self._related_pods(rs)
            doomed = podutil.pods_to_delete(active, related, count, self.clock())
            self.expectations.expect_deletions(key, [object_key(p) for p in doomed])
            results = await asyncio.gather(
                *(self._delete_pod(rs, key, p) for p in doomed), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result

    async def _slow_start(
        self, count: int, create: Callable[[], Awaitable[None]]
    ) -> tuple[int, Exception | None]:
        """Run ``create`` ``count`` times in doubling batches; stop after a batch with a failure."""
        done = 0
        for size in slow_start_batches(count, self.ctx.settings.slow_start_initial_batch):
            results = await asyncio.gather(*(create() for _ in range(size)), return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            done += size - len(errors)
            if errors:
                first = errors[0]
                if not isinstance(first, Exception):
                    raise first
                return done, first
        return done, None

    async def _create_pod(self, rs: Obj) -> None:
        template: Any = podutil.spec(rs).get("template") or {}
        pod = podutil.pod_from_template(template, rs, self.kind.controller_name)
        if not podutil.labels_of(pod):
            raise RuntimeError("unable to create pods, no labels")
        try:
            created = await self.client.create(PODS, pod, namespace=podutil.namespace_of(rs))
        except StatusError as exc:
            if namespace_terminating(exc):
                return  # every create would fail: nothing to report, nothing to retry
            self.recorder.event(rs, WARNING, "FailedCreate", f"Error creating: {error_text(exc)}")
            raise
        self.recorder.event(rs, NORMAL, "SuccessfulCreate", f"Created pod: {podutil.name_of(created)}")

    async def _delete_pod(self, rs: Obj, key: str, pod: Obj) -> None:
        name = podutil.name_of(pod)
        try:
            await self.client.delete(PODS, name, namespace=podutil.namespace_of(pod))
        except StatusError as exc:
            self.expectations.deletion_observed(key, object_key(pod))
            if exc.code == 404:
                return
            self.recorder.event(rs, WARNING, "FailedDelete", f"Error deleting: {error_text(exc)}")
            raise RuntimeError(f"unable to delete pods: {error_text(exc)}") from exc
        self.recorder.event(rs, NORMAL, "SuccessfulDelete", f"Deleted pod: {name}")

    def _related_pods(self, rs: Obj) -> list[Obj]:
        """``getIndirectlyRelatedPods``: pods of every set the same owner controls (siblings of one
        Deployment), used to prefer deleting pods doubled up on a node."""
        owner_ref = podutil.controller_ref(rs)
        if owner_ref is None:
            return self.pods_by_owner.get(podutil.uid_of(rs))
        related: list[Obj] = []
        for sibling in self.sets_by_namespace.get(podutil.namespace_of(rs)):
            ref = podutil.controller_ref(sibling)
            if ref is not None and ref.get("uid") == owner_ref.get("uid"):
                related.extend(self.pods_by_owner.get(podutil.uid_of(sibling)))
        return related

    async def _write_status(self, rs: Obj, status: Obj) -> None:
        """``updateReplicaSetStatus``: PUT /status guarded by resourceVersion; on a conflict, read afresh
        and try once more."""
        wanted = status_for_write(rs, status)
        if wanted is None:
            return
        body = {**rs, "status": wanted}
        try:
            await self.client.replace_status(self.kind.resource, body, namespace=podutil.namespace_of(rs))
        except StatusError as exc:
            if exc.code != 409:
                raise
            fresh = await self.client.get(
                self.kind.resource, podutil.name_of(rs), namespace=podutil.namespace_of(rs)
            )
            wanted = status_for_write(fresh, status)
            if wanted is not None:
                await self.client.replace_status(
                    self.kind.resource, {**fresh, "status": wanted}, namespace=podutil.namespace_of(rs)
                )

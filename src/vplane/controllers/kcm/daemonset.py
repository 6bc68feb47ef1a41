"""The DaemonSet controller (upstream ``pkg/controller/daemon``): the asyncio glue around
:mod:`daemonsetutil`.

Each sync of a DaemonSet: claim its ControllerRevisions and find (or snapshot) the one holding its current
template, whose hash labels new pods; unless its earlier creates and deletes are still unseen
(expectations), create a pod for every eligible node without one and delete pods on nodes that may no
longer run them (failed pods with a per-node back-off), then, if nothing was created or deleted, take
the next rolling-update step; delete old revisions beyond ``revisionHistoryLimit``; write ``status``.
Nodes that appear, or whose labels or taints change, wake the DaemonSets they matter to.

Events are upstream's: ``SuccessfulCreate`` "Created pod: x", ``FailedCreate`` "Error creating: ...",
``SuccessfulDelete`` "Deleted pod: x", ``FailedDelete`` "Error deleting: ...", ``FailedDaemonPod``,
``SucceededDaemonPod`` and ``SelectingAll``.
"""

from __future__ import annotations

import asyncio
import copy

from vplane.controllers.informer import object_key
from vplane.controllers.kcm import daemonsetutil as dsu
from vplane.controllers.kcm import history
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.events import NORMAL, WARNING
from vplane.controllers.kcm.expectations import Expectations
from vplane.controllers.kcm.podowners import PodOwners
from vplane.controllers.kcm.refmanager import claim, recheck_alive
from vplane.controllers.kcm.replicaset import (
    WorkloadKind,
    error_text,
    namespace_terminating,
    slow_start_batches,
    spec_selector,
)
from vplane.controllers.kcm.resources import PODS
from vplane.kube import labels as labelsel
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

DAEMONSETS = dsu.DAEMONSETS
NODES = dsu.NODES
REVISIONS = history.CONTROLLERREVISIONS


class SyncError(Exception):
    """Some creates or deletes failed (upstream's aggregate error)."""


DAEMON_SET_KIND = WorkloadKind(DAEMONSETS, dsu.CONTROLLER_NAME, spec_selector, "apps")


class DaemonSetController(ManagedController):
    name = dsu.CONTROLLER_NAME

    def __init__(self, ctx: ControllerContext) -> None:
        informers = ctx.informers
        self.sets = informers.informer(DAEMONSETS)
        self.pods = informers.informer(PODS)
        self.nodes = informers.informer(NODES)
        self.revisions = informers.informer(REVISIONS)
        self.sets_by_namespace = informers.namespace_index(DAEMONSETS)
        self.owners = PodOwners(DAEMON_SET_KIND, self.sets, self.sets_by_namespace)
        self.pods_by_owner = informers.controller_index(PODS)
        self.orphan_pods = informers.orphan_index(PODS)
        self.revisions_by_owner = informers.controller_index(REVISIONS)
        self.orphan_revisions = informers.orphan_index(REVISIONS)
        super().__init__(
            ctx, self.sets, [self.pods, self.nodes, self.revisions], ctx.settings.concurrent_daemonset_syncs
        )
        settings = ctx.settings
        self.expectations = Expectations(ctx.clock, settings.expectations_timeout_seconds)
        self.backoff = dsu.FailedPodBackoff(
            settings.daemonset_failed_pod_backoff_seconds, settings.daemonset_failed_pod_backoff_max_seconds
        )
        self.pods.add_handlers(
            on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted
        )
        self.nodes.add_handlers(on_add=self._node_added, on_update=self._node_updated)
        self.revisions.add_handlers(
            on_add=self._revision_added, on_update=self._revision_updated, on_delete=self._revision_deleted
        )

    # -- events -> keys -------------------------------------------------------------------------------------

    def _pod_added(self, pod: Obj) -> None:
        self.owners.pod_added(pod, self.expectations, self.enqueue, self._pod_deleted)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if podutil.meta(old).get("resourceVersion") == podutil.meta(new).get("resourceVersion"):
            return
        if podutil.is_deleting(new):
            self._pod_deleted(new)
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
        if podutil.labels_of(old) != podutil.labels_of(new) or new_ref != old_ref:
            for owner in self.owners.matching(new):
                self.enqueue(object_key(owner))

    def _pod_deleted(self, pod: Obj) -> None:
        owner = self.owners.resolve(podutil.namespace_of(pod), podutil.controller_ref(pod))
        if owner is None:
            return
        key = object_key(owner)
        self.expectations.deletion_observed(key, object_key(pod))
        self.enqueue(key)

    def _node_added(self, node: Obj) -> None:
        for ds in self.sets.objects():
            if dsu.node_should_run(node, ds)[0]:
                self.enqueue(object_key(ds))

    def _node_updated(self, old: Obj, new: Obj) -> None:
        """Only labels and taints change what a node may run (``shouldIgnoreNodeUpdate``)."""
        if podutil.labels_of(old) == podutil.labels_of(new) and (podutil.spec(old).get("taints") or []) == (
            podutil.spec(new).get("taints") or []
        ):
            return
        for ds in self.sets.objects():
            placement = dsu.Placement.of(ds)
            if placement.should_run(old) != placement.should_run(new):
                self.enqueue(object_key(ds))

    def _revision_added(self, revision: Obj) -> None:
        if podutil.is_deleting(revision):
            self._revision_deleted(revision)
            return
        if podutil.controller_ref(revision) is not None:
            return  # ours or another's: nothing to adopt
        for ds in self.owners.matching(revision):
            self.enqueue(object_key(ds))

    def _revision_updated(self, old: Obj, new: Obj) -> None:
        if podutil.meta(old).get("resourceVersion") == podutil.meta(new).get("resourceVersion"):
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
        if podutil.labels_of(old) != podutil.labels_of(new) or new_ref != old_ref:
            for ds in self.owners.matching(new):
                self.enqueue(object_key(ds))

    def _revision_deleted(self, revision: Obj) -> None:
        owner = self.owners.resolve(podutil.namespace_of(revision), podutil.controller_ref(revision))
        if owner is not None:
            self.enqueue(object_key(owner))

    # -- sync --------------------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        cached = self.sets.get(key)
        if cached is None:
            self.expectations.forget(key)
            return None
        ds = copy.deepcopy(cached)
        nodes = self.nodes.objects()  # read only: nothing below changes a node
        if podutil.spec(ds).get("selector") == {}:
            self.recorder.event(
                ds,
                WARNING,
                "SelectingAll",
                "This daemon set is selecting all pods. A non-empty selector is required.",
            )
            return None
        if podutil.is_deleting(ds):
            # Its pods and revisions may be going or orphaned: no status can be trusted now.
            return None
        try:
            selector = labelsel.from_label_selector(podutil.spec(ds).get("selector"))
        except StatusError as exc:
            self.log.error("invalid selector", key=key, error=exc.message)
            return None
        current, old = await self._construct_history(ds, selector)
        hash_ = podutil.labels_of(current).get(dsu.HASH_LABEL, "")
        if not self.expectations.satisfied(key):
            # Only status; the generation was not acted on.
            return await self._update_status(ds, selector, nodes, hash_, observe_generation=False)
        error: Exception | None = None
        try:
            await self._update(ds, selector, key, nodes, hash_, old)
        except (StatusError, RuntimeError, SyncError) as exc:
            error = exc
        try:
            requeue = await self._update_status(ds, selector, nodes, hash_, observe_generation=True)
        except StatusError as exc:
            if error is None:
                raise
            self.log.error("failed to update status", key=key, error=exc.message)
            requeue = None
        if error is not None:
            raise error
        return requeue

    async def _claim_pods(self, ds: Obj, selector: labelsel.Selector) -> list[Obj]:
        candidates = {
            object_key(p): p
            for p in (
                *self.pods_by_owner.get(podutil.uid_of(ds)),
                *self.orphan_pods.get(podutil.namespace_of(ds)),
            )
        }

        async def can_adopt() -> None:
            await recheck_alive(self.client, DAEMONSETS, ds)

        return await claim(self.client, PODS, ds, selector, candidates.values(), can_adopt=can_adopt)

    async def _update(
        self, ds: Obj, selector: labelsel.Selector, key: str, nodes: list[Obj], hash_: str, old: list[Obj]
    ) -> None:
        """``updateDaemonSet``: manage, then (with nothing in flight) the rolling update, then history."""
        node_pods = dsu.nodes_to_pods(await self._claim_pods(ds, selector))
        decision = dsu.manage(ds, nodes, node_pods, hash_, self.clock(), self.backoff)
        for event_type, reason, message in decision.events:
            self.recorder.event(ds, event_type, reason, message)
        if decision.requeue_after is not None:
            self.enqueue_after(key, decision.requeue_after)
        await self._sync_nodes(ds, key, decision.delete, decision.create_on, hash_)
        if self.expectations.satisfied(key):
            strategy = (podutil.spec(ds).get("updateStrategy") or {}).get("type") or "RollingUpdate"
            if strategy == "RollingUpdate":
                node_pods = dsu.nodes_to_pods(await self._claim_pods(ds, selector))
                try:
                    doomed, surge_on = dsu.rolling_update(ds, nodes, node_pods, hash_, self.clock())
                except ValueError as exc:
                    raise RuntimeError(f"couldn't get unavailable numbers: {exc}") from exc
                await self._sync_nodes(ds, key, doomed, surge_on, hash_)
        await self._cleanup_history(ds, selector, old)
        self.backoff.gc(self.clock())

    async def _sync_nodes(
        self, ds: Obj, key: str, delete: list[Obj], create_on: list[str], hash_: str
    ) -> None:
        """``syncNodes``: create on the nodes in slow-start batches, delete the pods, at most
        ``daemonset_burst_replicas`` of each; raise the failures together."""
        burst = self.ctx.settings.daemonset_burst_replicas
        create_on, delete = create_on[:burst], delete[:burst]
        self.expectations.expect(key, len(create_on), [object_key(p) for p in delete])
        template = dsu.pod_template(ds, hash_)
        failures: list[str] = []

        async def create(node_name: str) -> None:
            pod = dsu.pod_for_node(template, ds, node_name)
            try:
                created = await self.client.create(PODS, pod, namespace=podutil.namespace_of(ds))
            except StatusError as exc:
                self.expectations.creation_observed(key)
                if namespace_terminating(exc):
                    return  # every create would fail the same way
                self.recorder.event(ds, WARNING, "FailedCreate", f"Error creating: {error_text(exc)}")
                failures.append(error_text(exc))
                raise
            self.recorder.event(ds, NORMAL, "SuccessfulCreate", f"Created pod: {podutil.name_of(created)}")

        position = 0
        for size in slow_start_batches(len(create_on), self.ctx.settings.slow_start_initial_batch):
            batch = create_on[position : position + size]
            position += size
            results = await asyncio.gather(*(create(n) for n in batch), return_exceptions=True)
            if any(isinstance(r, BaseException) for r in results):
                for _ in range(len(create_on) - position):  # never attempted: not expected either
                    self.expectations.creation_observed(key)
                break

        async def remove(pod: Obj) -> None:
            name = podutil.name_of(pod)
            try:
                await self.client.delete(PODS, name, namespace=podutil.namespace_of(ds))
            except StatusError as exc:
                self.expectations.deletion_observed(key, object_key(pod))
                if exc.code == 404:
                    return
                self.recorder.event(ds, WARNING, "FailedDelete", f"Error deleting: {error_text(exc)}")
                failures.append(f"unable to delete pods: {error_text(exc)}")
                return
            self.recorder.event(ds, NORMAL, "SuccessfulDelete", f"Deleted pod: {name}")

        await asyncio.gather(*(remove(p) for p in delete))
        if failures:
            raise SyncError(failures[0] if len(failures) == 1 else "[" + ", ".join(failures) + "]")

    # -- history ------------------------------------------------------------------------------------------------

    async def _controlled_histories(self, ds: Obj, selector: labelsel.Selector) -> list[Obj]:
        candidates = {
            object_key(r): r
            for r in (
                *self.revisions_by_owner.get(podutil.uid_of(ds)),
                *self.orphan_revisions.get(podutil.namespace_of(ds)),
            )
        }

        async def can_adopt() -> None:
            await recheck_alive(self.client, DAEMONSETS, ds)

        claimed = await claim(self.client, REVISIONS, ds, selector, candidates.values(), can_adopt=can_adopt)
        return [copy.deepcopy(r) for r in claimed]

    async def _construct_history(self, ds: Obj, selector: labelsel.Selector) -> tuple[Obj, list[Obj]]:
        """``constructHistory``: (the revision of the current template, the others)."""
        current: list[Obj] = []
        old: list[Obj] = []
        namespace = podutil.namespace_of(ds)
        for revision in await self._controlled_histories(ds, selector):
            if dsu.HASH_LABEL not in podutil.labels_of(revision):
                # Older revisions lack the label; their name stands in for the hash.
                revision["metadata"].setdefault("labels", {})[dsu.HASH_LABEL] = podutil.name_of(revision)
                revision = await self.client.replace(REVISIONS, revision, namespace=namespace)
            (current if dsu.matches(ds, revision) else old).append(revision)
        number = dsu.max_revision(old) + 1
        if not current:
            return await self._snapshot(ds, number), old
        keep = await self._dedup(ds, selector, current)
        if history.number(keep) < number:
            updated = copy.deepcopy(keep)
            updated["revision"] = number
            await self.client.replace(REVISIONS, updated, namespace=namespace)
        return keep, old

    async def _snapshot(self, ds: Obj, number: int) -> Obj:
        revision = dsu.snapshot(ds, number)
        namespace, name = podutil.namespace_of(ds), podutil.name_of(revision)
        try:
            return await self.client.create(REVISIONS, revision, namespace=namespace)
        except StatusError as exc:
            if exc.code != 409 or exc.reason != "AlreadyExists":
                raise
            existing = await self.client.get(REVISIONS, name, namespace=namespace)
            if dsu.matches(ds, existing):
                return existing
            # A hash collision: count it, so the next sync names the revision differently.
            fresh = await self.client.get(DAEMONSETS, podutil.name_of(ds), namespace=namespace)
            seen = podutil.status(ds).get("collisionCount")
            stored = podutil.status(fresh).get("collisionCount")
            if seen != stored:
                raise RuntimeError(
                    f"found a stale collision count ({seen}, expected {stored}) of DaemonSet "
                    f'"{podutil.name_of(ds)}" while processing; will retry until it is updated'
                ) from exc
            fresh.setdefault("status", {})["collisionCount"] = int(stored or 0) + 1
            await self.client.replace_status(DAEMONSETS, fresh, namespace=namespace)
            self.log.info(
                "hash collision; bumping collisionCount",
                daemonset=podutil.name_of(ds),
                collision_count=fresh["status"]["collisionCount"],
            )
            raise

    async def _dedup(self, ds: Obj, selector: labelsel.Selector, current: list[Obj]) -> Obj:
        """``dedupCurHistories``: keep the highest of several equal revisions; relabel pods to its hash."""
        if len(current) == 1:
            return current[0]
        keep = dsu.keep_of(current)
        keep_hash = podutil.labels_of(keep).get(dsu.HASH_LABEL, "")
        namespace = podutil.namespace_of(ds)
        for pod in await self._claim_pods(ds, selector):
            if podutil.labels_of(pod).get(dsu.HASH_LABEL) != keep_hash:
                await self.client.patch(
                    PODS,
                    podutil.name_of(pod),
                    {"metadata": {"labels": {dsu.HASH_LABEL: keep_hash}}},
                    namespace=namespace,
                )
        for revision in current:
            if podutil.name_of(revision) != podutil.name_of(keep):
                await self.client.delete(REVISIONS, podutil.name_of(revision), namespace=namespace)
        return keep

    async def _cleanup_history(self, ds: Obj, selector: labelsel.Selector, old: list[Obj]) -> None:
        pods = await self._claim_pods(ds, selector)
        live = {
            h
            for pods_on_node in dsu.nodes_to_pods(pods, include_deleted_terminal=True).values()
            for p in pods_on_node
            if (h := podutil.labels_of(p).get(dsu.HASH_LABEL))
        }
        for revision in dsu.revisions_to_clean(ds, old, live):
            try:
                await self.client.delete(
                    REVISIONS, podutil.name_of(revision), namespace=podutil.namespace_of(ds)
                )
            except StatusError as exc:
                if exc.code != 404:
                    raise RuntimeError(
                        f"failed to clean up revisions of DaemonSet: {error_text(exc)}"
                    ) from exc

    # -- status ---------------------------------------------------------------------------------------------------

    async def _update_status(
        self, ds: Obj, selector: labelsel.Selector, nodes: list[Obj], hash_: str, *, observe_generation: bool
    ) -> float | None:
        """``updateDaemonSetStatus``: PUT /status when a count changed or a generation is newly observed;
        on a conflict read afresh and try once more (``StatusUpdateRetries``)."""
        pods = await self._claim_pods(ds, selector)
        now = self.clock()
        counts = dsu.status_counts(ds, nodes, dsu.nodes_to_pods(pods), hash_, now)
        status = dsu.status_for_write(ds, counts, observe_generation)
        if status is not None:
            namespace = podutil.namespace_of(ds)
            try:
                await self.client.replace_status(DAEMONSETS, {**ds, "status": status}, namespace=namespace)
            except StatusError as exc:
                if exc.code != 409:
                    raise
                fresh = await self.client.get(DAEMONSETS, podutil.name_of(ds), namespace=namespace)
                retry = {k: v for k, v in podutil.status(fresh).items() if k not in status}
                retry.update(status)
                await self.client.replace_status(DAEMONSETS, {**fresh, "status": retry}, namespace=namespace)
        min_ready = dsu.min_ready_seconds(ds)
        if min_ready > 0 and counts["numberReady"] != counts["numberAvailable"]:
            return podutil.available_in(pods, min_ready, now)
        return None

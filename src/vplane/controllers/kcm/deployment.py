"""The Deployment controller (upstream ``pkg/controller/deployment``).

A sync reads the Deployment and its ReplicaSets from the shared caches, claims sets by selector, and
then, in upstream's order: only updates status while the Deployment is being deleted; records the
``DeploymentPaused``/``DeploymentResumed`` progress condition; while paused, or when ``spec.replicas``
changed (a set's ``desired-replicas`` annotation disagrees), scales proportionally; otherwise rolls out
with the Recreate or RollingUpdate strategy. The new ReplicaSet is ``<deployment>-<pod-template-hash>``;
revisions, the ``desired-replicas``/``max-replicas`` annotations, old-set cleanup down to
``revisionHistoryLimit``, the ``Available`` and ``Progressing`` conditions and the ``ScalingReplicaSet``
events are upstream's. The arithmetic is in :mod:`deploymentutil`; this module reads caches and writes.

Writes follow upstream: ReplicaSets by PUT with their resourceVersion, the Deployment's status and its
revision annotation by PUT /status (upstream's Deployment status strategy keeps the request's
annotations; where /status ignores metadata, as vplane's does, the annotation follows in a merge patch).
The resourceVersion returned by each write is carried into the next write of the same sync.
"""

from __future__ import annotations

import copy
from typing import Any

from vplane.controllers.informer import object_key
from vplane.controllers.kcm import deploymentutil as du
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.events import NORMAL, WARNING
from vplane.controllers.kcm.podowners import PodOwners
from vplane.controllers.kcm.refmanager import claim, recheck_alive
from vplane.controllers.kcm.replicaset import WorkloadKind, error_text, namespace_terminating, spec_selector
from vplane.controllers.kcm.resources import DEPLOYMENTS, PODS, REPLICASETS
from vplane.kube import labels as labelsel
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

DEPLOYMENT_KIND = WorkloadKind(DEPLOYMENTS, "deployment-controller", spec_selector, "apps")


class DeploymentController(ManagedController):
    name = DEPLOYMENT_KIND.controller_name

    def __init__(self, ctx: ControllerContext) -> None:
        informers = ctx.informers
        self.deployments = informers.informer(DEPLOYMENTS)
        self.sets = informers.informer(REPLICASETS)
        self.pods = informers.informer(PODS)
        self.deployments_by_namespace = informers.namespace_index(DEPLOYMENTS)
        # Its dependents are ReplicaSets, looked up as a ReplicaSet controller looks up pods' owners.
        self.owners = PodOwners(DEPLOYMENT_KIND, self.deployments, self.deployments_by_namespace)
        self.sets_by_owner = informers.controller_index(REPLICASETS)
        self.orphan_sets = informers.orphan_index(REPLICASETS)
        self.pods_by_owner = informers.controller_index(PODS)
        super().__init__(
            ctx, self.deployments, [self.sets, self.pods], ctx.settings.concurrent_deployment_syncs
        )
        self.sets.add_handlers(
            on_add=self._set_added, on_update=self._set_updated, on_delete=self._set_deleted
        )
        self.pods.add_handlers(on_delete=self._pod_deleted)

    # -- ReplicaSet and pod events -> Deployment keys --------------------------------------------------

    def _set_added(self, rs: Obj) -> None:
        if podutil.is_deleting(rs):
            self._set_deleted(rs)
            return
        ref = podutil.controller_ref(rs)
        if ref is not None:
            d = self.owners.resolve(podutil.namespace_of(rs), ref)
            if d is not None:
                self.enqueue(object_key(d))
            return
        for d in self.owners.matching(rs):
            self.enqueue(object_key(d))

    def _set_updated(self, old: Obj, new: Obj) -> None:
        if podutil.meta(old).get("resourceVersion") == podutil.meta(new).get("resourceVersion"):
            return
        new_ref, old_ref = podutil.controller_ref(new), podutil.controller_ref(old)
        if new_ref != old_ref and old_ref is not None:
            d = self.owners.resolve(podutil.namespace_of(old), old_ref)
            if d is not None:
                self.enqueue(object_key(d))
        if new_ref is not None:
            d = self.owners.resolve(podutil.namespace_of(new), new_ref)
            if d is not None:
                self.enqueue(object_key(d))
            return
        if podutil.labels_of(old) != podutil.labels_of(new) or new_ref != old_ref:
            for d in self.owners.matching(new):
                self.enqueue(object_key(d))

    def _set_deleted(self, rs: Obj) -> None:
        d = self.owners.resolve(podutil.namespace_of(rs), podutil.controller_ref(rs))
        if d is not None:
            self.enqueue(object_key(d))

    def _pod_deleted(self, pod: Obj) -> None:
        """A Recreate rollout waits for the old pods to be gone: look again when the last one goes."""
        ref = podutil.controller_ref(pod)
        if ref is None or ref.get("kind") != "ReplicaSet":
            return
        rs = self.sets.get(f"{podutil.namespace_of(pod)}/{ref.get('name')}")
        if rs is None:
            return
        d = self.owners.resolve(podutil.namespace_of(rs), podutil.controller_ref(rs))
        if d is None or du.strategy_type(d) != "Recreate":
            return
        owned = [s for s in self.sets_by_owner.get(podutil.uid_of(d))]
        if all(not self.pods_by_owner.get(podutil.uid_of(s)) for s in owned):
            self.enqueue(object_key(d))

    # -- sync --------------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        cached = self.deployments.get(key)
        if cached is None:
            return None
        d = copy.deepcopy(cached)
        spec = podutil.spec(d)
        if spec.get("selector") == {}:
            self.recorder.event(
                d,
                WARNING,
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.",
            )
            if du.status_int(d, "observedGeneration") < du.generation(d):
                d.setdefault("status", {})["observedGeneration"] = du.generation(d)
                await self._write_status(d)
            return None
        rs_list = await self._claim_sets(d)
        if podutil.is_deleting(d):
            await self._sync_status_only(d, rs_list)
            return None
        await self._check_paused_conditions(d)
        if spec.get("paused"):
            await self._sync(d, rs_list)
            return None
        if await self._is_scaling_event(d, rs_list):
            await self._sync(d, rs_list)
            return None
        kind = du.strategy_type(d)
        if kind == "Recreate":
            return await self._rollout_recreate(d, rs_list)
        if kind == "RollingUpdate":
            return await self._rollout_rolling(d, rs_list)
        raise RuntimeError(f"unexpected deployment strategy type: {kind}")

    async def _claim_sets(self, d: Obj) -> list[Obj]:
        try:
            selector = labelsel.from_label_selector(podutil.spec(d).get("selector"))
        except StatusError as exc:
            raise RuntimeError(
                f"deployment {podutil.namespace_of(d)}/{podutil.name_of(d)} has invalid label selector: {exc.message}"
            ) from exc
        candidates = {
            object_key(rs): rs
            for rs in (
                *self.sets_by_owner.get(podutil.uid_of(d)),
                *self.orphan_sets.get(podutil.namespace_of(d)),
            )
        }

        async def can_adopt() -> None:
            await recheck_alive(self.client, DEPLOYMENTS, d)

        claimed = await claim(self.client, REPLICASETS, d, selector, candidates.values(), can_adopt=can_adopt)
        return [copy.deepcopy(rs) for rs in claimed]

    def _pod_map(self, d: Obj, rs_list: list[Obj]) -> dict[str, list[Obj]]:
        selector = labelsel.from_label_selector(podutil.spec(d).get("selector"))
        return {
            podutil.uid_of(rs): [
                p
                for p in self.pods_by_owner.get(podutil.uid_of(rs))
                if selector.matches(podutil.labels_of(p))
            ]
            for rs in rs_list
        }

    # -- new and old sets ------------------------------------------------------------------------------

    async def _all_sets(self, d: Obj, rs_list: list[Obj], create: bool) -> tuple[Obj | None, list[Obj]]:
        """``getAllReplicaSetsAndSyncRevision``: (the new set, every old set)."""
        new_rs = du.find_new_rs(d, rs_list)
        _, old = du.find_old_rss(d, rs_list, new_rs)
        new_rs = await self._new_set(d, rs_list, old, new_rs, create)
        return new_rs, old

    async def _new_set(
        self, d: Obj, rs_list: list[Obj], old: list[Obj], existing: Obj | None, create: bool
    ) -> Obj | None:
        """``getNewReplicaSet``: sync the existing new set's annotations and the Deployment's revision, or
        create the new set when asked."""
        now = self.clock()
        new_revision = str(du.max_revision(old) + 1)
        if existing is not None:
            rs = copy.deepcopy(existing)
            annotations_changed = du.set_new_rs_annotations(d, rs, new_revision, True)
            min_ready = podutil.spec(d).get("minReadySeconds") or 0
            if annotations_changed or (podutil.spec(rs).get("minReadySeconds") or 0) != min_ready:
                podutil.spec(rs)["minReadySeconds"] = min_ready
                return await self._replace_set(rs, existing)
            needs_update = du.set_deployment_revision(d, podutil.annotations_of(rs).get(du.REVISION, ""))
            if du.has_progress_deadline(d) and du.get_condition(podutil.status(d), "Progressing") is None:
                status = d.setdefault("status", {})
                du.set_condition(
                    status,
                    du.new_condition(
                        "Progressing",
                        "True",
                        du.FOUND_NEW_RS,
                        f'Found new replica set "{podutil.name_of(rs)}"',
                        now,
                    ),
                )
                needs_update = True
            if needs_update:
                await self._write_status(d)
            return rs
        if not create:
            return None
        tmpl = copy.deepcopy(du.template(d))
        collision = podutil.status(d).get("collisionCount")
        template_hash = du.compute_hash(tmpl, collision if isinstance(collision, int) else None)
        tmeta = tmpl.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), du.POD_TEMPLATE_HASH: template_hash}
        selector = copy.deepcopy(podutil.spec(d).get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), du.POD_TEMPLATE_HASH: template_hash}
        rs_name = f"{podutil.name_of(d)}-{template_hash}"
        new_rs: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": rs_name,
                "namespace": podutil.namespace_of(d),
                "ownerReferences": [podutil.new_controller_ref(d)],
                "labels": dict(tmeta["labels"]),
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": podutil.spec(d).get("minReadySeconds") or 0,
                "selector": selector,
                "template": tmpl,
            },
        }
        new_count = du.new_rs_new_replicas(d, [*old, new_rs], new_rs)
        new_rs["spec"]["replicas"] = new_count
        du.set_new_rs_annotations(d, new_rs, new_revision, False)
        already_exists = False
        try:
            created = await self.client.create(REPLICASETS, new_rs, namespace=podutil.namespace_of(d))
        except StatusError as exc:
            if exc.code == 409 and exc.reason == "AlreadyExists":
                already_exists = True
                found = await self.client.get(REPLICASETS, rs_name, namespace=podutil.namespace_of(d))
                ref = podutil.controller_ref(found)
                if (
                    ref is not None
                    and ref.get("uid") == podutil.uid_of(d)
                    and du.equal_ignore_hash(du.template(d), du.template(found))
                ):
                    created = found
                else:
                    status = d.setdefault("status", {})
                    before = status.get("collisionCount") or 0
                    status["collisionCount"] = before + 1
                    try:
                        await self._write_status(d)
                        self.log.info(
                            "hash collision; bumping collisionCount",
                            deployment=podutil.name_of(d),
                            collision_count=before + 1,
                        )
                    except StatusError:
                        pass
                    raise
            elif namespace_terminating(exc):
                raise
            else:
                message = f'Failed to create new replica set "{rs_name}": {error_text(exc)}'
                if du.has_progress_deadline(d):
                    status = d.setdefault("status", {})
                    du.set_condition(
                        status, du.new_condition("Progressing", "False", du.FAILED_RS_CREATE, message, now)
                    )
                    try:
                        await self._write_status(d)
                    except StatusError:
                        pass
                self.recorder.event(d, WARNING, du.FAILED_RS_CREATE, message)
                raise
        created.setdefault("apiVersion", "apps/v1")
        created.setdefault("kind", "ReplicaSet")
        if not already_exists and new_count > 0:
            self.recorder.event(
                d,
                NORMAL,
                "ScalingReplicaSet",
                f"Scaled up replica set {podutil.name_of(created)} to {new_count}",
            )
        needs_update = du.set_deployment_revision(d, new_revision)
        if not already_exists and du.has_progress_deadline(d):
            status = d.setdefault("status", {})
            du.set_condition(
                status,
                du.new_condition(
                    "Progressing",
                    "True",
                    du.NEW_REPLICA_SET,
                    f'Created new replica set "{podutil.name_of(created)}"',
                    now,
                ),
            )
            needs_update = True
        if needs_update:
            await self._write_status(d)
        return created

    # -- scaling -----------------------------------------------------------------------------------------

    async def _is_scaling_event(self, d: Obj, rs_list: list[Obj]) -> bool:
        new_rs, old = await self._all_sets(d, rs_list, False)
        for rs in du.filter_active([*old, new_rs]):
            desired = du.desired_replicas_annotation(rs)
            if desired is not None and desired != du.replicas(d):
                return True
        return False

    async def _scale_and_record(self, rs: Obj, new_scale: int, d: Obj) -> tuple[bool, Obj]:
        if du.replicas(rs) == new_scale:
            return False, rs
        operation = "up" if du.replicas(rs) < new_scale else "down"
        return await self._scale_set(rs, new_scale, d, operation)

    async def _scale_set(self, rs: Obj, new_scale: int, d: Obj, operation: str) -> tuple[bool, Obj]:
        size_changes = du.replicas(rs) != new_scale
        desired, maximum = du.replicas(d), du.replicas(d) + du.max_surge(d)
        if not size_changes and not du.replicas_annotations_need_update(rs, desired, maximum):
            return False, rs
        old_scale = du.replicas(rs)
        updated = copy.deepcopy(rs)
        podutil.spec(updated)["replicas"] = new_scale
        du.set_replicas_annotations(updated, desired, maximum)
        result = await self._replace_set(updated, rs)
        if size_changes:
            self.recorder.event(
                d,
                NORMAL,
                "ScalingReplicaSet",
                f"Scaled {operation} replica set {podutil.name_of(rs)} to {new_scale} from {old_scale}",
            )
        return size_changes, result

    async def _scale(self, d: Obj, new_rs: Obj | None, old: list[Obj]) -> None:
        """``scale``: one active set takes all replicas; otherwise spread the change proportionally."""
        latest = du.find_active_or_latest(new_rs, old)
        if latest is not None:
            if du.replicas(latest) == du.replicas(d):
                return
            await self._scale_and_record(latest, du.replicas(d), d)
            return
        if du.is_saturated(d, new_rs):
            for rs in du.filter_active(old):
                await self._scale_and_record(rs, 0, d)
            return
        if not du.is_rolling(d):
            return
        active = du.filter_active([*old, new_rs])
        allowed = max(du.replicas(d) + du.max_surge(d), 0) if du.replicas(d) > 0 else 0
        to_add = allowed - du.replica_count(active)
        operation = ""
        if to_add > 0:
            active = du.by_size_newer(active)
            operation = "up"
        elif to_add < 0:
            active = du.by_size_older(active)
            operation = "down"
        added = 0
        sizes: dict[str, int] = {}
        for rs in active:
            if to_add != 0:
                proportion = du.get_proportion(rs, d, to_add, added)
                sizes[podutil.name_of(rs)] = du.replicas(rs) + proportion
                added += proportion
            else:
                sizes[podutil.name_of(rs)] = du.replicas(rs)
        for i, rs in enumerate(active):
            name = podutil.name_of(rs)
            if i == 0 and to_add != 0:
                sizes[name] = max(sizes[name] + to_add - added, 0)
            await self._scale_set(rs, sizes[name], d, operation)

    # -- strategies ------------------------------------------------------------------------------------

    async def _sync(self, d: Obj, rs_list: list[Obj]) -> None:
        """Scaling events and paused Deployments: scale, clean up when paused, update status."""
        new_rs, old = await self._all_sets(d, rs_list, False)
        await self._scale(d, new_rs, old)
        if podutil.spec(d).get("paused"):
            await self._cleanup(d, old)
        await self._sync_deployment_status([*old, new_rs], new_rs, d)

    async def _sync_status_only(self, d: Obj, rs_list: list[Obj]) -> None:
        new_rs, old = await self._all_sets(d, rs_list, False)
        await self._sync_deployment_status([*old, new_rs], new_rs, d)

    async def _rollout_rolling(self, d: Obj, rs_list: list[Obj]) -> float | None:
        new_rs, old = await self._all_sets(d, rs_list, True)
        assert new_rs is not None
        all_rss: list[Obj | None] = [*old, new_rs]
        if await self._reconcile_new_set(all_rss, new_rs, d):
            return await self._sync_rollout_status(all_rss, new_rs, d)
        if await self._reconcile_old_sets(all_rss, du.filter_active(old), new_rs, d):
            return await self._sync_rollout_status(all_rss, new_rs, d)
        if du.deployment_complete(d, podutil.status(d)):
            await self._cleanup(d, old)
        return await self._sync_rollout_status(all_rss, new_rs, d)

    async def _reconcile_new_set(self, all_rss: list[Obj | None], new_rs: Obj, d: Obj) -> bool:
        if du.replicas(new_rs) == du.replicas(d):
            return False
        if du.replicas(new_rs) > du.replicas(d):
            scaled, _ = await self._scale_and_record(new_rs, du.replicas(d), d)
            return scaled
        count = du.new_rs_new_replicas(d, all_rss, new_rs)
        scaled, _ = await self._scale_and_record(new_rs, count, d)
        return scaled

    async def _reconcile_old_sets(
        self, all_rss: list[Obj | None], old: list[Obj], new_rs: Obj, d: Obj
    ) -> bool:
        if du.replica_count(old) == 0:
            return False
        all_pods = du.replica_count(all_rss)
        min_available = du.replicas(d) - du.max_unavailable(d)
        new_unavailable = du.replicas(new_rs) - du.status_int(new_rs, "availableReplicas")
        max_scaled_down = all_pods - min_available - new_unavailable
        if max_scaled_down <= 0:
            return False
        old, cleaned = await self._cleanup_unhealthy(old, d, max_scaled_down)
        scaled = await self._scale_down_old_for_rolling([*old, new_rs], old, d)
        return cleaned + scaled > 0

    async def _cleanup_unhealthy(self, old: list[Obj], d: Obj, max_cleanup: int) -> tuple[list[Obj], int]:
        """Old pods that are not available go first: removing them costs no availability."""
        old = du.by_creation(old)
        total = 0
        for i, rs in enumerate(old):
            if total >= max_cleanup:
                break
            if du.replicas(rs) == 0 or du.replicas(rs) == du.status_int(rs, "availableReplicas"):
                continue
            count = min(max_cleanup - total, du.replicas(rs) - du.status_int(rs, "availableReplicas"))
            new_count = du.replicas(rs) - count
            if new_count > du.replicas(rs):
                raise RuntimeError(
                    f"when cleaning up unhealthy replicas, got invalid request to scale down "
                    f"{podutil.namespace_of(rs)}/{podutil.name_of(rs)} {du.replicas(rs)} -> {new_count}"
                )
            _, updated = await self._scale_and_record(rs, new_count, d)
            total += count
            old[i] = updated
        return old, total

    async def _scale_down_old_for_rolling(self, all_rss: list[Obj | None], old: list[Obj], d: Obj) -> int:
        min_available = du.replicas(d) - du.max_unavailable(d)
        available = du.available_count(all_rss)
        if available <= min_available:
            return 0
        budget = available - min_available
        total = 0
        for rs in du.by_creation(old):
            if total >= budget:
                break
            if du.replicas(rs) == 0:
                continue
            count = min(du.replicas(rs), budget - total)
            new_count = du.replicas(rs) - count
            if new_count > du.replicas(rs):
                raise RuntimeError(
                    f"when scaling down old RS, got invalid request to scale down "
                    f"{podutil.namespace_of(rs)}/{podutil.name_of(rs)} {du.replicas(rs)} -> {new_count}"
                )
            await self._scale_and_record(rs, new_count, d)
            total += count
        return total

    async def _rollout_recreate(self, d: Obj, rs_list: list[Obj]) -> float | None:
        pod_map = self._pod_map(d, rs_list)
        new_rs, old = await self._all_sets(d, rs_list, False)
        all_rss: list[Obj | None] = [*old, new_rs]
        scaled = False
        for i, rs in enumerate(old):
            if du.replicas(rs) == 0:
                continue
            changed, updated = await self._scale_and_record(rs, 0, d)
            if changed:
                old[i] = updated
                scaled = True
        if scaled:
            return await self._sync_rollout_status(all_rss, new_rs, d)
        if self._old_pods_running(new_rs, old, pod_map):
            return await self._sync_rollout_status(all_rss, new_rs, d)
        if new_rs is None:
            new_rs, old = await self._all_sets(d, rs_list, True)
            all_rss = [*old, new_rs]
        assert new_rs is not None
        await self._scale_and_record(new_rs, du.replicas(d), d)
        if du.deployment_complete(d, podutil.status(d)):
            await self._cleanup(d, old)
        return await self._sync_rollout_status(all_rss, new_rs, d)

    @staticmethod
    def _old_pods_running(new_rs: Obj | None, old: list[Obj], pod_map: dict[str, list[Obj]]) -> bool:
        if du.actual_count(old) > 0:
            return True
        new_uid = podutil.uid_of(new_rs) if new_rs is not None else None
        for uid, pods in pod_map.items():
            if uid == new_uid:
                continue
            for pod in pods:
                if podutil.phase(pod) in ("Failed", "Succeeded"):
                    continue
                return True
        return False

    async def _cleanup(self, d: Obj, old: list[Obj]) -> None:
        """``cleanupDeployment``: delete the oldest empty sets beyond ``revisionHistoryLimit``."""
        if not du.has_revision_history_limit(d):
            return
        alive = [rs for rs in old if not podutil.is_deleting(rs)]
        diff = len(alive) - int(podutil.spec(d)["revisionHistoryLimit"])
        if diff <= 0:
            return
        for rs in du.by_revision(alive)[:diff]:
            if (
                du.status_int(rs, "replicas") != 0
                or du.replicas(rs) != 0
                or du.generation(rs) > du.status_int(rs, "observedGeneration")
                or podutil.is_deleting(rs)
            ):
                continue
            try:
                await self.client.delete(REPLICASETS, podutil.name_of(rs), namespace=podutil.namespace_of(rs))
            except StatusError as exc:
                if exc.code != 404:
                    raise

    # -- status --------------------------------------------------------------------------------------------

    async def _check_paused_conditions(self, d: Obj) -> None:
        if not du.has_progress_deadline(d):
            return
        status = d.setdefault("status", {})
        cond = du.get_condition(status, "Progressing")
        if cond is not None and cond.get("reason") == du.TIMED_OUT:
            return
        paused_recorded = cond is not None and cond.get("reason") == du.PAUSED
        now = self.clock()
        if podutil.spec(d).get("paused") and not paused_recorded:
            du.set_condition(
                status, du.new_condition("Progressing", "Unknown", du.PAUSED, "Deployment is paused", now)
            )
        elif not podutil.spec(d).get("paused") and paused_recorded:
            du.set_condition(
                status, du.new_condition("Progressing", "Unknown", du.RESUMED, "Deployment is resumed", now)
            )
        else:
            return
        await self._write_status(d)

    async def _sync_deployment_status(self, all_rss: list[Obj | None], new_rs: Obj | None, d: Obj) -> None:
        status = du.calculate_status(all_rss, new_rs, d, self.clock())
        if du.omit_zero(podutil.status(d)) == du.omit_zero(status):
            return
        d["status"] = status
        await self._write_status(d)

    async def _sync_rollout_status(
        self, all_rss: list[Obj | None], new_rs: Obj | None, d: Obj
    ) -> float | None:
        now = self.clock()
        status = du.rollout_status(all_rss, new_rs, d, now)
        requeue = du.progress_check_in(d, status, now)
        if du.omit_zero(podutil.status(d)) != du.omit_zero(status):
            d["status"] = status
            await self._write_status(d)
        return requeue

    # -- writes ------------------------------------------------------------------------------------------

    async def _write_status(self, d: Obj) -> None:
        """PUT /status, carrying the revision annotation as upstream does (its Deployment status strategy
        keeps the request's annotations). A server whose /status ignores metadata (vplane's) gets the
        annotation in a merge patch of the Deployment when the answer lacks it."""
        body = {**d, "status": du.omit_zero(podutil.status(d))}
        written = await self.client.replace_status(DEPLOYMENTS, body, namespace=podutil.namespace_of(d))
        self._carry(d, written)
        d["status"] = written.get("status") or {}
        revision = podutil.annotations_of(d).get(du.REVISION)
        if revision is not None and podutil.annotations_of(written).get(du.REVISION) != revision:
            patched = await self.client.patch(
                DEPLOYMENTS,
                podutil.name_of(d),
                {"metadata": {"annotations": {du.REVISION: revision}}},
                namespace=podutil.namespace_of(d),
            )
            self._carry(d, patched)

    @staticmethod
    def _carry(d: Obj, written: Obj) -> None:
        """Keep the resourceVersion of the latest write for the next one. Not the generation: a spec
        changed meanwhile must not be reported as observed by a sync that never read it."""
        meta: dict[str, Any] = podutil.meta(written)
        if "resourceVersion" in meta:
            d["metadata"]["resourceVersion"] = meta["resourceVersion"]

    async def _replace_set(self, rs: Obj, base: Obj) -> Obj:
        """PUT a ReplicaSet changed from ``base``. A conflict caused only by the ReplicaSet controller
        writing status meanwhile (spec, labels and annotations as ``base`` had them) is retried once with
        the fresh resourceVersion, as upstream's ``UpdateRSWithRetries`` does; any other change is left
        to the next sync."""
        namespace = podutil.namespace_of(rs)
        try:
            written = await self.client.replace(REPLICASETS, rs, namespace=namespace)
        except StatusError as exc:
            if exc.code != 409:
                raise
            fresh = await self.client.get(REPLICASETS, podutil.name_of(rs), namespace=namespace)
            if (
                fresh.get("spec") != base.get("spec")
                or podutil.labels_of(fresh) != podutil.labels_of(base)
                or podutil.annotations_of(fresh) != podutil.annotations_of(base)
                or podutil.uid_of(fresh) != podutil.uid_of(base)
            ):
                raise
            retry = {**rs, "status": fresh.get("status", {})}
            retry["metadata"] = {
                **podutil.meta(rs),
                "resourceVersion": podutil.meta(fresh).get("resourceVersion"),
            }
            written = await self.client.replace(REPLICASETS, retry, namespace=namespace)
        written.setdefault("apiVersion", "apps/v1")
        written.setdefault("kind", "ReplicaSet")
        return written

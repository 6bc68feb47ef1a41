"""The StatefulSet controller (upstream ``pkg/controller/statefulset``): the asyncio glue around
:mod:`statefulsetutil`.

Each sync of a StatefulSet: adopt orphaned ControllerRevisions its selector matches, claim its pods (by
selector and by name ``<set>-<ordinal>``), find or create the revision of its current template (an equal
older revision is renumbered: a rollback), then run the steps :func:`statefulsetutil.plan` chose — in
order under ``OrderedReady``, in slow-start batches under ``Parallel`` — and write ``status`` even when a
step failed; finally delete revisions beyond ``revisionHistoryLimit`` that no pod uses.

Events are upstream's (``recordPodEvent``/``recordClaimEvent``): ``SuccessfulCreate`` "create Pod web-0
in StatefulSet web successful", ``FailedCreate`` "create Pod web-0 in StatefulSet web failed error:
...", the same for ``delete`` and ``update``, and "create Claim www-web-0 Pod web-0 in StatefulSet web
success" for claims.

Unlike upstream, creations and deletions are tracked with expectations (as the ReplicaSet controller
does): the pod cache lags the writes, and a sync that runs before it catches up would otherwise create a
pod that exists (an ``AlreadyExists`` error and a back-off) or delete one twice (a ``FailedDelete``
event).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator, Mapping
from typing import Any

from vplane.controllers.informer import Informer, object_key, split_key
from vplane.controllers.kcm import history
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm import statefulsetutil as ssu
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.events import NORMAL, WARNING
from vplane.controllers.kcm.expectations import Expectations
from vplane.controllers.kcm.podowners import PodOwners
from vplane.controllers.kcm.refmanager import adopt_patch, claim, recheck_alive
from vplane.controllers.kcm.replicaset import WorkloadKind, error_text, slow_start_batches, spec_selector
from vplane.controllers.kcm.resources import PODS
from vplane.kube import labels as labelsel
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

STATEFULSETS = ssu.STATEFULSETS
PERSISTENTVOLUMECLAIMS = ssu.PERSISTENTVOLUMECLAIMS
MAX_BATCH = 500
"""``MaxBatchSize``: the most writes a Parallel sync has in flight."""
UPDATE_ATTEMPTS = 5
"""Writes retried on a conflict with a fresh read (``retry.DefaultRetry``/``DefaultBackoff`` steps)."""


class SyncError(Exception):
    """A step failed with this message (upstream's error text: what the events and logs say)."""


def aggregate(messages: list[str]) -> str:
    """``utilerrors.NewAggregate``'s text: one error as is, several in brackets."""
    return messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"


class _CacheView(Mapping[str, Obj]):
    """An informer's cache as a read-only mapping of ``namespace/name`` keys."""

    def __init__(self, informer: Informer) -> None:
        self._informer = informer

    def __getitem__(self, key: str) -> Obj:
        found = self._informer.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._informer.keys())

    def __len__(self) -> int:
        return len(self._informer.keys())


STATEFUL_SET_KIND = WorkloadKind(STATEFULSETS, ssu.CONTROLLER_NAME, spec_selector, "apps")


class StatefulSetController(ManagedController):
    name = ssu.CONTROLLER_NAME

    def __init__(self, ctx: ControllerContext) -> None:
        informers = ctx.informers
        self.sets = informers.informer(STATEFULSETS)
        self.pods = informers.informer(PODS)
        self.claims = informers.informer(PERSISTENTVOLUMECLAIMS)
        self.revisions = informers.informer(history.CONTROLLERREVISIONS)
        self.sets_by_namespace = informers.namespace_index(STATEFULSETS)
        self.owners = PodOwners(STATEFUL_SET_KIND, self.sets, self.sets_by_namespace)
        self.pods_by_owner = informers.controller_index(PODS)
        self.orphan_pods = informers.orphan_index(PODS)
        self.revisions_by_namespace = informers.namespace_index(history.CONTROLLERREVISIONS)
        super().__init__(
            ctx,
            self.sets,
            [self.pods, self.claims, self.revisions],
            ctx.settings.concurrent_statefulset_syncs,
        )
        self.claim_view = _CacheView(self.claims)
        self.expectations = Expectations(ctx.clock, ctx.settings.expectations_timeout_seconds)
        self.pods.add_handlers(
            on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted
        )
        self.claims.add_handlers(on_delete=self._claim_deleted)

    # -- pod and claim events -> keys ---------------------------------------------------------------------

    def _pod_added(self, pod: Obj) -> None:
        self.owners.pod_added(pod, self.expectations, self.enqueue, self._pod_deleted)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if podutil.meta(old).get("resourceVersion") == podutil.meta(new).get("resourceVersion"):
            return
        if podutil.is_deleting(new) and not podutil.is_deleting(old):
            owner = self.owners.resolve(podutil.namespace_of(new), podutil.controller_ref(new))
            if owner is not None:
                self.expectations.deletion_observed(object_key(owner), object_key(new))
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

    def _claim_deleted(self, claim_obj: Obj) -> None:
        """A claim that blocked a pod (owned by an earlier pod of the same name) is gone: look again."""
        namespace = podutil.namespace_of(claim_obj)
        for ref in podutil.meta(claim_obj).get("ownerReferences") or ():
            if not isinstance(ref, dict):
                continue
            name = ""
            if ref.get("kind") == "Pod":
                name = ssu.parent_and_ordinal(str(ref.get("name") or ""))[0]
            elif ref.get("kind") == "StatefulSet":
                name = str(ref.get("name") or "")
            if name and self.sets.get(f"{namespace}/{name}") is not None:
                self.enqueue(f"{namespace}/{name}")

    # -- sync ---------------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        cached = self.sets.get(key)
        if cached is None:
            self.expectations.forget(key)
            return None
        sts = copy.deepcopy(cached)
        try:
            selector = labelsel.from_label_selector(podutil.spec(sts).get("selector"))
        except StatusError as exc:
            self.log.error("invalid selector", key=key, error=exc.message)
            return None
        await self._adopt_orphan_revisions(sts, selector)
        pods = await self._claim_pods(sts, selector, key)
        revisions = history.sort_revisions(self._revisions_of(sts, selector))
        collision = int(podutil.status(sts).get("collisionCount") or 0)
        update, collision = await self._update_revision(sts, revisions, collision)
        current = ssu.current_revision(sts, revisions, update)
        current_set = history.apply_revision(sts, current, STATEFULSETS)
        update_set = history.apply_revision(sts, update, STATEFULSETS)
        now = self.clock()
        plan = ssu.plan(sts, pods, current, update, current_set, update_set, self.claim_view, collision, now)
        error: Exception | None = None
        if self.expectations.satisfied(key):
            error = await self._execute(sts, key, plan, update_set)
        await self._write_status(sts, plan.status)
        await self._truncate_history(sts, pods, revisions, current, update)
        if error is not None:
            raise error
        min_ready = ssu.min_ready_seconds(sts)
        if min_ready > 0 and plan.status.get("availableReplicas") != ssu.replicas(sts):
            return podutil.available_in(pods, min_ready, self.clock())
        return None

    def _revisions_of(self, sts: Obj, selector: labelsel.Selector) -> list[Obj]:
        """``ListRevisions``: the namespace's revisions the selector matches, ours or orphaned."""
        matched = [
            r
            for r in self.revisions_by_namespace.get(podutil.namespace_of(sts))
            if selector.matches(podutil.labels_of(r))
        ]
        return [copy.deepcopy(r) for r in history.owned_or_orphaned(matched, sts)]

    async def _adopt_orphan_revisions(self, sts: Obj, selector: labelsel.Selector) -> None:
        orphans = [r for r in self._revisions_of(sts, selector) if podutil.controller_ref(r) is None]
        if not orphans:
            return
        try:
            await recheck_alive(self.client, STATEFULSETS, sts)
        except RuntimeError as exc:
            raise RuntimeError(f"can't adopt ControllerRevisions: {exc}") from exc
        for revision in orphans:
            await self.client.patch(
                history.CONTROLLERREVISIONS,
                podutil.name_of(revision),
                adopt_patch(sts, revision),
                namespace=podutil.namespace_of(sts),
                patch_type="strategic",
            )

    async def _claim_pods(self, sts: Obj, selector: labelsel.Selector, key: str) -> list[Obj]:
        namespace, _ = split_key(key)
        candidates = {
            object_key(p): p
            for p in (*self.pods_by_owner.get(podutil.uid_of(sts)), *self.orphan_pods.get(namespace or ""))
        }

        async def can_adopt() -> None:
            await recheck_alive(self.client, STATEFULSETS, sts)

        return await claim(
            self.client,
            PODS,
            sts,
            selector,
            candidates.values(),
            can_adopt=can_adopt,
            match=lambda pod: ssu.is_member(sts, pod),
        )

    async def _update_revision(self, sts: Obj, revisions: list[Obj], collision: int) -> tuple[Obj, int]:
        choice = ssu.choose_update_revision(sts, revisions, collision)
        if choice.action == "keep":
            return choice.revision, collision
        if choice.action == "renumber":
            return await history.set_revision_number(self.client, choice.revision, choice.number), collision
        return await history.create_revision(self.client, sts, choice.revision, collision)

    async def _truncate_history(
        self, sts: Obj, pods: list[Obj], revisions: list[Obj], current: Obj, update: Obj
    ) -> None:
        doomed = ssu.revisions_to_delete(
            sts, pods, revisions, podutil.name_of(current), podutil.name_of(update)
        )
        for revision in doomed:
            try:
                await self.client.delete(
                    history.CONTROLLERREVISIONS,
                    podutil.name_of(revision),
                    namespace=podutil.namespace_of(sts),
                )
            except StatusError as exc:
                if exc.code != 404:
                    raise

    # -- running a plan ------------------------------------------------------------------------------------

    async def _execute(self, sts: Obj, key: str, plan: ssu.Plan, update_set: Obj) -> Exception | None:
        """Run the plan's phases; the first failure stops the sync and is returned (upstream returns it after
        writing status). Creations and deletions not carried out are taken off the expectations."""
        steps = [s for phase in plan.phases for s in phase.steps]
        creations = [s for s in steps if s.action == ssu.CREATE]
        deletions = [s for s in steps if s.action == ssu.DELETE_POD]
        self.expectations.expect(key, len(creations), [object_key(s.pod) for s in deletions])
        pending = {id(s) for s in (*creations, *deletions)}

        async def run(step: ssu.Step) -> None:
            try:
                await self._run_step(sts, update_set, step, plan)
            finally:
                pending.discard(id(step))

        error: Exception | None = None
        for phase in plan.phases:
            try:
                if plan.monotonic:
                    for step in phase.steps:
                        await run(step)
                else:
                    await self._in_batches(phase.steps, run)
            except (StatusError, RuntimeError, SyncError) as exc:
                error = exc
                break
            if phase.halt:
                break
        for step in (*creations, *deletions):
            if id(step) in pending:
                if step.action == ssu.CREATE:
                    self.expectations.creation_observed(key)
                else:
                    self.expectations.deletion_observed(key, object_key(step.pod))
        return error

    @staticmethod
    async def _in_batches(steps: list[ssu.Step], run: Any) -> None:
        """``slowStartBatch``: 1, 2, 4, ... at once (at most ``MAX_BATCH``); stop after a batch with a failure."""
        done = 0
        for size in slow_start_batches(len(steps), 1):
            while size > 0:
                chunk = min(size, MAX_BATCH)
                batch = steps[done : done + chunk]
                results = await asyncio.gather(*(run(s) for s in batch), return_exceptions=True)
                done += chunk
                size -= chunk
                for result in results:
                    if isinstance(result, BaseException):
                        raise result

    async def _run_step(self, sts: Obj, update_set: Obj, step: ssu.Step, plan: ssu.Plan) -> None:
        if step.action == ssu.CREATE:
            await self._create_pod(sts, step.pod)
        elif step.action == ssu.DELETE_POD:
            deleted = await self._delete_pod(sts, step.pod, ignore_missing=step.for_update)
            if deleted and step.for_update:
                plan.status["currentReplicas"] = int(plan.status.get("currentReplicas") or 0) - 1
        elif step.action == ssu.UPDATE:
            await self._update_pod(update_set, copy.deepcopy(step.pod))
        elif step.action == ssu.CLAIMS:
            await self._create_missing_claims(update_set, step.pod)
        elif step.action == ssu.RETENTION:
            await self._fix_retention(update_set, step.pod)

    def _pod_event(self, verb: str, sts: Obj, pod: Obj, error: str | None) -> None:
        """``recordPodEvent``."""
        name, set_name = podutil.name_of(pod), podutil.name_of(sts)
        if error is None:
            self.recorder.event(
                sts,
                NORMAL,
                f"Successful{verb.title()}",
                f"{verb} Pod {name} in StatefulSet {set_name} successful",
            )
        else:
            self.recorder.event(
                sts,
                WARNING,
                f"Failed{verb.title()}",
                f"{verb} Pod {name} in StatefulSet {set_name} failed error: {error}",
            )

    async def _create_pod(self, sts: Obj, pod: Obj) -> None:
        """``CreateStatefulPod``: claims first, then the pod, then the claims' ownership."""
        claim_errors = await self._create_claims(sts, pod)
        if claim_errors:
            self._pod_event("create", sts, pod, aggregate(claim_errors))
            raise SyncError(aggregate(claim_errors))
        try:
            created = await self.client.create(PODS, pod, namespace=podutil.namespace_of(sts))
        except StatusError as exc:
            if not (exc.code == 409 and exc.reason == "AlreadyExists"):
                self._pod_event("create", sts, pod, error_text(exc))
            raise
        created.setdefault("apiVersion", "v1")
        created.setdefault("kind", "Pod")
        try:
            await self._fix_retention(sts, created)
        except (StatusError, RuntimeError) as exc:
            self._pod_event("update", sts, pod, error_text(exc))
            raise
        self._pod_event("create", sts, pod, None)

    async def _delete_pod(self, sts: Obj, pod: Obj, *, ignore_missing: bool) -> bool:
        """``DeleteStatefulPod``; True when the pod is gone or going."""
        try:
            await self.client.delete(PODS, podutil.name_of(pod), namespace=podutil.namespace_of(pod))
        except StatusError as exc:
            self._pod_event("delete", sts, pod, error_text(exc))
            if exc.code == 404 and ignore_missing:
                return True
            raise
        self._pod_event("delete", sts, pod, None)
        return True

    async def _update_pod(self, sts: Obj, pod: Obj) -> None:
        """``UpdateStatefulPod``: conform identity, storage (creating missing claims) and claim ownership, and
        PUT the pod, retrying conflicts with a fresh read."""
        attempted = False
        error: str | None = None
        try:
            for attempt in range(UPDATE_ATTEMPTS):
                consistent = True
                if not ssu.identity_matches(sts, pod):
                    ssu.update_identity(sts, pod)
                    consistent = False
                if not ssu.storage_matches(sts, pod):
                    ssu.update_storage(sts, pod)
                    consistent = False
                    claim_errors = await self._create_claims(sts, pod)
                    if claim_errors:
                        self._pod_event("update", sts, pod, aggregate(claim_errors))
                        raise SyncError(aggregate(claim_errors))
                if not ssu.claims_match_retention(sts, pod, self.claim_view):
                    try:
                        await self._fix_retention(sts, pod)
                    except (StatusError, RuntimeError) as exc:
                        self._pod_event("update", sts, pod, error_text(exc))
                        raise
                    consistent = False
                if consistent:
                    return
                attempted = True
                try:
                    await self.client.replace(PODS, pod, namespace=podutil.namespace_of(sts))
                    return
                except StatusError as exc:
                    if exc.code != 409 or attempt == UPDATE_ATTEMPTS - 1:
                        raise
                    pod = await self.client.get(
                        PODS, podutil.name_of(pod), namespace=podutil.namespace_of(sts)
                    )
        except (StatusError, RuntimeError, SyncError) as exc:
            error = error_text(exc)
            raise
        finally:
            if attempted:
                self._pod_event("update", sts, pod, error)

    # -- claims ---------------------------------------------------------------------------------------------

    def _claim_event(self, sts: Obj, pod: Obj, claim_obj: Obj, error: str | None) -> None:
        """``recordClaimEvent`` (upstream's two wordings differ: "Pod" against "for Pod")."""
        claim_name, name, set_name = podutil.name_of(claim_obj), podutil.name_of(pod), podutil.name_of(sts)
        if error is None:
            self.recorder.event(
                sts,
                NORMAL,
                "SuccessfulCreate",
                f"create Claim {claim_name} Pod {name} in StatefulSet {set_name} success",
            )
        else:
            self.recorder.event(
                sts,
                WARNING,
                "FailedCreate",
                f"create Claim {claim_name} for Pod {name} in StatefulSet {set_name} failed error: {error}",
            )

    async def _create_claims(self, sts: Obj, pod: Obj) -> list[str]:
        """``createPersistentVolumeClaims``: the pod's missing claims; the errors, as upstream words them."""
        errors: list[str] = []
        for _, wanted in ssu.claims_for(sts, ssu.ordinal(pod)):
            name = podutil.name_of(wanted)
            existing = self.claims.get(f"{podutil.namespace_of(wanted)}/{name}")
            if existing is not None:
                if podutil.is_deleting(existing):
                    errors.append(f"pvc {name} is being deleted")
                continue
            try:
                await self.client.create(PERSISTENTVOLUMECLAIMS, wanted, namespace=podutil.namespace_of(sts))
            except StatusError as exc:
                errors.append(f"failed to create PVC {name}: {error_text(exc)}")
                if not (exc.code == 409 and exc.reason == "AlreadyExists"):
                    self._claim_event(sts, pod, wanted, error_text(exc))
                continue
            self._claim_event(sts, pod, wanted, None)
        return errors

    async def _create_missing_claims(self, sts: Obj, pod: Obj) -> None:
        """``createMissingPersistentVolumeClaims``: for a pending pod whose claims were removed."""
        claim_errors = await self._create_claims(sts, pod)
        if claim_errors:
            raise SyncError(aggregate(claim_errors))
        try:
            await self._fix_retention(sts, pod)
        except (StatusError, RuntimeError) as exc:
            self._pod_event("update", sts, pod, error_text(exc))
            raise

    async def _fix_retention(self, sts: Obj, pod: Obj) -> None:
        """``UpdatePodClaimForRetentionPolicy``: owner references of the pod's claims per the policy."""
        for _, wanted in ssu.claims_for(sts, ssu.ordinal(pod)):
            name = podutil.name_of(wanted)
            existing = self.claims.get(f"{podutil.namespace_of(wanted)}/{name}")
            if existing is None:
                continue  # created this sync or removed: the next sync sees it
            if ssu.has_unexpected_controller(existing, sts, pod):
                self.recorder.event(
                    sts,
                    WARNING,
                    "ConflictingController",
                    f"PersistentVolumeClaim {name} has a conflicting OwnerReference that acts as a manging "
                    "controller, the retention policy is ignored for this claim",
                )
            if ssu.claim_owner_up_to_date(existing, sts, pod):
                continue
            updated = copy.deepcopy(existing)
            updated["metadata"]["ownerReferences"] = ssu.updated_claim_refs(existing, sts, pod)
            try:
                await self.client.replace(
                    PERSISTENTVOLUMECLAIMS, updated, namespace=podutil.namespace_of(sts)
                )
            except StatusError as exc:
                raise RuntimeError(
                    f"could not update claim {name} for delete policy ownerRefs: {error_text(exc)}"
                ) from exc

    # -- status -----------------------------------------------------------------------------------------------

    async def _write_status(self, sts: Obj, status: Obj) -> None:
        """``updateStatefulSetStatus``: complete a finished rolling update, and PUT /status when something
        changed, retrying conflicts against a fresh read."""
        ssu.complete_rolling_update(sts, status)
        current = sts
        for attempt in range(UPDATE_ATTEMPTS):
            if not ssu.status_changed(current, status):
                return
            body = {**current, "status": ssu.wire_status(current, status)}
            try:
                await self.client.replace_status(STATEFULSETS, body, namespace=podutil.namespace_of(sts))
                return
            except StatusError as exc:
                if exc.code != 409 or attempt == UPDATE_ATTEMPTS - 1:
                    raise
                current = await self.client.get(
                    STATEFULSETS, podutil.name_of(sts), namespace=podutil.namespace_of(sts)
                )

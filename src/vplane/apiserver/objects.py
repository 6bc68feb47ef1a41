"""Create, read, update, patch and delete objects of any registered kind.

This is the generic registry store (upstream's ``genericregistry.Store``): the rules every kind shares
(metadata bookkeeping, optimistic concurrency, generation, status subresource, finalizers, dry run,
managed fields) with per-kind :class:`~vplane.apiserver.registry.Strategy` hooks. HTTP handlers and the
in-process controllers (garbage collector, namespace cleanup, CRD status) both go through it, so an
internal write obeys the same rules as a client's.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vplane.apiserver import codec, timeutil
from vplane.apiserver.admission import Admission, AdmissionRequest
from vplane.apiserver.context import RequestContext
from vplane.apiserver.registry import ResourceType
from vplane.apiserver.schemas import SchemaSource
from vplane.kube import errors, managedfields, patch, structural, timefields, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj
from vplane.storage.cache import Cache
from vplane.storage.interface import KeyExistsError, KeyNotFoundError, KeyValue, RevisionMismatchError

GENERATE_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
GENERATE_NAME_LENGTH = 5
MAX_UPDATE_RETRIES = 1000
"""Compare-and-swap retries for one update. Upstream retries until the request's deadline; each lost race
means another writer made progress, so the bound only matters under pathological contention."""

DEFAULT_MAX_OBJECT_BYTES = 1536 * 1024
"""Largest stored object, as etcd's default ``--max-request-bytes`` (1.5 MiB); the server passes its
``max_object_bytes`` setting."""

FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"

Mutation = Callable[[Obj], Obj]


@dataclass(slots=True)
class DeleteOptions:
    propagation_policy: str = ""
    grace_period_seconds: int | None = None
    precondition_uid: str = ""
    precondition_rv: str = ""
    dry_run: bool = False

    @classmethod
    def from_body(cls, body: Obj | None, query_policy: str = "", dry_run: bool = False) -> DeleteOptions:
        body = body or {}
        policy = str(body.get("propagationPolicy") or query_policy or "")
        if body.get("orphanDependents") is True and not policy:
            policy = "Orphan"
        if body.get("orphanDependents") is False and not policy:
            policy = "Background"
        pre = body.get("preconditions") or {}
        dry = dry_run or "All" in (body.get("dryRun") or [])
        grace = body.get("gracePeriodSeconds")
        return cls(
            policy,
            grace if isinstance(grace, int) else None,
            str(pre.get("uid") or ""),
            str(pre.get("resourceVersion") or ""),
            dry,
        )


@dataclass(slots=True)
class DeleteResult:
    obj: Obj
    deleted: bool
    """True when the object is gone; False when deletion is pending on finalizers."""


class ObjectStore:
    def __init__(
        self,
        cache: Cache,
        admission: Admission,
        schemas: SchemaSource,
        clock: timeutil.Clock = timeutil.wall_clock,
        *,
        max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
    ) -> None:
        self.cache = cache
        self.admission = admission
        self.schemas = schemas
        self.clock = clock
        self.max_object_bytes = max_object_bytes

    # -- reads -----------------------------------------------------------------------------------

    def get_kv(self, rtype: ResourceType, namespace: str, name: str) -> KeyValue | None:
        return self.cache.get(rtype.key(namespace, name))

    def get(self, rtype: ResourceType, namespace: str, name: str) -> Obj | None:
        kv = self.get_kv(rtype, namespace, name)
        return self.to_version(rtype, codec.decode_kv(kv)) if kv else None

    def must_get(self, rtype: ResourceType, namespace: str, name: str) -> tuple[KeyValue, Obj]:
        kv = self.get_kv(rtype, namespace, name)
        if kv is None:
            raise errors.not_found(rtype.resource, name, rtype.group)
        return kv, self.to_version(rtype, codec.decode_kv(kv))

    def list(self, rtype: ResourceType, namespace: str = "") -> list[Obj]:
        return [
            self.to_version(rtype, codec.decode_kv(kv))
            for kv in self.cache.iter_prefix(rtype.prefix(namespace))
        ]

    @staticmethod
    def _to_storage_version(rtype: ResourceType, obj: Obj) -> None:
        if rtype.converter is not None:
            converted = rtype.converter.to_storage(obj)
            if converted is not obj:
                obj.clear()
                obj.update(converted)
        elif rtype.is_custom and rtype.version != rtype.storage_version:
            obj["apiVersion"] = f"{rtype.group}/{rtype.storage_version}"

    @staticmethod
    def to_version(rtype: ResourceType, obj: Obj) -> Obj:
        """Custom resources are stored in one version and served in any (conversion strategy None);
        built-in kinds served in several versions convert through their type's converter."""
        if rtype.converter is not None:
            return rtype.converter.from_storage(obj)
        if rtype.is_custom and obj.get("apiVersion") != rtype.api_version:
            obj["apiVersion"] = rtype.api_version
        return obj

    # -- create ----------------------------------------------------------------------------------

    async def create(
        self, ctx: RequestContext, rtype: ResourceType, namespace: str, obj: Obj, *, applied: bool = False
    ) -> Obj:
        """Create ``obj``; ``applied`` means server-side apply already recorded its managed fields."""
        return self.as_object(rtype, await self.create_stored(ctx, rtype, namespace, obj, applied=applied))

    async def create_stored(
        self, ctx: RequestContext, rtype: ResourceType, namespace: str, obj: Obj, *, applied: bool = False
    ) -> KeyValue | Obj:
        """:meth:`create`, answering with the stored value (an object only for a dry run), so a handler
        can serve the stored bytes without decoding and re-encoding them."""
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        self._check_type(rtype, obj)
        if rtype.namespaced:
            body_ns = meta.get("namespace") or ""
            if body_ns and namespace and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace or body_ns
        else:
            meta.pop("namespace", None)
        now = timeutil.rfc3339(self.clock())
        meta["uid"] = new_uid()
        meta["creationTimestamp"] = now
        for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(field, None)
        if rtype.strategy.uses_generation or rtype.is_custom:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if rtype.has_status and rtype.strategy.reset_status_on_create:
            obj.pop("status", None)
        rtype.strategy.prepare_for_create(obj)
        self._default(ctx, rtype, obj)
        generated = not meta.get("name") and bool(meta.get("generateName"))
        if generated:
            meta["name"] = self._generate_name(str(meta["generateName"]))
        self._validate(rtype, obj, None)
        if not applied:
            obj = self._manage(ctx, rtype, None, obj, "")
        self._to_storage_version(rtype, obj)
        if self.admission.mutating:
            obj = await self._mutate_create(ctx, rtype, obj, generated)
            meta = obj["metadata"]
        hooks = rtype.store_hooks
        finish = await hooks.begin_create(ctx, obj) if hooks is not None else None
        try:
            await self.admission.admit(
                AdmissionRequest(ctx, "CREATE", rtype, "", meta.get("namespace", ""), meta["name"], obj, None)
            )
            if ctx.dry_run:
                if self.get_kv(rtype, meta.get("namespace", ""), meta["name"]) is not None:
                    raise errors.already_exists(rtype.resource, meta["name"], rtype.group)
                result: KeyValue | Obj = self.to_version(rtype, obj)
            else:
                result = obj  # replaced by the stored value below (the loop breaks or raises)
                for attempt in range(8):
                    try:
                        result = await self.cache.create(
                            rtype.key(meta.get("namespace", ""), meta["name"]), self._stored_value(obj, None)
                        )
                        break
                    except KeyExistsError:
                        if not generated or attempt == 7:
                            raise errors.already_exists(rtype.resource, meta["name"], rtype.group) from None
                        meta["name"] = self._generate_name(str(meta["generateName"]))
                        if hooks is not None and finish is not None:
                            # What was allocated names the object: give it back and allocate for the new name.
                            done, finish = finish, None
                            await done(False)
                            finish = await hooks.begin_create(ctx, obj)
        except Exception:
            # Not on cancellation: the write may have been stored; the hooks' repair settles what is left.
            if finish is not None:
                await finish(False)
            raise
        if finish is not None:
            await finish(True)
        return result

    async def _mutate_create(
        self, ctx: RequestContext, rtype: ResourceType, obj: Obj, generated: bool
    ) -> Obj:
        """Mutating admission of a create. Mutators see the object as upstream's do (no uid, creation
        time, generation or generated name yet); a changed object is prepared, defaulted and validated
        again, with the system fields and managed fields it had before."""
        meta = obj["metadata"]
        hidden = {k: meta[k] for k in ("uid", "creationTimestamp", "generation") if k in meta}
        shown_meta = {k: v for k, v in meta.items() if k not in hidden and not (generated and k == "name")}
        shown = {**obj, "metadata": shown_meta}
        namespace = meta.get("namespace", "")
        request = AdmissionRequest(
            ctx, "CREATE", rtype, "", namespace, "" if generated else meta["name"], shown, None
        )
        mutated = await self.admission.mutate(request)
        if mutated is shown or mutated is None:
            return obj
        new_meta = mutated.get("metadata")
        if not isinstance(new_meta, dict):
            raise errors.bad_request("metadata must be an object")
        self._check_type(rtype, mutated)
        new_meta.update(hidden)
        if rtype.namespaced:
            new_meta["namespace"] = namespace
        if not new_meta.get("name"):
            new_meta["name"] = meta["name"]
        for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            new_meta.pop(field, None)
        _keep_managed_fields(new_meta, meta)
        if rtype.has_status:
            mutated.pop("status", None)
        rtype.strategy.prepare_for_create(mutated)
        self._default(dataclasses.replace(ctx, field_validation="Ignore"), rtype, mutated)
        self._validate(rtype, mutated, None)
        self._to_storage_version(rtype, mutated)
        return mutated

    @staticmethod
    def _generate_name(prefix: str) -> str:
        suffix = "".join(random.choice(GENERATE_NAME_ALPHABET) for _ in range(GENERATE_NAME_LENGTH))
        return prefix[: 63 - GENERATE_NAME_LENGTH] + suffix

    @staticmethod
    def _check_type(rtype: ResourceType, obj: Obj) -> None:
        kind = obj.get("kind")
        api_version = obj.get("apiVersion")
        if kind and kind != rtype.kind:
            raise errors.bad_request(
                f"the kind of the provided object ({kind}) does not match the kind of the request ({rtype.kind})"
            )
        if api_version and api_version != rtype.api_version:
            if not (
                rtype.is_custom and isinstance(api_version, str) and api_version.startswith(rtype.group + "/")
            ):
                raise errors.bad_request(
                    f"the API version in the data ({api_version}) does not match the expected API version "
                    f"({rtype.api_version})"
                )
        obj["kind"] = rtype.kind
        obj["apiVersion"] = rtype.api_version

    # -- update ----------------------------------------------------------------------------------

    async def update(
        self,
        ctx: RequestContext,
        rtype: ResourceType,
        namespace: str,
        name: str,
        new: Obj,
        subresource: str = "",
    ) -> Obj:
        """PUT: replace the object (or its status) with ``new``; 409 when its resourceVersion is stale."""
        return self.as_object(rtype, await self.update_stored(ctx, rtype, namespace, name, new, subresource))

    async def update_stored(
        self,
        ctx: RequestContext,
        rtype: ResourceType,
        namespace: str,
        name: str,
        new: Obj,
        subresource: str = "",
    ) -> KeyValue | Obj:
        """:meth:`update`, answering with the stored value when one was written."""
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        if rtype.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        self._check_type(rtype, new)
        user_rv = str(meta.get("resourceVersion") or "")
        if not user_rv and not getattr(rtype.strategy, "allow_unconditional_update", not rtype.is_custom):
            raise errors.invalid(
                rtype.kind,
                name,
                [errors.field_invalid("metadata.resourceVersion", 0, "must be specified for an update")],
                rtype.group,
            )
        return await self._guaranteed_update(
            ctx,
            rtype,
            namespace,
            name,
            lambda _old: copy.deepcopy(new),
            user_rv=user_rv,
            subresource=subresource,
        )

    def as_object(self, rtype: ResourceType, result: KeyValue | Obj) -> Obj:
        """A write's answer as an object in the version the request used."""
        if isinstance(result, KeyValue):
            return self.to_version(rtype, codec.decode_kv(result))
        return result

    async def guaranteed_update(
        self,
        ctx: RequestContext,
        rtype: ResourceType,
        namespace: str,
        name: str,
        mutate: Mutation,
        *,
        user_rv: str = "",
        subresource: str = "",
        apply: Callable[[Obj | None], Obj] | None = None,
    ) -> Obj:
        """Read, mutate, write with compare-and-swap; retry on a race unless the caller pinned a version.

        ``apply`` (server-side apply) may also create the object when it is missing.
        """
        result = await self._guaranteed_update(
            ctx, rtype, namespace, name, mutate, user_rv=user_rv, subresource=subresource, apply=apply
        )
        return self.as_object(rtype, result)

    async def _guaranteed_update(
        self,
        ctx: RequestContext,
        rtype: ResourceType,
        namespace: str,
        name: str,
        mutate: Mutation,
        *,
        user_rv: str = "",
        subresource: str = "",
        apply: Callable[[Obj | None], Obj] | None = None,
    ) -> KeyValue | Obj:
        key = rtype.key(namespace, name)
        for _ in range(MAX_UPDATE_RETRIES):
            kv = self.cache.get(key)
            if kv is None:
                if apply is not None and not subresource:
                    created = apply(None)
                    return await self.create_stored(ctx, rtype, namespace, created, applied=True)
                raise errors.not_found(rtype.resource, name, rtype.group)
            old = self.to_version(rtype, codec.decode_kv(kv))
            if user_rv and user_rv != str(kv.mod_revision):
                raise errors.conflict(rtype.resource, name, rtype.group)
            proposed = apply(copy.deepcopy(old)) if apply is not None else mutate(copy.deepcopy(old))
            body_rv = str((proposed.get("metadata") or {}).get("resourceVersion") or "")
            if body_rv and body_rv != str(kv.mod_revision):
                raise errors.conflict(rtype.resource, name, rtype.group)
            new = self._prepare_update(
                ctx, rtype, old, proposed, subresource, managed_by_apply=apply is not None
            )
            if new is not None and self.admission.mutating:
                new = await self._mutate_update(ctx, rtype, subresource, namespace, name, new, old)
            if new is None:
                return old  # nothing changed: no write, resourceVersion unchanged (as upstream)
            new_meta = new["metadata"]
            finishing = (
                bool(new_meta.get("deletionTimestamp"))
                and not new_meta.get("finalizers")
                and not new_meta.get("deletionGracePeriodSeconds")
                and not self._needs_graceful(rtype, new)
            )
            hooks = rtype.store_hooks
            finish = None
            if hooks is not None and not subresource and not finishing:
                finish = await hooks.begin_update(ctx, new, old)
            try:
                result = await self._write_update(
                    ctx,
                    rtype,
                    subresource,
                    namespace,
                    name,
                    kv,
                    new,
                    old,
                    finishing=finishing,
                    user_rv=user_rv,
                )
            except Exception:
                if finish is not None:
                    await finish(False)
                raise
            if finish is not None:
                await finish(result is not None)
            if result is None:
                continue  # lost a race with another writer: read again
            if finishing and hooks is not None and not ctx.dry_run:
                await hooks.after_delete(ctx, old)
            return result
        raise errors.conflict(
            rtype.resource, name, rtype.group, reason="too many concurrent updates, try again"
        )

    async def _write_update(
        self,
        ctx: RequestContext,
        rtype: ResourceType,
        subresource: str,
        namespace: str,
        name: str,
        kv: KeyValue,
        new: Obj,
        old: Obj,
        *,
        finishing: bool,
        user_rv: str,
    ) -> KeyValue | Obj | None:
        """Validating admission and the compare-and-swap write of an update; None when another writer
        changed the object first (the caller reads it again)."""
        await self.admission.admit(
            AdmissionRequest(ctx, "UPDATE", rtype, subresource, namespace, name, new, old)
        )
        if ctx.dry_run:
            new["metadata"]["resourceVersion"] = str(kv.mod_revision)  # nothing was written: the live version
            return self.to_version(rtype, new)
        self._to_storage_version(rtype, new)
        key = rtype.key(namespace, name)
        try:
            if finishing:
                return await self.cache.delete(key, kv.mod_revision)
            return await self.cache.update(key, self._stored_value(new, kv), kv.mod_revision)
        except RevisionMismatchError:
            if user_rv:
                raise errors.conflict(rtype.resource, name, rtype.group) from None
            return None
        except KeyNotFoundError:
            raise errors.not_found(rtype.resource, name, rtype.group) from None

    async def _mutate_update(
        self,
        ctx: RequestContext,
        rtype: ResourceType,
        subresource: str,
        namespace: str,
        name: str,
        new: Obj,
        old: Obj,
    ) -> Obj | None:
        """Mutating admission of an update; a changed object goes through the update rules again (its
        managed fields are the request's: mutators' changes are not attributed to a manager)."""
        request = AdmissionRequest(ctx, "UPDATE", rtype, subresource, namespace, name, new, old)
        mutated = await self.admission.mutate(request)
        if mutated is new or mutated is None:
            return new
        if not isinstance(mutated.get("metadata"), dict):
            raise errors.bad_request("metadata must be an object")
        _keep_managed_fields(mutated["metadata"], new["metadata"])
        return self._prepare_update(
            dataclasses.replace(ctx, field_validation="Ignore"),
            rtype,
            old,
            mutated,
            subresource,
            managed_by_apply=True,
        )

    def _prepare_update(
        self,
        ctx: RequestContext,
        rtype: ResourceType,
        old: Obj,
        new: Obj,
        subresource: str,
        *,
        managed_by_apply: bool,
    ) -> Obj | None:
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise errors.bad_request("the patched object must have metadata")
        self._check_type(rtype, new)
        old_meta, meta = old["metadata"], new["metadata"]
        for field in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        meta.pop("resourceVersion", None)
        meta.pop("selfLink", None)
        if subresource == "finalize":
            finalizers = (new.get("spec") or {}).get("finalizers")
            new = copy.deepcopy(old)
            new["metadata"].pop("resourceVersion", None)
            if finalizers:
                new.setdefault("spec", {})["finalizers"] = finalizers
            else:
                (new.get("spec") or {}).pop("finalizers", None)
            return new if new != old else None
        if subresource in rtype.strategy.status_subresources:
            status = new.get("status")
            new = {k: copy.deepcopy(v) for k, v in old.items() if k != "status"}
            if status is not None:
                new["status"] = status
            kept = new["metadata"]
            kept["managedFields"] = meta.get("managedFields", old_meta.get("managedFields"))
            if kept["managedFields"] is None:
                kept.pop("managedFields")
            meta = kept
        elif rtype.has_status:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        if "generation" in old_meta:
            meta["generation"] = old_meta["generation"]
            if _spec_changed(old, new):
                meta["generation"] = int(old_meta["generation"]) + 1
        if subresource:
            rtype.strategy.prepare_for_subresource_update(subresource, new, old)
        else:
            rtype.strategy.prepare_for_update(new, old)
        self._default(ctx, rtype, new)
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise errors.invalid(
                    rtype.kind,
                    meta["name"],
                    [
                        errors.field_forbidden(
                            "metadata.finalizers",
                            f"no new finalizers can be added if the object is being deleted, found new finalizers {sorted(added)!r}",
                        )
                    ],
                    rtype.group,
                )
        self._validate(rtype, new, old, subresource)
        if not managed_by_apply:
            new = self._manage(ctx, rtype, old, new, subresource)
        if _same_ignoring_managed_time(old, new):
            return None
        return new

    # -- delete ----------------------------------------------------------------------------------

    async def delete(
        self, ctx: RequestContext, rtype: ResourceType, namespace: str, name: str, options: DeleteOptions
    ) -> DeleteResult:
        key = rtype.key(namespace, name)
        for _ in range(MAX_UPDATE_RETRIES):
            kv = self.cache.get(key)
            if kv is None:
                raise errors.not_found(rtype.resource, name, rtype.group)
            obj = self.to_version(rtype, codec.decode_kv(kv))
            meta = obj["metadata"]
            if options.precondition_uid and options.precondition_uid != meta.get("uid"):
                raise errors.conflict(
                    rtype.resource,
                    name,
                    rtype.group,
                    reason=f"Precondition failed: UID in precondition: {options.precondition_uid}, UID in object meta: {meta.get('uid')}",
                )
            if options.precondition_rv and options.precondition_rv != str(kv.mod_revision):
                raise errors.conflict(
                    rtype.resource,
                    name,
                    rtype.group,
                    reason=f"Precondition failed: ResourceVersion in precondition: {options.precondition_rv}, ResourceVersion in object meta: {kv.mod_revision}",
                )
            request = AdmissionRequest(ctx, "DELETE", rtype, "", namespace, name, None, obj)
            await self.admission.mutate(request)
            await self.admission.admit(request)
            finalizers = list(meta.get("finalizers") or [])
            policy = options.propagation_policy
            if policy == "Foreground" and FOREGROUND_FINALIZER not in finalizers:
                finalizers.append(FOREGROUND_FINALIZER)
            elif policy == "Orphan" and ORPHAN_FINALIZER not in finalizers:
                finalizers.append(ORPHAN_FINALIZER)
            graceful = self._graceful(rtype, obj, options.grace_period_seconds, finalizers)
            if graceful is obj:
                return DeleteResult(
                    obj, False
                )  # a graceful deletion is under way; only a shorter one changes it
            if graceful is not None:
                if options.dry_run or ctx.dry_run:
                    return DeleteResult(graceful, False)
                try:
                    stored = await self.cache.update(key, codec.stored_bytes(graceful), kv.mod_revision)
                except RevisionMismatchError:
                    continue
                return DeleteResult(self.to_version(rtype, codec.decode_kv(stored)), False)
            pending = finalizers or self._needs_graceful(rtype, obj)
            if pending:
                if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or []):
                    return DeleteResult(obj, False)  # already terminating; nothing to change
                updated = copy.deepcopy(obj)
                umeta = updated["metadata"]
                umeta.setdefault("deletionTimestamp", timeutil.rfc3339(self.clock()))
                umeta["deletionGracePeriodSeconds"] = 0
                if finalizers:
                    umeta["finalizers"] = finalizers
                self._on_terminating(rtype, updated)
                umeta.pop("resourceVersion", None)
                if options.dry_run or ctx.dry_run:
                    return DeleteResult(updated, False)
                # Not size-checked: marking adds a timestamp and finalizers to an object already stored,
                # and refusing it would leave an object at the limit impossible to delete.
                try:
                    stored = await self.cache.update(key, codec.stored_bytes(updated), kv.mod_revision)
                except RevisionMismatchError:
                    continue
                return DeleteResult(self.to_version(rtype, codec.decode_kv(stored)), False)
            if options.dry_run or ctx.dry_run:
                return DeleteResult(obj, True)
            try:
                gone = await self.cache.delete(key, kv.mod_revision)
            except RevisionMismatchError:
                continue
            except KeyNotFoundError:
                raise errors.not_found(rtype.resource, name, rtype.group) from None
            if rtype.store_hooks is not None:
                await rtype.store_hooks.after_delete(ctx, obj)
            return DeleteResult(self.to_version(rtype, codec.decode_kv(gone)), True)
        raise errors.conflict(
            rtype.resource, name, rtype.group, reason="too many concurrent updates, try again"
        )

    def _graceful(
        self, rtype: ResourceType, obj: Obj, requested: int | None, finalizers: Sequence[str]
    ) -> Obj | None:
        """Graceful deletion (upstream ``rest.BeforeDelete`` with the kind's ``CheckGracefulDelete``): the
        object marked to go in ``grace`` seconds, to store; ``obj`` itself when a deletion is already
        pending and the request does not shorten it; None when it is deleted (or waits on finalizers) as
        any object is."""
        meta = obj["metadata"]
        current = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp"):
            if not isinstance(current, int) or current <= 0:
                return None
            if requested is None or requested >= current:
                return obj
            requested = max(requested, 0)
            if requested == 0 and not finalizers:
                return None
            started = timeutil.parse_time(str(meta["deletionTimestamp"])) or self.clock()
            updated = copy.deepcopy(obj)
            umeta = updated["metadata"]
            umeta["deletionTimestamp"] = timeutil.rfc3339(started - current + requested)
            umeta["deletionGracePeriodSeconds"] = requested
        else:
            grace = rtype.strategy.deletion_grace(obj, requested)
            if grace is None or grace <= 0:
                return None
            updated = copy.deepcopy(obj)
            umeta = updated["metadata"]
            umeta["deletionTimestamp"] = timeutil.rfc3339(self.clock() + grace)
            umeta["deletionGracePeriodSeconds"] = grace
            if isinstance(umeta.get("generation"), int) and umeta["generation"] > 0:
                umeta["generation"] += 1
        if finalizers:
            umeta["finalizers"] = list(finalizers)
        umeta.pop("resourceVersion", None)
        return updated

    @staticmethod
    def _needs_graceful(rtype: ResourceType, obj: Obj) -> bool:
        """Namespaces wait for their content to be removed (the ``kubernetes`` finalizer in spec)."""
        if rtype.resource == "namespaces" and not rtype.group:
            return bool((obj.get("spec") or {}).get("finalizers"))
        return False

    @staticmethod
    def _on_terminating(rtype: ResourceType, obj: Obj) -> None:
        if rtype.resource == "namespaces" and not rtype.group:
            obj.setdefault("status", {})["phase"] = "Terminating"

    # -- shared steps ----------------------------------------------------------------------------

    def _stored_value(self, obj: Obj, old: KeyValue | None) -> bytes:
        """The bytes to store, refused with 413 past ``max_object_bytes`` unless the write does not grow
        the object (so one stored under a larger limit can still be trimmed). Every create, update, patch
        and subresource write passes here; the check is the length of bytes the write needs anyway."""
        meta = obj.get("metadata")
        if meta:
            # ObjectMeta's lists and maps are omitempty: an empty one (a patch that removed the last
            # finalizer, say) is absent on a real server, not stored and served as [] or {}.
            for name in _OMITEMPTY_META:
                if name in meta and not meta[name]:
                    del meta[name]
        value = codec.stored_bytes(obj)
        if len(value) > self.max_object_bytes and (old is None or len(value) > len(old.value)):
            raise errors.object_too_large()
        return value

    def _default(self, ctx: RequestContext, rtype: ResourceType, obj: Obj) -> None:
        rtype.strategy.default(obj)
        schema = rtype.crd_schema
        if schema is not None:
            structural.apply_defaults(obj, schema)
        else:
            timefields.normalize(obj, self.schemas.definition_name(rtype))
        unknown = self.schemas.prune(rtype, obj)
        duplicates = ctx.duplicate_fields
        if (unknown or duplicates) and ctx.field_validation != "Ignore":
            if ctx.field_validation == "Strict":
                raise errors.bad_request(
                    structural.strict_decoding_message(rtype.kind, rtype.version, unknown, duplicates)
                )
            for text in structural.strict_errors(unknown, duplicates):
                ctx.warn(text)

    def _validate(self, rtype: ResourceType, obj: Obj, old: Obj | None, subresource: str = "") -> None:
        meta = obj["metadata"]
        causes: list[Cause] = validation.validate_object_meta(
            meta, namespaced=rtype.namespaced, name_validator=rtype.strategy.name_validator
        )
        if rtype.crd_schema is not None:
            body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
            causes.extend(structural.validate(body, _without_metadata(rtype.crd_schema)))
        if old is None:
            causes.extend(rtype.strategy.validate(obj, None))
        else:
            causes.extend(rtype.strategy.validate_update(obj, old, subresource))
        if causes:
            raise errors.invalid(
                rtype.kind, str(meta.get("name") or meta.get("generateName") or ""), causes, rtype.group
            )

    def _manage(
        self, ctx: RequestContext, rtype: ResourceType, old: Obj | None, new: Obj, subresource: str
    ) -> Obj:
        manager = managedfields.manager_or_user_agent(ctx.field_manager, ctx.user_agent)
        return managedfields.record_update(
            old,
            new,
            manager=manager,
            schema=self.schemas.node_for(rtype),
            api_version=rtype.api_version,
            now=timeutil.rfc3339(self.clock()),
            subresource=subresource,
            ignored=_ignored(rtype, subresource),
            builtin=rtype.crd_schema is None,
        )

    # -- patch -----------------------------------------------------------------------------------

    async def patch(
        self,
        ctx: RequestContext,
        rtype: ResourceType,
        namespace: str,
        name: str,
        patch_type: str,
        body: Any,
        *,
        subresource: str = "",
        force: bool = False,
    ) -> Obj:
        if patch_type == codec.APPLY_PATCH:
            applied = codec.require_object(body)
            manager = ctx.field_manager
            if not manager:
                raise errors.bad_request(
                    "PATCH, application/apply-patch+yaml requests must have fieldManager set"
                )

            def apply(live: Obj | None) -> Obj:
                target = copy.deepcopy(applied)
                target_meta = target.setdefault("metadata", {})
                if not isinstance(target_meta, dict):
                    raise errors.bad_request("metadata must be an object")
                if target_meta.get("name") and target_meta["name"] != name:
                    raise errors.bad_request(
                        f"the name of the object ({target_meta['name']}) does not match the name on the URL ({name})"
                    )
                target_meta["name"] = name
                if rtype.namespaced:
                    target_meta["namespace"] = namespace
                self._check_type(rtype, target)
                result = managedfields.server_side_apply(
                    live,
                    target,
                    manager=manager,
                    force=force,
                    schema=self.schemas.node_for(rtype),
                    api_version=rtype.api_version,
                    now=timeutil.rfc3339(self.clock()),
                    subresource=subresource,
                    ignored=_ignored(rtype, subresource),
                )
                if live is None:
                    result.setdefault("metadata", {}).pop("resourceVersion", None)
                return result

            return await self.guaranteed_update(
                ctx, rtype, namespace, name, lambda o: o, subresource=subresource, apply=apply
            )

        def mutate(old: Obj) -> Obj:
            if patch_type == codec.JSON_PATCH:
                return patch.apply_json_patch(old, body)
            if patch_type == codec.MERGE_PATCH:
                return patch.apply_merge_patch_to_object(old, body)
            if patch_type == codec.STRATEGIC_MERGE_PATCH:
                return patch.apply_strategic_merge_patch(
                    old,
                    codec.require_object(body, "object (strategic merge patch)"),
                    self.schemas.node_for(rtype),
                )
            raise errors.unsupported_media_type(patch_type, patch_types_for(rtype))

        return await self.guaranteed_update(ctx, rtype, namespace, name, mutate, subresource=subresource)


_OMITEMPTY_META = ("labels", "annotations", "finalizers", "ownerReferences", "managedFields")


def _keep_managed_fields(meta: Obj, before: Obj) -> None:
    """Mutating admission may not rewrite ownership (upstream resets managedFields a mutator changed)."""
    if "managedFields" in before:
        meta["managedFields"] = before["managedFields"]
    else:
        meta.pop("managedFields", None)


def new_uid() -> str:
    """A random (version 4) UUID. ``uuid.uuid4`` reads the OS entropy pool on every call; uids need
    uniqueness, not secrecy, so the process PRNG is enough and much cheaper on the write path."""
    value = (random.getrandbits(128) & ~(0xF000 << 64) | (0x4000 << 64)) & ~(0xC000 << 48) | (0x8000 << 48)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def patch_types_for(rtype: ResourceType) -> tuple[str, ...]:
    if rtype.is_custom:
        return (codec.JSON_PATCH, codec.MERGE_PATCH, codec.APPLY_PATCH)
    return (codec.JSON_PATCH, codec.MERGE_PATCH, codec.STRATEGIC_MERGE_PATCH, codec.APPLY_PATCH)


def _ignored(rtype: ResourceType, subresource: str) -> tuple[managedfields.Path, ...]:
    """Subtrees another endpoint owns: status belongs to ``/status`` when the kind has that subresource."""
    if rtype.has_status and subresource != "status":
        return (managedfields.field_path("status"),)
    return ()


def _spec_changed(old: Obj, new: Obj) -> bool:
    keys = (set(old) | set(new)) - {"metadata", "status", "apiVersion", "kind"}
    return any(old.get(k) != new.get(k) for k in keys)


def _same_ignoring_managed_time(old: Obj, new: Obj) -> bool:
    if old.keys() != new.keys():
        return False
    for key in old:
        if key == "metadata":
            a = {k: v for k, v in old["metadata"].items() if k not in ("resourceVersion", "managedFields")}
            b = {k: v for k, v in new["metadata"].items() if k not in ("resourceVersion", "managedFields")}
            if a != b or _fields_of(old) != _fields_of(new):
                return False
        elif old[key] != new[key]:
            return False
    return True


def _fields_of(obj: Obj) -> list[tuple[str, str, Any]]:
    """Managed-field entries without their timestamps, to tell a real ownership change from a no-op."""
    entries = obj["metadata"].get("managedFields") or []
    return [(e.get("manager", ""), e.get("operation", ""), e.get("fieldsV1")) for e in entries]


def _without_metadata(schema: Obj) -> Obj:
    """The CRD schema minus apiVersion, kind and metadata, which ObjectMeta rules validate instead."""
    resource_fields = ("apiVersion", "kind", "metadata")
    out = dict(schema)
    out["properties"] = {
        k: v for k, v in (schema.get("properties") or {}).items() if k not in resource_fields
    }
    if "required" in out and set(out["required"]) <= set(resource_fields):
        del out["required"]
    return out

"""Controllers that run inside the API server process: namespace cleanup, garbage collection, CRDs.

They react to watch-hub events and write through :class:`~vplane.apiserver.objects.ObjectStore` as the
server's own identity, so their writes are validated, admitted and watched like any client's. Each
keeps its work in a queue drained by one task, so a burst of events never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import structlog

from vplane.apiserver import codec
from vplane.apiserver.objects import FOREGROUND_FINALIZER, ORPHAN_FINALIZER, DeleteOptions
from vplane.apiserver.registry import STATUS_VERBS, ResourceType, Strategy, Subresource
from vplane.apiserver.watch import WatchEvent
from vplane.kube import errors, structural
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj, split_api_version

if TYPE_CHECKING:
    from vplane.apiserver.context import RequestContext
    from vplane.apiserver.server import APIServer

log = structlog.get_logger("vplane.apiserver.controllers")

CRD_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
RETRY_SECONDS = 0.5


class _Queue:
    """A de-duplicating work queue drained by one task."""

    def __init__(self) -> None:
        self._pending: dict[Any, None] = {}
        self._wake = asyncio.Event()

    def add(self, item: Any) -> None:
        self._pending[item] = None
        self._wake.set()

    async def get(self) -> Any:
        while not self._pending:
            self._wake.clear()
            await self._wake.wait()
        item = next(iter(self._pending))
        del self._pending[item]
        return item


# -- namespaces ------------------------------------------------------------------------------------


class NamespaceController:
    """Deletes everything in a terminating namespace, then releases its ``kubernetes`` finalizer."""

    def __init__(self, server: APIServer) -> None:
        self.server = server
        self.queue = _Queue()

    @property
    def rtype(self) -> ResourceType:
        rtype = self.server.registry.get("", "v1", "namespaces")
        assert rtype is not None
        return rtype

    def namespace_phase(self, name: str) -> str | None:
        kv = self.server.cache.get(f"/core/namespaces/{name}")
        if kv is None:
            return None
        if b'"deletionTimestamp"' in kv.value:
            return "Terminating"
        return "Active"

    def start(self) -> list[asyncio.Task[None]]:
        for kv in self.server.cache.iter_prefix("/core/namespaces/"):
            if b'"deletionTimestamp"' in kv.value:
                self.queue.add(kv.key.rsplit("/", 1)[1])
        return [asyncio.create_task(self._run())]

    def on_event(self, wevent: WatchEvent) -> None:
        event = wevent.event
        key = event.kv.key
        if key.startswith("/core/namespaces/"):
            if event.type == "PUT" and b'"deletionTimestamp"' in event.kv.value:
                self.queue.add(key.rsplit("/", 1)[1])
        elif event.type == "DELETE":
            # Something inside a terminating namespace went away: check whether it is empty now.
            parts = key.split("/")
            if len(parts) == 5 and self.namespace_phase(parts[3]) == "Terminating":
                self.queue.add(parts[3])

    async def _run(self) -> None:
        while True:
            name = await self.queue.get()
            try:
                done = await self._clean(name)
            except Exception:
                log.exception("namespace cleanup failed", namespace=name)
                done = False
            if not done:
                asyncio.get_running_loop().call_later(RETRY_SECONDS, self.queue.add, name)

    async def _clean(self, name: str) -> bool:
        server = self.server
        ns = server.objects.get(self.rtype, "", name)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return True
        ctx = server.system_context()
        remaining = 0
        for rtype in server.registry.unique_resources():
            if not rtype.namespaced:
                continue
            for kv in list(server.cache.iter_prefix(rtype.prefix(name))):
                remaining += 1
                if b'"deletionTimestamp"' in kv.value:
                    continue
                obj_name = kv.key.rsplit("/", 1)[1]
                with contextlib.suppress(errors.StatusError):
                    await server.objects.delete(ctx, rtype, name, obj_name, DeleteOptions("Background"))
        if remaining:
            return False
        spec = ns.get("spec") or {}
        if "kubernetes" in (spec.get("finalizers") or []):
            spec["finalizers"] = [f for f in spec["finalizers"] if f != "kubernetes"]
            await self.finalize(ctx, self.rtype, name, ns)
        return True

    async def finalize(self, ctx: RequestContext, rtype: ResourceType, name: str, body: Obj) -> Obj:
        """``PUT /api/v1/namespaces/<name>/finalize``: replace ``spec.finalizers``."""
        finalizers = list(((body.get("spec") or {}).get("finalizers")) or [])

        def mutate(old: Obj) -> Obj:
            old.setdefault("spec", {})["finalizers"] = finalizers
            if not finalizers:
                old["spec"].pop("finalizers")
            return old

        # spec is otherwise immutable through updates, so write the raw object past the strategy.
        return await self.server.objects.guaranteed_update(
            ctx, rtype, "", name, mutate, subresource="finalize"
        )


# -- garbage collection ----------------------------------------------------------------------------


class GarbageCollector:
    """ownerReferences garbage collection: Background, Foreground and Orphan propagation.

    Owners are indexed by storage key (resolved from the reference's apiVersion, kind and name), so a
    deletion event is matched to its dependents without decoding every object on every write.
    """

    def __init__(self, server: APIServer) -> None:
        self.server = server
        self.dependents: dict[str, set[str]] = {}
        """owner storage key -> dependent storage keys"""
        self.owners_of: dict[str, list[tuple[str, str]]] = {}
        """dependent storage key -> [(owner storage key, owner uid)]"""
        self.queue = _Queue()

    def start(self) -> list[asyncio.Task[None]]:
        for rtype in self.server.registry.unique_resources():
            for kv in self.server.cache.iter_prefix(rtype.storage_prefix):
                if b'"ownerReferences"' in kv.value:
                    self._index(kv.key, codec.decode_kv(kv))
        for key in list(self.owners_of):
            self.queue.add(("dependent", key))
        return [asyncio.create_task(self._run())]

    def _owner_key(self, ref: Obj, namespace: str) -> str | None:
        group, version = split_api_version(str(ref.get("apiVersion", "")))
        rtype = self.server.registry.for_kind(group, version, str(ref.get("kind", "")))
        if rtype is None:
            for candidate in self.server.registry:
                if candidate.group == group and candidate.kind == ref.get("kind"):
                    rtype = candidate
                    break
        if rtype is None or not rtype.stored:
            return None
        return rtype.key(namespace if rtype.namespaced else "", str(ref.get("name", "")))

    def _unindex(self, key: str) -> None:
        for owner_key, _uid in self.owners_of.pop(key, []):
            deps = self.dependents.get(owner_key)
            if deps is not None:
                deps.discard(key)
                if not deps:
                    del self.dependents[owner_key]

    def _index(self, key: str, obj: Obj) -> None:
        self._unindex(key)
        meta = obj.get("metadata") or {}
        refs = []
        for ref in meta.get("ownerReferences") or []:
            if not isinstance(ref, dict):
                continue
            owner_key = self._owner_key(ref, str(meta.get("namespace", "")))
            if owner_key is not None:
                refs.append((owner_key, str(ref.get("uid", ""))))
                self.dependents.setdefault(owner_key, set()).add(key)
        if refs:
            self.owners_of[key] = refs

    def on_event(self, wevent: WatchEvent) -> None:
        event = wevent.event
        key = event.kv.key
        if event.type == "DELETE":
            self._unindex(key)
        elif b'"ownerReferences"' in event.kv.value:
            self._index(key, wevent.obj())
            if event.prev is None:
                self.queue.add(("dependent", key))
        elif key in self.owners_of:
            self._unindex(key)
        value = event.kv.value
        if event.type == "DELETE":
            if key in self.dependents:
                self.queue.add(("owner", key))
        elif b'"deletionTimestamp"' in value and (
            key in self.dependents or b'"foregroundDeletion"' in value or b'"orphan"' in value
        ):
            # Foreground and Orphan deletions wait on the collector even with no dependents left.
            self.queue.add(("owner", key))

    async def _run(self) -> None:
        while True:
            kind, key = await self.queue.get()
            try:
                done = await (self._process_owner(key) if kind == "owner" else self._process_dependent(key))
            except Exception:
                log.exception("garbage collection failed", key=key)
                done = False
            if not done:
                asyncio.get_running_loop().call_later(RETRY_SECONDS, self.queue.add, (kind, key))

    def _rtype_of_key(self, key: str) -> ResourceType | None:
        parts = key.split("/")
        group = "" if parts[1] == "core" else parts[1]
        return self.server.registry.any_version(group, parts[2])

    def _split(self, key: str) -> tuple[str, str]:
        parts = key.split("/")
        return (parts[3], parts[4]) if len(parts) == 5 else ("", parts[3])

    def _owner_alive(self, owner_key: str, uid: str) -> bool:
        kv = self.server.cache.get(owner_key)
        if kv is None:
            return False
        return bool(uid and f'"uid":"{uid}"'.encode() in kv.value)

    async def _process_dependent(self, key: str) -> bool:
        """A dependent whose owners are all gone is deleted (covers references to owners that never existed)."""
        owners = self.owners_of.get(key)
        if not owners:
            return True
        if any(self._owner_alive(owner_key, uid) for owner_key, uid in owners):
            return True
        return await self._delete_dependent(key, "Background")

    async def _delete_dependent(self, key: str, policy: str) -> bool:
        rtype = self._rtype_of_key(key)
        if rtype is None:
            return True
        namespace, name = self._split(key)
        with contextlib.suppress(errors.StatusError):
            await self.server.objects.delete(
                self.server.system_context(), rtype, namespace, name, DeleteOptions(policy)
            )
        return True

    async def _process_owner(self, owner_key: str) -> bool:
        kv = self.server.cache.get(owner_key)
        deps = list(self.dependents.get(owner_key, ()))
        ctx = self.server.system_context()
        if kv is None:
            for dep in deps:
                if not any(self._owner_alive(o, u) for o, u in self.owners_of.get(dep, []) if o != owner_key):
                    await self._delete_dependent(dep, "Background")
            return True
        owner = codec.decode_kv(kv)
        meta = owner["metadata"]
        if not meta.get("deletionTimestamp"):
            return True
        finalizers = meta.get("finalizers") or []
        uid = meta.get("uid", "")
        owner_rtype = self._rtype_of_key(owner_key)
        if owner_rtype is None:
            return True
        if ORPHAN_FINALIZER in finalizers:
            for dep in deps:
                await self._remove_owner_ref(ctx, dep, uid)
            await self._drop_finalizer(ctx, owner_rtype, owner_key, ORPHAN_FINALIZER)
            return True
        if FOREGROUND_FINALIZER in finalizers:
            live = [d for d in deps if self.server.cache.get(d) is not None]
            for dep in live:
                await self._delete_dependent(dep, "Foreground")
            if any(self.server.cache.get(d) is not None for d in live):
                return False
            await self._drop_finalizer(ctx, owner_rtype, owner_key, FOREGROUND_FINALIZER)
        return True

    async def _remove_owner_ref(self, ctx: RequestContext, dep_key: str, uid: str) -> None:
        rtype = self._rtype_of_key(dep_key)
        if rtype is None:
            return
        namespace, name = self._split(dep_key)

        def mutate(obj: Obj) -> Obj:
            refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                obj["metadata"]["ownerReferences"] = refs
            else:
                obj["metadata"].pop("ownerReferences", None)
            return obj

        with contextlib.suppress(errors.StatusError):
            await self.server.objects.guaranteed_update(ctx, rtype, namespace, name, mutate)

    async def _drop_finalizer(
        self, ctx: RequestContext, rtype: ResourceType, key: str, finalizer: str
    ) -> None:
        namespace, name = self._split(key)

        def mutate(obj: Obj) -> Obj:
            obj["metadata"]["finalizers"] = [
                f for f in obj["metadata"].get("finalizers") or [] if f != finalizer
            ]
            return obj

        with contextlib.suppress(errors.StatusError):
            await self.server.objects.guaranteed_update(ctx, rtype, namespace, name, mutate)


# -- custom resource definitions -------------------------------------------------------------------


class CustomResourceStrategy(Strategy):
    uses_generation = True
    allow_unconditional_update = False


class CRDStrategy(Strategy):
    uses_generation = True

    def prepare_for_create(self, obj: Obj) -> None:
        meta = obj["metadata"]
        finalizers = meta.setdefault("finalizers", [])
        if CRD_FINALIZER not in finalizers:
            finalizers.append(CRD_FINALIZER)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        return validate_crd(obj, old)


def validate_crd(obj: Obj, old: Obj | None) -> list[Cause]:
    causes: list[Cause] = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [errors.field_required("spec")]
    names = spec.get("names") or {}
    group = str(spec.get("group", ""))
    plural = str(names.get("plural", ""))
    name = (obj.get("metadata") or {}).get("name", "")
    if not group:
        causes.append(errors.field_required("spec.group"))
    elif "." not in group:
        causes.append(errors.field_invalid("spec.group", group, "should be a domain with at least one dot"))
    if not plural:
        causes.append(errors.field_required("spec.names.plural"))
    if not names.get("kind"):
        causes.append(errors.field_required("spec.names.kind"))
    if plural and group and name != f"{plural}.{group}":
        causes.append(errors.field_invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(errors.field_not_supported("spec.scope", spec.get("scope"), ["Cluster", "Namespaced"]))
    versions = spec.get("versions") or []
    if not versions:
        causes.append(
            errors.field_required("spec.versions", "must have exactly one version marked as storage version")
        )
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    if versions and len(storage) != 1:
        causes.append(
            errors.field_invalid(
                "spec.versions", len(storage), "must have exactly one version marked as storage version"
            )
        )
    for i, version in enumerate(versions):
        if not isinstance(version, dict) or not version.get("name"):
            causes.append(errors.field_required(f"spec.versions[{i}].name"))
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            causes.append(
                errors.field_required(f"spec.versions[{i}].schema.openAPIV3Schema", "schemas are required")
            )
        else:
            causes.extend(
                structural.check_structural(schema, path=f"spec.versions[{i}].schema.openAPIV3Schema")
            )
    if old is not None:
        if (old.get("spec") or {}).get("group") != group:
            causes.append(errors.field_invalid("spec.group", group, "field is immutable"))
        if (old.get("spec") or {}).get("scope") != spec.get("scope"):
            causes.append(errors.field_invalid("spec.scope", spec.get("scope"), "field is immutable"))
    return causes


class CRDController:
    """Serves the kinds CRDs define, keeps their status conditions, and cleans up on deletion."""

    def __init__(self, server: APIServer) -> None:
        self.server = server
        self.queue = _Queue()
        self._served: dict[str, list[tuple[str, str, str]]] = {}
        crd_type = server.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert crd_type is not None
        crd_type.strategy = CRDStrategy()
        self._task: asyncio.Task[None] | None = None

    @property
    def rtype(self) -> ResourceType:
        rtype = self.server.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert rtype is not None
        return rtype

    def load_existing(self) -> None:
        for kv in self.server.cache.iter_prefix("/apiextensions.k8s.io/customresourcedefinitions/"):
            crd = codec.decode_kv(kv)
            self._register(crd)
            self.queue.add(crd["metadata"]["name"])

    def on_event(self, wevent: WatchEvent) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())
            self.server._tasks.append(self._task)  # stopped with the server
        obj = wevent.obj()
        name = obj["metadata"]["name"]
        if wevent.event.type == "DELETE":
            self._unregister(name)
            return
        self._register(obj)
        self.queue.add(name)

    def _unregister(self, name: str) -> None:
        for group, version, resource in self._served.pop(name, []):
            self.server.registry.remove(group, version, resource)

    def _register(self, crd: Obj) -> None:
        name = crd["metadata"]["name"]
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group = spec.get("group", "")
        storage = next((v["name"] for v in spec.get("versions") or [] if v.get("storage")), "")
        self._unregister(name)
        served: list[tuple[str, str, str]] = []
        for version in spec.get("versions") or []:
            if not version.get("served"):
                continue
            subresources: dict[str, Subresource] = {}
            subs = version.get("subresources") or {}
            if "status" in subs:
                subresources["status"] = Subresource("status", names["kind"], STATUS_VERBS)
            if "scale" in subs:
                subresources["scale"] = Subresource("scale", "Scale", STATUS_VERBS, "autoscaling", "v1")
            rtype = ResourceType(
                group,
                version["name"],
                names.get("plural", ""),
                names.get("kind", ""),
                spec.get("scope") == "Namespaced",
                singular=names.get("singular") or names.get("kind", "").lower(),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=subresources,
                strategy=CustomResourceStrategy(),
                crd_schema=(version.get("schema") or {}).get("openAPIV3Schema")
                or {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                printer_columns=version.get("additionalPrinterColumns") or [],
                is_custom=True,
                storage_version=storage,
                selectable_fields=tuple(f.get("jsonPath", "") for f in version.get("selectableFields") or []),
            )
            self.server.registry.add(rtype)
            served.append((group, version["name"], rtype.resource))
        if storage:
            self.server.registry.set_preferred_version(group, _preferred(spec))
        self._served[name] = served

    async def _run(self) -> None:
        while True:
            name = await self.queue.get()
            try:
                done = await self._reconcile(name)
            except Exception:
                log.exception("CRD reconcile failed", crd=name)
                done = False
            if not done:
                asyncio.get_running_loop().call_later(RETRY_SECONDS, self.queue.add, name)

    async def _reconcile(self, name: str) -> bool:
        server = self.server
        crd = server.objects.get(self.rtype, "", name)
        if crd is None:
            return True
        ctx = server.system_context()
        if crd["metadata"].get("deletionTimestamp"):
            return await self._cleanup(ctx, crd)
        status = crd.get("status") or {}
        spec = crd["spec"]
        storage = next((v["name"] for v in spec.get("versions") or [] if v.get("storage")), "")
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        want_names = {k: v for k, v in (spec.get("names") or {}).items()}
        want_names.setdefault("singular", want_names.get("kind", "").lower())
        want_names.setdefault("listKind", want_names.get("kind", "") + "List")
        stored_versions = list(status.get("storedVersions") or [])
        if storage and storage not in stored_versions:
            stored_versions.append(storage)
        if (
            conditions.get("Established", {}).get("status") == "True"
            and conditions.get("NamesAccepted", {}).get("status") == "True"
            and status.get("acceptedNames") == want_names
            and status.get("storedVersions") == stored_versions
        ):
            return True
        from vplane.apiserver.timeutil import rfc3339

        now = rfc3339(server.clock())
        new_status = {
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "lastTransitionTime": now,
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                },
                {
                    "type": "Established",
                    "status": "True",
                    "lastTransitionTime": now,
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                },
            ],
            "acceptedNames": want_names,
            "storedVersions": stored_versions,
        }

        def mutate(obj: Obj) -> Obj:
            obj["status"] = new_status
            return obj

        await server.objects.guaranteed_update(ctx, self.rtype, "", name, mutate, subresource="status")
        return True

    async def _cleanup(self, ctx: RequestContext, crd: Obj) -> bool:
        spec = crd["spec"]
        group = spec.get("group", "")
        plural = (spec.get("names") or {}).get("plural", "")
        prefix = f"/{group}/{plural}/"
        rtype = self.server.registry.any_version(group, plural)
        remaining = list(self.server.cache.iter_prefix(prefix))
        for kv in remaining:
            parts = kv.key.split("/")
            namespace, name = (parts[3], parts[4]) if len(parts) == 5 else ("", parts[3])
            if rtype is not None and b'"deletionTimestamp"' not in kv.value:
                with contextlib.suppress(errors.StatusError):
                    await self.server.objects.delete(ctx, rtype, namespace, name, DeleteOptions("Background"))
        if any(True for _ in self.server.cache.iter_prefix(prefix)):
            return False

        def mutate(obj: Obj) -> Obj:
            obj["metadata"]["finalizers"] = [
                f for f in obj["metadata"].get("finalizers") or [] if f != CRD_FINALIZER
            ]
            return obj

        with contextlib.suppress(errors.StatusError):
            await self.server.objects.guaranteed_update(ctx, self.rtype, "", crd["metadata"]["name"], mutate)
        return True


def _preferred(spec: Obj) -> str:
    from vplane.apiserver.registry import version_sort_key

    served = [v["name"] for v in spec.get("versions") or [] if v.get("served")]
    served.sort(key=version_sort_key)
    return served[0] if served else ""

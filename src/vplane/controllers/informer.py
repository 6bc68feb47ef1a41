"""A list-then-watch cache of one resource (client-go's reflector and informer, reduced).

:meth:`Informer.run` lists once, then watches from the list's ``resourceVersion`` and keeps the cache
current; handlers hear about every change as add, update or delete. A watch that breaks resumes from
the last revision seen, so nothing is missed and nothing is replayed. When that revision has been
compacted away (410 Expired), the informer lists again and turns the difference between the old cache
and the new list into the same add/update/delete calls, so handlers never need to know a relist
happened. Restarting :meth:`run` after it was cancelled also resumes from the last revision.

Handlers are plain functions called on the event loop: they should only record or enqueue (the
reconciler's handlers queue keys). Cached objects are shared with handlers; treat them as read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog
from pydantic import BaseModel, ConfigDict

from vplane.controllers.client import KubeAPI, Resource, TransportError
from vplane.controllers.workqueue import ExponentialBackoff
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

log = structlog.get_logger("vplane.controllers.informer")

OnAdd = Callable[[Obj], None]
OnUpdate = Callable[[Obj, Obj], None]
OnDelete = Callable[[Obj], None]


class InformerSettings(BaseModel):
    """Timings in seconds; defaults are client-go's reflector's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    watch_timeout_seconds: int = 300
    """Each watch asks the server to end it after a random time in [t, 2t), so watches spread out."""
    backoff_base: float = 0.8
    """The wait after a failed list or watch; doubles with each consecutive failure."""
    backoff_max: float = 30.0
    page_size: int | None = 500
    """List in pages of this many objects (``limit``/``continue``); None lists in one response."""


def object_key(obj: Obj) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects (client-go ``MetaNamespaceKeyFunc``)."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name", "")
    return f"{namespace}/{name}" if namespace else str(name)


def split_key(key: str) -> tuple[str | None, str]:
    namespace, sep, name = key.partition("/")
    return (namespace, name) if sep else (None, key)


def _revision(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True)
class _Handlers:
    on_add: OnAdd | None
    on_update: OnUpdate | None
    on_delete: OnDelete | None


class Informer:
    """The cache of one resource (optionally one namespace and selectors), kept by list and watch."""

    def __init__(
        self,
        client: KubeAPI,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | None = None,
        field_selector: Mapping[str, str] | None = None,
        settings: InformerSettings | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = dict(label_selector) if label_selector else None
        self.field_selector = dict(field_selector) if field_selector else None
        self.settings = settings or InformerSettings()
        self._rng = rng or random.Random()
        self._cache: dict[str, Obj] = {}
        self._handlers: list[_Handlers] = []
        self._resource_version: str | None = None
        self._synced = asyncio.Event()
        self.list_count = 0
        """How many lists this informer has made: 1 plus one per relist (for metrics and tests)."""
        self._log = log.bind(resource=resource.plural, namespace=namespace or "")

    # -- the cache ------------------------------------------------------------------------------------

    def add_handlers(
        self,
        *,
        on_add: OnAdd | None = None,
        on_update: OnUpdate | None = None,
        on_delete: OnDelete | None = None,
    ) -> None:
        """Register handlers; if the cache is already filled, ``on_add`` hears about every cached object."""
        handlers = _Handlers(on_add, on_update, on_delete)
        self._handlers.append(handlers)
        if self.has_synced and on_add is not None:
            for obj in list(self._cache.values()):
                self._call(on_add, obj)

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        """Return once the first list has filled the cache."""
        await self._synced.wait()

    @property
    def resource_version(self) -> str | None:
        """The last revision seen (list or event): where the next watch resumes."""
        return self._resource_version

    def get(self, key: str) -> Obj | None:
        return self._cache.get(key)

    def objects(self) -> list[Obj]:
        return list(self._cache.values())

    def keys(self) -> list[str]:
        return list(self._cache)

    # -- list and watch -------------------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch forever; relist on 410; back off on failures. Cancel to stop."""
        backoff: ExponentialBackoff[str] = ExponentialBackoff(
            self.settings.backoff_base, self.settings.backoff_max
        )
        while True:
            try:
                if self._resource_version is None:
                    await self._list()
                    backoff.forget("run")
                await self._watch(lambda: backoff.forget("run"))
            except StatusError as exc:
                if exc.code == 410:
                    self._log.info("watch expired; relisting", resource_version=self._resource_version)
                    self._resource_version = None
                    continue
                delay = backoff.when("run")
                self._log.warning("list or watch failed", code=exc.code, error=exc.message, retry_in=delay)
                await asyncio.sleep(delay)
            except TransportError as exc:
                delay = backoff.when("run")
                self._log.warning("list or watch failed", error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)

    async def _list(self) -> None:
        result = await self.client.list(
            self.resource,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            chunk_size=self.settings.page_size,
        )
        fresh = {object_key(obj): self._complete(obj) for obj in result.items}
        old, self._cache = self._cache, fresh
        self._resource_version = result.resource_version
        self.list_count += 1
        self._synced.set()
        # Replay the difference, so a relist looks like the events it stands in for.
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._dispatch_add(obj)
            elif _revision(before) != _revision(obj):
                self._dispatch_update(before, obj)
        for key, obj in old.items():
            if key not in fresh:
                self._dispatch_delete(obj)

    async def _watch(self, healthy: Callable[[], None]) -> None:
        timeout = self.settings.watch_timeout_seconds
        events = self.client.watch(
            self.resource,
            namespace=self.namespace,
            resource_version=self._resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=int(timeout * (1 + self._rng.random())),
        )
        async with contextlib.aclosing(events) as stream:
            async for event in stream:
                healthy()
                obj = self._complete(event.object)
                revision = _revision(obj)
                if event.type == "BOOKMARK":
                    self._resource_version = revision or self._resource_version
                    continue
                key = object_key(obj)
                if event.type == "DELETED":
                    self._cache.pop(key, None)
                    self._resource_version = revision or self._resource_version
                    self._dispatch_delete(obj)
                    continue
                before = self._cache.get(key)
                self._cache[key] = obj
                self._resource_version = revision or self._resource_version
                if before is None:
                    self._dispatch_add(obj)
                else:
                    self._dispatch_update(before, obj)

    def _complete(self, obj: Obj) -> Obj:
        # List items carry no apiVersion/kind on the wire; events do. Make them alike for handlers.
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        return obj

    # -- handlers -------------------------------------------------------------------------------------

    def _dispatch_add(self, obj: Obj) -> None:
        for h in self._handlers:
            if h.on_add is not None:
                self._call(h.on_add, obj)

    def _dispatch_update(self, old: Obj, new: Obj) -> None:
        for h in self._handlers:
            if h.on_update is not None:
                self._call(h.on_update, old, new)

    def _dispatch_delete(self, obj: Obj) -> None:
        for h in self._handlers:
            if h.on_delete is not None:
                self._call(h.on_delete, obj)

    def _call(self, handler: Callable[..., None], *args: Obj) -> None:
        try:
            handler(*args)
        except Exception:
            self._log.exception("event handler failed")

"""Shared informers: one list and one watch per resource for every controller of the process
(client-go's ``SharedInformerFactory``), plus the secondary indexes controllers look pods up by.

Controllers ask for an informer while they are being built; :meth:`SharedInformers.run` then runs each
one once, however many controllers registered handlers on it. Indexes are kept by informer handlers, so
they change exactly when the cache does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

from vplane.controllers.client import KubeAPI, Resource
from vplane.controllers.informer import Informer, InformerSettings, object_key
from vplane.controllers.kcm import pods as podutil
from vplane.kube.objects import Obj

IndexFunc = Callable[[Obj], Iterable[str]]


def strip_managed_fields(obj: Obj) -> None:
    """kube-controller-manager's informer transform: no controller reads ``managedFields``, which are a
    large part of a small object, so the cache does not keep them. A PUT without them leaves the stored
    ones as they are (upstream and vplane alike)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)


def by_namespace(obj: Obj) -> tuple[str, ...]:
    return (podutil.namespace_of(obj),)


def by_controller_uid(obj: Obj) -> tuple[str, ...]:
    ref = podutil.controller_ref(obj)
    return (str(ref.get("uid") or ""),) if ref is not None else ()


def orphans_by_namespace(obj: Obj) -> tuple[str, ...]:
    return (podutil.namespace_of(obj),) if podutil.controller_ref(obj) is None else ()


class Index:
    """index value -> {key: object} over one informer's cache."""

    def __init__(self, informer: Informer, func: IndexFunc) -> None:
        self._func = func
        self._by_value: dict[str, dict[str, Obj]] = {}
        self._values_of: dict[str, tuple[str, ...]] = {}
        informer.add_handlers(
            on_add=self._put, on_update=lambda old, new: self._put(new), on_delete=self._drop
        )

    def _put(self, obj: Obj) -> None:
        key = object_key(obj)
        values = tuple(self._func(obj))
        old = self._values_of.get(key, ())
        for value in old:
            if value not in values:
                self._remove(value, key)
        for value in values:
            self._by_value.setdefault(value, {})[key] = obj
        if values:
            self._values_of[key] = values
        else:
            self._values_of.pop(key, None)

    def _drop(self, obj: Obj) -> None:
        key = object_key(obj)
        for value in self._values_of.pop(key, ()):
            self._remove(value, key)

    def _remove(self, value: str, key: str) -> None:
        bucket = self._by_value.get(value)
        if bucket is not None:
            bucket.pop(key, None)
            if not bucket:
                del self._by_value[value]

    def get(self, value: str) -> list[Obj]:
        return list(self._by_value.get(value, {}).values())


class SharedInformers:
    def __init__(self, client: KubeAPI, settings: InformerSettings | None = None) -> None:
        self.client = client
        self.settings = settings or InformerSettings()
        self._informers: dict[tuple[Resource, tuple[tuple[str, str], ...]], Informer] = {}
        self._indexes: dict[tuple[Resource, str], Index] = {}
        self._started = False

    def informer(self, resource: Resource, *, field_selector: Mapping[str, str] | None = None) -> Informer:
        key = (resource, tuple(sorted((field_selector or {}).items())))
        informer = self._informers.get(key)
        if informer is None:
            if self._started:
                raise RuntimeError("informers must be requested before the shared informers run")
            informer = Informer(self.client, resource, field_selector=field_selector, settings=self.settings)
            # First handler of every informer, so the cached object itself is trimmed before anyone sees it.
            informer.add_handlers(
                on_add=strip_managed_fields, on_update=lambda old, new: strip_managed_fields(new)
            )
            self._informers[key] = informer
        return informer

    def index(self, resource: Resource, name: str, func: IndexFunc) -> Index:
        index = self._indexes.get((resource, name))
        if index is None:
            index = self._indexes[(resource, name)] = Index(self.informer(resource), func)
        return index

    def namespace_index(self, resource: Resource) -> Index:
        return self.index(resource, "namespace", by_namespace)

    def controller_index(self, resource: Resource) -> Index:
        return self.index(resource, "controller", by_controller_uid)

    def orphan_index(self, resource: Resource) -> Index:
        return self.index(resource, "orphans", orphans_by_namespace)

    @property
    def all(self) -> list[Informer]:
        return list(self._informers.values())

    async def run(self) -> None:
        """Run every informer requested so far until cancelled."""
        self._started = True
        async with asyncio.TaskGroup() as tasks:
            for informer in self._informers.values():
                tasks.create_task(informer.run())

    async def wait_for_sync(self, informers: Iterable[Informer] | None = None) -> None:
        for informer in informers if informers is not None else self.all:
            await informer.wait_for_sync()

"""Which namespaces hold objects of one kind, kept from committed events, so an admission plug-in that
matters only where such objects exist (ResourceQuota, LimitRange) costs a dict lookup on every other
write instead of a range count in the cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vplane.apiserver.watch import WatchEvent

if TYPE_CHECKING:
    from vplane.apiserver.registry import ResourceType
    from vplane.apiserver.server import APIServer


class Presence:
    """namespace -> names of one namespaced kind's objects (loaded from the cache on first use)."""

    def __init__(self, server: APIServer, group: str, version: str, resource: str) -> None:
        rtype = server.registry.get(group, version, resource)
        assert rtype is not None and rtype.namespaced
        self.server = server
        self.rtype: ResourceType = rtype
        self._prefix = rtype.prefix("")
        self._names: dict[str, set[str]] = {}
        self._loaded = False
        server.hub.on_event.append(self._on_event)

    def _load(self) -> None:
        # Admission only runs once the cache has started; events seen before then are in it too.
        names: dict[str, set[str]] = {}
        for kv in self.server.cache.iter_prefix(self._prefix):
            namespace, _, name = kv.key[len(self._prefix) :].partition("/")
            names.setdefault(namespace, set()).add(name)
        self._names = names
        self._loaded = True

    def _on_event(self, wevent: WatchEvent) -> None:
        key = wevent.event.kv.key
        if not key.startswith(self._prefix):
            return
        namespace, _, name = key[len(self._prefix) :].partition("/")
        if wevent.event.type == "DELETE":
            held = self._names.get(namespace)
            if held is not None:
                held.discard(name)
                if not held:
                    del self._names[namespace]
        else:
            self._names.setdefault(namespace, set()).add(name)

    @property
    def anywhere(self) -> bool:
        if not self._loaded:
            self._load()
        return bool(self._names)

    def holds(self, namespace: str) -> bool:
        if not self._loaded:
            self._load()
        return namespace in self._names

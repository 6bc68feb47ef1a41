"""Discovery documents, legacy (``/api``, ``/apis``, ``/apis/<g>[/<v>]``) and aggregated (apidiscovery v2).

Documents are built from the registry and cached until it changes. The Python clients and kopf read
only the legacy form; kubectl prefers the aggregated one, which answers all of discovery in two requests.
Extra groups (aggregated APIServices) are merged in by a provider the aggregator installs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from vplane.apiserver.kinds.apis import API_SERVICE_PRIORITIES
from vplane.apiserver.registry import Registry, ResourceType

AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

GROUP_PRIORITY = {group: priority for (group, _v), (priority, _vp) in API_SERVICE_PRIORITIES.items()}
"""Built-in groups' ``groupPriorityMinimum``: discovery lists groups by it, highest first (as upstream
does); groups not listed (custom resources) get 1000, as their automatic APIServices do upstream."""
DEFAULT_GROUP_PRIORITY = 1000


@dataclass
class ExternalGroup:
    """A group served elsewhere (an aggregated APIService), as discovery should list it."""

    name: str
    versions: list[str]
    priority: int = 0
    resources: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Aggregated-discovery resources per version, when the backend's discovery was fetched."""
    stale: dict[str, bool] = field(default_factory=dict)


ExternalGroups = Callable[[], list[ExternalGroup]]


def wants_aggregated(accept: str) -> bool:
    for part in accept.split(","):
        params = {p.strip() for p in part.split(";")[1:]}
        if {"g=apidiscovery.k8s.io", "v=v2", "as=APIGroupDiscoveryList"} <= params:
            return True
    return False


def _group_order(name: str, priority: int | None = None) -> tuple[int, str]:
    if priority is None:
        priority = GROUP_PRIORITY.get(name, DEFAULT_GROUP_PRIORITY)
    return (-priority, name)


def resource_entries(rtype: ResourceType) -> list[dict[str, Any]]:
    """Legacy APIResource entries for a type and its subresources, keys in upstream's order."""
    main: dict[str, Any] = {
        "name": rtype.resource,
        "singularName": rtype.singular,
        "namespaced": rtype.namespaced,
        "kind": rtype.kind,
        "verbs": sorted(rtype.verbs),
    }
    if rtype.short_names:
        main["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        main["categories"] = list(rtype.categories)
    if rtype.stored:
        main["storageVersionHash"] = rtype.storage_version_hash
    out = [main]
    for sub in rtype.subresources.values():
        entry: dict[str, Any] = {
            "name": f"{rtype.resource}/{sub.name}",
            "singularName": "",
            "namespaced": rtype.namespaced,
        }
        if sub.group is not None:
            entry["group"] = sub.group
            entry["version"] = sub.version or ""
        entry["kind"] = sub.kind
        entry["verbs"] = sorted(sub.verbs)
        out.append(entry)
    return out


def aggregated_resource(rtype: ResourceType) -> dict[str, Any]:
    """An aggregated-discovery resource; ``responseKind`` leaves group and version empty where they are the
    enclosing group/version's, as upstream does."""
    entry: dict[str, Any] = {
        "resource": rtype.resource,
        "responseKind": {"group": "", "version": "", "kind": rtype.kind},
        "scope": "Namespaced" if rtype.namespaced else "Cluster",
        "singularResource": rtype.singular,
        "verbs": sorted(rtype.verbs),
    }
    if rtype.short_names:
        entry["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        entry["categories"] = list(rtype.categories)
    subs = []
    for sub in rtype.subresources.values():
        group = sub.group if sub.group is not None and sub.group != rtype.group else ""
        version = sub.version if sub.version is not None and sub.version != rtype.version else ""
        if group and not version:
            version = sub.version or ""
        subs.append(
            {
                "subresource": sub.name,
                "responseKind": {"group": group, "version": version, "kind": sub.kind},
                "verbs": sorted(sub.verbs),
            }
        )
    if subs:
        entry["subresources"] = subs
    return entry


class Discovery:
    def __init__(self, registry: Registry, external: ExternalGroups | None = None) -> None:
        self.registry = registry
        self.external = external
        self._cache: dict[str, bytes] = {}
        self._generation = -1

    def _fresh(self) -> None:
        if self._generation != self.registry.generation or self.external is not None:
            self._cache = {}
            self._generation = self.registry.generation

    def _memo(self, key: str, build: Callable[[], Any]) -> bytes:
        self._fresh()
        body = self._cache.get(key)
        if body is None:
            body = orjson.dumps(build())
            self._cache[key] = body
        return body

    def _externals(self) -> list[ExternalGroup]:
        return self.external() if self.external is not None else []

    def api_versions(self, server_address: str) -> bytes:
        return orjson.dumps(
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
            }
        )

    def _groups(self) -> list[tuple[str, list[str]]]:
        local = self.registry.group_versions()
        ordered: list[tuple[tuple[int, str], str, list[str]]] = [
            (_group_order(g), g, list(v)) for g, v in local.items() if g
        ]
        names = {g for _, g, _ in ordered}
        for ext in sorted(self._externals(), key=lambda e: (-e.priority, e.name)):
            if ext.name in names:
                for _, g, versions in ordered:
                    if g == ext.name:
                        versions.extend(v for v in ext.versions if v not in versions)
            else:
                ordered.append((_group_order(ext.name, ext.priority), ext.name, list(ext.versions)))
                names.add(ext.name)
        ordered.sort(key=lambda entry: entry[0])
        return [(g, v) for _, g, v in ordered]

    @staticmethod
    def _group_doc(name: str, versions: list[str]) -> dict[str, Any]:
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": entries, "preferredVersion": dict(entries[0])}

    def api_group_list(self) -> bytes:
        def build() -> Any:
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [self._group_doc(g, v) for g, v in self._groups()],
            }

        return self._memo("apis", build)

    def api_group(self, group: str) -> bytes | None:
        for name, versions in self._groups():
            if name == group:
                return orjson.dumps(
                    {"kind": "APIGroup", "apiVersion": "v1", **self._group_doc(name, versions)}
                )
        return None

    def resource_list(self, group: str, version: str) -> bytes | None:
        types = self.registry.resources_in(group, version)
        if not types:
            return None

        def build() -> Any:
            resources: list[dict[str, Any]] = []
            for rtype in types:
                resources.extend(resource_entries(rtype))
            doc: dict[str, Any] = {"kind": "APIResourceList"}
            if group:
                doc["apiVersion"] = "v1"  # upstream's core list has none
            doc["groupVersion"] = f"{group}/{version}" if group else version
            doc["resources"] = resources
            return doc

        return self._memo(f"rl:{group}/{version}", build)

    def aggregated(self, legacy_core: bool) -> bytes:
        """``/api`` (core only) or ``/apis`` (every other group) as an APIGroupDiscoveryList."""

        def build() -> Any:
            items = []
            local = self.registry.group_versions()
            groups = [("", local.get("", []))] if legacy_core else [(g, v) for g, v in self._groups()]
            externals = {e.name: e for e in self._externals()}
            for group, versions in groups:
                version_docs = []
                for version in versions:
                    types = self.registry.resources_in(group, version)
                    ext = externals.get(group)
                    if types:
                        resources = [aggregated_resource(t) for t in types]
                        freshness = "Current"
                    elif ext is not None:
                        resources = ext.resources.get(version, [])
                        freshness = "Stale" if ext.stale.get(version) else "Current"
                    else:
                        continue
                    version_docs.append({"version": version, "resources": resources, "freshness": freshness})
                item: dict[str, Any] = {
                    "metadata": {"name": group} if group else {},
                    "versions": version_docs,
                }
                items.append(item)
            return {
                "kind": "APIGroupDiscoveryList",
                "apiVersion": "apidiscovery.k8s.io/v2",
                "metadata": {},
                "items": items,
            }

        return self._memo("agg:api" if legacy_core else "agg:apis", build)

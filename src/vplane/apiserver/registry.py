"""The registry of served kinds.

A :class:`ResourceType` describes one resource of one group/version: names for discovery, scope, verbs,
subresources, where its objects live in storage, and a :class:`Strategy` with the per-kind rules
(defaulting, validation, generation, field selectors). Built-in kinds are declared in
:mod:`vplane.apiserver.builtin`; CustomResourceDefinitions add and remove types at run time, and every
change bumps :attr:`Registry.generation` so discovery and OpenAPI documents are rebuilt lazily.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vplane.kube import errors, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

if TYPE_CHECKING:
    from vplane.apiserver.context import RequestContext

ALL_VERBS: tuple[str, ...] = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)
STATUS_VERBS: tuple[str, ...] = ("get", "patch", "update")

CreateHandler = Callable[["RequestContext", Obj], Awaitable[Obj]]


class Strategy:
    """Per-kind rules. The defaults suit a plain stored kind (ConfigMap-like)."""

    uses_generation = False
    """Whether ``metadata.generation`` starts at 1 and counts changes outside metadata and status."""

    name_validator: Callable[[str], list[str]] = staticmethod(validation.dns1123_subdomain)

    def default(self, obj: Obj) -> None:
        """Fill defaults before validation (on create, update and patch)."""

    def prepare_for_create(self, obj: Obj) -> None:
        """Reset fields a client may not set on create (beyond the generic metadata rules)."""

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        """Carry over fields a client may not change on update."""

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        """Kind-specific validation; metadata is validated generically."""
        return []

    def field_labels(self, obj: Obj) -> dict[str, str]:
        """Fields usable in field selectors beyond ``metadata.name`` and ``metadata.namespace``."""
        return {}

    supported_field_labels: frozenset[str] = frozenset()


DEFAULT_STRATEGY = Strategy()


@dataclass
class Subresource:
    name: str
    kind: str
    verbs: tuple[str, ...]
    group: str | None = None
    version: str | None = None


@dataclass
class ResourceType:
    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: dict[str, Subresource] = field(default_factory=dict)
    strategy: Strategy = DEFAULT_STRATEGY
    stored: bool = True
    create_handler: CreateHandler | None = None
    schema_definition: str | None = None
    """Name of the OpenAPI component describing this kind (built-in kinds)."""
    crd_schema: Obj | None = None
    """The CRD version's ``openAPIV3Schema`` (custom resources)."""
    printer_columns: list[Obj] | None = None
    is_custom: bool = False
    storage_version: str = ""
    """The version objects are stored in; other versions of a custom resource are converted on the way."""
    selectable_fields: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.singular:
            self.singular = self.kind.lower()
        if not self.storage_version:
            self.storage_version = self.version

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def storage_prefix(self) -> str:
        return f"/{self.group or 'core'}/{self.resource}/"

    def key(self, namespace: str, name: str) -> str:
        if self.namespaced:
            return f"{self.storage_prefix}{namespace}/{name}"
        return f"{self.storage_prefix}{name}"

    def prefix(self, namespace: str) -> str:
        """Storage prefix for a list (all namespaces when ``namespace`` is empty)."""
        if self.namespaced and namespace:
            return f"{self.storage_prefix}{namespace}/"
        return self.storage_prefix

    @property
    def qualified(self) -> str:
        return errors.qualified_resource(self.resource, self.group)


class Registry:
    """All served types, by group/version/resource, with lookups for routing and discovery."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._preferred: dict[str, str] = {}
        self.generation = 0

    def add(self, rtype: ResourceType) -> None:
        self._types[(rtype.group, rtype.version, rtype.resource)] = rtype
        self.generation += 1

    def remove(self, group: str, version: str, resource: str) -> None:
        if self._types.pop((group, version, resource), None) is not None:
            self.generation += 1

    def set_preferred_version(self, group: str, version: str) -> None:
        self._preferred[group] = version
        self.generation += 1

    def get(self, group: str, version: str, resource: str) -> ResourceType | None:
        return self._types.get((group, version, resource))

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self._types.values()))

    def for_kind(self, group: str, version: str, kind: str) -> ResourceType | None:
        for rtype in self._types.values():
            if rtype.group == group and rtype.version == version and rtype.kind == kind:
                return rtype
        return None

    def any_version(self, group: str, resource: str) -> ResourceType | None:
        """The preferred served version of a resource (used by GC and namespace cleanup)."""
        versions = [t for (g, _v, r), t in self._types.items() if g == group and r == resource]
        if not versions:
            return None
        preferred = self.preferred_version(group)
        for t in versions:
            if t.version == preferred:
                return t
        return versions[0]

    def group_versions(self) -> dict[str, list[str]]:
        """Group -> versions, preferred first (core group is ``""``)."""
        out: dict[str, list[str]] = {}
        for group, version, _resource in self._types:
            versions = out.setdefault(group, [])
            if version not in versions:
                versions.append(version)
        for group, versions in out.items():
            versions.sort(key=version_sort_key)
            preferred = self._preferred.get(group)
            if preferred in versions:
                versions.remove(preferred)
                versions.insert(0, preferred)
        return out

    def preferred_version(self, group: str) -> str:
        versions = self.group_versions().get(group, [])
        return versions[0] if versions else ""

    def resources_in(self, group: str, version: str) -> list[ResourceType]:
        return sorted(
            (t for (g, v, _r), t in self._types.items() if g == group and v == version),
            key=lambda t: t.resource,
        )

    def unique_resources(self) -> list[ResourceType]:
        """One type per stored group/resource (the preferred version), for whole-store sweeps."""
        seen: dict[tuple[str, str], ResourceType] = {}
        for t in self._types.values():
            if not t.stored:
                continue
            current = seen.get((t.group, t.resource))
            if current is None or t.version == self.preferred_version(t.group):
                seen[(t.group, t.resource)] = t
        return list(seen.values())


def version_sort_key(version: str) -> tuple[int, int, int, str]:
    """Kubernetes version priority: GA > beta > alpha, higher numbers first, then non-conforming names."""
    import re

    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0, version)
    major = int(m.group(1))
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor, version)

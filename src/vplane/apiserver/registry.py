"""The registry of served kinds.

A :class:`ResourceType` describes one resource of one group/version: names for discovery, scope, verbs,
subresources, where its objects live in storage, and a :class:`Strategy` with the per-kind rules
(defaulting, validation, generation, field selectors). Built-in kinds are declared in
:mod:`vplane.apiserver.builtin`; CustomResourceDefinitions add and remove types at run time, and every
change bumps :attr:`Registry.generation` so discovery and OpenAPI documents are rebuilt lazily.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

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
Finish = Callable[[bool], Awaitable[None]]
"""Called once a write that a store hook prepared is stored (True) or has failed (False)."""


class StoreHooks(Protocol):
    """Side effects of a kind's writes that the generic store cannot know (upstream's ``BeginCreate``,
    ``BeginUpdate`` and ``AfterDelete`` registry hooks): Services allocate ClusterIPs and node ports.

    ``begin_create`` and ``begin_update`` run after mutating admission and before validating admission, so
    validating webhooks and policies see what they allocated, and may change the object; they raise a
    ``StatusError`` to refuse it. Their ``Finish`` learns whether the write was stored: a refused or failed
    write gives back what was allocated for it. They are not called for subresource writes or dry runs'
    side effects (a dry run is passed on; hooks check without allocating)."""

    async def begin_create(self, ctx: RequestContext, obj: Obj) -> Finish: ...

    async def begin_update(self, ctx: RequestContext, obj: Obj, old: Obj) -> Finish: ...

    async def after_delete(self, ctx: RequestContext, obj: Obj) -> None: ...


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

    def validate_update(self, obj: Obj, old: Obj, subresource: str) -> list[Cause]:
        """Validation of an update through ``subresource`` (``""`` for the object itself)."""
        return self.validate(obj, old)

    def prepare_for_subresource_update(self, subresource: str, obj: Obj, old: Obj) -> None:
        """What a write through a subresource other than ``status`` may change (default: as an update)."""
        self.prepare_for_update(obj, old)

    def field_labels(self, obj: Obj) -> dict[str, str]:
        """Fields usable in field selectors beyond ``metadata.name`` and ``metadata.namespace``.

        ``obj`` is the stored form (for kinds served in several versions, the storage version)."""
        return {}

    supported_field_labels: frozenset[str] = frozenset()

    def field_label_error(self, label: str) -> str:
        """The 400 message for an unsupported field selector (upstream words it per kind)."""
        return f"field label not supported: {label}"

    def deletion_grace(self, obj: Obj, requested: int | None) -> int | None:
        """Graceful deletion (upstream ``CheckGracefulDelete``): how many seconds a deleted object stays,
        marked with ``deletionTimestamp``, for its owner (a kubelet) to finish it; None for kinds that go
        at once. ``requested`` is the delete's ``gracePeriodSeconds``."""
        return None

    reset_status_on_create = True
    """Whether a create drops the status a client sent (Node keeps it: kubelets create nodes with status)."""

    status_subresources: frozenset[str] = frozenset({"status"})
    """Subresources whose writes take ``status`` from the body and keep everything else."""


DEFAULT_STRATEGY = Strategy()


@dataclass
class Subresource:
    name: str
    kind: str
    verbs: tuple[str, ...]
    group: str | None = None
    version: str | None = None


class Converter(Protocol):
    """Converts objects between a served version and the storage version (built-in kinds served in
    several versions, or in two groups sharing storage). Both directions are idempotent: an object
    already in the target form is returned as is."""

    def to_storage(self, obj: Obj) -> Obj: ...

    def from_storage(self, obj: Obj) -> Obj: ...


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
    store_hooks: StoreHooks | None = None
    """Side effects of this kind's creates, updates and deletes (Services' allocations)."""
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
    storage_group: str | None = None
    """The group objects are stored under when another group serves them too (events.k8s.io events
    live with core events); None means this type's own group."""
    converter: Converter | None = None
    """Converts between this version and the storage version (built-in multi-version kinds)."""
    storage_kind: str = ""
    """The kind the storage version calls the objects (for ``storageVersionHash``)."""

    def __post_init__(self) -> None:
        if not self.singular:
            self.singular = self.kind.lower()
        if not self.storage_version:
            self.storage_version = self.version
        if not self.storage_kind:
            self.storage_kind = self.kind

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
        group = self.group if self.storage_group is None else self.storage_group
        return f"/{group or 'core'}/{self.resource}/"

    @property
    def converts(self) -> bool:
        """Whether stored objects differ from what this type serves (the stored bytes can't be relayed)."""
        return self.converter is not None or (self.is_custom and self.version != self.storage_version)

    @property
    def list_items_typed(self) -> bool:
        """Whether list items carry ``kind`` and ``apiVersion``: custom resources' do, built-in kinds' do not
        (upstream encodes typed lists, whose items have an empty TypeMeta)."""
        return self.is_custom

    @property
    def storage_version_hash(self) -> str:
        """Upstream's ``storageVersionHash``: the first 8 bytes of SHA-256 of the storage group/version/kind,
        base64; it changes only when the storage version does."""
        group = self.group if self.storage_group is None else self.storage_group
        text = f"{group}/{self.storage_version}/{self.storage_kind}"
        return base64.b64encode(hashlib.sha256(text.encode()).digest()[:8]).decode()

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
        """One type per storage location (the preferred version of the owning group), for whole-store
        sweeps; a resource another group also serves (events.k8s.io events) is swept once."""
        seen: dict[str, ResourceType] = {}
        for t in self._types.values():
            if not t.stored:
                continue
            current = seen.get(t.storage_prefix)
            if current is None or _better_sweeper(t, current, self.preferred_version(t.group)):
                seen[t.storage_prefix] = t
        return list(seen.values())


def _better_sweeper(candidate: ResourceType, current: ResourceType, preferred: str) -> bool:
    if (candidate.storage_group is None) != (current.storage_group is None):
        return candidate.storage_group is None
    return candidate.version == preferred


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

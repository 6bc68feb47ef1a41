"""Patch and apply metadata read from OpenAPI v3 schemas.

kube-apiserver decides how a strategic merge patch or a server-side apply treats a list or a map from
the ``x-kubernetes-*`` extensions of the kind's schema (kubectl reads the same extensions from
``/openapi/v3``; see apimachinery ``strategicpatch/meta.go`` ``PatchMetaFromOpenAPIV3`` and kube-openapi
``schemaconv/smd.go``). Reading them from the schema rather than from a table per kind means every kind
whose schema we serve, built-in or custom, gets the same patch engine.

A ``SchemaNode`` of ``None`` means "nothing is known here": lists are then replaced atomically and maps
merged key by key, which is what upstream does for untyped (deduced) values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

ListType = Literal["atomic", "set", "map"]
"""How a list is merged: replaced whole, merged as a set of scalars, or merged by key fields."""

_REF_PREFIX = "#/components/schemas/"
_MISSING: Any = object()
_MAX_MAP_MEMBERS = 256
"""Map keys (not declared fields) remembered per node: label keys and ConfigMap keys are unbounded."""


class SchemaNode:
    """One resolved schema position: the structure of the target and the extensions of the reference.

    ``$ref`` (and the ``allOf: [{$ref}]`` wrapper upstream emits next to ``default``/``description``) is
    followed through ``components``. Extensions written next to the reference win over the target's own,
    because that is where upstream puts per-field facts such as ``x-kubernetes-patch-merge-key``.
    """

    __slots__ = (
        "_components",
        "_data",
        "_default",
        "_ext",
        "_items",
        "_kids",
        "_members",
        "_more",
        "_props",
    )

    def __init__(self, schema: Mapping[str, Any], components: Mapping[str, Any] | None = None) -> None:
        self._components: Mapping[str, Any] = components if components is not None else {}
        self._default: Any = schema.get("default", _MISSING)
        self._data, self._ext = _resolve(schema, self._components)
        if self._default is _MISSING:
            self._default = self._data.get("default", _MISSING)
        self._kids: dict[str, SchemaNode | None] = {}
        self._members: dict[str, SchemaNode | None] = {}
        props = self._data.get("properties")
        # Looked up for every field of every write; plain dicts (decoded JSON) avoid ABC isinstance checks.
        self._props: Mapping[str, Any] = props if isinstance(props, dict | Mapping) else {}
        self._items: SchemaNode | None | Any = _MISSING
        self._more: SchemaNode | None | Any = _MISSING

    @classmethod
    def from_component(cls, name: str, components: Mapping[str, Any]) -> SchemaNode | None:
        """The node for ``components.schemas[name]``, or None when there is no such schema."""
        schema = components.get(name)
        return cls(schema, components) if isinstance(schema, Mapping) else None

    def __repr__(self) -> str:
        return f"SchemaNode(type={self.type!r}, fields={sorted(self.properties)!r})"

    # -- structure ---------------------------------------------------------------------------------------

    @property
    def type(self) -> str | None:
        typ = self._data.get("type")
        return typ if isinstance(typ, str) else None

    @property
    def properties(self) -> Mapping[str, Any]:
        return self._props

    def has_field(self, name: str) -> bool:
        """Whether ``name`` is a declared property (a struct field, in upstream's terms)."""
        sub = self._props.get(name)
        return isinstance(sub, dict) or (sub is not None and isinstance(sub, Mapping))

    def child(self, name: str) -> SchemaNode | None:
        """The declared property ``name``; None when it is not declared."""
        if name in self._kids:
            return self._kids[name]
        sub = self.properties.get(name)
        node = SchemaNode(sub, self._components) if isinstance(sub, Mapping) else None
        self._kids[name] = node
        return node

    def items(self) -> SchemaNode | None:
        """The schema of list elements."""
        if self._items is _MISSING:
            sub = self._data.get("items")
            self._items = SchemaNode(sub, self._components) if isinstance(sub, Mapping) else None
        node: SchemaNode | None = self._items
        return node

    def additional(self) -> SchemaNode | None:
        """The schema of map values (``additionalProperties``); None for free-form or absent."""
        if self._more is _MISSING:
            sub = self._data.get("additionalProperties")
            self._more = SchemaNode(sub, self._components) if isinstance(sub, Mapping) else None
        node: SchemaNode | None = self._more
        return node

    def member(self, key: str) -> SchemaNode | None:
        """The schema for key ``key`` of an object: the declared property, else the map value schema."""
        try:
            return self._members[key]  # asked for every key of every write: remembered
        except KeyError:
            pass
        declared = self.has_field(key)
        node = self.child(key) if declared else self.additional()
        if declared or len(self._members) < _MAX_MAP_MEMBERS:
            self._members[key] = node
        return node

    @property
    def default(self) -> Any:
        """The ``default`` value, or None when the schema has none (used for list-map key defaults)."""
        return None if self._default is _MISSING else self._default

    @property
    def has_default(self) -> bool:
        return self._default is not _MISSING

    # -- extensions --------------------------------------------------------------------------------------

    def extension(self, name: str) -> Any:
        return self._ext.get(name)

    @property
    def patch_strategies(self) -> tuple[str, ...]:
        """``x-kubernetes-patch-strategy`` split on commas, e.g. ``("merge", "retainKeys")``."""
        value = self._ext.get("x-kubernetes-patch-strategy")
        if not isinstance(value, str) or not value:
            return ()
        return tuple(value.split(","))

    @property
    def patch_merge_key(self) -> str:
        """``x-kubernetes-patch-merge-key``; empty when absent (as upstream's ``PatchMeta``)."""
        value = self._ext.get("x-kubernetes-patch-merge-key")
        return value if isinstance(value, str) else ""

    @property
    def list_type(self) -> str | None:
        value = self._ext.get("x-kubernetes-list-type")
        return value if isinstance(value, str) else None

    @property
    def list_map_keys(self) -> tuple[str, ...]:
        value = self._ext.get("x-kubernetes-list-map-keys")
        if isinstance(value, list | tuple):
            return tuple(k for k in value if isinstance(k, str))
        return ()

    @property
    def map_type(self) -> str | None:
        value = self._ext.get("x-kubernetes-map-type")
        return value if isinstance(value, str) else None

    @property
    def preserve_unknown_fields(self) -> bool:
        return self._ext.get("x-kubernetes-preserve-unknown-fields") is True

    def list_relationship(self) -> tuple[ListType, tuple[str, ...]]:
        """How server-side apply treats this list, following kube-openapi ``getListElementRelationship``.

        ``x-kubernetes-list-type`` wins; without it a ``merge`` patch strategy makes a keyed list (with a
        merge key) or a set (without one), as built-in types only carry the patch tags. Anything else is
        atomic.
        """
        list_type = self.list_type
        if list_type == "set":
            return "set", ()
        if list_type == "map":
            keys = self.list_map_keys
            return ("map", keys) if keys else ("atomic", ())
        if list_type is not None:
            return "atomic", ()
        if "merge" in self.patch_strategies:
            key = self.patch_merge_key
            return ("map", (key,)) if key else ("set", ())
        return "atomic", ()

    @property
    def map_atomic(self) -> bool:
        return self.map_type == "atomic"


def find_kind_schema(components: Mapping[str, Any], group: str, version: str, kind: str) -> SchemaNode | None:
    """The component schema carrying ``x-kubernetes-group-version-kind`` for ``group/version, kind``."""
    for schema in components.values():
        if not isinstance(schema, Mapping):
            continue
        gvks = schema.get("x-kubernetes-group-version-kind")
        if not isinstance(gvks, list):
            continue
        for gvk in gvks:
            if (
                isinstance(gvk, Mapping)
                and gvk.get("group", "") == group
                and gvk.get("version") == version
                and gvk.get("kind") == kind
            ):
                return SchemaNode(schema, components)
    return None


def _resolve(
    schema: Mapping[str, Any], components: Mapping[str, Any]
) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """Follow ``$ref`` / ``allOf[0]`` to the structural schema; collect extensions, nearest first."""
    ext: dict[str, Any] = {k: v for k, v in schema.items() if k.startswith("x-")}
    data: Mapping[str, Any] = schema
    seen: set[str] = set()
    while True:
        ref = data.get("$ref")
        if not isinstance(ref, str):
            all_of = data.get("allOf")
            structural = any(k in data for k in ("type", "properties", "items", "additionalProperties"))
            if not structural and isinstance(all_of, list) and all_of and isinstance(all_of[0], Mapping):
                # upstream's PatchMetaFromOpenAPIV3.resolve takes allOf[0]; a schema that already has
                # its own structure (a CRD using allOf for validation only) keeps it
                inner: Mapping[str, Any] = all_of[0]
                for k, v in inner.items():
                    if k.startswith("x-"):
                        ext.setdefault(k, v)
                data = inner
                if isinstance(inner.get("$ref"), str):
                    continue
            return data, ext
        name = ref[len(_REF_PREFIX) :] if ref.startswith(_REF_PREFIX) else ref
        target = components.get(name)
        if name in seen or not isinstance(target, Mapping):
            # unresolvable: structure unknown, extensions kept
            return {}, ext
        seen.add(name)
        for k, v in target.items():
            if k.startswith("x-"):
                ext.setdefault(k, v)
        data = target

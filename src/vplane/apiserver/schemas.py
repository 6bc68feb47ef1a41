"""Where a kind's schema comes from: the committed built-in OpenAPI data or the CRD's openAPIV3Schema.

One lookup serves the patch engines (strategic merge, server-side apply), strict field validation and
the OpenAPI documents, so all three agree on what a kind looks like.
"""

from __future__ import annotations

from typing import Any

from vplane.apiserver.registry import Registry, ResourceType
from vplane.kube import openapi, structural
from vplane.kube.objects import Obj
from vplane.kube.schema_meta import SchemaNode

_META_KEYS = ("apiVersion", "kind", "metadata")


class SchemaSource:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._nodes: dict[int, tuple[Any, SchemaNode | None]] = {}
        self._definitions: dict[tuple[str, str, str, str | None], str] = {}

    def definition_name(self, rtype: ResourceType) -> str:
        if rtype.is_custom:
            parts = rtype.group.split(".")
            return ".".join(reversed(parts)) + f".{rtype.version}.{rtype.kind}"
        key = (rtype.group, rtype.version, rtype.kind, rtype.schema_definition)
        name = self._definitions.get(key)
        if name is None:
            found = openapi.load_builtin().definition_for(rtype.group, rtype.version, rtype.kind)
            name = self._definitions[key] = found or rtype.schema_definition or ""
        return name

    def node_for(self, rtype: ResourceType) -> SchemaNode | None:
        cached = self._nodes.get(id(rtype))
        if cached is not None and cached[0] is (rtype.crd_schema if rtype.is_custom else rtype):
            return cached[1]
        node: SchemaNode | None
        if rtype.is_custom:
            node = SchemaNode(rtype.crd_schema) if rtype.crd_schema is not None else None
            self._nodes[id(rtype)] = (rtype.crd_schema, node)
        else:
            builtin = openapi.load_builtin()
            node = SchemaNode.from_component(self.definition_name(rtype), builtin.schemas)
            self._nodes[id(rtype)] = (rtype, node)
        return node

    def unknown_fields(self, rtype: ResourceType, obj: Obj) -> list[str]:
        """Paths of fields the kind's schema does not know (for ``fieldValidation`` Strict and Warn)."""
        if rtype.is_custom:
            if rtype.crd_schema is None:
                return []
            return structural.unknown_fields(obj, rtype.crd_schema)
        builtin = openapi.load_builtin()
        definition = self.definition_name(rtype)
        schema = builtin.schemas.get(definition)
        if schema is None:
            return []
        return structural.unknown_fields(obj, schema, components=builtin.schemas)

    def prune(self, rtype: ResourceType, obj: Obj) -> list[str]:
        """Drop fields the kind does not have, as decoding into upstream's typed structs does; return
        their paths (``spec.foo``) for ``fieldValidation``."""
        if rtype.is_custom:
            if rtype.crd_schema is None:
                return []
            pruned = structural.prune(obj, rtype.crd_schema)
        else:
            builtin = openapi.load_builtin()
            schema = builtin.schemas.get(self.definition_name(rtype))
            if schema is None:
                return []
            pruned = structural.prune(obj, schema, components=builtin.schemas)
        return [p.removeprefix(".") for p in pruned]

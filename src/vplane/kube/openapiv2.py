"""The Swagger 2.0 document ``/openapi/v2`` serves, derived from the per-group-version OpenAPI v3 documents.

kube-apiserver still serves one v2 document for the whole API beside the v3 ones, and client-go's
``OpenAPISchema()`` reads only v2 (as protobuf, see :mod:`vplane.kube.gnostic`): Argo CD's cluster cache,
``kubectl explain --output plaintext-openapiv2``, kubectl's validation fallback when v3 is missing, and
older tools read it. Rather than keep a second set of schemas, the v2 document is converted from the v3
documents the server already builds (and those aggregated servers publish):

* ``#/components/schemas/X`` becomes ``#/definitions/X``; v3's ``allOf: [{$ref}]`` wrapper, which exists
  to allow siblings beside a reference, becomes the bare ``$ref`` with its description, as upstream's v2
  document writes it;
* keywords v2 lacks are dropped as upstream's ``ToStructuralOpenAPIV2`` drops them for custom resources:
  ``oneOf``/``anyOf``/``not``; a ``nullable`` schema loses its type, items and properties; so does a schema
  that preserves unknown fields (its items and properties) and an array left without items (its type),
  because kubectl's v2 model cannot cope with those shapes;
* operations take the v2 shape: the request body becomes the ``body`` parameter, each response's
  ``content`` its ``schema``, query parameters carry their type inline, and ``consumes``/``produces``/
  ``schemes`` are listed per operation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

V3_REF = "#/components/schemas/"
V2_REF = "#/definitions/"
PRODUCES = ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]
_SCHEMA_KEYWORDS = frozenset(
    {
        "$ref",
        "format",
        "title",
        "description",
        "default",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxProperties",
        "minProperties",
        "required",
        "enum",
        "additionalProperties",
        "type",
        "items",
        "allOf",
        "properties",
        "discriminator",
        "readOnly",
        "xml",
        "externalDocs",
        "example",
    }
)
"""What a Swagger 2.0 Schema Object may hold besides ``x-`` extensions (gnostic refuses anything else)."""
_METHODS = ("get", "put", "post", "delete", "options", "head", "patch")


def document(v3_documents: Iterable[Mapping[str, Any]], version: str) -> dict[str, Any]:
    """One Swagger 2.0 document for the whole API. A definition or path in several documents keeps its
    first form (they are the same schema: ObjectMeta, Status, ...)."""
    definitions: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for doc in v3_documents:
        for name, schema in (doc.get("components") or {}).get("schemas", {}).items():
            if name not in definitions:
                definitions[name] = schema_v2(schema)
        for path, item in (doc.get("paths") or {}).items():
            if path not in paths:
                paths[path] = path_item_v2(path, item)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": dict(sorted(paths.items())),
        "definitions": dict(sorted(definitions.items())),
        "securityDefinitions": {
            "BearerToken": {
                "description": "Bearer Token authentication",
                "type": "apiKey",
                "name": "authorization",
                "in": "header",
            }
        },
        "security": [{"BearerToken": []}],
    }


def schema_v2(schema: Any) -> Any:
    """A v3 schema (as the server writes them) in its v2 form; see the module docstring."""
    if not isinstance(schema, dict):
        return schema
    wrapped = schema.get("allOf")
    if (
        "$ref" not in schema
        and isinstance(wrapped, list)
        and len(wrapped) == 1
        and isinstance(wrapped[0], dict)
        and isinstance(wrapped[0].get("$ref"), str)
    ):
        out: dict[str, Any] = {"$ref": _ref(wrapped[0]["$ref"])}
        if "description" in schema:
            out["description"] = schema["description"]
        return out
    out = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = _ref(value)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: schema_v2(prop) for name, prop in value.items()}
        elif key == "additionalProperties":
            out[key] = value if isinstance(value, bool) else schema_v2(value)
        elif key == "items":
            out[key] = [schema_v2(v) for v in value] if isinstance(value, list) else schema_v2(value)
        elif key == "allOf" and isinstance(value, list):
            out[key] = [schema_v2(v) for v in value]
        elif key in _SCHEMA_KEYWORDS or key.startswith("x-"):
            out[key] = value
    if schema.get("nullable") is True:
        for key in ("type", "items", "properties"):
            out.pop(key, None)
    if schema.get("x-kubernetes-preserve-unknown-fields") is True:
        out.pop("items", None)
        out.pop("properties", None)
    if out.get("type") == "array" and "items" not in out:
        del out["type"]
    return out


def path_item_v2(path: str, item: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for method in _METHODS:
        operation = item.get(method)
        if isinstance(operation, dict):
            out[method] = operation_v2(operation)
    params = [_path_parameter(name) for name in _path_names(path)]
    if params:
        out["parameters"] = params
    return out


def operation_v2(operation: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("description", "operationId"):
        if key in operation:
            out[key] = operation[key]
    body = operation.get("requestBody")
    consumes = ["*/*"]
    params: list[dict[str, Any]] = []
    if isinstance(body, dict):
        content: dict[str, Any] = body.get("content") or {}
        consumes = list(content) or consumes
        first: dict[str, Any] = next(iter(content.values()), {})
        schema = first.get("schema", {"type": "object"})
        params.append({"name": "body", "in": "body", "required": True, "schema": schema_v2(schema)})
    for param in operation.get("parameters") or []:
        params.append(_parameter_v2(param))
    out["consumes"] = consumes
    out["produces"] = list(PRODUCES)
    out["schemes"] = ["https"]
    if "tags" in operation:
        out["tags"] = operation["tags"]
    if params:
        out["parameters"] = params
    responses: dict[str, Any] = {}
    for code, response in (operation.get("responses") or {}).items():
        converted: dict[str, Any] = {"description": response.get("description", "")}
        content = response.get("content") or {}
        if content:
            converted["schema"] = schema_v2(next(iter(content.values())).get("schema", {}))
        responses[code] = converted
    responses.setdefault("401", {"description": "Unauthorized"})
    out["responses"] = responses
    for key, value in operation.items():
        if key.startswith("x-"):
            out[key] = value
    return out


def _parameter_v2(param: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in param.items() if k != "schema"}
    schema = param.get("schema")
    if isinstance(schema, dict):
        for key in ("type", "format", "uniqueItems", "items", "enum", "default"):
            if key in schema:
                out[key] = schema[key]
    out.setdefault("type", "string")
    return out


def _path_names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{") and part.endswith("}")]


def _path_parameter(name: str) -> dict[str, Any]:
    description = {
        "namespace": "object name and auth scope, such as for teams and projects",
        "name": "name of the resource",
    }.get(name, name)
    return {
        "description": description,
        "in": "path",
        "name": name,
        "required": True,
        "type": "string",
        "uniqueItems": True,
    }


def _ref(target: str) -> str:
    return V2_REF + target[len(V3_REF) :] if target.startswith(V3_REF) else target


_SUBTYPES = {
    "json": False,
    "com.github.proto-openapi.spec.v2.v1.0+protobuf": True,
    "com.github.proto-openapi.spec.v2@v1.0+protobuf": True,  # client-go still asks for this one
}
"""The media subtypes kube-openapi serves the v2 document as: False for JSON, True for protobuf."""


def negotiate(accept: str) -> bool | None:
    """True for protobuf, False for JSON, None when the client takes neither (goautoneg's order: higher
    ``q`` first, then the more specific clause, then the order given)."""
    clauses: list[tuple[float, int, int, str, str]] = []
    for index, clause in enumerate((accept or "*/*").split(",")):
        media, *params = (p.strip() for p in clause.split(";"))
        kind, _, sub = media.partition("/")
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q <= 0:
            continue
        specific = (kind != "*") + (sub != "*")
        clauses.append((-q, -specific, index, kind, sub))
    for _q, _specific, _index, kind, sub in sorted(clauses):
        if kind not in ("application", "*"):
            continue
        if sub == "*":
            return False
        if sub in _SUBTYPES:
            return _SUBTYPES[sub]
    return None

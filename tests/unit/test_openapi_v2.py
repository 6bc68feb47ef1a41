"""The Swagger 2.0 document: its conversion from the v3 documents, its gnostic protobuf form, and the
media type negotiation of ``/openapi/v2``. kubectl reading the served protobuf is in the integration tests."""

from __future__ import annotations

import struct
from typing import Any

import orjson
import pytest

from vplane.kube import gnostic, openapiv2
from vplane.kube.openapi import OBJECT_META, load_builtin

# -- conversion ------------------------------------------------------------------------------------


def test_an_allof_wrapped_reference_becomes_a_bare_v2_reference_with_its_description() -> None:
    v3 = {"allOf": [{"$ref": f"#/components/schemas/{OBJECT_META}"}], "default": {}, "description": "meta"}
    assert openapiv2.schema_v2(v3) == {"$ref": f"#/definitions/{OBJECT_META}", "description": "meta"}


def test_keywords_v2_lacks_are_dropped_as_upstream_drops_them_for_custom_resources() -> None:
    v3 = {
        "type": "object",
        "properties": {
            "color": {"type": "string", "nullable": True, "enum": ["red"]},
            "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "extra": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"a": {"type": "string"}},
            },
            "list": {"type": "array", "nullable": True, "items": {"type": "string"}},
            "any": {
                "type": "array",
                "x-kubernetes-preserve-unknown-fields": True,
                "items": {"type": "string"},
            },
            "choice": {"oneOf": [{"required": ["a"]}], "not": {"required": ["b"]}, "writeOnly": True},
        },
    }
    props = openapiv2.schema_v2(v3)["properties"]
    assert props["color"] == {"enum": ["red"]}
    assert props["port"] == {"x-kubernetes-int-or-string": True}
    assert props["extra"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert props["list"] == {}
    assert props["any"] == {"x-kubernetes-preserve-unknown-fields": True}  # an array without items
    assert props["choice"] == {}


def test_operations_take_the_v2_shape() -> None:
    ref = {"$ref": "#/components/schemas/com.example.v1.Widget"}
    item = {
        "patch": {
            "operationId": "patchWidget",
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            ],
            "requestBody": {"content": {"application/merge-patch+json": {"schema": {"type": "object"}}}},
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": "example.com", "version": "v1", "kind": "Widget"},
        }
    }
    out = openapiv2.path_item_v2("/apis/example.com/v1/namespaces/{namespace}/widgets/{name}", item)
    patch = out["patch"]
    assert patch["consumes"] == ["application/merge-patch+json"]
    assert patch["produces"] == openapiv2.PRODUCES and patch["schemes"] == ["https"]
    assert patch["parameters"] == [
        {"name": "body", "in": "body", "required": True, "schema": {"type": "object"}},
        {"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": True},
    ]
    assert patch["responses"] == {
        "200": {"description": "OK", "schema": {"$ref": "#/definitions/com.example.v1.Widget"}},
        "401": {"description": "Unauthorized"},
    }
    assert patch["x-kubernetes-action"] == "patch"
    assert [p["name"] for p in out["parameters"]] == ["namespace", "name"]
    assert all(p["in"] == "path" and p["required"] for p in out["parameters"])


def test_the_document_merges_group_versions_first_form_wins_and_refers_only_to_its_definitions() -> None:
    builtin = load_builtin()
    core = {"components": {"schemas": builtin.closure(["io.k8s.api.core.v1.Pod"])}, "paths": {}}
    crd = {
        "components": {
            "schemas": {
                OBJECT_META: {"type": "string"},  # a second form of a shared definition is not taken
                "com.example.v1.Widget": {
                    "type": "object",
                    "x-kubernetes-group-version-kind": [{"kind": "Widget"}],
                },
            }
        },
        "paths": {},
    }
    doc = openapiv2.document([core, crd], "v1.36.2")
    assert doc["swagger"] == "2.0" and doc["info"] == {"title": "Kubernetes", "version": "v1.36.2"}
    assert doc["definitions"][OBJECT_META]["type"] == "object"
    assert "com.example.v1.Widget" in doc["definitions"]
    text = orjson.dumps(doc).decode()
    assert "#/components/schemas/" not in text
    for ref in _refs(doc):
        assert ref.removeprefix("#/definitions/") in doc["definitions"], ref


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


# -- negotiation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "proto"),
    [
        ("", False),
        ("*/*", False),
        ("application/json", False),
        ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf", True),
        ("application/com.github.proto-openapi.spec.v2.v1.0+protobuf", True),
        ("application/json;q=0.5, application/com.github.proto-openapi.spec.v2.v1.0+protobuf", True),
        ("application/json, application/com.github.proto-openapi.spec.v2.v1.0+protobuf", False),
        ("*/*;q=0.1, application/com.github.proto-openapi.spec.v2.v1.0+protobuf;q=0.9", True),
        ("text/html, application/*", False),
        ("text/html", None),
        ("application/json;q=0", None),
        ("application/yaml", None),
    ],
)
def test_negotiation_follows_kube_openapi(accept: str, proto: bool | None) -> None:
    assert openapiv2.negotiate(accept) is proto


# -- protobuf --------------------------------------------------------------------------------------


def _fields(buf: bytes) -> dict[int, list[Any]]:
    """Protobuf wire data as field number -> values (varints as ints, doubles as floats, else bytes)."""
    out: dict[int, list[Any]] = {}
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value = struct.unpack("<d", buf[pos : pos + 8])[0]
            pos += 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value = buf[pos : pos + size]
            pos += size
        else:
            raise AssertionError(f"wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def _named(entries: list[bytes]) -> dict[str, dict[int, list[Any]]]:
    """Repeated Named<T> {1 name, 2 value} -> name: the value's fields."""
    out = {}
    for entry in entries:
        f = _fields(entry)
        out[f[1][0].decode()] = _fields(f[2][0])
    return out


def test_the_protobuf_carries_gnostics_field_numbers() -> None:
    doc = openapiv2.document(
        [
            {
                "components": {
                    "schemas": {
                        "com.example.v1.Widget": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "spec": {"type": "integer", "minimum": 1.5, "maxLength": 3, "enum": ["a"]},
                                "tags": {"type": "array", "items": {"type": "string"}},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                "free": {"type": "object", "additionalProperties": True},
                            },
                            "x-kubernetes-group-version-kind": [
                                {"group": "example.com", "version": "v1", "kind": "Widget"}
                            ],
                        }
                    }
                },
                "paths": {
                    "/apis/example.com/v1/namespaces/{namespace}/widgets": {
                        "post": {
                            "operationId": "createWidget",
                            "parameters": [{"name": "dryRun", "in": "query", "schema": {"type": "string"}}],
                            "requestBody": {
                                "content": {
                                    "*/*": {"schema": {"$ref": "#/components/schemas/com.example.v1.Widget"}}
                                }
                            },
                            "responses": {"200": {"description": "OK"}},
                        }
                    }
                },
            }
        ],
        "v1.36.2",
    )
    top = _fields(gnostic.encode_document(doc))
    assert top[1] == [b"2.0"]
    info = _fields(top[2][0])
    assert info[1] == [b"Kubernetes"] and info[2] == [b"v1.36.2"]
    widget = _named(_fields(top[9][0])[1])["com.example.v1.Widget"]  # Definitions {1 NamedSchema}
    assert _fields(widget[22][0])[1] == [b"object"]  # type: TypeItem {1 value}
    assert widget[19] == [b"spec"]  # required
    gvk = _named(widget[31])["x-kubernetes-group-version-kind"]  # vendor_extension: NamedAny
    assert orjson.loads(gvk[2][0]) == [
        {"group": "example.com", "version": "v1", "kind": "Widget"}
    ]  # Any.yaml
    props = _named(_fields(widget[25][0])[1])  # properties: Properties {1 NamedSchema}
    spec = props["spec"]
    assert spec[9] == [1.5] and spec[11] == [3]  # minimum (double), maxLength (int64)
    assert [orjson.loads(_fields(e)[2][0]) for e in spec[20]] == ["a"]  # enum: repeated Any
    tags_items = _fields(props["tags"][23][0])[1]  # items: ItemsItem {1 repeated Schema}
    assert _fields(_fields(tags_items[0])[22][0])[1] == [b"string"]
    labels_extra = _fields(props["labels"][21][0])  # additionalProperties oneof: 1 Schema
    assert _fields(_fields(labels_extra[1][0])[22][0])[1] == [b"string"]
    assert _fields(props["free"][21][0]) == {2: [1]}  # additionalProperties oneof: 2 bool
    paths = _fields(top[8][0])  # Paths {2 NamedPathItem}
    item = _named(paths[2])["/apis/example.com/v1/namespaces/{namespace}/widgets"]
    post = _fields(item[4][0])  # PathItem.post
    assert post[5] == [b"createWidget"]
    body, query = (_fields(p) for p in post[8])  # parameters: ParametersItem oneof 1 Parameter
    body_param = _fields(_fields(body[1][0])[1][0])  # Parameter oneof 1 BodyParameter
    assert body_param[2] == [b"body"] and body_param[3] == [b"body"] and body_param[4] == [1]
    assert _fields(body_param[5][0])[1] == [b"#/definitions/com.example.v1.Widget"]  # Schema._ref
    non_body = _fields(_fields(query[1][0])[2][0])  # Parameter oneof 2 NonBodyParameter
    dry_run = _fields(non_body[3][0])  # NonBodyParameter oneof 3 QueryParameterSubSchema
    assert dry_run[2] == [b"query"] and dry_run[4] == [b"dryRun"] and dry_run[6] == [b"string"]
    (namespace_param,) = item[9]  # PathItem.parameters
    path_sub = _fields(_fields(_fields(namespace_param)[1][0])[2][0])[4][0]  # oneof 4 PathParameterSubSchema
    assert _fields(path_sub)[4] == [b"namespace"] and _fields(path_sub)[1] == [1]
    responses = _named(_fields(post[9][0])[1])  # Responses {1 NamedResponseValue}
    assert _fields(responses["200"][1][0])[1] == [b"OK"]  # ResponseValue oneof 1 Response
    security = _named(_fields(top[13][0])[1])["BearerToken"]  # SecurityDefinitions, oneof 2 ApiKey
    assert _fields(security[2][0])[3] == [b"header"]
    requirement = _named(_fields(top[12][0])[1])  # SecurityRequirement {1 NamedStringArray}
    assert requirement == {"BearerToken": {}}


def test_negative_integers_take_ten_bytes_and_zero_values_are_left_out() -> None:
    encoded = gnostic.encode_document(
        {"definitions": {"x": {"minLength": 0, "maxLength": -1, "uniqueItems": False, "title": ""}}}
    )
    schema = _named(_fields(_fields(encoded)[9][0])[1])["x"]
    assert schema == {11: [(1 << 64) - 1]}

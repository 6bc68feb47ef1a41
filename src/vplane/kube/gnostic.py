"""The Swagger 2.0 document as gnostic's ``openapi.v2.Document`` protobuf, the form client-go reads.

client-go's ``DiscoveryClient.OpenAPISchema()`` asks ``/openapi/v2`` for
``application/com.github.proto-openapi.spec.v2@v1.0+protobuf`` and unmarshals the answer into gnostic's
generated message, with no JSON fallback; kube-apiserver makes it with gnostic's ``ParseDocument`` and
``proto.Marshal``. No Python package carries gnostic's messages, so this module writes them: the field
numbers below are those of gnostic's ``openapiv2/OpenAPIv2.proto``. Only what a Kubernetes document uses
is written (no contacts, licenses, XML objects or file schemas); anything else is left out, as an
unknown key would be. Values gnostic keeps as ``Any`` (extensions, defaults, enums, examples) carry their
YAML text; JSON text is used, which every YAML parser reads.

JSON object order is kept (gnostic keeps the document's order); proto3 leaves out empty scalars.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

import orjson

MEDIA_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
MEDIA_TYPE_DEPRECATED = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"

# Field kinds: "s" string, "b" bool, "d" double, "i" int64, "[s]" repeated string, "A" Any, "[A]"
# repeated Any, or a message name ("[Name]" repeated). "x-" names the field of vendor extensions.
_PARAMETER_COMMON = {"required": (1, "b"), "in": (2, "s"), "description": (3, "s"), "name": (4, "s")}
_VALIDATIONS = (
    " collectionFormat:s default:A maximum:d exclusiveMaximum:b minimum:d exclusiveMinimum:b maxLength:i"
    " minLength:i pattern:s maxItems:i minItems:i uniqueItems:b enum:[A] multipleOf:d x-:"
)


def _numbered(first: int, names: str) -> dict[str, tuple[int, str]]:
    """Fields numbered in order from ``first``: ``"name:kind name:kind ..."``."""
    out: dict[str, tuple[int, str]] = {}
    for offset, entry in enumerate(names.split()):
        name, kind = entry.split(":", 1)
        out[name] = (first + offset, kind)
    return out


_MESSAGES: dict[str, dict[str, tuple[int, str]]] = {
    "Document": {
        "swagger": (1, "s"),
        "info": (2, "Info"),
        "host": (3, "s"),
        "basePath": (4, "s"),
        "schemes": (5, "[s]"),
        "consumes": (6, "[s]"),
        "produces": (7, "[s]"),
        "paths": (8, "Paths"),
        "definitions": (9, "Definitions"),
        "security": (12, "[SecurityRequirement]"),
        "securityDefinitions": (13, "SecurityDefinitions"),
        "tags": (14, "[Tag]"),
        "externalDocs": (15, "ExternalDocs"),
        "x-": (16, ""),
    },
    "Info": {
        "title": (1, "s"),
        "version": (2, "s"),
        "description": (3, "s"),
        "termsOfService": (4, "s"),
        "x-": (7, ""),
    },
    "ExternalDocs": {"description": (1, "s"), "url": (2, "s"), "x-": (3, "")},
    "Tag": {"name": (1, "s"), "description": (2, "s"), "externalDocs": (3, "ExternalDocs"), "x-": (4, "")},
    "PathItem": {
        "$ref": (1, "s"),
        "get": (2, "Operation"),
        "put": (3, "Operation"),
        "post": (4, "Operation"),
        "delete": (5, "Operation"),
        "options": (6, "Operation"),
        "head": (7, "Operation"),
        "patch": (8, "Operation"),
        "parameters": (9, "[ParametersItem]"),
        "x-": (10, ""),
    },
    "Operation": {
        "tags": (1, "[s]"),
        "summary": (2, "s"),
        "description": (3, "s"),
        "externalDocs": (4, "ExternalDocs"),
        "operationId": (5, "s"),
        "produces": (6, "[s]"),
        "consumes": (7, "[s]"),
        "parameters": (8, "[ParametersItem]"),
        "responses": (9, "Responses"),
        "schemes": (10, "[s]"),
        "deprecated": (11, "b"),
        "security": (12, "[SecurityRequirement]"),
        "x-": (13, ""),
    },
    "BodyParameter": {
        "description": (1, "s"),
        "name": (2, "s"),
        "in": (3, "s"),
        "required": (4, "b"),
        "schema": (5, "Schema"),
        "x-": (6, ""),
    },
    # header and path parameters share one numbering, query and formData another (allowEmptyValue).
    "HeaderParameterSubSchema": {
        **_PARAMETER_COMMON,
        **_numbered(5, "type:s format:s items:PrimitivesItems" + _VALIDATIONS),
    },
    "QueryParameterSubSchema": {
        **_PARAMETER_COMMON,
        **_numbered(5, "allowEmptyValue:b type:s format:s items:PrimitivesItems" + _VALIDATIONS),
    },
    "PrimitivesItems": _numbered(1, "type:s format:s items:PrimitivesItems" + _VALIDATIONS),
    "Response": {"description": (1, "s"), "schema": (2, "SchemaItem"), "x-": (5, "")},
    "Schema": {
        **_numbered(
            1,
            "$ref:s format:s title:s description:s default:A multipleOf:d maximum:d exclusiveMaximum:b "
            "minimum:d exclusiveMinimum:b maxLength:i minLength:i pattern:s maxItems:i minItems:i "
            "uniqueItems:b maxProperties:i minProperties:i required:[s] enum:[A] "
            "additionalProperties:AdditionalPropertiesItem type:TypeItem items:ItemsItem allOf:[Schema] "
            "properties:Properties discriminator:s readOnly:b",
        ),
        "externalDocs": (29, "ExternalDocs"),
        "example": (30, "A"),
        "x-": (31, ""),
    },
    "ApiKeySecurity": {
        "type": (1, "s"),
        "name": (2, "s"),
        "in": (3, "s"),
        "description": (4, "s"),
        "x-": (5, ""),
    },
    "BasicAuthenticationSecurity": {"type": (1, "s"), "description": (2, "s"), "x-": (3, "")},
}
_MESSAGES["PathParameterSubSchema"] = _MESSAGES["HeaderParameterSubSchema"]
_MESSAGES["FormDataParameterSubSchema"] = _MESSAGES["QueryParameterSubSchema"]
_NON_BODY = {"header": 1, "formData": 2, "query": 3, "path": 4}
_NON_BODY_MESSAGE = {
    "header": "HeaderParameterSubSchema",
    "formData": "FormDataParameterSubSchema",
    "query": "QueryParameterSubSchema",
    "path": "PathParameterSubSchema",
}


def encode_document(doc: Mapping[str, Any]) -> bytes:
    """``doc`` (a Swagger 2.0 document) as the bytes of gnostic's ``openapi.v2.Document``."""
    return _message("Document", doc)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64s take ten bytes, as proto encodes them
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def _string(number: int, text: str) -> bytes:
    return _delimited(number, text.encode()) if text else b""


def _any(number: int, value: Any) -> bytes:
    # Any {1 google.protobuf.Any value, 2 string yaml}
    return _delimited(number, _string(2, orjson.dumps(value).decode() + "\n"))


def _named(number: int, name: str, value: bytes) -> bytes:
    # Named<T> {1 name, 2 value}
    return _delimited(number, _string(1, name) + _delimited(2, value))


def _extensions(number: int, value: Mapping[str, Any]) -> bytes:
    return b"".join(
        _named(number, k, _string(2, orjson.dumps(v).decode() + "\n"))
        for k, v in value.items()
        if k.startswith("x-")
    )


def _message(name: str, value: Any) -> bytes:
    special = _SPECIAL.get(name)
    if special is not None:
        return special(value)
    fields = _MESSAGES[name]
    out = bytearray()
    for key, item in sorted(
        ((k, v) for k, v in value.items() if k in fields), key=lambda kv: fields[kv[0]][0]
    ):
        number, kind = fields[key]
        out += _field(number, kind, item)
    if "x-" in fields:
        out += _extensions(fields["x-"][0], value)
    return bytes(out)


def _field(number: int, kind: str, item: Any) -> bytes:
    if kind == "s":
        return _string(number, str(item))
    if kind == "b":
        return _key(number, 0) + b"\x01" if item else b""
    if kind == "i":
        return _key(number, 0) + _varint(int(item)) if item else b""
    if kind == "d":
        return _key(number, 1) + struct.pack("<d", float(item)) if item else b""
    if kind == "A":
        return _any(number, item)
    if kind.startswith("["):
        inner = kind[1:-1]
        return b"".join(_field(number, inner, one) for one in item) if isinstance(item, list) else b""
    if kind in _SPECIAL or isinstance(item, dict):  # the oneof wrappers also take a bool, string or list
        return _delimited(number, _message(kind, item))
    return b""


def _named_map(value_kind: str, number: int = 1) -> Callable[[Mapping[str, Any]], bytes]:
    """A message that is a JSON object of named values: ``repeated Named<T> additional_properties``."""

    def encode(value: Mapping[str, Any]) -> bytes:
        return b"".join(
            _named(number, k, _message(value_kind, v)) for k, v in value.items() if isinstance(v, dict)
        )

    return encode


def _paths(value: Mapping[str, Any]) -> bytes:
    # Paths {1 repeated NamedAny vendor_extension, 2 repeated NamedPathItem path}
    return _extensions(1, value) + b"".join(
        _named(2, k, _message("PathItem", v))
        for k, v in value.items()
        if not k.startswith("x-") and isinstance(v, dict)
    )


def _responses(value: Mapping[str, Any]) -> bytes:
    # Responses {1 repeated NamedResponseValue response_code, 2 vendor_extension}
    return b"".join(
        _named(1, k, _response_value(v))
        for k, v in value.items()
        if not k.startswith("x-") and isinstance(v, dict)
    ) + _extensions(2, value)


def _response_value(value: Mapping[str, Any]) -> bytes:
    # ResponseValue oneof {1 Response, 2 JsonReference}
    if "$ref" in value:
        return _delimited(2, _json_reference(value))
    return _delimited(1, _message("Response", value))


def _json_reference(value: Mapping[str, Any]) -> bytes:
    return _string(1, str(value["$ref"])) + _string(2, str(value.get("description", "")))


def _parameters_item(value: Mapping[str, Any]) -> bytes:
    # ParametersItem oneof {1 Parameter, 2 JsonReference}; Parameter oneof {1 body, 2 non-body};
    # NonBodyParameter oneof by where the parameter is.
    if "$ref" in value:
        return _delimited(2, _json_reference(value))
    where = value.get("in")
    if where == "body":
        return _delimited(1, _delimited(1, _message("BodyParameter", value)))
    if where in _NON_BODY:
        sub = _message(_NON_BODY_MESSAGE[str(where)], value)
        return _delimited(1, _delimited(2, _delimited(_NON_BODY[str(where)], sub)))
    return b""


def _schema_item(value: Mapping[str, Any]) -> bytes:
    # SchemaItem oneof {1 Schema, 2 FileSchema}; a v2 file schema is type: file.
    return _delimited(1, _message("Schema", value))


def _additional_properties(value: Any) -> bytes:
    # AdditionalPropertiesItem oneof {1 Schema, 2 bool}
    if isinstance(value, bool):
        return _key(2, 0) + (b"\x01" if value else b"\x00")
    return _delimited(1, _message("Schema", value))


def _type_item(value: Any) -> bytes:
    # TypeItem {1 repeated string value}: a type name or a list of them
    names = value if isinstance(value, list) else [value]
    return b"".join(_string(1, str(n)) for n in names)


def _items_item(value: Any) -> bytes:
    # ItemsItem {1 repeated Schema}: one schema or a list of them
    schemas = value if isinstance(value, list) else [value]
    return b"".join(_delimited(1, _message("Schema", s)) for s in schemas if isinstance(s, dict))


def _security_definitions(value: Mapping[str, Any]) -> bytes:
    # NamedSecurityDefinitionsItem; the item's oneof: 1 basic, 2 apiKey (OAuth2 flows are not written)
    out = b""
    for name, item in value.items():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "apiKey":
            out += _named(1, name, _delimited(2, _message("ApiKeySecurity", item)))
        elif item.get("type") == "basic":
            out += _named(1, name, _delimited(1, _message("BasicAuthenticationSecurity", item)))
    return out


def _security_requirement(value: Mapping[str, Any]) -> bytes:
    # NamedStringArray {1 name, 2 StringArray {1 repeated string}}
    return b"".join(_named(1, k, b"".join(_string(1, str(s)) for s in v)) for k, v in value.items())


_SPECIAL: dict[str, Callable[[Any], bytes]] = {
    "Paths": _paths,
    "Definitions": _named_map("Schema"),
    "Properties": _named_map("Schema"),
    "Responses": _responses,
    "ParametersItem": _parameters_item,
    "SchemaItem": _schema_item,
    "AdditionalPropertiesItem": _additional_properties,
    "TypeItem": _type_item,
    "ItemsItem": _items_item,
    "SecurityDefinitions": _security_definitions,
    "SecurityRequirement": _security_requirement,
}

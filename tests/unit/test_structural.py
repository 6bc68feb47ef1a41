"""Structural schemas: kube-openapi validation messages, pruning, defaulting, structural checks, strict decoding.

Expected texts are upstream's (kube-openapi ``validate``/``errors``, apiextensions-apiserver ``schema/*`` and
``validation.go``, apimachinery ``field.Error``), so a mismatch here is a wire-compatibility bug.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vplane.kube import errors, openapi, structural
from vplane.kube.errors import Cause


def triples(causes: list[Cause]) -> list[tuple[str, str, str]]:
    return [(c.get("field", ""), c.get("reason", ""), c.get("message", "")) for c in causes]


def check(obj: Any, schema: dict[str, Any], **kw: Any) -> list[tuple[str, str, str]]:
    return triples(structural.validate(obj, schema, **kw))


def spec_schema(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"spec": {"type": "object", "properties": props}}}


def one(obj: Any, schema: dict[str, Any]) -> tuple[str, str, str]:
    found = check(obj, schema)
    assert len(found) == 1, found
    return found[0]


# -- types ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema_type", "value", "got"),
    [
        ("integer", "string", "string"),
        ("integer", True, "boolean"),
        ("integer", [], "array"),
        ("integer", {}, "object"),
        ("string", 5, "integer"),
        ("string", 2.5, "number"),
        ("boolean", "true", "string"),
        ("object", "x", "string"),
        ("array", {"a": 1}, "object"),
    ],
)
def test_type_mismatch_is_type_invalid_with_upstream_text(schema_type: str, value: Any, got: str) -> None:
    schema = spec_schema(size={"type": schema_type})
    assert one({"spec": {"size": value}}, schema) == (
        "spec.size",
        "FieldValueTypeInvalid",
        f'Invalid value: "{got}": spec.size in body must be of type {schema_type}: "{got}"',
    )


def test_compat_spec_example() -> None:
    schema = spec_schema(size={"type": "integer"})
    [cause] = structural.validate({"spec": {"size": "string"}}, schema)
    text = errors.invalid("Widget", "w", [cause], "example.com").message
    assert text == (
        'Widget.example.com "w" is invalid: spec.size: Invalid value: "string": '
        'spec.size in body must be of type integer: "string"'
    )


def test_numbers_accept_ints_and_integers_accept_integral_floats() -> None:
    schema = spec_schema(n={"type": "number"}, i={"type": "integer"})
    assert check({"spec": {"n": 3, "i": 3.0}}, schema) == []


def test_fractional_float_for_integer_also_fails_the_range_check() -> None:
    # kube-openapi (2026) checks the value against the declared type's range too; that error has no field.
    assert check({"spec": {"i": 1.5}}, spec_schema(i={"type": "integer"})) == [
        (
            "spec.i",
            "FieldValueTypeInvalid",
            'Invalid value: "number": spec.i in body must be of type integer: "number"',
        ),
        (
            "",
            "FieldValueInvalid",
            'Invalid value: "": Checked value must be of type integer (default format) in spec.i',
        ),
    ]


def test_int32_overflow() -> None:
    schema = spec_schema(i={"type": "integer", "format": "int32"})
    assert check({"spec": {"i": 2**31 - 1}}, schema) == []
    assert check({"spec": {"i": 2**31}}, schema) == [
        (
            "",
            "FieldValueInvalid",
            'Invalid value: "": Checked value must be of type integer with format int32 in spec.i',
        )
    ]


def test_format_on_non_string_value_reports_the_format_as_type() -> None:
    schema = spec_schema(i={"type": "integer", "format": "int32"})
    assert check({"spec": {"i": 1.5}}, schema)[0][2] == (
        'Invalid value: "float64": spec.i in body must be of type int32: "float64"'
    )


def test_null_is_a_type_error_unless_nullable() -> None:
    schema = spec_schema(a={"type": "string"}, b={"type": "string", "nullable": True})
    assert check({"spec": {"a": None, "b": None}}, schema) == [
        (
            "spec.a",
            "FieldValueTypeInvalid",
            'Invalid value: "null": spec.a in body must be of type string: "null"',
        )
    ]


def test_int_or_string() -> None:
    schema = spec_schema(port={"x-kubernetes-int-or-string": True})
    assert check({"spec": {"port": 80}}, schema) == []
    assert check({"spec": {"port": "http"}}, schema) == []
    assert one({"spec": {"port": 1.5}}, schema)[2] == (
        'Invalid value: "number": spec.port in body must be of type integer,string: "number"'
    )


def test_int_or_string_with_any_of_reports_like_upstream() -> None:
    schema = spec_schema(
        port={"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    )
    assert check({"spec": {"port": True}}, schema) == [
        (
            "spec.port",
            "FieldValueTypeInvalid",
            'Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"',
        ),
        ("", "FieldValueInvalid", 'Invalid value: "": "spec.port" must validate at least one schema (anyOf)'),
        (
            "spec.port",
            "FieldValueTypeInvalid",
            'Invalid value: "boolean": spec.port in body must be of type integer: "boolean"',
        ),
    ]


# -- objects -------------------------------------------------------------------------------------------------


def test_required() -> None:
    schema = {
        "type": "object",
        "required": ["spec"],
        "properties": {"spec": {"type": "object", "required": ["a", "b"]}},
    }
    assert check({}, schema) == [("spec", "FieldValueRequired", "Required value")]
    assert check({"spec": {"b": 1}}, schema) == [("spec.a", "FieldValueRequired", "Required value")]


def test_additional_properties_schema_uses_dotted_paths() -> None:
    schema = spec_schema(m={"type": "object", "additionalProperties": {"type": "integer"}})
    assert one({"spec": {"m": {"k": "v"}}}, schema) == (
        "spec.m.k",
        "FieldValueTypeInvalid",
        'Invalid value: "string": spec.m.k in body must be of type integer: "string"',
    )


def test_additional_properties_false() -> None:
    schema = spec_schema(
        o={"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    )
    assert one({"spec": {"o": {"a": "x", "b": 1}}}, schema) == (
        "spec.o",
        "FieldValueInvalid",
        'Invalid value: "b": spec.o.b in body is a forbidden property',
    )


def test_min_and_max_properties() -> None:
    schema = spec_schema(o={"type": "object", "minProperties": 2, "maxProperties": 3})
    assert one({"spec": {"o": {"a": 1}}}, schema) == (
        "spec.o",
        "FieldValueInvalid",
        "Invalid value: 1: spec.o in body should have at least 2 properties",
    )
    assert one({"spec": {"o": dict.fromkeys("abcd", 1)}}, schema) == (
        "spec.o",
        "FieldValueTooMany",
        "Too many: 4: must have at most 3 items",
    )


def test_errors_follow_property_order_deterministically() -> None:
    schema = spec_schema(b={"type": "string"}, a={"type": "string"})
    assert [f for f, _, _ in check({"spec": {"b": 1, "a": 1}}, schema)] == ["spec.a", "spec.b"]


# -- enums ---------------------------------------------------------------------------------------------------


def test_enum_strings() -> None:
    schema = spec_schema(mode={"type": "string", "enum": ["a", "b"]})
    assert one({"spec": {"mode": "x"}}, schema) == (
        "spec.mode",
        "FieldValueNotSupported",
        'Unsupported value: "x": supported values: "a", "b"',
    )


def test_enum_non_strings_are_json_then_quoted() -> None:
    schema = spec_schema(n={"type": "integer", "enum": [1, 2]}, o={"type": "object", "enum": [{"a": "<b>"}]})
    assert check({"spec": {"n": 3, "o": {"a": 1}}}, schema) == [
        ("spec.n", "FieldValueNotSupported", 'Unsupported value: 3: supported values: "1", "2"'),
        (
            "spec.o",
            "FieldValueNotSupported",
            'Unsupported value: {"a":1}: supported values: "{\\"a\\":\\"\\\\u003cb\\\\u003e\\"}"',
        ),
    ]


def test_enum_compares_numbers_across_int_and_float() -> None:
    schema = spec_schema(n={"type": "number", "enum": [1, 2.5]})
    assert check({"spec": {"n": 1.0}}, schema) == []
    assert check({"spec": {"n": 2.5}}, schema) == []


def test_enum_rejects_null_even_when_nullable() -> None:
    schema = spec_schema(m={"type": "string", "nullable": True, "enum": ["a"]})
    assert one({"spec": {"m": None}}, schema) == (
        "spec.m",
        "FieldValueNotSupported",
        'Unsupported value: null: supported values: "a"',
    )


# -- numbers -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keywords", "value", "message"),
    [
        ({"minimum": 1}, 0, "Invalid value: 0: spec.n in body should be greater than or equal to 1"),
        (
            {"minimum": 1, "exclusiveMinimum": True},
            1,
            "Invalid value: 1: spec.n in body should be greater than 1",
        ),
        ({"maximum": 10}, 11, "Invalid value: 11: spec.n in body should be less than or equal to 10"),
        (
            {"maximum": 10, "exclusiveMaximum": True},
            10,
            "Invalid value: 10: spec.n in body should be less than 10",
        ),
        ({"multipleOf": 3}, 7, "Invalid value: 7: spec.n in body should be a multiple of 3"),
    ],
)
def test_integer_bounds(keywords: dict[str, Any], value: int, message: str) -> None:
    schema = spec_schema(n={"type": "integer", **keywords})
    assert one({"spec": {"n": value}}, schema) == ("spec.n", "FieldValueInvalid", message)


@pytest.mark.parametrize(
    ("keywords", "value", "message"),
    [
        ({"maximum": 1.5}, 2e6, "Invalid value: 2e+06: spec.n in body should be less than or equal to 1.5"),
        (
            {"minimum": 0.25},
            0.1,
            "Invalid value: 0.1: spec.n in body should be greater than or equal to 0.25",
        ),
        ({"maximum": 100}, 100.5, "Invalid value: 100.5: spec.n in body should be less than or equal to 100"),
        ({"multipleOf": 0.5}, 0.7, "Invalid value: 0.7: spec.n in body should be a multiple of 0.5"),
    ],
)
def test_number_bounds_render_floats_like_go(keywords: dict[str, Any], value: float, message: str) -> None:
    schema = spec_schema(n={"type": "number", **keywords})
    assert one({"spec": {"n": value}}, schema) == ("spec.n", "FieldValueInvalid", message)


def test_float_multiple_of_tolerates_rounding() -> None:
    assert check({"spec": {"n": 0.3}}, spec_schema(n={"type": "number", "multipleOf": 0.1})) == []


# -- strings -------------------------------------------------------------------------------------------------


def test_max_length_counts_characters_and_reports_bytes_like_upstream() -> None:
    schema = spec_schema(s={"type": "string", "maxLength": 3})
    assert check({"spec": {"s": "ééé"}}, schema) == []
    assert one({"spec": {"s": "abcd"}}, schema) == (
        "spec.s",
        "FieldValueTooLong",
        "Too long: may not be more than 3 bytes",
    )
    singular = spec_schema(s={"type": "string", "maxLength": 1})
    assert one({"spec": {"s": "ab"}}, singular)[2] == "Too long: may not be more than 1 byte"


def test_min_length() -> None:
    schema = spec_schema(s={"type": "string", "minLength": 3})
    assert one({"spec": {"s": "ab"}}, schema) == (
        "spec.s",
        "FieldValueInvalid",
        'Invalid value: "ab": spec.s in body should be at least 3 chars long',
    )


def test_pattern() -> None:
    schema = spec_schema(s={"type": "string", "pattern": "^[a-z]+$"})
    assert check({"spec": {"s": "abc"}}, schema) == []
    assert one({"spec": {"s": "ABC"}}, schema) == (
        "spec.s",
        "FieldValueInvalid",
        "Invalid value: \"ABC\": spec.s in body should match '^[a-z]+$'",
    )
    # RE2's $ is end of text: a trailing newline does not sneak through as it would with Python's $.
    assert len(check({"spec": {"s": "abc\n"}}, schema)) == 1


def test_invalid_pattern_is_reported_per_value() -> None:
    [(field, reason, message)] = check(
        {"spec": {"s": "x"}}, spec_schema(s={"type": "string", "pattern": "(a"})
    )
    assert (field, reason) == ("spec.s", "FieldValueInvalid")
    assert message.startswith(
        'Invalid value: "x": spec.s in body should match \'(a, but pattern is invalid: '
    )


def test_string_values_are_go_quoted() -> None:
    schema = spec_schema(s={"type": "string", "minLength": 5})
    assert one({"spec": {"s": 'a"\n\x01'}}, schema)[2] == (
        'Invalid value: "a\\"\\n\\x01": spec.s in body should be at least 5 chars long'
    )


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (r"^\d+$", "123", "١٢٣"),  # RE2 \d is ASCII
        (r"^a\z", "a", "a\n"),
        (r"^(?<x>a)b$", "ab", "b"),
        (r"^[[:alpha:]]+$", "abc", "ab1"),
        (r"^\Qa.b\E$", "a.b", "axb"),
        (r"^\101$", "A", "B"),
        (r"^\x{41}$", "A", "B"),
        (r"^[]a]+$", "]a", "b"),
        (r"^[[&~|]+$", "[&~|", "a"),  # literal in RE2 classes, set-operation syntax to Python
    ],
)
def test_go_regex_translation(pattern: str, good: str, bad: str) -> None:
    schema = spec_schema(s={"type": "string", "pattern": pattern})
    assert check({"spec": {"s": good}}, schema) == []
    assert len(check({"spec": {"s": bad}}, schema)) == 1


@pytest.mark.parametrize("pattern", ["a(?=b)", r"(a)\1", r"\p{L}", "(?>a)", r"a\Z"])
def test_patterns_re2_rejects_are_invalid(pattern: str) -> None:
    [cause] = structural.check_structural(
        {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
    )
    assert cause["field"] == "properties[s].pattern"
    assert cause["message"].startswith(
        f'Invalid value: "{pattern.replace(chr(92), chr(92) * 2)}": must be a valid'
    )


# -- formats -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("date-time", "2024-01-02T03:04:05Z", "2024-01-02 03:04:05"),
        ("date-time", "2024-01-02t03:04:05.123+02:00", "2024-01-02T24:00:00Z"),
        ("date", "2024-02-29", "2023-02-29"),
        ("byte", "aGVsbG8=", "hello!"),
        ("uuid", "123e4567-E89B-12d3-a456-426614174000", "123e4567"),
        ("uuid4", "123e4567-e89b-42d3-a456-426614174000", "123e4567-e89b-12d3-a456-426614174000"),
        ("ipv4", "010.0.0.1", "1.2.3"),
        ("ipv6", "::1", "1.2.3.4"),
        ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
        ("mac", "01:23:45:67:89:ab", "01:23:45:67:89"),
        ("hostname", "example.com", "-bad-.com"),
        ("hexcolor", "#fff", "#ffff"),
        ("k8s-short-name", "abc-1", "Abc"),
        ("k8s-long-name", "a.b-c", "a..b"),
        ("bsonobjectid", "507f1f77bcf86cd799439011", "507f1f77"),
    ],
)
def test_formats(fmt: str, good: str, bad: str) -> None:
    schema = spec_schema(v={"type": "string", "format": fmt})
    assert check({"spec": {"v": good}}, schema) == []
    assert one({"spec": {"v": bad}}, schema) == (
        "spec.v",
        "FieldValueTypeInvalid",
        f'Invalid value: "{bad}": spec.v in body must be of type {fmt}: "{bad}"',
    )


@pytest.mark.parametrize("fmt", ["email", "uri", "duration", "made-up", "int32"])
def test_lenient_and_unsupported_string_formats_accept_anything(fmt: str) -> None:
    assert check({"spec": {"v": "?? not valid ??"}}, spec_schema(v={"type": "string", "format": fmt})) == []


# -- arrays --------------------------------------------------------------------------------------------------


def test_array_items_min_max_unique() -> None:
    schema = spec_schema(
        a={"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3, "uniqueItems": True}
    )
    assert one({"spec": {"a": ["x"]}}, schema) == (
        "spec.a",
        "FieldValueInvalid",
        "Invalid value: 1: spec.a in body should have at least 2 items",
    )
    assert one({"spec": {"a": ["a", "b", "c", "d"]}}, schema) == (
        "spec.a",
        "FieldValueTooMany",
        "Too many: 4: must have at most 3 items",
    )
    assert one({"spec": {"a": ["a", "a"]}}, schema) == (
        "spec.a",
        "FieldValueInvalid",
        'Invalid value: "": spec.a in body shouldn\'t contain duplicates',
    )
    assert one({"spec": {"a": ["a", 1]}}, schema) == (
        "spec.a[1]",
        "FieldValueTypeInvalid",
        'Invalid value: "integer": spec.a[1] in body must be of type string: "integer"',
    )


def test_unique_items_is_type_sensitive() -> None:
    schema = spec_schema(a={"type": "array", "items": {"type": "number"}, "uniqueItems": True})
    assert check({"spec": {"a": [1, 1.0]}}, schema) == []


def test_nested_paths() -> None:
    schema = spec_schema(
        items={
            "type": "array",
            "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
        }
    )
    assert check({"spec": {"items": [{"name": "a"}, {}]}}, schema) == [
        ("spec.items[1].name", "FieldValueRequired", "Required value")
    ]


# -- junctors ------------------------------------------------------------------------------------------------


def test_one_of() -> None:
    schema = spec_schema(v={"type": "integer", "oneOf": [{"minimum": 0}, {"maximum": 10}]})
    assert check({"spec": {"v": 5}}, schema) == [
        (
            "",
            "FieldValueInvalid",
            'Invalid value: "": "spec.v" must validate one and only one schema (oneOf). Found 2 valid alternatives',
        )
    ]
    assert check({"spec": {"v": 20}}, schema) == []


def test_one_of_none_valid_reports_best_branch() -> None:
    schema = spec_schema(v={"type": "integer", "oneOf": [{"minimum": 100}, {"maximum": -100}]})
    assert check({"spec": {"v": 5}}, schema) == [
        (
            "",
            "FieldValueInvalid",
            'Invalid value: "": "spec.v" must validate one and only one schema (oneOf). Found none valid',
        ),
        (
            "spec.v",
            "FieldValueInvalid",
            "Invalid value: 5: spec.v in body should be greater than or equal to 100",
        ),
    ]


def test_all_of() -> None:
    schema = spec_schema(v={"type": "string", "allOf": [{"minLength": 2}, {"maxLength": 3}]})
    assert check({"spec": {"v": "abcd"}}, schema) == [
        ("spec.v", "FieldValueTooLong", "Too long: may not be more than 3 bytes"),
        ("", "FieldValueInvalid", 'Invalid value: "": "spec.v" must validate all the schemas (allOf)'),
    ]
    assert check({"spec": {"v": 1}}, spec_schema(v={"allOf": [{"type": "string"}]}))[1] == (
        "",
        "FieldValueInvalid",
        'Invalid value: "": "spec.v" must validate all the schemas (allOf). None validated',
    )


def test_not() -> None:
    schema = spec_schema(v={"type": "string", "not": {"enum": ["forbidden"]}})
    assert check({"spec": {"v": "forbidden"}}, schema) == [
        ("", "FieldValueInvalid", 'Invalid value: "": "spec.v" must not validate the schema (not)')
    ]


def test_prefix_path_prefixes_fields_not_messages() -> None:
    schema = {"type": "object", "properties": {"replicas": {"type": "integer"}}, "required": ["phase"]}
    assert check({"replicas": "x"}, schema, path="status") == [
        (
            "status.replicas",
            "FieldValueTypeInvalid",
            'Invalid value: "string": replicas in body must be of type integer: "string"',
        ),
        ("status.phase", "FieldValueRequired", "Required value"),
    ]


# -- embedded resources and list types -----------------------------------------------------------------------

EMBEDDED = spec_schema(
    template={
        "type": "object",
        "x-kubernetes-embedded-resource": True,
        "x-kubernetes-preserve-unknown-fields": True,
    }
)


def test_embedded_resource_requires_api_version_and_kind() -> None:
    assert check({"spec": {"template": {"metadata": {"name": "x"}}}}, EMBEDDED) == [
        ("spec.template.apiVersion", "FieldValueRequired", "Required value"),
        ("spec.template.kind", "FieldValueRequired", "Required value"),
    ]
    assert check({"spec": {"template": {"apiVersion": "v1", "kind": "Pod"}}}, EMBEDDED) == []


def test_embedded_resource_type_meta_values() -> None:
    obj = {"spec": {"template": {"apiVersion": "a/b/c", "kind": "Bad_Kind", "metadata": "x"}}}
    assert check(obj, EMBEDDED) == [
        (
            "spec.template.apiVersion",
            "FieldValueInvalid",
            'Invalid value: "a/b/c": unexpected GroupVersion string: a/b/c',
        ),
        (
            "spec.template.kind",
            "FieldValueInvalid",
            'Invalid value: "Bad_Kind": may have mixed case, but should otherwise match: a DNS-1035 label must '
            "consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end "
            "with an alphanumeric character (e.g. 'my-name' or 'abc-123', regex used for validation is "
            "'[a-z]([-a-z0-9]*[a-z0-9])?')",
        ),
        (
            "spec.template.metadata",
            "FieldValueInvalid",
            'Invalid value: "x": json: cannot unmarshal string into Go value of type v1.ObjectMeta',
        ),
    ]


def test_list_type_set() -> None:
    schema = spec_schema(tags={"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"})
    assert check({"spec": {"tags": ["a", "b", "a", "a", "b"]}}, schema) == [
        ("spec.tags[2]", "FieldValueDuplicate", 'Duplicate value: "a"'),
        ("spec.tags[4]", "FieldValueDuplicate", 'Duplicate value: "b"'),
    ]


def test_list_type_map_single_key() -> None:
    schema = spec_schema(
        ports={
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
            },
        }
    )
    obj = {"spec": {"ports": [{"name": "a", "port": 1}, {"name": "a", "port": 2}, {"port": 3}, {"port": 4}]}}
    assert check(obj, schema) == [
        ("spec.ports[1]", "FieldValueDuplicate", 'Duplicate value: {"name":"a"}'),
        ("spec.ports[3]", "FieldValueDuplicate", "Duplicate value: {}"),
    ]


def test_list_type_map_multiple_keys_and_non_objects() -> None:
    items = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    schema = spec_schema(
        l={
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["a", "b"],
            "items": items,
        }
    )
    assert check({"spec": {"l": [{"a": "x", "b": 1}, {"a": "x", "b": 2}, {"b": 1, "a": "x"}]}}, schema) == [
        ("spec.l[2]", "FieldValueDuplicate", 'Duplicate value: {"a":"x","b":1}')
    ]
    map_schema = spec_schema(
        l={"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a"]}
    )
    assert check({"spec": {"l": [{"a": 1}, 5]}}, map_schema) == [
        (
            "spec.l[1]",
            "FieldValueInvalid",
            "Invalid value: 5: must be an object for an array of list-type map",
        )
    ]


def test_list_type_paths_use_keys_for_maps() -> None:
    schema = spec_schema(
        m={
            "type": "object",
            "additionalProperties": {
                "type": "array",
                "items": {"type": "integer"},
                "x-kubernetes-list-type": "set",
            },
        }
    )
    assert check({"spec": {"m": {"k": [1, 1]}}}, schema) == [
        ("spec.m[k][1]", "FieldValueDuplicate", "Duplicate value: 1")
    ]


# -- $ref and components (built-in kinds) --------------------------------------------------------------------

COMPONENTS: dict[str, dict[str, Any]] = {
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"},
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "creationTimestamp": {
                "allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Time"}]
            },
        },
    },
    "io.k8s.api.core.v1.ConfigMap": {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {
                "allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}],
                "default": {},
            },
            "data": {"type": "object", "additionalProperties": {"type": "string"}},
            "immutable": {"type": "boolean"},
            "raw": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.runtime.RawExtension"},
            "tree": {"$ref": "#/components/schemas/Tree"},
        },
    },
    "io.k8s.apimachinery.pkg.runtime.RawExtension": {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    },
    "Tree": {
        "type": "object",
        "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/components/schemas/Tree"}},
        },
    },
}
CONFIGMAP = {"$ref": "#/components/schemas/io.k8s.api.core.v1.ConfigMap"}


def test_ref_and_all_of_resolution_for_validation() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "creationTimestamp": "yesterday", "labels": {"a": 1}},
        "data": {"k": 2},
        "tree": {"value": 1, "children": [{"value": "x"}]},
    }
    assert check(obj, CONFIGMAP, components=COMPONENTS) == [
        (
            "data.k",
            "FieldValueTypeInvalid",
            'Invalid value: "integer": data.k in body must be of type string: "integer"',
        ),
        (
            "metadata.creationTimestamp",
            "FieldValueTypeInvalid",
            'Invalid value: "yesterday": metadata.creationTimestamp in body must be of type date-time: "yesterday"',
        ),
        (
            "metadata.labels.a",
            "FieldValueTypeInvalid",
            'Invalid value: "integer": metadata.labels.a in body must be of type string: "integer"',
        ),
        (
            "tree.children[0].value",
            "FieldValueTypeInvalid",
            'Invalid value: "string": tree.children[0].value in body must be of type integer: "string"',
        ),
    ]


def test_ref_resolution_for_pruning() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "bogus": 1},
        "data": {"k": "v"},
        "raw": {"anything": {"goes": True}},
        "tree": {"value": 1, "children": [{"value": 2, "leaf": True}]},
        "extra": 1,
    }
    assert structural.unknown_fields(obj, CONFIGMAP, components=COMPONENTS) == [
        "metadata.bogus",
        "extra",
        "tree.children[0].leaf",
    ]
    assert structural.prune(obj, CONFIGMAP, components=COMPONENTS) == [
        ".metadata.bogus",
        ".extra",
        ".tree.children[0].leaf",
    ]
    assert obj == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c"},
        "data": {"k": "v"},
        "raw": {"anything": {"goes": True}},
        "tree": {"value": 1, "children": [{"value": 2}]},
    }


def test_unresolvable_ref_is_an_empty_schema() -> None:
    schema = {"type": "object", "properties": {"x": {"$ref": "#/components/schemas/Missing"}}}
    assert check({"x": 1}, schema, components={}) == []


# -- pruning -------------------------------------------------------------------------------------------------

CRD = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {
                "size": {"type": "integer"},
                "free": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}},
                },
                "list": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "loose": {"type": "object", "additionalProperties": True},
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {"spec": {"type": "object", "properties": {"image": {"type": "string"}}}},
                },
                "opt": {"type": "string", "nullable": True},
                "req": {"type": "string"},
                "withDefault": {"type": "string", "default": "d"},
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def test_prune_drops_unknown_fields_and_reports_sorted_paths() -> None:
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "labels": {"a": "b"}, "clusterName": "x"},
        "spec": {
            "size": 1,
            "foo": 1,
            "free": {"anything": [1, 2], "known": {"a": "x", "b": "y"}},
            "list": [{"name": "a", "x": 1}, "scalar"],
            "labels": {"k": "v"},
            "loose": {"k": {"nested": 1}, "s": "kept"},
            "template": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "bogus": 2, "uid": "u", "creationTimestamp": None},
                "spec": {"image": "i", "other": 3},
                "stray": 4,
            },
        },
        "status": {"whatever": {"deep": True}},
        "zzz": True,
    }
    expected = [
        "metadata.clusterName",
        "spec.foo",
        "spec.free.known.b",
        "spec.list[0].x",
        "spec.loose.k.nested",
        "spec.template.spec.other",
        "spec.template.stray",
        "zzz",
        "spec.template.metadata.bogus",
    ]
    assert structural.unknown_fields(copy.deepcopy(obj), CRD) == expected
    assert structural.prune(obj, CRD) == ["." + p for p in expected]
    assert obj == {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "labels": {"a": "b"}},
        "spec": {
            "size": 1,
            "free": {"anything": [1, 2], "known": {"a": "x"}},
            "list": [{"name": "a"}, "scalar"],
            "labels": {"k": "v"},
            "loose": {"k": {}, "s": "kept"},
            "template": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "uid": "u"},
                "spec": {"image": "i"},
            },
        },
        "status": {"whatever": {"deep": True}},
    }


def test_unknown_fields_does_not_mutate() -> None:
    obj = {"spec": {"foo": 1}, "metadata": {"x": 1}}
    before = copy.deepcopy(obj)
    assert structural.unknown_fields(obj, CRD) == ["metadata.x", "spec.foo"]
    assert obj == before


def test_prune_not_at_resource_root_treats_type_meta_as_fields() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    obj = {"a": "x", "kind": "K", "metadata": {}, "b": 1}
    # upstream drops unknown root apiVersion/kind/metadata without listing them
    assert structural.prune(obj, schema, is_resource_root=False) == [".b"]
    assert obj == {"a": "x"}


def test_preserve_unknown_fields_at_root_and_in_array_items() -> None:
    schema = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "spec": {"type": "object", "properties": {"a": {"type": "string"}}},
            "arr": {
                "type": "array",
                "x-kubernetes-preserve-unknown-fields": True,
                "items": {"type": "object", "properties": {"k": {"type": "object", "properties": {}}}},
            },
        },
    }
    obj = {"spec": {"a": "x", "b": 1}, "other": {"x": 1}, "arr": [{"k": {"drop": 1}, "keep": 1}]}
    assert structural.prune(obj, schema) == [".arr[0].k.drop", ".spec.b"]
    assert obj == {"spec": {"a": "x"}, "other": {"x": 1}, "arr": [{"k": {}, "keep": 1}]}


def test_prune_drops_non_nullable_nulls_without_default() -> None:
    obj = {"spec": {"size": None, "opt": None, "req": None, "withDefault": None}}
    assert structural.prune(obj, CRD) == []
    assert obj == {"spec": {"opt": None, "withDefault": None}}


def test_prune_embedded_metadata_null_becomes_empty() -> None:
    obj: dict[str, Any] = {"spec": {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": None}}}
    structural.prune(obj, CRD)
    assert obj["spec"]["template"]["metadata"] == {}


def test_prune_scalar_and_list_roots() -> None:
    assert structural.prune(5, CRD) == []
    lst: list[Any] = [{"a": 1}]
    assert structural.prune(lst, {"type": "array", "items": {"type": "object"}}) == [".[0].a"]
    assert lst == [{}]


# -- defaulting ----------------------------------------------------------------------------------------------


def test_defaults_fill_missing_and_non_nullable_null_properties() -> None:
    schema = spec_schema(
        a={"type": "string", "default": "x"},
        b={"type": "string", "default": "y"},
        c={"type": "string", "nullable": True, "default": "z"},
        d={"type": "integer"},
    )
    obj: dict[str, Any] = {"spec": {"b": None, "c": None}}
    structural.apply_defaults(obj, schema)
    assert obj == {"spec": {"a": "x", "b": "y", "c": None}}


def test_defaults_only_inside_present_objects() -> None:
    schema = spec_schema(a={"type": "string", "default": "x"})
    obj: dict[str, Any] = {}
    structural.apply_defaults(obj, schema)
    assert obj == {}


def test_defaults_are_deep_copied_and_recursively_defaulted() -> None:
    inner = {
        "type": "object",
        "properties": {
            "x": {"type": "integer", "default": 1},
            "l": {"type": "array", "items": {"type": "string"}},
        },
    }
    schema = spec_schema(o={**inner, "default": {"l": ["a"]}})
    first: dict[str, Any] = {"spec": {}}
    second: dict[str, Any] = {"spec": {}}
    structural.apply_defaults(first, schema)
    structural.apply_defaults(second, schema)
    assert first == {"spec": {"o": {"l": ["a"], "x": 1}}}
    first["spec"]["o"]["l"].append("b")
    assert second["spec"]["o"]["l"] == ["a"]
    assert schema["properties"]["spec"]["properties"]["o"]["default"] == {"l": ["a"]}


def test_defaults_in_array_items_and_additional_properties() -> None:
    schema = spec_schema(
        l={
            "type": "array",
            "items": {
                "type": "object",
                "default": {"n": 0},
                "properties": {"n": {"type": "integer"}, "m": {"type": "string", "default": "q"}},
            },
        },
        m={"type": "object", "additionalProperties": {"type": "string", "default": "v"}},
    )
    obj: dict[str, Any] = {"spec": {"l": [None, {"n": 5}], "m": {"k": None, "j": "set"}}}
    structural.apply_defaults(obj, schema)
    assert obj == {"spec": {"l": [{"n": 0, "m": "q"}, {"n": 5, "m": "q"}], "m": {"k": "v", "j": "set"}}}


def test_defaults_are_pruned_unless_preserved() -> None:
    schema = spec_schema(
        o={"type": "object", "properties": {"a": {"type": "string"}}, "default": {"a": "x", "junk": 1}},
        p={"type": "object", "x-kubernetes-preserve-unknown-fields": True, "default": {"anything": 1}},
    )
    obj: dict[str, Any] = {"spec": {}}
    structural.apply_defaults(obj, schema)
    assert obj == {"spec": {"o": {"a": "x"}, "p": {"anything": 1}}}


def test_defaults_then_prune_then_validate_pipeline() -> None:
    obj: dict[str, Any] = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 2, "junk": 1},
    }
    structural.apply_defaults(obj, CRD)
    structural.prune(obj, CRD)
    assert obj["spec"] == {"size": 2, "withDefault": "d"}
    assert structural.validate(obj, CRD) == []


# -- structural checks ---------------------------------------------------------------------------------------

PREFIX = "spec.versions[0].schema.openAPIV3Schema"


def structural_errors(schema: dict[str, Any]) -> list[tuple[str, str, str]]:
    return triples(structural.check_structural(schema, path=PREFIX))


def test_structural_schema_ok() -> None:
    assert structural.check_structural(CRD, path=PREFIX) == []
    int_or_string = {
        "type": "object",
        "properties": {
            "p": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "q": {
                "x-kubernetes-int-or-string": True,
                "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"pattern": "^a"}],
            },
            "r": {"x-kubernetes-preserve-unknown-fields": True},
        },
    }
    assert structural.check_structural(int_or_string) == []


def test_structural_missing_types() -> None:
    schema = {
        "properties": {"a": {"properties": {"b": {"type": "array"}}}, "c": {"type": "array", "items": {}}}
    }
    assert structural_errors(schema) == [
        (
            f"{PREFIX}.properties[a].properties[b].items",
            "FieldValueRequired",
            "Required value: must be specified",
        ),
        (
            f"{PREFIX}.properties[a].type",
            "FieldValueRequired",
            "Required value: must not be empty for specified object fields",
        ),
        (
            f"{PREFIX}.properties[c].items.type",
            "FieldValueRequired",
            "Required value: must not be empty for specified array items",
        ),
        (f"{PREFIX}.type", "FieldValueRequired", "Required value: must not be empty at the root"),
    ]


def test_structural_root_rules() -> None:
    assert structural_errors({"type": "array", "items": {"type": "string"}, "nullable": True}) == [
        (f"{PREFIX}.nullable", "FieldValueForbidden", "Forbidden: nullable cannot be true at the root"),
        (f"{PREFIX}.type", "FieldValueInvalid", 'Invalid value: "array": must be object at the root'),
    ]
    assert structural_errors({"type": "object", "additionalProperties": {"type": "string"}}) == [
        (f"{PREFIX}.additionalProperties", "FieldValueForbidden", "Forbidden: must not be used at the root")
    ]


def test_structural_ref_and_unsupported_keywords() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/definitions/x"},
            "b": {"type": "string", "uniqueItems": True},
            "c": {
                "type": "object",
                "properties": {"x": {"type": "string"}},
                "additionalProperties": {"type": "string"},
            },
            "d": {"type": "null"},
            "e": {"type": "thing"},
        },
    }
    assert structural_errors(schema) == [
        (f"{PREFIX}.properties[a].$ref", "FieldValueForbidden", "Forbidden: $ref is not supported"),
        (
            f"{PREFIX}.properties[a].type",
            "FieldValueRequired",
            "Required value: must not be empty for specified object fields",
        ),
        (
            f"{PREFIX}.properties[b].uniqueItems",
            "FieldValueForbidden",
            "Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ),
        (
            f"{PREFIX}.properties[c].additionalProperties",
            "FieldValueForbidden",
            "Forbidden: additionalProperties and properties are mutual exclusive",
        ),
        (
            f"{PREFIX}.properties[d].type",
            "FieldValueForbidden",
            "Forbidden: type cannot be set to null, use nullable as an alternative",
        ),
        (
            f"{PREFIX}.properties[d].type",
            "FieldValueNotSupported",
            'Unsupported value: "null": supported values: "array", "boolean", "integer", "number", "object", "string"',
        ),
        (
            f"{PREFIX}.properties[e].type",
            "FieldValueNotSupported",
            'Unsupported value: "thing": supported values: "array", "boolean", "integer", "number", "object", "string"',
        ),
    ]


def test_structural_metadata_at_root() -> None:
    ok = {
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}}
        },
    }
    assert structural.check_structural(ok) == []
    bad = {
        "type": "object",
        "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}},
    }
    assert structural_errors(bad) == [
        (
            f"{PREFIX}.properties[metadata]",
            "FieldValueForbidden",
            "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
        )
    ]
    assert structural_errors(
        {"type": "object", "properties": {"metadata": {"type": "string"}, "kind": {"type": "integer"}}}
    ) == [
        (f"{PREFIX}.properties[kind].type", "FieldValueInvalid", 'Invalid value: "integer": must be string'),
        (
            f"{PREFIX}.properties[metadata].type",
            "FieldValueInvalid",
            'Invalid value: "string": must be object',
        ),
    ]


def test_structural_junctors_must_not_carry_structure() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "anyOf": [{"type": "object", "properties": {"a": {"description": "d"}, "metadata": {}, "zz": {}}}],
        "not": {"x-kubernetes-preserve-unknown-fields": True, "additionalProperties": {}},
    }
    assert structural_errors(schema) == [
        (
            f"{PREFIX}.anyOf[0].properties[a].description",
            "FieldValueForbidden",
            "Forbidden: must be empty to be structural",
        ),
        (
            f"{PREFIX}.anyOf[0].properties[metadata]",
            "FieldValueForbidden",
            "Forbidden: must not be specified in a nested context",
        ),
        (f"{PREFIX}.anyOf[0].type", "FieldValueForbidden", "Forbidden: must be empty to be structural"),
        (
            f"{PREFIX}.not.additionalProperties",
            "FieldValueForbidden",
            "Forbidden: must be undefined to be structural",
        ),
        (
            f"{PREFIX}.not.x-kubernetes-preserve-unknown-fields",
            "FieldValueForbidden",
            "Forbidden: must be false to be structural",
        ),
        (
            f"{PREFIX}.properties[metadata]",
            "FieldValueRequired",
            f"Required value: because it is defined in {PREFIX}.anyOf[0].properties[metadata]",
        ),
        (
            f"{PREFIX}.properties[zz]",
            "FieldValueRequired",
            f"Required value: because it is defined in {PREFIX}.anyOf[0].properties[zz]",
        ),
    ]


def test_structural_embedded_and_int_or_string_rules() -> None:
    schema = {
        "type": "object",
        "properties": {
            "e": {"type": "string", "x-kubernetes-embedded-resource": True},
            "f": {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "additionalProperties": {"type": "string"},
            },
            "g": {"x-kubernetes-int-or-string": True, "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    assert structural_errors(schema) == [
        (
            f"{PREFIX}.properties[e].properties",
            "FieldValueRequired",
            "Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ),
        (
            f"{PREFIX}.properties[e].type",
            "FieldValueInvalid",
            'Invalid value: "string": must be object if x-kubernetes-embedded-resource is true',
        ),
        (
            f"{PREFIX}.properties[f].additionalProperties",
            "FieldValueForbidden",
            "Forbidden: must not be used if x-kubernetes-embedded-resource is set",
        ),
        (
            f"{PREFIX}.properties[f].properties",
            "FieldValueRequired",
            "Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ),
        (
            f"{PREFIX}.properties[g].x-kubernetes-preserve-unknown-fields",
            "FieldValueInvalid",
            "Invalid value: true: must be false if x-kubernetes-int-or-string is true",
        ),
    ]


def test_structural_list_type_rules() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "x-kubernetes-list-type": "set"},
            "b": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "bag"},
            "c": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-map-keys": ["k"]},
            "d": {
                "type": "array",
                "items": {"type": "object", "properties": {"k": {"type": "object"}}},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["k", "z"],
            },
        },
    }
    assert structural_errors(schema) == [
        (
            f"{PREFIX}.properties[a].type",
            "FieldValueInvalid",
            'Invalid value: "string": must be array if x-kubernetes-list-type is specified',
        ),
        (
            f"{PREFIX}.properties[b].x-kubernetes-list-type",
            "FieldValueNotSupported",
            'Unsupported value: "bag": supported values: "atomic", "set", "map"',
        ),
        (
            f"{PREFIX}.properties[c].x-kubernetes-list-type",
            "FieldValueRequired",
            "Required value: must be map if x-kubernetes-list-map-keys is non-empty",
        ),
        (
            f"{PREFIX}.properties[d].items.properties[k].type",
            "FieldValueInvalid",
            'Invalid value: "object": must be a scalar type if parent array\'s x-kubernetes-list-type is map',
        ),
        (
            f"{PREFIX}.properties[d].x-kubernetes-list-map-keys",
            "FieldValueInvalid",
            'Invalid value: ["k","z"]: entries must all be names of item properties',
        ),
    ]


# -- strict decoding -----------------------------------------------------------------------------------------


def test_strict_decoding_message() -> None:
    assert structural.strict_decoding_message("Widget", "v1", ["spec.foo"]) == (
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.foo"'
    )
    assert structural.strict_decoding_message("Widget", "v1", ["spec.a", "spec.b"], ["spec.c"]) == (
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: '
        'duplicate field "spec.c", unknown field "spec.a", unknown field "spec.b"'
    )


def test_strict_errors_are_warning_texts_and_go_quoted() -> None:
    assert structural.strict_errors(['spec."q"']) == ['unknown field "spec.\\"q\\""']


def test_strict_decoding_error_is_bad_request() -> None:
    err = structural.strict_decoding_error("Widget", "v1", ["spec.foo"])
    assert (err.code, err.reason) == (400, "BadRequest")
    assert err.message.endswith('strict decoding error: unknown field "spec.foo"')


# -- Go rendering --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.5, "1.5"),
        (100.0, "100"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (1e-05, "1e-05"),
        (-2.5e-7, "-2.5e-07"),
    ],
)
def test_float_rendering_matches_go_v(value: float, text: str) -> None:
    schema = spec_schema(n={"type": "number", "maximum": -1e300})
    message = one({"spec": {"n": value}}, schema)[2]
    assert message.startswith(f"Invalid value: {text}: ")


def test_enum_json_float_rendering() -> None:
    schema = spec_schema(n={"type": "number", "enum": [1e21, 1e-7, 2.0]})
    assert (
        one({"spec": {"n": 3.5}}, schema)[2]
        == 'Unsupported value: 3.5: supported values: "1e+21", "1e-7", "2"'
    )


# -- properties ----------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "spec",
                    "status",
                    "metadata",
                    "size",
                    "name",
                    "tags",
                    "x",
                    "apiVersion",
                    "kind",
                    "free",
                    "list",
                    "template",
                    "labels",
                    "loose",
                    "ports",
                ]
            )
            | st.text(max_size=4),
            children,
            max_size=5,
        )
    ),
    max_leaves=25,
)

REALISTIC: dict[str, Any] = copy.deepcopy(CRD)
REALISTIC["properties"]["spec"]["required"] = ["size"]
REALISTIC["properties"]["spec"]["properties"].update(
    {
        "name": {
            "type": "string",
            "maxLength": 5,
            "minLength": 1,
            "pattern": "^[a-z]+$",
            "format": "k8s-short-name",
        },
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["a", "b"]},
            "x-kubernetes-list-type": "set",
            "maxItems": 3,
        },
        "ports": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "port": {
                        "x-kubernetes-int-or-string": True,
                        "anyOf": [{"type": "integer"}, {"type": "string"}],
                    },
                },
            },
        },
        "ratio": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "multipleOf": 0.25,
            "oneOf": [{"maximum": 0.5}, {"minimum": 0.75}],
        },
        "when": {"type": "string", "format": "date-time", "not": {"enum": ["1970-01-01T00:00:00Z"]}},
    }
)


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_validate_and_prune_never_raise(value: Any) -> None:
    structural.validate(value, REALISTIC)
    structural.validate({"spec": value, "status": value}, REALISTIC)
    structural.unknown_fields(value, REALISTIC)
    structural.prune(copy.deepcopy(value), REALISTIC)
    structural.apply_defaults(copy.deepcopy(value), REALISTIC)


@settings(max_examples=150, deadline=None)
@given(json_values, json_values)
def test_prune_is_idempotent_and_leaves_nothing_unknown(spec: Any, extra: Any) -> None:
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "junk": extra},
        "spec": spec,
        "extra": extra,
    }
    reported = structural.unknown_fields(obj, REALISTIC)
    pruned = copy.deepcopy(obj)
    assert structural.prune(pruned, REALISTIC) == ["." + p for p in reported]
    assert structural.unknown_fields(pruned, REALISTIC) == []
    again = copy.deepcopy(pruned)
    assert structural.prune(again, REALISTIC) == []
    assert again == pruned


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_causes_are_well_formed(value: Any) -> None:
    for cause in structural.validate({"spec": value}, REALISTIC):
        assert set(cause) == {"reason", "message", "field"}
        assert re.fullmatch(r"FieldValue[A-Za-z]+", cause["reason"])


# -- the clean-shape memo of prune ------------------------------------------------------------------------

_other_scalars = st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=3)


def _rescalar(value: Any, data: st.DataObject) -> Any:
    """``value`` with every non-null scalar replaced by an arbitrary one: the same shape, other values."""
    if isinstance(value, dict):
        return {k: _rescalar(v, data) for k, v in value.items()}
    if isinstance(value, list):
        return [_rescalar(v, data) for v in value]
    return None if value is None else data.draw(_other_scalars)


def _prune_fresh(obj: Any, schema: Any, **kwargs: Any) -> tuple[list[str], Any]:
    structural._CLEAN_SHAPES.clear()
    pruned = copy.deepcopy(obj)
    return structural.prune(pruned, schema, **kwargs), pruned


def _without_embedded(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_embedded(v) for k, v in schema.items() if k != "x-kubernetes-embedded-resource"}
    if isinstance(schema, list):
        return [_without_embedded(v) for v in schema]
    return schema


_POD_SCHEMA = openapi.load_builtin().schemas["io.k8s.api.core.v1.Pod"]
_PLAIN = _without_embedded(REALISTIC)  # embedded resources keep the memo out of the way


def test_the_memo_schemas_have_no_embedded_resources() -> None:
    """Otherwise the memo tests below would test nothing."""
    assert not structural._has_embedded(structural._context(None), _PLAIN)
    builtin = openapi.load_builtin().schemas
    assert not structural._has_embedded(structural._context(builtin), _POD_SCHEMA)
    assert structural._has_embedded(structural._context(None), REALISTIC)


@settings(max_examples=200, deadline=None)
@given(json_values, json_values, st.data())
def test_prune_memo_gives_the_general_answer(spec: Any, extra: Any, data: st.DataObject) -> None:
    """An object whose shape an earlier one pruned cleanly gets the general algorithm's answer: the
    memo is exact for any other scalar values (custom schema and a built-in kind with components)."""
    for schema, kwargs in ((_PLAIN, {}), (_POD_SCHEMA, {"components": openapi.load_builtin().schemas})):
        first = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"}, "spec": spec, "x": extra}
        if data.draw(st.booleans()):
            first.pop("x")
        second = _rescalar(first, data)
        expected = _prune_fresh(second, schema, **kwargs)
        structural._CLEAN_SHAPES.clear()
        structural.prune(copy.deepcopy(first), schema, **kwargs)
        answered = copy.deepcopy(second)
        assert (structural.prune(answered, schema, **kwargs), answered) == expected


def test_prune_memo_remembers_only_clean_shapes() -> None:
    """A shape that pruned something is walked again next time; a clean one is remembered."""
    structural._CLEAN_SHAPES.clear()
    dirty = {"apiVersion": "v1", "kind": "W", "metadata": {"name": "a"}, "spec": {"size": 1, "bogus": 2}}
    assert structural.prune(copy.deepcopy(dirty), _PLAIN) == [".spec.bogus"]
    assert structural._CLEAN_SHAPES == {}
    assert structural.prune(copy.deepcopy(dirty), _PLAIN) == [".spec.bogus"]
    clean = {"apiVersion": "v1", "kind": "W", "metadata": {"name": "a"}, "spec": {"size": 1}}
    assert structural.prune(copy.deepcopy(clean), _PLAIN) == []
    assert len(structural._CLEAN_SHAPES) == 1
    other = {"apiVersion": "v1", "kind": "W", "metadata": {"name": "b"}, "spec": {"size": 7}}
    assert structural.prune(other, _PLAIN) == []
    assert len(structural._CLEAN_SHAPES) == 1

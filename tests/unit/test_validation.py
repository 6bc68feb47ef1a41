"""Name and metadata validation with upstream wording (apimachinery util/validation, api/validation)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vplane.kube import errors, validation

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
NAME_PART_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


# --- string formats -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["a", "ab", "abc", "a1", "a-1", "a--1--2--b", "0", "01", "a.a", "1.2.3.4", "a" * 253, "a.b-c.d"]
)
def test_dns1123_subdomain_valid(value: str) -> None:
    assert validation.dns1123_subdomain(value) == []


@pytest.mark.parametrize(
    "value", ["", "A", "ABC", "aBc", "A1", "a_1", "a..a", "-1", "a-", ".a", "a.", "a$b", "a b", "a\n", "é"]
)
def test_dns1123_subdomain_invalid(value: str) -> None:
    assert validation.dns1123_subdomain(value) == [SUBDOMAIN_MSG]


def test_dns1123_subdomain_too_long() -> None:
    assert validation.dns1123_subdomain("a" * 254) == ["must be no more than 253 bytes"]
    assert validation.dns1123_subdomain("-" * 254) == ["must be no more than 253 bytes", SUBDOMAIN_MSG]


def test_dns1123_label() -> None:
    assert validation.dns1123_label("my-name") == []
    assert validation.dns1123_label("a" * 63) == []
    assert validation.dns1123_label("a" * 64) == ["must be no more than 63 bytes"]
    assert validation.dns1123_label("a.b") == ["must not contain dots"]
    assert validation.dns1123_label("A") == [LABEL_MSG]
    assert validation.dns1123_label("") == [LABEL_MSG]


def test_dns1035_label() -> None:
    assert validation.dns1035_label("a-1") == []
    assert validation.dns1035_label("1a") == [DNS1035_MSG]
    assert validation.dns1035_label("a" * 64) == ["must be no more than 63 bytes"]


@pytest.mark.parametrize(
    "value",
    ["simple", "now-with-dashes", "1-starts-with-num", "1234", "simple/simple", "now-with-dashes/simple",
     "now-with-dashes/now-with-dashes", "now.with.dots/simple", "now-with.dashes-and.dots/simple",
     "1-num.2-num/3-num", "1234/5678", "1.2.3.4/5678", "Uppercase_Is_OK_123", "example.com/Uppercase_Is_OK_123",
     "requests.storage-foo", "a" * 63, "a" * 253 + "/" + "b" * 63],
)  # fmt: skip
def test_qualified_name_valid(value: str) -> None:
    assert validation.qualified_name(value) == []


def test_qualified_name_invalid() -> None:
    assert validation.qualified_name("nospecialchars%^=@") == [NAME_PART_MSG]
    assert validation.qualified_name("") == ["name part must be non-empty", NAME_PART_MSG]
    assert validation.qualified_name("/simple") == ["prefix part must be non-empty"]
    assert validation.qualified_name("Example.com/x") == ["prefix part " + SUBDOMAIN_MSG]
    assert validation.qualified_name("a" * 254 + "/x") == ["prefix part must be no more than 253 bytes"]
    assert validation.qualified_name("x/") == ["name part must be non-empty", NAME_PART_MSG]
    assert validation.qualified_name("a" * 64) == ["name part must be no more than 63 bytes"]
    assert validation.qualified_name("a/b/c") == [
        "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
        "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
        "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix "
        "and '/' (e.g. 'example.com/MyName')"
    ]


def test_label_value() -> None:
    for good in ["", "simple", "now-with-dashes", "1-starts-with-num", "end-with-num-1", "1234", "a" * 63,
                 "Uppercase_And.Dots"]:  # fmt: skip
        assert validation.label_value(good) == [], good
    assert validation.label_value("nospecialchars%^=@") == [VALUE_MSG]
    assert validation.label_value("-a") == [VALUE_MSG]
    assert validation.label_value("a" * 64) == ["must be no more than 63 bytes"]
    # Lengths are in bytes, like Go's len().
    assert validation.label_value("é" * 32) == ["must be no more than 63 bytes", VALUE_MSG]


def test_path_segment_name() -> None:
    assert validation.path_segment_name("system:admin") == []
    assert validation.path_segment_name("") == []
    assert validation.path_segment_name(".") == ["may not be '.'"]
    assert validation.path_segment_name("..") == ["may not be '..'"]
    assert validation.path_segment_name("a/b") == ["may not contain '/'"]
    assert validation.path_segment_name("a%b/") == ["may not contain '/'", "may not contain '%'"]
    assert validation.path_segment_prefix("..") == []


def test_message_helpers() -> None:
    assert validation.max_len_error(5) == "must be no more than 5 bytes"
    assert validation.regex_error("bad", "x+") == "bad (regex used for validation is 'x+')"
    assert (
        validation.regex_error("bad", "x+", "x", "xx")
        == "bad (e.g. 'x',  or 'xx', regex used for validation is 'x+')"
    )
    assert validation.go_quote('a"b\\c\n\t\x00\x7fé\u2028') == '"a\\"b\\\\c\\n\\t\\x00\\x7fé\\u2028"'


@given(st.text(max_size=30))
@settings(max_examples=200, deadline=None)
def test_validators_return_lists_of_strings(value: str) -> None:
    for check in (
        validation.dns1123_subdomain,
        validation.dns1123_label,
        validation.dns1035_label,
        validation.qualified_name,
        validation.label_value,
        validation.path_segment_name,
    ):
        result = check(value)
        assert isinstance(result, list) and all(isinstance(m, str) for m in result)


# --- object metadata ------------------------------------------------------------------------------------


def messages(causes: list[errors.Cause]) -> list[str]:
    return [f"{c.get('field')}: {c.get('message')}" for c in causes]


def test_valid_meta() -> None:
    meta: dict[str, Any] = {
        "name": "web-1",
        "namespace": "default",
        "labels": {"app": "web", "example.com/tier": ""},
        "annotations": {"Example.COM/Note": "anything at all"},
        "finalizers": ["example.com/cleanup", "kubernetes"],
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1", "controller": True},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u2", "controller": False},
        ],
        "generation": 3,
    }
    assert validation.validate_object_meta(meta, namespaced=True) == []


def test_name_required() -> None:
    causes = validation.validate_object_meta({}, namespaced=False)
    assert causes == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value: name or generateName is required",
            "field": "metadata.name",
        }
    ]
    # generateName alone is enough: the name is generated later.
    assert validation.validate_object_meta({"generateName": "web-"}, namespaced=False) == []


def test_invalid_name_matches_upstream_invalid_message() -> None:
    causes = validation.validate_object_meta({"name": "Bad_Name", "namespace": "default"}, namespaced=True)
    assert causes == [errors.field_invalid("metadata.name", "Bad_Name", SUBDOMAIN_MSG)]
    err = errors.invalid("ConfigMap", "Bad_Name", causes)
    assert (
        err.message
        == f'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": {SUBDOMAIN_MSG}'
    )


def test_generate_name() -> None:
    # A trailing dash is masked before checking, as upstream (including its two-character quirk).
    assert validation.validate_object_meta({"generateName": "a-"}, namespaced=False) == []
    assert messages(validation.validate_object_meta({"generateName": "Web-"}, namespaced=False)) == [
        f'metadata.generateName: Invalid value: "Web-": {SUBDOMAIN_MSG}'
    ]
    both = validation.validate_object_meta({"generateName": "x_", "name": "x_abcde"}, namespaced=False)
    assert [c["field"] for c in both] == ["metadata.generateName", "metadata.name"]
    # Path-segment kinds check a generateName as a prefix, so '..' is fine there.
    assert (
        validation.validate_object_meta(
            {"generateName": ".."}, namespaced=False, name_validator=validation.path_segment_name
        )
        == []
    )
    assert messages(
        validation.validate_object_meta(
            {"generateName": "a/"}, namespaced=False, name_validator=validation.path_segment_name
        )
    ) == ["metadata.generateName: Invalid value: \"a/\": may not contain '/'"]


def test_name_validators() -> None:
    rbac = {"name": "system:controller:foo"}
    assert (
        validation.validate_object_meta(rbac, namespaced=False, name_validator=validation.path_segment_name)
        == []
    )
    assert messages(
        validation.validate_object_meta(
            {"name": ".."}, namespaced=False, name_validator=validation.path_segment_name
        )
    ) == ["metadata.name: Invalid value: \"..\": may not be '..'"]
    assert messages(
        validation.validate_object_meta(
            {"name": "a.b"}, namespaced=False, name_validator=validation.dns1123_label
        )
    ) == ['metadata.name: Invalid value: "a.b": must not contain dots']


def test_namespace_rules() -> None:
    assert messages(validation.validate_object_meta({"name": "a"}, namespaced=True)) == [
        "metadata.namespace: Required value"
    ]
    assert messages(validation.validate_object_meta({"name": "a", "namespace": "x"}, namespaced=False)) == [
        "metadata.namespace: Forbidden: not allowed on this type"
    ]
    assert messages(validation.validate_object_meta({"name": "a", "namespace": "a.b"}, namespaced=True)) == [
        'metadata.namespace: Invalid value: "a.b": must not contain dots'
    ]


def test_labels_and_annotations() -> None:
    meta = {
        "name": "a",
        "labels": {"-bad": "ok", "good": "not ok"},
        "annotations": {"UPPER/Case": "v", "bad key": "v"},
    }
    assert messages(validation.validate_object_meta(meta, namespaced=False)) == [
        f'metadata.labels: Invalid value: "-bad": {NAME_PART_MSG}',
        f'metadata.labels: Invalid value: "not ok": {VALUE_MSG}',
        f'metadata.annotations: Invalid value: "bad key": {NAME_PART_MSG}',
    ]


def test_annotation_size_limit() -> None:
    limit = validation.TOTAL_ANNOTATION_SIZE_LIMIT
    assert limit == 262144
    at_limit = {"name": "a", "annotations": {"k": "v" * (limit - 1)}}
    assert validation.validate_object_meta(at_limit, namespaced=False) == []
    over = {"name": "a", "annotations": {"k": "v" * limit}}
    assert validation.validate_object_meta(over, namespaced=False) == [
        {
            "reason": "FieldValueTooLong",
            "message": "Too long: may not be more than 262144 bytes",
            "field": "metadata.annotations",
        }
    ]
    # Bytes, not characters.
    multibyte = {"name": "a", "annotations": {"k": "é" * (limit // 2)}}
    assert [c["reason"] for c in validation.validate_object_meta(multibyte, namespaced=False)] == [
        "FieldValueTooLong"
    ]


def test_finalizers() -> None:
    meta = {"name": "a", "finalizers": ["orphan", "foregroundDeletion", "bad name"]}
    assert messages(validation.validate_object_meta(meta, namespaced=False)) == [
        f'metadata.finalizers: Invalid value: "bad name": {NAME_PART_MSG}',
        'metadata.finalizers: Invalid value: ["orphan","foregroundDeletion","bad name"]: '
        "finalizer orphan and foregroundDeletion cannot be both set",
    ]


def test_owner_references() -> None:
    meta = {
        "name": "a",
        "ownerReferences": [
            {},
            {"apiVersion": "a/b/c", "kind": "K", "name": "n", "uid": "u"},
            {"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "u"},
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d1", "uid": "1", "controller": True},
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d2", "uid": "2", "controller": True},
        ],
    }
    got = messages(validation.validate_object_meta(meta, namespaced=False))
    assert got[:6] == [
        'metadata.ownerReferences.apiVersion: Invalid value: "": version must not be empty',
        'metadata.ownerReferences.kind: Invalid value: "": must not be empty',
        'metadata.ownerReferences.name: Invalid value: "": must not be empty',
        'metadata.ownerReferences.uid: Invalid value: "": must not be empty',
        'metadata.ownerReferences.apiVersion: Invalid value: "a/b/c": version must not be empty',
        'metadata.ownerReferences: Invalid value: {"apiVersion":"v1","kind":"Event","name":"e","uid":"u"}: '
        "/v1, Kind=Event is disallowed from being an owner",
    ]
    assert len(got) == 7
    assert got[6].startswith('metadata.ownerReferences: Invalid value: [{"apiVersion":"","kind":""')
    assert got[6].endswith(
        'Only one reference can have Controller set to true. Found "true" in references for '
        "Deployment/d1 and Deployment/d2"
    )


def test_generation_must_not_be_negative() -> None:
    assert messages(validation.validate_object_meta({"name": "a", "generation": -1}, namespaced=False)) == [
        "metadata.generation: Invalid value: -1: must be greater than or equal to 0"
    ]


def test_field_prefix() -> None:
    causes = validation.validate_object_meta({}, namespaced=True, field_prefix="spec.template.metadata")
    assert [c["field"] for c in causes] == ["spec.template.metadata.name", "spec.template.metadata.namespace"]


def test_wrong_types_are_causes_not_crashes() -> None:
    meta: dict[str, Any] = {
        "name": 5,
        "namespace": ["x"],
        "labels": {"a": 1},
        "annotations": "nope",
        "finalizers": "nope",
        "ownerReferences": ["nope", {"apiVersion": "v1", "kind": 3, "name": "n", "uid": "u"}],
    }
    causes = validation.validate_object_meta(meta, namespaced=True)
    assert all(c["reason"] in ("FieldValueTypeInvalid", "FieldValueInvalid") for c in causes)
    assert {c["field"] for c in causes} >= {
        "metadata.name",
        "metadata.namespace",
        "metadata.labels",
        "metadata.annotations",
        "metadata.finalizers",
        "metadata.ownerReferences",
        "metadata.ownerReferences.kind",
    }
    assert validation.validate_labels(["a"], "x") == [
        errors.field_type_invalid("x", ["a"], "must be of type object")
    ]
    assert validation.validate_owner_references({}, "o")[0]["reason"] == "FieldValueTypeInvalid"
    assert validation.validate_finalizers([1], "f")[0]["reason"] == "FieldValueTypeInvalid"
    assert validation.validate_annotations({"a": 1}, "a")[0]["reason"] == "FieldValueTypeInvalid"


def test_label_selector_validation() -> None:
    assert validation.validate_label_selector(None, "spec.selector") == []
    assert validation.validate_label_selector({"matchLabels": {"a": "b"}}, "spec.selector") == []
    bad = {
        "matchLabels": {"a": "-"},
        "matchExpressions": [
            {"key": "k", "operator": "In"},
            {"key": "k", "operator": "Exists", "values": ["v"]},
            {"key": "-k", "operator": "Gt", "values": ["_"]},
            "junk",
            {"key": 1, "operator": "In", "values": [2]},
        ],
    }
    assert messages(validation.validate_label_selector(bad, "spec.selector")) == [
        f'spec.selector.matchLabels: Invalid value: "-": {VALUE_MSG}',
        "spec.selector.matchExpressions[0].values: Required value: "
        "must be specified when `operator` is 'In' or 'NotIn'",
        "spec.selector.matchExpressions[1].values: Forbidden: "
        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        'spec.selector.matchExpressions[2].operator: Invalid value: "Gt": not a valid selector operator',
        f'spec.selector.matchExpressions[2].key: Invalid value: "-k": {NAME_PART_MSG}',
        f'spec.selector.matchExpressions[2].values[0]: Invalid value: "_": {VALUE_MSG}',
        'spec.selector.matchExpressions[3]: Invalid value: "junk": must be of type object',
        "spec.selector.matchExpressions[4].key: Invalid value: 1: must be of type string",
        "spec.selector.matchExpressions[4].values[0]: Invalid value: 2: must be of type string",
    ]
    assert validation.validate_label_selector("x", "s")[0]["reason"] == "FieldValueTypeInvalid"
    assert (
        validation.validate_label_selector({"matchExpressions": {}}, "s")[0]["field"] == "s.matchExpressions"
    )

"""JSON patch, JSON merge patch, and the properties every patch engine must keep."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vplane.kube.errors import StatusError
from vplane.kube.patch import (
    CUSTOM_RESOURCE_PATCH_TYPES,
    MAX_JSON_PATCH_OPERATIONS,
    PATCH_TYPES,
    apply_json_patch,
    apply_merge_patch,
    apply_merge_patch_to_object,
    apply_strategic_merge_patch,
)

GENERIC_422 = "the server rejected our request due to an error in our request"


def test_patch_types_in_upstream_order() -> None:
    assert PATCH_TYPES == (
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    )
    # the 415 text kubectl prints for `kubectl patch` on a custom resource
    assert ", ".join(CUSTOM_RESOURCE_PATCH_TYPES) == (
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


# -- merge patch ----------------------------------------------------------------------------------------------

# RFC 7386 appendix A, verbatim
RFC7386_EXAMPLES: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("original", "patch", "expected"), RFC7386_EXAMPLES)
def test_merge_patch_rfc7386_examples(original: Any, patch: Any, expected: Any) -> None:
    assert apply_merge_patch(original, patch) == expected


def test_merge_patch_does_not_modify_inputs() -> None:
    original = {"metadata": {"labels": {"a": "1"}}, "data": {"x": "1"}}
    patch = {"metadata": {"labels": {"b": "2", "a": None}}, "data": {"y": {"z": 1}}}
    before = copy.deepcopy((original, patch))
    result = apply_merge_patch(original, patch)
    assert (original, patch) == before
    result["data"]["y"]["z"] = 2
    assert patch["data"]["y"]["z"] == 1  # type: ignore[index]


def test_merge_patch_to_object_errors_like_upstream() -> None:
    assert apply_merge_patch_to_object({"a": 1}, {"b": 2}) == {"a": 1, "b": 2}
    for patch in (None, "x", 5, True):
        with pytest.raises(StatusError) as err:
            apply_merge_patch_to_object({"a": 1}, patch)
        assert (err.value.code, err.value.reason, err.value.message) == (
            400,
            "BadRequest",
            "Invalid JSON Patch",
        )
    with pytest.raises(StatusError) as err:
        apply_merge_patch_to_object({"a": 1}, [1])
    assert err.value.code == 422
    assert err.value.reason == "Invalid"
    assert err.value.details is not None
    assert err.value.details["causes"][0]["field"] == "patch"


# -- JSON patch -------------------------------------------------------------------------------------------------


def test_json_patch_operations() -> None:
    original = {"metadata": {"labels": {"a": "1"}}, "spec": {"items": [1, 2, 3]}}
    patch = [
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "add", "path": "/metadata/labels/b", "value": "2"},
        {"op": "remove", "path": "/spec/items/0"},
        {"op": "replace", "path": "/spec/items/0", "value": 20},
        {"op": "add", "path": "/spec/items/-", "value": 4},
        {"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/c"},
        {"op": "move", "from": "/metadata/labels/c", "path": "/metadata/labels/~1d"},
    ]
    result = apply_json_patch(original, patch)
    assert result == {
        "metadata": {"labels": {"a": "1", "b": "2", "/d": "1"}},
        "spec": {"items": [20, 3, 4]},
    }
    assert original == {"metadata": {"labels": {"a": "1"}}, "spec": {"items": [1, 2, 3]}}


@pytest.mark.parametrize(
    "patch",
    [
        [{"op": "test", "path": "/a", "value": 2}],
        [{"op": "test", "path": "/a", "value": True}],  # JSON types: 1 is not true
        [{"op": "test", "path": "/missing", "value": None}],
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "add", "path": "/x/y", "value": 1}],
        [{"op": "frobnicate", "path": "/a"}],
        [{"path": "/a"}],
        [{"op": "add", "value": 1}],
        [{"op": "add", "path": 5, "value": 1}],
        [{"op": "move", "from": "/missing", "path": "/b"}],
        [{"op": "add", "path": "/a"}],
    ],
)
def test_json_patch_failing_operation_is_422(patch: list[Any]) -> None:
    with pytest.raises(StatusError) as err:
        apply_json_patch({"a": 1}, patch)
    assert (err.value.code, err.value.reason, err.value.message) == (422, "Invalid", GENERIC_422)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"op": "add"}, "json: cannot unmarshal object into Go value of type jsonpatch.Patch"),
        ("x", "json: cannot unmarshal string into Go value of type jsonpatch.Patch"),
        (None, "json: cannot unmarshal null into Go value of type jsonpatch.Patch"),
        ([1], "json: cannot unmarshal number into Go value of type jsonpatch.Operation"),
    ],
)
def test_json_patch_malformed_document_is_400(patch: Any, message: str) -> None:
    with pytest.raises(StatusError) as err:
        apply_json_patch({"a": 1}, patch)
    assert (err.value.code, err.value.reason, err.value.message) == (400, "BadRequest", message)


def test_json_patch_operation_limit() -> None:
    patch = [{"op": "test", "path": "/a", "value": 1}] * (MAX_JSON_PATCH_OPERATIONS + 1)
    with pytest.raises(StatusError) as err:
        apply_json_patch({"a": 1}, patch)
    assert err.value.code == 413
    assert err.value.message == "The allowed maximum operations in a JSON patch is 10000, got 10001"


def test_json_patch_replacing_the_object_with_a_non_object_is_invalid() -> None:
    with pytest.raises(StatusError) as err:
        apply_json_patch({"a": 1}, [{"op": "replace", "path": "", "value": [1]}])
    assert err.value.code == 422
    assert err.value.reason == "Invalid"
    assert err.value.details is not None
    assert err.value.details["causes"][0]["field"] == "patch"


def test_empty_json_patch_is_a_copy() -> None:
    original = {"a": {"b": 1}}
    result = apply_json_patch(original, [])
    assert result == original
    assert result is not original


# -- properties -------------------------------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "metadata", "spec", "name", "0", "-", "~"])
SCALARS = (
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-2, 2, allow_nan=False) | st.text(max_size=3)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)
OBJECTS = st.dictionaries(KEYS, JSON, max_size=5)

# null only as an object member: inside arrays RFC 7386 and strategic merge patch differ by design
NULL_FREE = st.recursive(
    st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)
PATCH_VALUES = st.recursive(
    st.none() | NULL_FREE,
    lambda inner: st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
MAP_PATCHES = st.dictionaries(KEYS, PATCH_VALUES, max_size=5)

POINTERS = st.lists(KEYS | st.integers(0, 3).map(str), max_size=3).map(
    lambda parts: "".join("/" + p for p in parts)
)
JSON_PATCH_OPS = st.fixed_dictionaries(
    {"op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "bogus"]), "path": POINTERS},
    optional={"value": JSON, "from": POINTERS},
)

PROPERTY_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(original=OBJECTS, patch=JSON)
def test_merge_patch_is_idempotent(original: dict[str, Any], patch: Any) -> None:
    once = apply_merge_patch(original, patch)
    assert apply_merge_patch(once, patch) == once


@PROPERTY_SETTINGS
@given(original=OBJECTS, patch=MAP_PATCHES)
def test_strategic_merge_without_schema_equals_merge_patch_on_maps(
    original: dict[str, Any], patch: dict[str, Any]
) -> None:
    assert apply_strategic_merge_patch(original, patch, None) == apply_merge_patch(original, patch)


@PROPERTY_SETTINGS
@given(original=OBJECTS, patch=JSON)
def test_engines_fail_only_with_status_errors(original: dict[str, Any], patch: Any) -> None:
    before = copy.deepcopy((original, patch))
    for engine in (
        lambda: apply_merge_patch_to_object(original, patch),
        lambda: apply_strategic_merge_patch(original, patch, None),
        lambda: apply_json_patch(original, patch),
    ):
        try:
            result = engine()
        except StatusError:
            continue
        assert isinstance(result, dict)
    assert (original, patch) == before


@PROPERTY_SETTINGS
@given(original=OBJECTS, patch=st.lists(JSON_PATCH_OPS, max_size=4))
def test_json_patch_fails_only_with_status_errors(original: dict[str, Any], patch: list[Any]) -> None:
    before = copy.deepcopy(original)
    try:
        result = apply_json_patch(original, patch)
    except StatusError as err:
        assert err.code in (400, 422)
    else:
        assert isinstance(result, dict)
    assert original == before


def test_deep_nesting_is_a_status_error() -> None:
    deep: Any = {}
    for _ in range(5000):
        deep = {"a": deep}
    for engine in (
        lambda: apply_merge_patch({}, deep),
        lambda: apply_strategic_merge_patch({}, deep, None),
    ):
        with pytest.raises(StatusError):
            engine()


def test_results_share_nothing_with_the_original() -> None:
    original = {"metadata": {"labels": {"a": "1"}}, "spec": {"x": [1]}}
    for result in (
        apply_merge_patch(original, {"data": "x"}),
        apply_strategic_merge_patch(original, {"data": "x"}, None),
        apply_json_patch(original, [{"op": "add", "path": "/data", "value": "x"}]),
    ):
        result["metadata"]["labels"]["a"] = "changed"
        result["spec"]["x"].append(2)
    assert original == {"metadata": {"labels": {"a": "1"}}, "spec": {"x": [1]}}

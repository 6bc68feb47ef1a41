"""Request body decoding limits (``apiserver.codec``), ``timeoutSeconds`` parsing and review kinds decoded
into their schema: pure functions, no server."""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vplane.apiserver import codec
from vplane.apiserver.context import RequestContext, UserInfo
from vplane.apiserver.handlers import _timeout_param
from vplane.apiserver.reviews import decode_into_schema
from vplane.kube import errors
from vplane.kube.requestinfo import RequestInfo

YAML = "application/yaml"


def refused(body: bytes, content_type: str = YAML, **kwargs: Any) -> errors.StatusError:
    with pytest.raises(errors.StatusError) as info:
        codec.decode_body(body, content_type, **kwargs)
    return info.value


def nested_list(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def alias_bomb(levels: int = 9, width: int = 9) -> bytes:
    lines = ["a0: &a0 [" + ",".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines).encode()


# -- the encoder's depth ---------------------------------------------------------------------------------


def test_orjson_writes_254_levels_and_no_more() -> None:
    """The limits derive from this: if orjson changes it, ENCODER_MAX_DEPTH must follow."""
    value: Any = []
    for _ in range(codec.ENCODER_MAX_DEPTH - 1):
        value = [value]
    orjson.dumps(value)
    with pytest.raises(orjson.JSONEncodeError, match="Recursion limit reached"):
        orjson.dumps([value])
    assert codec.MAX_DEPTH == codec.ENCODER_MAX_DEPTH - codec.RESPONSE_HEADROOM == 246


# -- YAML aliases ----------------------------------------------------------------------------------------


def test_alias_is_refused_with_its_line() -> None:
    err = refused(b"a: &x [1]\nb: *x\n")
    assert (err.code, err.reason) == (400, "BadRequest")
    assert err.message == "yaml: line 2: aliases are not supported (found *x); write the value out in full"


def test_merge_key_is_an_alias_too() -> None:
    assert "found *base" in refused(b"base: &base {a: 1}\nc:\n  <<: *base\n").message


def test_alias_bomb_builds_nothing() -> None:
    """Refused while reading parser events: the 9 x 9 bomb (387 million strings expanded) costs a few
    kilobytes, not gigabytes."""
    body = alias_bomb()
    tracemalloc.start()
    try:
        err = refused(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "found *a0" in err.message
    assert peak < 256 * 1024, peak


def test_anchors_alone_and_stars_in_strings_are_accepted() -> None:
    value, _ = codec.decode_body(b"a: &x {k: 'v*'}\nb: '*not an alias'\nc: [\"*\"]\n", YAML)
    assert value == {"a": {"k": "v*"}, "b": "*not an alias", "c": ["*"]}


def test_apply_patch_bodies_are_yaml() -> None:
    err = refused(b"a: &x 1\nb: *x\n", codec.APPLY_PATCH, allowed=(codec.APPLY_PATCH,))
    assert "aliases are not supported" in err.message


def test_malformed_yaml_with_a_star_is_still_a_parse_error() -> None:
    assert refused(b"a: b: c\nd: *x\n").message.startswith("yaml parse error: ")


# -- YAML values as JSON ---------------------------------------------------------------------------------


def test_yaml_timestamps_stay_strings_and_keys_become_strings() -> None:
    value, _ = codec.decode_body(b"day: 2024-01-01\nat: 2001-12-14t21:59:43.10-05:00\n7: x\nnull: y\n", YAML)
    assert value == {"day": "2024-01-01", "at": "2001-12-14t21:59:43.10-05:00", "7": "x", "null": "y"}


@pytest.mark.parametrize(
    "body", [b"a: !!binary aGVsbG8=\n", b"a: !!set {x, y}\n", b"a: 99999999999999999999999\n"]
)
def test_yaml_values_json_cannot_hold_are_400(body: bytes) -> None:
    err = refused(body)
    assert err.code == 400
    assert err.message.startswith("the request body cannot be represented as JSON: ")


# -- depth -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["application/json", YAML])
def test_bodies_nest_at_most_246_levels(content_type: str) -> None:
    value, _ = codec.decode_body(nested_list(246), content_type)
    assert isinstance(value, list)
    err = refused(nested_list(247), content_type)
    assert err.message == "exceeded max depth: objects and arrays may be nested at most 246 levels deep"


def test_json_as_deep_as_the_parser_allows_is_400_not_500() -> None:
    """orjson reads 1024 levels but writes 254: the old decoder let 255..1024 through to a 500."""
    assert "exceeded max depth" in refused(nested_list(1024), "application/json").message


def test_stored_objects_nest_at_most_246_levels() -> None:
    inner: Any = {}
    for _ in range(244):
        inner = {"a": inner}
    assert codec.stored_bytes({"metadata": {"name": "x"}, "spec": inner}).startswith(b'{"metadata":')
    with pytest.raises(errors.StatusError) as info:
        codec.stored_bytes({"metadata": {"name": "x"}, "spec": {"a": inner}})
    assert info.value.code == 400
    assert "may be nested at most 246 levels deep" in info.value.message


def test_stored_bytes_are_the_object_alone() -> None:
    obj = {"kind": "ConfigMap", "metadata": {"name": "x", "resourceVersion": "5"}, "data": {"k": "v"}}
    assert codec.stored_bytes(obj) == b'{"kind":"ConfigMap","metadata":{"name":"x"},"data":{"k":"v"}}'


# -- decoded size ----------------------------------------------------------------------------------------


def test_decoded_size_is_limited_like_the_body() -> None:
    """``-`` (2 bytes of YAML) is ``null,`` (5 bytes of JSON): the decoded value is held to the body limit."""
    body = b"-\n" * 1000
    value, _ = codec.decode_body(body, YAML, max_bytes=5001)
    assert value == [None] * 1000
    err = refused(body, max_bytes=4000)
    assert (err.code, err.reason) == (413, "RequestEntityTooLarge")
    assert err.message == "Request entity too large: the decoded body exceeds the limit of 4000"


def test_json_duplicates_are_still_found() -> None:
    value, duplicates = codec.decode_body(
        b'{"a": 1, "a": 2, "b": {"c": 1}}', "application/json", want_duplicates=True
    )
    assert value == {"a": 2, "b": {"c": 1}}
    assert duplicates == ["a"]
    compact = b'{"a":1,"b":[1,2]}'
    assert codec.decode_body(compact, "application/json", want_duplicates=True) == (orjson.loads(compact), [])


# -- timeoutSeconds --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", None),
        ("0", 0),
        ("30", 30),
        ("+5", 5),
        ("007", 7),
        ("0" * 50 + "9", 9),
        (str(2**63 - 1), 2**63 - 1),
    ],
)
def test_timeout_seconds_accepted(raw: str, expected: int | None) -> None:
    assert _timeout_param({"timeoutSeconds": raw}) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("abc", 'strconv.ParseInt: parsing "abc": invalid syntax'),
        ("0.1s", 'strconv.ParseInt: parsing "0.1s": invalid syntax'),
        ("1_000", 'strconv.ParseInt: parsing "1_000": invalid syntax'),
        (" 5", 'strconv.ParseInt: parsing " 5": invalid syntax'),
        ("٣", 'strconv.ParseInt: parsing "٣": invalid syntax'),
        ("-", 'strconv.ParseInt: parsing "-": invalid syntax'),
        (str(2**63), f'strconv.ParseInt: parsing "{2**63}": value out of range'),
        ("-" + str(2**63 + 1), f'strconv.ParseInt: parsing "-{2**63 + 1}": value out of range'),
        ("9" * 5000, f'strconv.ParseInt: parsing "{"9" * 5000}": value out of range'),
        ("-1", "timeoutSeconds: Invalid value: -1: must be greater than or equal to 0"),
    ],
)
def test_timeout_seconds_refused(raw: str, message: str) -> None:
    with pytest.raises(errors.StatusError) as info:
        _timeout_param({"timeoutSeconds": raw})
    assert (info.value.code, info.value.message) == (400, message)


@given(st.text(max_size=40))
def test_timeout_seconds_is_an_int64_or_a_400(raw: str) -> None:
    try:
        value = _timeout_param({"timeoutSeconds": raw})
    except errors.StatusError as exc:
        assert exc.code == 400
        return
    assert value is None or 0 <= value < 2**63


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_timeout_seconds_reads_every_int64(value: int) -> None:
    assert _timeout_param({"timeoutSeconds": str(value)}) == value


# -- review kinds ----------------------------------------------------------------------------------------

SSAR = "io.k8s.api.authorization.v1.SelfSubjectAccessReview"
SAR = "io.k8s.api.authorization.v1.SubjectAccessReview"


def context(validation: str) -> RequestContext:
    return RequestContext(UserInfo("u"), RequestInfo(True, "/", "create"), field_validation=validation)


def ssar() -> dict[str, Any]:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "metadata": {"name": "x", "bogus": 1},
        "spec": {"resourceAttributes": {"verb": "get", "resource": "pods", "bogus": [1]}},
        "bogus": {"a": 1},
    }


def test_review_unknown_fields_are_dropped_with_warnings() -> None:
    ctx, obj = context("Warn"), ssar()
    decode_into_schema(ctx, obj, SSAR, "SelfSubjectAccessReview", "v1")
    assert obj == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "metadata": {"name": "x"},
        "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}},
    }
    assert ctx.warnings == [
        'unknown field "metadata.bogus"',
        'unknown field "bogus"',
        'unknown field "spec.resourceAttributes.bogus"',
    ]


def test_review_unknown_fields_are_dropped_silently_under_ignore() -> None:
    ctx, obj = context("Ignore"), ssar()
    decode_into_schema(ctx, obj, SSAR, "SelfSubjectAccessReview", "v1")
    assert "bogus" not in orjson.dumps(obj).decode()
    assert ctx.warnings == []


def test_review_unknown_fields_are_refused_under_strict() -> None:
    ctx = context("Strict")
    ctx.duplicate_fields = ["spec"]
    with pytest.raises(errors.StatusError) as info:
        decode_into_schema(ctx, ssar(), SSAR, "SelfSubjectAccessReview", "v1")
    assert info.value.code == 400
    assert info.value.message == (
        'SelfSubjectAccessReview in version "v1" cannot be handled as a SelfSubjectAccessReview: strict decoding '
        'error: duplicate field "spec", unknown field "metadata.bogus", unknown field "bogus", unknown field '
        '"spec.resourceAttributes.bogus"'
    )


@pytest.mark.parametrize(
    ("spec", "field"),
    [({"user": "u", "extra": "x"}, "spec.extra"), ({"user": "u", "groups": 5}, "spec.groups"), ("x", "spec")],
)
def test_review_fields_of_the_wrong_type_are_400(spec: Any, field: str) -> None:
    with pytest.raises(errors.StatusError) as info:
        decode_into_schema(context("Warn"), {"spec": spec}, SAR, "SubjectAccessReview", "v1")
    assert info.value.code == 400
    assert info.value.message.startswith(
        f'SubjectAccessReview in version "v1" cannot be handled as a SubjectAccessReview: {field}: '
    )


def test_review_required_fields_are_left_to_the_handler() -> None:
    """Go's decoder does not check ``required``; the handlers answer missing fields with upstream's 422."""
    obj: dict[str, Any] = {}
    decode_into_schema(context("Strict"), obj, SSAR, "SelfSubjectAccessReview", "v1")
    assert obj == {}

"""Pure parts of issue 9 item 4's smaller differences: Go's JSON syntax errors (``kube.gojson``), upstream's
body summary and decode wording (``kube.errors``, ``apiserver.codec``), and when a watch's bookmarks fall
(``apiserver.watch.next_bookmark_at``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vplane.apiserver import codec
from vplane.apiserver.watch import PRE_TIMEOUT_BOOKMARK_SECONDS, next_bookmark_at
from vplane.kube import errors, gojson

# -- Go's syntax errors -----------------------------------------------------------------------------------

GO_SYNTAX_ERRORS = [
    # The first three are quoted verbatim from Go programs' tests in the wild; the rest follow the scanner.
    (b"", "unexpected end of JSON input"),
    (b"imastring!", "invalid character 'i' looking for beginning of value"),
    (b"{]", "invalid character ']' looking for beginning of object key string"),
    (b"   ", "unexpected end of JSON input"),
    (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"', "unexpected end of JSON input"),
    (b'{"a":"abc', "unexpected end of JSON input"),
    (b'{"a":1', "unexpected end of JSON input"),
    (b'{"a":tru', "invalid character ' ' in literal true (expecting 'e')"),
    (b"[f", "invalid character ' ' in literal false (expecting 'a')"),
    (b"nul", "invalid character ' ' in literal null (expecting 'l')"),
    (b"[nulx]", "invalid character 'x' in literal null (expecting 'l')"),
    (b"-", "invalid character ' ' in numeric literal"),
    (b'{"a":-}', "invalid character '}' in numeric literal"),
    (b"[1.", "invalid character ' ' after decimal point in numeric literal"),
    (b'{"a":1.}', "invalid character '}' after decimal point in numeric literal"),
    (b"1e", "invalid character ' ' in exponent of numeric literal"),
    (b"[1E+]", "invalid character ']' in exponent of numeric literal"),
    (b'"\\', "invalid character ' ' in string escape code"),
    (b'{"a":"\\x"}', "invalid character 'x' in string escape code"),
    (b'"\\u12', "invalid character ' ' in \\u hexadecimal character escape"),
    (b'"\\u12g"', "invalid character 'g' in \\u hexadecimal character escape"),
    (b'{"a":"b\n"}', "invalid character '\\n' in string literal"),
    (b'["\t"]', "invalid character '\\t' in string literal"),
    (b'{"a":1,}', "invalid character '}' looking for beginning of object key string"),
    (b"[1,]", "invalid character ']' looking for beginning of value"),
    (b'{"a" 1}', "invalid character '1' after object key"),
    (b'{"a":1 "b":2}', "invalid character '\"' after object key:value pair"),
    (b"[1 2]", "invalid character '2' after array element"),
    (b"[01]", "invalid character '1' after array element"),
    (b'{"a":1}}', "invalid character '}' after top-level value"),
    (b"{} x", "invalid character 'x' after top-level value"),
    (b"'a'", "invalid character '\\'' looking for beginning of value"),
    (b"\x00", "invalid character '\\x00' looking for beginning of value"),
    (b"\x7f", "invalid character '\\x7f' looking for beginning of value"),
    (b"\xef\xbb\xbf{}", "invalid character '\u00ef' looking for beginning of value"),  # a byte-order mark
    (b"\x85", "invalid character '\\u0085' looking for beginning of value"),
    (b"\x0c{}", "invalid character '\\f' looking for beginning of value"),
    (b"[" * 10_001 + b"]" * 10_001, "invalid character '[' exceeded max depth"),
]


@pytest.mark.parametrize(("body", "message"), GO_SYNTAX_ERRORS)
def test_syntax_errors_are_gos(body: bytes, message: str) -> None:
    assert gojson.syntax_error(body) == message


@pytest.mark.parametrize(
    "body",
    [
        b"{}",
        b' {"a": [1, -2.5e+3, true, false, null, "\\u00e9\\n\\"", {}]} \n',
        b"0",
        b'"\xff"',  # Go does not check UTF-8 while scanning (orjson refuses it)
        b"[" * 10_000 + b"]" * 10_000,  # Go's limit, past orjson's 1024
    ],
)
def test_what_go_accepts_is_none(body: bytes) -> None:
    assert gojson.syntax_error(body) is None


def test_scanning_stops_after_max_tokens() -> None:
    """A body whose error lies past the budget is not judged (None), so no body costs more than the budget."""
    body = b"[" + b"0," * 100 + b"x]"
    assert gojson.syntax_error(body) == "invalid character 'x' looking for beginning of value"
    assert gojson.syntax_error(body, max_tokens=150) is None
    escapes = b'["' + b"\\n" * 100 + b"\x01"
    assert gojson.syntax_error(escapes) == "invalid character '\\x01' in string literal"
    assert gojson.syntax_error(escapes, max_tokens=50) is None


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


def test_a_number_too_large_for_a_double_is_well_formed() -> None:
    assert gojson.syntax_error(b"1E400") is None and gojson.syntax_error(b"[-1e999]") is None
    assert gojson.syntax_error(b"1E400:") == "invalid character ':' after top-level value"


@settings(max_examples=300, deadline=None)  # a scan per cut: slow under load, not wrong
@given(JSON_VALUES, st.booleans())
def test_every_cut_of_a_json_text_is_judged_the_same_from_its_end(value: Any, indent: bool) -> None:
    """A prefix of a JSON text either is one (None) or ends early, and then :func:`gojson.end_of_input`,
    which looks only at its end, says what the full scan says."""
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else 0)
    assert gojson.syntax_error(text) is None
    for cut in range(len(text)):
        prefix = text[:cut]
        found = gojson.syntax_error(prefix)
        if found is None:
            orjson.loads(prefix)
        else:
            assert found == gojson.end_of_input(prefix), prefix


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet='{}[]":,0123456789.eE+-truefalsn \t\n\\ux', max_size=16))
def test_go_and_orjson_agree_on_what_is_json(text: str) -> None:
    """On short ASCII inputs (no depth, UTF-8 or surrogate differences) the scanner accepts what orjson
    accepts; orjson's refusals are Go's errors, and those at the end of the input are end_of_input's."""
    body = text.encode()
    try:
        orjson.loads(body)
        valid = True
    except orjson.JSONDecodeError as exc:
        # A number too large for a double (1E400) is orjson's range error, raised before it reads on: what
        # follows is not judged, so the two cannot be compared (Go's scanner accepts the number itself).
        assume("infinity" not in exc.msg)
        valid = False
        at_end = not body.strip() or (bool(exc.doc) and exc.pos >= len(exc.doc))
    found = gojson.syntax_error(body)
    assert (found is None) == valid, found
    if not valid and at_end:
        assert gojson.end_of_input(body) == found


# -- the wording around them ----------------------------------------------------------------------------


def test_summary_is_upstreams() -> None:
    """``summarizeData(body, 30)``: text for bodies starting with ``{``, hex otherwise, `` ...`` when cut."""
    assert errors.summarize_body(b"") == "<empty>"
    assert errors.summarize_body(b'{"a":1') == '{"a":1'
    assert errors.summarize_body(b"{" + b"a" * 29) == "{" + "a" * 29
    assert errors.summarize_body(b"{" + b"a" * 30) == "{" + "a" * 29 + " ..."
    assert errors.summarize_body(b"[1, 2") == "5b312c2032"
    assert errors.summarize_body(b" " * 31) == "20" * 30 + " ..."
    # A cut through a UTF-8 sequence: one U+FFFD per byte, as Go's encoder writes invalid bytes.
    assert errors.summarize_body(b'{"' + b"a" * 27 + "é".encode()) == '{"' + "a" * 27 + "\ufffd ..."
    assert errors.summarize_body(b'{"\xe2\x82') == '{"\ufffd\ufffd'


def refused(body: bytes, content_type: str = codec.JSON, **kwargs: Any) -> errors.StatusError:
    with pytest.raises(errors.StatusError) as info:
        codec.decode_body(body, content_type, **kwargs)
    return info.value


def test_create_and_update_bodies_name_their_kind() -> None:
    err = refused(b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"', kind="ConfigMap")
    assert (err.code, err.reason, err.details) == (400, "BadRequest", None)
    assert err.message == (
        "the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; "
        'json parse error: unexpected end of JSON input ({"apiVersion":"v1","kind":"Con ...)'
    )
    assert refused(b"", kind="Scale").message == (
        "the object provided is unrecognized (must be of type Scale): couldn't get version/kind; "
        "json parse error: unexpected end of JSON input (<empty>)"
    )


def test_other_bodies_get_the_serializers_words() -> None:
    assert refused(b'{"kind":').message == (
        "couldn't get version/kind; json parse error: unexpected end of JSON input"
    )


@pytest.mark.parametrize(
    ("content_type", "validation", "message"),
    [
        (codec.MERGE_PATCH, "Warn", "error decoding patch: unexpected end of JSON input"),
        (codec.MERGE_PATCH, "Strict", "error decoding patch: unexpected end of JSON input"),
        (codec.MERGE_PATCH, "Ignore", "Invalid JSON Patch"),
        (codec.JSON_PATCH, "Warn", "error decoding patch: unexpected end of JSON input"),
        (codec.JSON_PATCH, "Ignore", "unexpected end of JSON input"),
        (codec.STRATEGIC_MERGE_PATCH, "Strict", "unexpected end of JSON input"),
        (codec.STRATEGIC_MERGE_PATCH, "Ignore", "unexpected end of JSON input"),
    ],
)
def test_patch_bodies_are_worded_per_patch_type(content_type: str, validation: str, message: str) -> None:
    allowed = (codec.JSON_PATCH, codec.MERGE_PATCH, codec.STRATEGIC_MERGE_PATCH)
    err = refused(b'{"data":', content_type, allowed=allowed, field_validation=validation)
    assert (err.code, err.reason, err.message) == (400, "BadRequest", message)


def test_json_past_orjsons_depth_is_too_deep_not_a_syntax_error() -> None:
    err = refused(b"[" * 2000 + b"]" * 2000, kind="ConfigMap")
    assert err.message == errors.nested_too_deeply(codec.MAX_DEPTH).message


def test_empty_details_are_sent() -> None:
    """405 and 404 from upstream's router carry ``details: {}``; a Status without details has none."""
    assert errors.method_not_allowed().to_status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server does not allow this method on the requested resource",
        "reason": "MethodNotAllowed",
        "details": {},
        "code": 405,
    }
    assert errors.not_found_path().to_status()["details"] == {}
    assert "details" not in errors.bad_request("x").to_status()


# -- bookmarks --------------------------------------------------------------------------------------------


def test_bookmarks_come_every_interval_then_two_seconds_before_the_deadline() -> None:
    assert PRE_TIMEOUT_BOOKMARK_SECONDS == 2.0
    deadline = 1000.0
    assert next_bookmark_at(0.0, 60.0, deadline) == 60.0
    assert next_bookmark_at(940.0, 60.0, deadline) == 998.0
    assert next_bookmark_at(997.5, 60.0, deadline) == 998.0
    assert next_bookmark_at(998.0, 60.0, deadline) is None  # the last one was just sent
    assert next_bookmark_at(999.0, 60.0, deadline) is None


def test_a_watch_of_two_seconds_or_less_gets_no_bookmark() -> None:
    """As upstream: the pre-timeout moment is already past when such a watch starts."""
    assert next_bookmark_at(10.0, 60.0, 10.0 + 3) == 11.0
    assert next_bookmark_at(10.0, 60.0, 10.0 + 2) is None
    assert next_bookmark_at(10.0, 60.0, 10.0 + 1) is None

"""Field selector parsing and matching (upstream apimachinery ``pkg/fields`` behaviour)."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vplane.kube import errors, fields
from vplane.kube.fields import FieldSelector, Operator, Requirement


def bad_request_message(text: str) -> str:
    with pytest.raises(errors.StatusError) as info:
        fields.parse(text)
    assert info.value.code == 400
    assert info.value.reason == "BadRequest"
    return info.value.message


@pytest.mark.parametrize(
    ("text", "expected", "canonical"),
    [
        ("", [], ""),
        ("metadata.name=foo", [("metadata.name", Operator.EQUALS, "foo")], "metadata.name=foo"),
        ("metadata.name==foo", [("metadata.name", Operator.EQUALS, "foo")], "metadata.name=foo"),
        (
            "status.phase!=Running",
            [("status.phase", Operator.NOT_EQUALS, "Running")],
            "status.phase!=Running",
        ),
        ("spec.nodeName=", [("spec.nodeName", Operator.EQUALS, "")], "spec.nodeName="),
        (
            "b=2,a=1",
            [("a", Operator.EQUALS, "1"), ("b", Operator.EQUALS, "2")],
            "a=1,b=2",
        ),
        ("a=1,,b=2,", [("a", Operator.EQUALS, "1"), ("b", Operator.EQUALS, "2")], "a=1,b=2"),
        (r"a=x\,y", [("a", Operator.EQUALS, "x,y")], r"a=x\,y"),
        (r"a=x\=y", [("a", Operator.EQUALS, "x=y")], r"a=x\=y"),
        (r"a=x\\y", [("a", Operator.EQUALS, "x\\y")], r"a=x\\y"),
        (r"a!=\,\=\\", [("a", Operator.NOT_EQUALS, ",=\\")], r"a!=\,\=\\"),
        ("a= b ", [("a", Operator.EQUALS, " b ")], "a= b "),
        ("=", [], ""),  # neither side: dropped, as upstream's identity transform does
        ("!=", [], ""),
        ("=x", [("", Operator.EQUALS, "x")], "=x"),
        ("a!b=c", [("a!b", Operator.EQUALS, "c")], "a!b=c"),
        ("a+b=c+d", [("a+b", Operator.EQUALS, "c+d")], "a+b=c+d"),
    ],
)
def test_parse(text: str, expected: list[tuple[str, Operator, str]], canonical: str) -> None:
    sel = fields.parse(text)
    assert [(r.field, r.operator, r.value) for r in sel.requirements] == expected
    assert str(sel) == canonical
    assert fields.parse(canonical) == sel
    assert sel.empty == (not expected)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a", "invalid selector: 'a'; can't understand 'a'"),
        ("a=1,b", "invalid selector: 'a=1,b'; can't understand 'b'"),
        ("a<1", "invalid selector: 'a<1'; can't understand 'a<1'"),
        ("a=b=c", "invalid field selector: unescaped character in value: 61"),
        ("a!==c", "invalid field selector: unescaped character in value: 61"),
        ("a=b\\", "invalid field selector: invalid escape sequence: \\"),
        ("a=\\x", "invalid field selector: invalid escape sequence: \\x"),
        ("a=\\n", "invalid field selector: invalid escape sequence: \\n"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    assert bad_request_message(text) == message


def test_matches() -> None:
    sel = fields.parse("metadata.name=foo,status.phase!=Failed")
    assert sel.matches({"metadata.name": "foo", "status.phase": "Running"})
    assert sel.matches({"metadata.name": "foo"})
    assert not sel.matches({"metadata.name": "foo", "status.phase": "Failed"})
    assert not sel.matches({"metadata.name": "bar"})
    # A missing field reads as "" (upstream Fields.Get).
    assert fields.parse("spec.nodeName=").matches({})
    assert not fields.parse("spec.nodeName!=").matches({})
    assert fields.parse("spec.nodeName!=").matches({"spec.nodeName": "n1"})
    assert fields.parse("").matches({})


def test_fields_and_exact_value() -> None:
    sel = fields.parse("metadata.namespace!=kube-system,metadata.name==foo")
    assert sel.fields() == {"metadata.name", "metadata.namespace"}
    assert fields.exact_value(sel, "metadata.name") == "foo"
    assert fields.exact_value(sel, "metadata.namespace") is None
    assert fields.exact_value(sel, "spec.x") is None


def test_check_supported() -> None:
    sel = fields.parse("metadata.name=foo,spec.bogus=1,status.bogus=2")
    fields.check_supported(fields.parse("metadata.name=x"), {"metadata.name", "metadata.namespace"})
    fields.check_supported(fields.parse(""), ())
    with pytest.raises(errors.StatusError) as info:
        fields.check_supported(sel, {"metadata.name", "metadata.namespace"})
    assert info.value.code == 400
    assert info.value.message == "field label not supported: spec.bogus"


def test_value_object() -> None:
    a = fields.parse("b=2")
    b = fields.parse("a!=1")
    both = a & b
    assert str(both) == "a!=1,b=2"
    assert both == fields.parse("b=2,a!=1")
    assert hash(both) == hash(fields.parse("a!=1,b=2"))
    assert list(both) == list(both.requirements)
    assert repr(both) == "FieldSelector('a!=1,b=2')"
    assert a.__and__("x") is NotImplemented
    assert a != "b=2"
    with pytest.raises(AttributeError):
        a._requirements = ()
    assert copy.copy(a) is a and copy.deepcopy(a) is a
    assert pickle.loads(pickle.dumps(both)) == both
    assert fields.exact({"metadata.name": "x"}) == fields.parse("metadata.name=x")
    assert FieldSelector() == fields.parse("")
    assert str(Requirement("a", Operator.EQUALS, "x,y")) == r"a=x\,y"


@pytest.mark.parametrize("value", ["", "plain", "a,b", "a=b", "a\\b", "\\,=", "==,,\\\\"])
def test_escape_round_trip(value: str) -> None:
    assert fields.unescape_value(fields.escape_value(value)) == value


# --- properties -----------------------------------------------------------------------------------------

_FIELD_TOKENS = ["a", "b.c", "=", "==", "!=", "!", ",", "\\", "\\,", "\\=", "\\\\", " ", "x", "é", "\x00"]


@given(st.one_of(st.text(max_size=40), st.lists(st.sampled_from(_FIELD_TOKENS), max_size=20).map("".join)))
@settings(max_examples=400, deadline=None)
def test_parse_only_ever_raises_bad_request(text: str) -> None:
    try:
        sel = fields.parse(text)
    except errors.StatusError as e:
        assert e.code == 400
        assert e.reason == "BadRequest"
        return
    assert fields.parse(str(sel)) == sel


# Field names carry no escaping upstream, so generated ones avoid the operator and separator characters.
_field_names = st.text(alphabet="abcxyz.[]_-0123456789", min_size=1, max_size=12)
_requirements = st.builds(Requirement, _field_names, st.sampled_from(list(Operator)), st.text(max_size=12))


@given(st.lists(_requirements, max_size=6))
@settings(max_examples=200, deadline=None)
def test_string_round_trip(reqs: list[Requirement]) -> None:
    sel = FieldSelector(reqs)
    assert fields.parse(str(sel)) == sel


@given(
    st.lists(
        st.builds(
            Requirement,
            st.sampled_from(["f", "g"]),
            st.sampled_from(list(Operator)),
            st.sampled_from(["", "1", "2"]),
        ),
        max_size=4,
    ),
    st.dictionaries(st.sampled_from(["f", "g"]), st.sampled_from(["", "1", "2"])),
)
@settings(max_examples=200, deadline=None)
def test_matches_agrees_with_reference(reqs: list[Requirement], values: dict[str, str]) -> None:
    def reference(r: Requirement) -> bool:
        have = values.get(r.field, "")
        return have == r.value if r.operator == Operator.EQUALS else have != r.value

    assert FieldSelector(reqs).matches(values) == all(reference(r) for r in reqs)

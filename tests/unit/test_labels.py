"""Label selector parsing, matching and conversion (upstream apimachinery ``pkg/labels`` behaviour)."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vplane.kube import errors, labels
from vplane.kube.labels import Operator, Requirement, Selector

VALUE_REGEX_HELP = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
    "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NAME_PART_HELP = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "
    "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def bad_request_message(text: str) -> str:
    with pytest.raises(errors.StatusError) as info:
        labels.parse(text)
    assert info.value.code == 400
    assert info.value.reason == "BadRequest"
    return info.value.message


# --- parsing --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("a=b", "a=b"),
        ("a==b", "a==b"),
        ("a!=b", "a!=b"),
        ("a in (b,c)", "a in (b,c)"),
        ("a notin (c,b,b)", "a notin (b,c)"),
        ("a", "a"),
        ("!a", "!a"),
        ("a>5", "a>5"),
        ("a<10", "a<10"),
        ("a=", "a="),
        ("a in ()", "a in ()"),
        ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),
        ("a in (b,)", "a in (,b)"),
        ("  a  =  b  ,  c  ", "a=b,c"),
        ("\ta\n!=\rb", "a!=b"),
        ("b=1,a=2", "a=2,b=1"),
        ("example.com/app=web", "example.com/app=web"),
        ("in in (in,notin)", "in in (in,notin)"),
        ("notin=in", "notin=in"),
        ("a=1,a=2", "a=1,a=2"),
        ("A_b.c-D=E_f.g-H", "A_b.c-D=E_f.g-H"),
    ],
)
def test_parse_canonical_string(text: str, canonical: str) -> None:
    sel = labels.parse(text)
    assert str(sel) == canonical
    assert labels.parse(canonical) == sel


def test_parse_requirements_shape() -> None:
    sel = labels.parse("z notin (b,a),!y,x,w>3,v<4,u==1,t!=2,s=3,r in (q)")
    assert [(r.key, r.operator, r.values) for r in sel.requirements] == [
        ("r", Operator.IN, ("q",)),
        ("s", Operator.EQUALS, ("3",)),
        ("t", Operator.NOT_EQUALS, ("2",)),
        ("u", Operator.DOUBLE_EQUALS, ("1",)),
        ("v", Operator.LESS_THAN, ("4",)),
        ("w", Operator.GREATER_THAN, ("3",)),
        ("x", Operator.EXISTS, ()),
        ("y", Operator.DOES_NOT_EXIST, ()),
        ("z", Operator.NOT_IN, ("a", "b")),
    ]


def test_plus_is_not_a_separator() -> None:
    # Query strings encode spaces as '+', but decoding is the caller's job: here '+' is just a bad char.
    assert 'Invalid value: "a+in+"' in bad_request_message("a+in+(b)")
    assert bad_request_message("a=b+c") == (
        f'unable to parse requirement: values[0][a]: Invalid value: "b+c": {VALUE_REGEX_HELP}'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (",", "found ',', expected: !, identifier, or 'end of string'"),
        ("=a", "found '=', expected: !, identifier, or 'end of string'"),
        ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
        ("a,", "found '', expected: identifier after ','"),
        ("a=b,,c", "found ',', expected: identifier after ','"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("a)", "unable to parse requirement: found ')', expected: in, notin, =, ==, !=, gt, lt"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
        ("!!a", "unable to parse requirement: found '!', expected: identifier"),
        ("a=(", "unable to parse requirement: found '(', expected: identifier"),
        ("a in b", "unable to parse requirement: found 'b' expected: '('"),
        ("a in", "unable to parse requirement: found '' expected: '('"),
        ("a in (", "unable to parse requirement: found '', expected: ',', ')' or identifier"),
        ("a in (=", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
        ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
        ("a in (b,=", "unable to parse requirement: found '=', expected: ',', or identifier"),
        ("a in (b,", "unable to parse requirement: found '', expected: ',', or identifier"),
        (
            "a>x",
            'unable to parse requirement: values[0]: Invalid value: "x": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (
            "a<",
            'unable to parse requirement: values[0]: Invalid value: "": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (
            "a>99999999999999999999",
            'unable to parse requirement: values[0]: Invalid value: "99999999999999999999": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        ("-a", f'unable to parse requirement: <nil>: Invalid value: "-a": {NAME_PART_HELP}'),
        (
            "a/b/c",
            'unable to parse requirement: <nil>: Invalid value: "a/b/c": a valid label key must consist of '
            "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character "
            "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')",
        ),
        ("/a", 'unable to parse requirement: <nil>: Invalid value: "/a": prefix part must be non-empty'),
        (
            "a/",
            'unable to parse requirement: <nil>: Invalid value: "a/": name part must be non-empty; '
            + NAME_PART_HELP,
        ),
        (
            "x" * 64,
            f'unable to parse requirement: <nil>: Invalid value: "{"x" * 64}": '
            "name part must be no more than 63 bytes",
        ),
        ("a=-b", f'unable to parse requirement: values[0][a]: Invalid value: "-b": {VALUE_REGEX_HELP}'),
        (
            "a=" + "v" * 64,
            f'unable to parse requirement: values[0][a]: Invalid value: "{"v" * 64}": must be no more than 63 bytes',
        ),
        (
            "a in (ok,_bad)",
            f'unable to parse requirement: values[0][a]: Invalid value: "_bad": {VALUE_REGEX_HELP}',
        ),
        (
            "a>_x",
            "unable to parse requirement: [values[0]: Invalid value: \"_x\": for 'Gt', 'Lt' operators, "
            f'the value must be an integer, values[0][a]: Invalid value: "_x": {VALUE_REGEX_HELP}]',
        ),
        ("a\x01", f'unable to parse requirement: <nil>: Invalid value: "a\\x01": {NAME_PART_HELP}'),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    assert bad_request_message(text) == message


# --- matching -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "matching", "not_matching"),
    [
        ("a=b", [{"a": "b"}, {"a": "b", "c": "d"}], [{}, {"a": "c"}, {"b": "b"}]),
        ("a==b", [{"a": "b"}], [{}, {"a": ""}]),
        ("a!=b", [{}, {"a": "c"}, {"a": ""}], [{"a": "b"}]),
        ("a in (b,c)", [{"a": "b"}, {"a": "c"}], [{}, {"a": "d"}]),
        ("a notin (b,c)", [{}, {"a": "d"}], [{"a": "b"}, {"a": "c"}]),
        ("a", [{"a": ""}, {"a": "x"}], [{}, {"b": "a"}]),
        ("!a", [{}, {"b": "a"}], [{"a": ""}]),
        ("a>5", [{"a": "6"}, {"a": "100"}], [{}, {"a": "5"}, {"a": "x"}, {"a": ""}, {"a": "1e3"}]),
        ("a<5", [{"a": "4"}, {"a": "-3"}, {"a": "+4"}], [{}, {"a": "5"}, {"a": "4.5"}, {"a": " 4"}]),
        ("a=", [{"a": ""}], [{}, {"a": "x"}]),
        ("a in ()", [{"a": ""}], [{}, {"a": "x"}]),
        ("", [{}, {"a": "b"}], []),
        ("a=b,c!=d,e", [{"a": "b", "e": "1"}], [{"a": "b"}, {"a": "b", "c": "d", "e": "1"}]),
    ],
)
def test_matches(text: str, matching: list[dict[str, str]], not_matching: list[dict[str, str]]) -> None:
    sel = labels.parse(text)
    for m in matching:
        assert sel.matches(m), m
    for m in not_matching:
        assert not sel.matches(m), m


def test_integer_comparison_is_int64() -> None:
    assert not labels.parse("a>1").matches({"a": str(2**63)})  # out of int64 range: not an integer
    assert labels.parse("a<1").matches({"a": str(-(2**63))})


# --- the Selector value ---------------------------------------------------------------------------------


def test_everything_and_nothing() -> None:
    everything = Selector.everything()
    nothing = Selector.nothing()
    assert everything.empty and everything.matches({}) and everything.matches({"a": "b"})
    assert not nothing.empty and nothing.matches_nothing
    assert not nothing.matches({}) and not nothing.matches({"a": "b"})
    assert str(nothing) == ""  # as upstream; it is the one selector that does not round-trip
    assert nothing != everything
    assert labels.parse("") == everything
    assert not labels.parse("a").empty
    assert nothing.add([Requirement("a", Operator.EXISTS)]) is nothing
    assert (labels.parse("a") & nothing) == nothing
    assert (nothing & labels.parse("a")) == nothing
    assert repr(nothing) == "Selector.nothing()"


def test_combine() -> None:
    a = labels.parse("b=1")
    b = labels.parse("a in (x)")
    both = a & b
    assert str(both) == "a in (x),b=1"
    assert both == labels.parse("b=1,a in (x)")
    assert a.add([Requirement("a", Operator.IN, ("x",))]) == both
    assert str(a) == "b=1"  # unchanged
    assert hash(both) == hash(labels.parse("a in (x),b=1"))
    assert list(both) == list(both.requirements)
    assert repr(both) == "Selector('a in (x),b=1')"
    assert a.__and__(3) is NotImplemented
    assert a != "b=1"


def test_immutable_and_copyable() -> None:
    sel = labels.parse("a=b,!c")
    with pytest.raises(AttributeError):
        sel._requirements = ()
    with pytest.raises(AttributeError):
        sel.requirements[0].key = "x"  # type: ignore[misc]
    assert copy.copy(sel) is sel and copy.deepcopy(sel) is sel
    assert pickle.loads(pickle.dumps(sel)) == sel
    assert pickle.loads(pickle.dumps(Selector.nothing())) == Selector.nothing()


def test_exact_value() -> None:
    sel = labels.parse("a=1,b in (2),c in (3,4),d!=5,e==6")
    assert sel.exact_value("a") == "1"
    assert sel.exact_value("b") == "2"
    assert sel.exact_value("c") is None
    assert sel.exact_value("d") is None
    assert sel.exact_value("e") == "6"
    assert sel.exact_value("zzz") is None


def test_requirement_validation() -> None:
    assert Requirement("a", Operator.IN, ("b", "a", "b")).values == ("a", "b")
    with pytest.raises(errors.StatusError) as info:
        Requirement("a", "bogus", ())  # type: ignore[arg-type]
    assert info.value.message == (
        'operator: Unsupported value: "bogus": supported values: '
        '"in", "notin", "=", "==", "!=", "gt", "lt", "exists", "!"'
    )
    with pytest.raises(errors.StatusError) as info:
        Requirement("a", Operator.EQUALS, ("b", "c"))
    assert info.value.message == (
        'values: Invalid value: ["b","c"]: exact-match compatibility requires one single value'
    )
    with pytest.raises(errors.StatusError) as info:
        Requirement("a", Operator.GREATER_THAN, ("1", "2"))
    assert info.value.message == (
        "values: Invalid value: [\"1\",\"2\"]: for 'Gt', 'Lt' operators, exactly one value is required"
    )
    assert Requirement("a", "in", ("b",)).operator is Operator.IN  # type: ignore[arg-type]


# --- metav1.LabelSelector -------------------------------------------------------------------------------


def test_from_label_selector() -> None:
    assert labels.from_label_selector(None) == Selector.nothing()
    assert labels.from_label_selector({}) == Selector.everything()
    assert labels.from_label_selector({"matchLabels": {}, "matchExpressions": []}).empty
    sel = labels.from_label_selector(
        {
            "matchLabels": {"tier": "web", "app": "x"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "dev"]},
                {"key": "zone", "operator": "NotIn", "values": ["a"]},
                {"key": "owner", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist", "values": []},
            ],
        }
    )
    assert str(sel) == "app=x,env in (dev,prod),!legacy,owner,tier=web,zone notin (a)"
    assert sel.matches({"app": "x", "tier": "web", "env": "dev", "owner": ""})
    assert not sel.matches({"app": "x", "tier": "web", "env": "dev", "owner": "", "legacy": "1"})


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            '"Gt" is not a valid label selector operator',
        ),
        ({"matchExpressions": [{"key": "a"}]}, '"" is not a valid label selector operator'),
        (
            {"matchExpressions": [{"key": "a", "operator": "In"}]},
            "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            'values: Invalid value: ["x"]: values set must be empty for exists and does not exist',
        ),
        ({"matchLabels": {"a": "_"}}, f'values[0][a]: Invalid value: "_": {VALUE_REGEX_HELP}'),
        ({"matchLabels": {"-a": "b"}}, f'key: Invalid value: "-a": {NAME_PART_HELP}'),
        ({"matchLabels": {"a": 1}}, "matchLabels must map strings to strings"),
        ({"matchExpressions": {}}, "matchExpressions must be a list"),
        ({"matchExpressions": ["a"]}, "matchExpressions entries must be objects"),
        ({"matchExpressions": [{"key": 1, "operator": "Exists"}]}, "matchExpressions key must be a string"),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]},
            "matchExpressions values must be a list of strings",
        ),
    ],
)
def test_from_label_selector_errors(selector: Mapping[str, object], message: str) -> None:
    with pytest.raises(errors.StatusError) as info:
        labels.from_label_selector(selector)
    assert info.value.code == 400
    assert info.value.message == message


def test_from_label_selector_rejects_non_mapping() -> None:
    with pytest.raises(errors.StatusError):
        labels.from_label_selector(["a"])  # type: ignore[arg-type]


def test_exact() -> None:
    sel = labels.exact({"b": "2", "a": "1"})
    assert str(sel) == "a=1,b=2"
    assert sel.matches({"a": "1", "b": "2", "c": "3"})
    assert not sel.matches({"a": "1"})
    assert labels.exact({}) == Selector.everything()
    with pytest.raises(errors.StatusError):
        labels.exact({"a": "not valid"})


# --- properties -----------------------------------------------------------------------------------------

_SELECTOR_TOKENS = [
    "a", "b", "k8s.io/x", "in", "notin", "=", "==", "!=", "!", "(", ")", ",", " ", "<", ">", "1",
    "-", "_", ".", "/", "+", "\t", "\\", "%", "é", "\x00",
]  # fmt: skip


@given(
    st.one_of(
        st.text(max_size=40),
        st.lists(st.sampled_from(_SELECTOR_TOKENS), max_size=25).map("".join),
    )
)
@settings(max_examples=400, deadline=None)
def test_parse_only_ever_raises_bad_request(text: str) -> None:
    try:
        sel = labels.parse(text)
    except errors.StatusError as e:
        assert e.code == 400
        assert e.reason == "BadRequest"
        return
    # Whatever parses prints to something that parses back to the same selector.
    assert labels.parse(str(sel)) == sel


_dns_label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True)
_prefix = st.lists(_dns_label, min_size=1, max_size=3).map(".".join)
_name = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,12}[A-Za-z0-9])?", fullmatch=True)
_keys = st.one_of(_name, st.tuples(_prefix, _name).map("/".join))
_values = st.one_of(
    st.just(""), st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,12}[A-Za-z0-9])?", fullmatch=True)
)
_ints = st.integers(min_value=0, max_value=10**6).map(str)


@st.composite
def requirements(draw: st.DrawFn, keys: st.SearchStrategy[str] = _keys) -> Requirement:
    key = draw(keys)
    op = draw(st.sampled_from(list(Operator)))
    if op in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
        values: tuple[str, ...] = ()
    elif op in (Operator.IN, Operator.NOT_IN):
        values = tuple(draw(st.lists(_values, min_size=1, max_size=4)))
    elif op in (Operator.GREATER_THAN, Operator.LESS_THAN):
        values = (draw(_ints),)
    else:
        values = (draw(_values),)
    return Requirement(key, op, values)


@given(st.lists(requirements(), max_size=6))
@settings(max_examples=200, deadline=None)
def test_string_round_trip(reqs: list[Requirement]) -> None:
    sel = Selector(reqs)
    assert labels.parse(str(sel)) == sel


def reference_matches(req: Requirement, lbls: Mapping[str, str]) -> bool:
    """A direct reading of the upstream rules, written independently of the implementation."""
    present = req.key in lbls
    value = lbls.get(req.key, "")
    op = req.operator
    if op == Operator.EXISTS:
        return present
    if op == Operator.DOES_NOT_EXIST:
        return not present
    if op in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.IN):
        return present and value in set(req.values)
    if op in (Operator.NOT_EQUALS, Operator.NOT_IN):
        return not present or value not in set(req.values)
    if not present or not value.lstrip("+-").isdigit() or not value.isascii():
        return False
    number = int(value)
    if not -(2**63) <= number < 2**63:
        return False
    return number > int(req.values[0]) if op == Operator.GREATER_THAN else number < int(req.values[0])


_small_keys = st.sampled_from(["a", "b", "x/c"])
_label_sets = st.dictionaries(
    _small_keys, st.one_of(st.sampled_from(["", "1", "5", "10", "-3", "x", "+7", "007"]), _ints), max_size=3
)


@given(st.lists(requirements(_small_keys), max_size=4), _label_sets)
@settings(max_examples=300, deadline=None)
def test_matches_agrees_with_reference(reqs: list[Requirement], lbls: dict[str, str]) -> None:
    sel = Selector(reqs)
    assert sel.matches(lbls) == all(reference_matches(r, lbls) for r in reqs)


@pytest.mark.parametrize(
    ("selector", "required"),
    [
        ("a=1", {"a": "1"}),
        ("a==1,b in (2)", {"a": "1", "b": "2"}),
        ("", {}),
        ("a=1,a=2", None),
        ("a in (1,2)", None),
        ("a!=1", None),
        ("a", None),
        ("!a", None),
        ("a=1,b notin (2)", None),
        ("a>1", None),
    ],
)
def test_required_labels_agrees_with_matches(selector: str, required: dict[str, str] | None) -> None:
    sel = labels.parse(selector)
    assert sel.required_labels() == required
    if required is None:
        return
    for candidate in ({}, {"a": "1"}, {"a": "2"}, {"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}):
        assert (required.items() <= candidate.items()) == sel.matches(candidate), candidate


def test_required_labels_of_nothing() -> None:
    assert labels.Selector.nothing().required_labels() is None

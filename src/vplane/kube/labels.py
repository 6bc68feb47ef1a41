"""Label selectors: the ``labelSelector`` query grammar and ``metav1.LabelSelector``.

Follows apimachinery v0.36 ``pkg/labels/selector.go`` (lexer, parser, ``NewRequirement`` checks and
``Requirement.Matches``) and ``pkg/apis/meta/v1/helpers.go`` (``LabelSelectorAsSelector``), including
the error wording, because kubectl prints a server's 400 message verbatim. Everything a client can get
wrong raises :func:`vplane.kube.errors.bad_request`; nothing else escapes :func:`parse`.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from vplane.kube import errors, validation


class Operator(enum.StrEnum):
    """Upstream ``selection.Operator``; the values are upstream's spellings (used in messages)."""

    IN = "in"
    NOT_IN = "notin"
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    GREATER_THAN = "gt"
    LESS_THAN = "lt"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


# Upstream's ``validRequirementOperators`` order, which the "supported values" message lists.
_BINARY_OPERATORS = (
    Operator.IN,
    Operator.NOT_IN,
    Operator.EQUALS,
    Operator.DOUBLE_EQUALS,
    Operator.NOT_EQUALS,
    Operator.GREATER_THAN,
    Operator.LESS_THAN,
)
_ALL_OPERATORS = (*_BINARY_OPERATORS, Operator.EXISTS, Operator.DOES_NOT_EXIST)

_EXACT_OPERATORS = frozenset({Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.NOT_EQUALS})
_SET_OPERATORS = frozenset({Operator.IN, Operator.NOT_IN})
_UNARY_OPERATORS = frozenset({Operator.EXISTS, Operator.DOES_NOT_EXIST})
_ORDER_OPERATORS = frozenset({Operator.GREATER_THAN, Operator.LESS_THAN})

# strconv.ParseInt(s, 10, 64): optional sign, ASCII digits, int64 range.
_GO_INT_RE = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _parse_int64(text: str) -> int | None:
    if not _GO_INT_RE.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def _invalid(path: str, value: str, detail: str) -> str:
    """A ``field.Invalid(...).Error()`` string; upstream's parser passes a nil path, printed ``<nil>``."""
    return f"{path}: Invalid value: {validation.go_quote(value)}: {detail}"


def _aggregate(messages: list[str]) -> str:
    """``field.ErrorList.ToAggregate().Error()``: duplicates dropped, several wrapped in brackets."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def _key_error(key: str, path: str) -> str | None:
    msgs = validation.qualified_name(key)
    return _invalid(path, key, "; ".join(msgs)) if msgs else None


def _requirement_errors(key: str, operator: str, values: tuple[str, ...]) -> list[str]:
    """The checks of upstream ``NewRequirement``, in its order."""
    errs: list[str] = []
    if (err := _key_error(key, "key")) is not None:
        errs.append(err)
    rendered = json.dumps(list(values), separators=(",", ":"), ensure_ascii=False)
    if operator in _SET_OPERATORS:
        if not values:
            errs.append(
                f"values: Invalid value: {rendered}: for 'in', 'notin' operators, values set can't be empty"
            )
    elif operator in _EXACT_OPERATORS:
        if len(values) != 1:
            errs.append(
                f"values: Invalid value: {rendered}: exact-match compatibility requires one single value"
            )
    elif operator in _UNARY_OPERATORS:
        if values:
            errs.append(
                f"values: Invalid value: {rendered}: values set must be empty for exists and does not exist"
            )
    elif operator in _ORDER_OPERATORS:
        if len(values) != 1:
            errs.append(
                f"values: Invalid value: {rendered}: for 'Gt', 'Lt' operators, exactly one value is required"
            )
        for i, value in enumerate(values):
            if _parse_int64(value) is None:
                errs.append(
                    _invalid(f"values[{i}]", value, "for 'Gt', 'Lt' operators, the value must be an integer")
                )
    else:
        supported = ", ".join(f'"{op.value}"' for op in _ALL_OPERATORS)
        errs.append(
            f"operator: Unsupported value: {validation.go_quote(operator)}: supported values: {supported}"
        )
    for i, value in enumerate(values):
        msgs = validation.label_value(value)
        if msgs:
            errs.append(_invalid(f"values[{i}][{key}]", value, "; ".join(msgs)))
    return errs


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``key <operator> values`` term; always valid once constructed.

    Values are kept sorted and de-duplicated: upstream's parser stores a set and prints sorted values,
    so this makes equal selectors compare equal and print the same.
    """

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        values = tuple(sorted(set(self.values)))
        errs = _requirement_errors(self.key, str(self.operator), values)
        if errs:
            raise errors.bad_request(_aggregate(errs))
        object.__setattr__(self, "operator", Operator(self.operator))
        object.__setattr__(self, "values", values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Upstream ``Requirement.Matches``: ``!=``/``notin`` also match objects lacking the key."""
        op = self.operator
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if op in (Operator.IN, Operator.EQUALS, Operator.DOUBLE_EQUALS):
            return value is not None and value in self.values
        if op in (Operator.NOT_IN, Operator.NOT_EQUALS):
            return value is None or value not in self.values
        # gt / lt: both sides must be int64s; anything else simply does not match.
        if value is None or not isinstance(value, str):
            return False
        have = _parse_int64(value)
        want = _parse_int64(self.values[0])
        if have is None or want is None:
            return False
        return have > want if op is Operator.GREATER_THAN else have < want

    def __str__(self) -> str:
        op = self.operator
        if op is Operator.EXISTS:
            return self.key
        if op is Operator.DOES_NOT_EXIST:
            return "!" + self.key
        if op in _SET_OPERATORS:
            return f"{self.key} {op.value} ({','.join(self.values)})"
        symbol = {Operator.GREATER_THAN: ">", Operator.LESS_THAN: "<"}.get(op, op.value)
        return f"{self.key}{symbol}{self.values[0]}"


_EXACT = frozenset({Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.IN})


class Selector:
    """An immutable AND of requirements, kept sorted by key (stably) like upstream's ``internalSelector``.

    ``Selector.nothing()`` is the separate "selects nothing" value upstream uses for a nil
    ``metav1.LabelSelector``; like upstream it prints as the empty string, so it does not round-trip.
    """

    __slots__ = ("_nothing", "_requirements")

    _requirements: tuple[Requirement, ...]
    _nothing: bool

    def __init__(self, requirements: Iterable[Requirement] = ()) -> None:
        object.__setattr__(self, "_requirements", tuple(sorted(requirements, key=lambda r: r.key)))
        object.__setattr__(self, "_nothing", False)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Selector is immutable")

    @classmethod
    def everything(cls) -> Selector:
        return _EVERYTHING

    @classmethod
    def nothing(cls) -> Selector:
        return _NOTHING

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        return self._requirements

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything (``nothing()`` is not empty)."""
        return not self._nothing and not self._requirements

    @property
    def matches_nothing(self) -> bool:
        return self._nothing

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self._nothing:
            return False
        return all(r.matches(labels) for r in self._requirements)

    def add(self, requirements: Iterable[Requirement]) -> Selector:
        """A new selector that also requires ``requirements`` (upstream ``Selector.Add``)."""
        if self._nothing:
            return self
        return Selector((*self._requirements, *requirements))

    def __and__(self, other: object) -> Selector:
        if not isinstance(other, Selector):
            return NotImplemented
        if other._nothing:
            return other
        return self.add(other._requirements)

    def exact_value(self, key: str) -> str | None:
        """Upstream ``RequiresExactMatch``: the one value the first requirement on ``key`` pins, if any."""
        for r in self._requirements:
            if r.key == key:
                if (
                    r.operator in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.IN)
                    and len(r.values) == 1
                ):
                    return r.values[0]
                return None
        return None

    def required_labels(self) -> dict[str, str] | None:
        """The labels a match must carry, when that is all the selector asks (only one-value ``=``, ``==``
        and ``in`` requirements, each key once), else None. ``required.items() <= labels.items()`` then
        matches several times faster than ``matches`` (a label-selected list tests every object)."""
        if self._nothing:
            return None
        required: dict[str, str] = {}
        for r in self._requirements:
            if r.operator not in _EXACT or len(r.values) != 1 or r.key in required:
                return None
            required[r.key] = r.values[0]
        return required

    def __iter__(self) -> Iterator[Requirement]:
        return iter(self._requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self._requirements)

    def __repr__(self) -> str:
        if self._nothing:
            return "Selector.nothing()"
        return f"Selector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Selector):
            return NotImplemented
        return self._nothing == other._nothing and self._requirements == other._requirements

    def __hash__(self) -> int:
        return hash((self._nothing, self._requirements))

    # Immutable, so copies can be the object itself; pickling rebuilds through the constructor.
    def __copy__(self) -> Selector:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Selector:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        if self._nothing:
            return (Selector.nothing, ())
        return (Selector, (self._requirements,))


_EVERYTHING = Selector()
_NOTHING = Selector()
object.__setattr__(_NOTHING, "_nothing", True)


# --- lexer ----------------------------------------------------------------------------------------------


class _Tok(enum.Enum):
    END = enum.auto()
    CLOSED_PAR = enum.auto()
    COMMA = enum.auto()
    DOES_NOT_EXIST = enum.auto()
    DOUBLE_EQUALS = enum.auto()
    EQUALS = enum.auto()
    GREATER_THAN = enum.auto()
    IDENTIFIER = enum.auto()
    IN = enum.auto()
    LESS_THAN = enum.auto()
    NOT_EQUALS = enum.auto()
    NOT_IN = enum.auto()
    OPEN_PAR = enum.auto()


_SYMBOLS = {
    ")": _Tok.CLOSED_PAR,
    ",": _Tok.COMMA,
    "!": _Tok.DOES_NOT_EXIST,
    "==": _Tok.DOUBLE_EQUALS,
    "=": _Tok.EQUALS,
    ">": _Tok.GREATER_THAN,
    "<": _Tok.LESS_THAN,
    "!=": _Tok.NOT_EQUALS,
    "(": _Tok.OPEN_PAR,
}
_KEYWORDS = {"in": _Tok.IN, "notin": _Tok.NOT_IN}
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")  # upstream isWhitespace; '+' is deliberately not special


def _lex(text: str) -> list[tuple[_Tok, str]]:
    """Tokenise like upstream's ``Lexer``: two-character operators win, identifiers run to a symbol/blank."""
    items: list[tuple[_Tok, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            items.append((_Tok.END, ""))
            return items
        ch = text[i]
        if ch in _SPECIAL:
            pair = text[i : i + 2]
            if pair in _SYMBOLS:
                items.append((_SYMBOLS[pair], pair))
                i += 2
            else:
                items.append((_SYMBOLS[ch], ch))
                i += 1
            continue
        start = i
        while i < n and text[i] not in _SPECIAL and text[i] not in _WHITESPACE:
            i += 1
        word = text[start:i]
        items.append((_KEYWORDS.get(word, _Tok.IDENTIFIER), word))


# --- parser ---------------------------------------------------------------------------------------------


class _ParseError(Exception):
    pass


class _Parser:
    """Upstream's recursive-descent ``Parser``; ``values`` context turns ``in``/``notin`` into identifiers."""

    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def lookahead(self, values: bool = True) -> tuple[_Tok, str]:
        tok, lit = self.items[self.pos]
        if values and tok in (_Tok.IN, _Tok.NOT_IN):
            tok = _Tok.IDENTIFIER
        return tok, lit

    def consume(self, values: bool = True) -> tuple[_Tok, str]:
        item = self.lookahead(values)
        # END is always last; parsing never consumes past it, but stay in bounds regardless.
        self.pos = min(self.pos + 1, len(self.items) - 1)
        return item

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            tok, lit = self.lookahead()
            if tok is _Tok.END:
                return requirements
            if tok not in (_Tok.IDENTIFIER, _Tok.DOES_NOT_EXIST):
                raise _ParseError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            try:
                requirements.append(self.requirement())
            except _ParseError as e:
                raise _ParseError(f"unable to parse requirement: {e}") from None
            tok, lit = self.consume()
            if tok is _Tok.END:
                return requirements
            if tok is not _Tok.COMMA:
                raise _ParseError(f"found '{lit}', expected: ',' or 'end of string'")
            tok, lit = self.lookahead()
            if tok not in (_Tok.IDENTIFIER, _Tok.DOES_NOT_EXIST):
                raise _ParseError(f"found '{lit}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        key, operator = self.key_and_inferred_operator()
        values: tuple[str, ...] = ()
        if operator is None:
            operator = self.operator()
            values = self.set_values() if operator in _SET_OPERATORS else self.exact_value()
        try:
            return Requirement(key, operator, values)
        except errors.StatusError as e:
            raise _ParseError(e.message) from None

    def key_and_inferred_operator(self) -> tuple[str, Operator | None]:
        operator: Operator | None = None
        tok, lit = self.consume()
        if tok is _Tok.DOES_NOT_EXIST:
            operator = Operator.DOES_NOT_EXIST
            tok, lit = self.consume()
        if tok is not _Tok.IDENTIFIER:
            raise _ParseError(f"found '{lit}', expected: identifier")
        if (err := _key_error(lit, "<nil>")) is not None:
            raise _ParseError(err)
        # "!key" stays DoesNotExist whatever follows; the leftover token then fails in parse().
        if operator is None and self.lookahead()[0] in (_Tok.END, _Tok.COMMA):
            operator = Operator.EXISTS
        return lit, operator

    def operator(self) -> Operator:
        tok, lit = self.consume(values=False)
        op = _TOKEN_OPERATORS.get(tok)
        if op is None:
            expected = ", ".join(o.value for o in _BINARY_OPERATORS)
            raise _ParseError(f"found '{lit}', expected: {expected}")
        return op

    def set_values(self) -> tuple[str, ...]:
        tok, lit = self.consume()
        if tok is not _Tok.OPEN_PAR:
            raise _ParseError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok is _Tok.CLOSED_PAR:  # "()" is the set holding only the empty value
            self.consume()
            return ("",)
        if tok not in (_Tok.IDENTIFIER, _Tok.COMMA):
            raise _ParseError(f"found '{lit}', expected: ',', ')' or identifier")
        values = self.identifiers()
        self.consume()  # the ')' that identifiers() stopped at
        return values

    def identifiers(self) -> tuple[str, ...]:
        """A comma-separated list where empty entries (``(,a)``, ``(a,,b)``, ``(a,)``) mean ""."""
        found: list[str] = []
        while True:
            tok, lit = self.consume()
            if tok is _Tok.IDENTIFIER:
                found.append(lit)
                nxt, nlit = self.lookahead()
                if nxt is _Tok.COMMA:
                    continue
                if nxt is _Tok.CLOSED_PAR:
                    return tuple(found)
                raise _ParseError(f"found '{nlit}', expected: ',' or ')'")
            if tok is _Tok.COMMA:
                if not found:
                    found.append("")
                nxt, _ = self.lookahead()
                if nxt is _Tok.CLOSED_PAR:
                    found.append("")
                    return tuple(found)
                if nxt is _Tok.COMMA:
                    found.append("")
                continue
            raise _ParseError(f"found '{lit}', expected: ',', or identifier")

    def exact_value(self) -> tuple[str, ...]:
        tok, _ = self.lookahead()
        if tok in (_Tok.END, _Tok.COMMA):
            return ("",)
        tok, lit = self.consume()
        if tok is _Tok.IDENTIFIER:
            return (lit,)
        raise _ParseError(f"found '{lit}', expected: identifier")


_TOKEN_OPERATORS = {
    _Tok.IN: Operator.IN,
    _Tok.EQUALS: Operator.EQUALS,
    _Tok.DOUBLE_EQUALS: Operator.DOUBLE_EQUALS,
    _Tok.GREATER_THAN: Operator.GREATER_THAN,
    _Tok.LESS_THAN: Operator.LESS_THAN,
    _Tok.NOT_IN: Operator.NOT_IN,
    _Tok.NOT_EQUALS: Operator.NOT_EQUALS,
}


def parse(text: str) -> Selector:
    """Parse a ``labelSelector`` query value; the empty string selects everything.

    The caller URL-decodes the query first; ``+`` has no meaning here (it is part of a word, and so is
    rejected by key/value validation).
    """
    try:
        return Selector(_Parser(text).parse())
    except _ParseError as e:
        raise errors.bad_request(str(e)) from None


# --- metav1.LabelSelector ---------------------------------------------------------------------------------

_EXPRESSION_OPERATORS = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}


def _or_default(value: Any, default: Any) -> Any:
    """JSON null means absent; any other value is kept so a wrong type is reported, not ignored."""
    return default if value is None else value


def from_label_selector(sel: Mapping[str, Any] | None) -> Selector:
    """Upstream ``LabelSelectorAsSelector``: None selects nothing, ``{}`` selects everything."""
    if sel is None:
        return Selector.nothing()
    if not isinstance(sel, Mapping):
        raise errors.bad_request("label selector must be an object")
    match_labels = _or_default(sel.get("matchLabels"), {})
    expressions = _or_default(sel.get("matchExpressions"), [])
    if not isinstance(match_labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in match_labels.items()
    ):
        raise errors.bad_request("matchLabels must map strings to strings")
    if not isinstance(expressions, list):
        raise errors.bad_request("matchExpressions must be a list")
    requirements = [Requirement(k, Operator.EQUALS, (v,)) for k, v in sorted(match_labels.items())]
    for expr in expressions:
        if not isinstance(expr, Mapping):
            raise errors.bad_request("matchExpressions entries must be objects")
        raw_op = expr.get("operator")
        op = _EXPRESSION_OPERATORS.get(raw_op) if isinstance(raw_op, str) else None
        if op is None:
            shown = validation.go_quote("" if raw_op is None else str(raw_op))
            raise errors.bad_request(f"{shown} is not a valid label selector operator")
        key = expr.get("key")
        values = _or_default(expr.get("values"), [])
        if not isinstance(key, str):
            raise errors.bad_request("matchExpressions key must be a string")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise errors.bad_request("matchExpressions values must be a list of strings")
        requirements.append(Requirement(key, op, tuple(values)))
    return Selector(requirements)


def exact(labels: Mapping[str, str]) -> Selector:
    """A selector requiring exactly these labels (upstream ``ValidatedSelectorFromSet``); {} is everything."""
    return Selector(Requirement(k, Operator.EQUALS, (v,)) for k, v in sorted(labels.items()))

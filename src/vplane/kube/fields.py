"""Field selectors: the ``fieldSelector`` query grammar.

Follows apimachinery v0.36 ``pkg/fields/selector.go``: terms split on unescaped commas, each split at
its first ``!=``, ``==`` or ``=``, values unescaped (``\\,`` ``\\=`` ``\\\\``), and a missing field
compares as the empty string. Error texts are upstream's because kubectl prints them verbatim.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from vplane.kube import errors


class Operator(enum.StrEnum):
    """The two operators a parsed field selector can hold (``==`` is read as ``=``, as upstream does)."""

    EQUALS = "="
    NOT_EQUALS = "!="


def escape_value(value: str) -> str:
    """Upstream ``EscapeValue``: make a literal safe as a field selector value."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def unescape_value(text: str) -> str:
    """Upstream ``UnescapeValue``, with its error texts (a rune prints as its number there)."""
    if not any(c in text for c in "\\,="):
        return text
    out: list[str] = []
    in_slash = False
    for ch in text:
        if in_slash:
            if ch not in "\\,=":
                raise errors.bad_request(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            in_slash = False
        elif ch == "\\":
            in_slash = True
        elif ch in ",=":
            raise errors.bad_request(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if in_slash:
        raise errors.bad_request("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Requirement:
    """``field <op> value``; ``value`` is the unescaped literal."""

    field: str
    operator: Operator
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        have = fields.get(self.field, "")
        return (have == self.value) == (self.operator is Operator.EQUALS)

    def __str__(self) -> str:
        return f"{self.field}{self.operator.value}{escape_value(self.value)}"


class FieldSelector:
    """An immutable AND of field requirements, kept in the order of their printed terms.

    Upstream sorts the raw terms before building the selector; sorting by the canonical term text gives
    the same order for canonical input and makes ``str`` re-parse to an equal selector.
    """

    __slots__ = ("_requirements",)

    _requirements: tuple[Requirement, ...]

    def __init__(self, requirements: Iterable[Requirement] = ()) -> None:
        object.__setattr__(self, "_requirements", tuple(sorted(requirements, key=str)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("FieldSelector is immutable")

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        return self._requirements

    @property
    def empty(self) -> bool:
        return not self._requirements

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(r.matches(fields) for r in self._requirements)

    def fields(self) -> set[str]:
        return {r.field for r in self._requirements}

    def __and__(self, other: object) -> FieldSelector:
        if not isinstance(other, FieldSelector):
            return NotImplemented
        return FieldSelector((*self._requirements, *other._requirements))

    def __iter__(self) -> Iterator[Requirement]:
        return iter(self._requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self._requirements)

    def __repr__(self) -> str:
        return f"FieldSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FieldSelector):
            return NotImplemented
        return self._requirements == other._requirements

    def __hash__(self) -> int:
        return hash(self._requirements)

    def __copy__(self) -> FieldSelector:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FieldSelector:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FieldSelector, (self._requirements,))


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not backslash-escaped; escapes stay in place for unescape_value."""
    terms: list[str] = []
    start = 0
    in_slash = False
    for i, ch in enumerate(text):
        if in_slash:
            in_slash = False
        elif ch == "\\":
            in_slash = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


# "==" before "=" so a doubled operator leaves no '=' on the value.
_TERM_OPERATORS = (("!=", Operator.NOT_EQUALS), ("==", Operator.EQUALS), ("=", Operator.EQUALS))


def _split_term(term: str) -> tuple[str, Operator, str] | None:
    """The field, operator and raw value at the first operator; fields have no escaping upstream."""
    for i in range(len(term)):
        for symbol, op in _TERM_OPERATORS:
            if term.startswith(symbol, i):
                return term[:i], op, term[i + len(symbol) :]
    return None


def parse(text: str) -> FieldSelector:
    """Parse a ``fieldSelector`` query value; the empty string selects everything."""
    requirements: list[Requirement] = []
    for term in sorted(_split_terms(text)) if text else []:
        if not term:
            continue
        split = _split_term(term)
        if split is None:
            raise errors.bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        field, op, raw = split
        value = unescape_value(raw)
        if not field and not value:
            continue  # upstream's identity transform drops a term with neither side
        requirements.append(Requirement(field, op, value))
    return FieldSelector(requirements)


def exact(fields: Mapping[str, str]) -> FieldSelector:
    """A selector requiring exactly these field values (upstream ``SelectorFromSet``)."""
    return FieldSelector(Requirement(f, Operator.EQUALS, v) for f, v in fields.items())


def unsupported_message(label: str) -> str:
    """Upstream's default wording (``DefaultMetaV1FieldSelectorConversion``); some kinds word it their way."""
    return f"field label not supported: {label}"


def check_supported(
    selector: FieldSelector,
    supported: Collection[str],
    message: Callable[[str], str] = unsupported_message,
) -> None:
    """Reject the first field the resource cannot filter on, in upstream's words."""
    for r in selector.requirements:
        if r.field not in supported:
            raise errors.bad_request(message(r.field))


def exact_value(selector: FieldSelector, field: str) -> str | None:
    """Upstream ``RequiresExactMatch``: the value an ``=`` term pins ``field`` to, to narrow lookups."""
    for r in selector.requirements:
        if r.field == field and r.operator is Operator.EQUALS:
            return r.value
    return None

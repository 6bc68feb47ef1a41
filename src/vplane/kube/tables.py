"""Server-side ``Table`` rendering for ``kubectl get`` (spec section 2 and S1).

kubectl has printed built-in kinds from server-made Tables for years: without them ``kubectl get cm`` shows only
``NAME AGE``. Built-in kinds' columns live in :mod:`vplane.kube.printers` (upstream's printers), the shared
formats in :mod:`vplane.kube.tablecells`; this module renders the Table and the custom resource columns
(apiextensions-apiserver ``pkg/registry/customresource/tableconvertor``, with client-go's JSONPath).

The server always renders the wide (``priority > 0``) cells, as upstream does; kubectl hides them unless
``-o wide``. Times are injected (``now`` in epoch seconds) so rendering is pure and testable.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from vplane.kube.errors import bad_request
from vplane.kube.printers import PRINTERS, format_endpoints, pod_status_cells, printer_for
from vplane.kube.tablecells import (
    AGE,
    CREATED_AT,
    DEFAULT_PRINTER,
    NAME,
    ColumnDef,
    Obj,
    Printer,
    age,
    column,
    format_label_selector,
    format_labels,
    human_duration,
    name_of,
    parse_time,
    selector_string,
)
from vplane.kube.tablecells import i as _i
from vplane.kube.tablecells import meta as _meta
from vplane.kube.tablecells import s as _s

__all__ = [
    "AGE",
    "CREATED_AT",
    "DEFAULT_PRINTER",
    "NAME",
    "PRINTERS",
    "ColumnDef",
    "Printer",
    "age",
    "build_table",
    "column",
    "format_endpoints",
    "format_label_selector",
    "format_labels",
    "human_duration",
    "parse_time",
    "pod_status_cells",
    "printer_for",
    "selector_string",
]

TABLE_API_VERSION = "meta.k8s.io/v1"
INCLUDE_OBJECT_VALUES = ("None", "Object", "Metadata")


# --------------------------------------------------------------------------------------------------
# JSONPath: the subset custom resource printer columns use (client-go util/jsonpath semantics)
# --------------------------------------------------------------------------------------------------
class JsonPathError(ValueError):
    """A path that cannot be parsed, or a comparison client-go would reject."""


@dataclass(frozen=True)
class _Field:
    name: str  # "*" for a wildcard over map values or list items


@dataclass(frozen=True)
class _Recursive:
    pass


@dataclass(frozen=True)
class _Index:
    start: int | None
    end: int | None
    step: int | None
    is_slice: bool


@dataclass(frozen=True)
class _Union:
    names: tuple[str, ...]


@dataclass(frozen=True)
class _Filter:
    left: tuple[Any, ...]
    op: str  # "exists", "==", "!=", "<", ">", "<=", ">="
    right: tuple[Any, ...] | None
    literal: Any


_Step = _Field | _Recursive | _Index | _Union | _Filter
_MISSING = object()
_FILTER_RE = re.compile(r"^([^!<>=]+)([!<>=]+)(.+?)$", re.S)
_SLICE_RE = re.compile(r"^(-?\d*)(?::(-?\d*))?(?::(-?\d*))?$")


@dataclass(frozen=True)
class JsonPath:
    """A compiled path; :meth:`find` returns every match, in document order."""

    source: str
    steps: tuple[_Step, ...]

    def find(self, data: Any) -> list[Any]:
        return _evaluate(self.steps, [data])


def compile_jsonpath(expr: str) -> JsonPath:
    """Parse a printer-column path such as ``.status.conditions[?(@.type=="Ready")].status``.

    Braces (``{.spec.x}``) and a leading ``$`` are accepted, as client-go does. Raises JsonPathError.
    """
    text = expr.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    return JsonPath(expr, tuple(_parse_steps(text)))


def _parse_steps(text: str) -> list[_Step]:
    steps: list[_Step] = []
    i = 0
    if text.startswith(("$", "@")):
        i = 1
    while i < len(text):
        ch = text[i]
        if text.startswith("..", i):
            steps.append(_Recursive())
            i += 2
            if i < len(text) and text[i] not in ".[":
                i = _parse_field(text, i, steps)
        elif ch == ".":
            i = _parse_field(text, i + 1, steps)
        elif ch == "[":
            i = _parse_bracket(text, i, steps)
        elif ch.isspace():
            i += 1
        else:
            raise JsonPathError(f"unrecognized character in path {text!r} at {i}")
    return steps


def _parse_field(text: str, i: int, steps: list[_Step]) -> int:
    name: list[str] = []
    while i < len(text) and text[i] not in ".[":
        if text[i] == "\\" and i + 1 < len(text):
            name.append(text[i + 1])
            i += 2
            continue
        name.append(text[i])
        i += 1
    field = "".join(name).strip()
    if not field:
        if i >= len(text):
            return i  # a bare "." selects the current object
        raise JsonPathError(f"empty field name in path {text!r}")
    steps.append(_Field(field))
    return i


def _matching_bracket(text: str, i: int) -> int:
    """Index of the ``]`` closing the bracket at ``i``, skipping quoted text and parentheses."""
    depth = 0
    quote = ""
    j = i + 1
    while j < len(text):
        ch = text[j]
        if quote:
            if ch == "\\":
                j += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "]" and depth == 0:
            return j
        j += 1
    raise JsonPathError(f"unclosed bracket in path {text!r}")


def _unquote(token: str) -> str | None:
    token = token.strip()
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        return token[1:-1].replace("\\" + token[0], token[0])
    return None


def _parse_bracket(text: str, i: int, steps: list[_Step]) -> int:
    end = _matching_bracket(text, i)
    inner = text[i + 1 : end].strip()
    if inner.startswith("?(") and inner.endswith(")"):
        steps.append(_parse_filter(inner[2:-1]))
    elif inner == "*":
        steps.append(_Field("*"))
    elif inner and inner[0] in "'\"":
        parts = [_unquote(p) for p in _split_union(inner)]
        if any(p is None for p in parts):
            raise JsonPathError(f"bad quoted key in path {text!r}")
        names = tuple(p for p in parts if p is not None)
        steps.append(_Field(names[0]) if len(names) == 1 else _Union(names))
    else:
        m = _SLICE_RE.match(inner.replace(" ", ""))
        if m is None:
            raise JsonPathError(f"bad array index in path {text!r}")
        raw_start, raw_end, raw_step = m.group(1), m.group(2), m.group(3)
        is_slice = raw_end is not None
        if not is_slice and not raw_start:
            raise JsonPathError(f"empty array index in path {text!r}")
        steps.append(
            _Index(
                int(raw_start) if raw_start else None,
                int(raw_end) if raw_end else None,
                int(raw_step) if raw_step else None,
                is_slice,
            )
        )
    return end + 1


def _split_union(inner: str) -> list[str]:
    parts: list[str] = []
    quote = ""
    current: list[str] = []
    for ch in inner:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            current.append(ch)
        elif ch == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _parse_literal(token: str) -> Any:
    quoted = _unquote(token)
    if quoted is not None:
        return quoted
    token = token.strip()
    if token in ("true", "false"):
        return token == "true"
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        return _MISSING


def _parse_operand(token: str) -> tuple[tuple[_Step, ...] | None, Any]:
    token = token.strip()
    if token.startswith(("@", "$")):
        return tuple(_parse_steps(token)), _MISSING
    literal = _parse_literal(token)
    if literal is _MISSING:
        raise JsonPathError(f"unrecognized filter operand {token!r}")
    return None, literal


def _parse_filter(body: str) -> _Filter:
    m = _FILTER_RE.match(body.strip())
    if m is None:
        left, _ = _parse_operand(body)
        if left is None:
            raise JsonPathError(f"filter needs a path: {body!r}")
        return _Filter(left, "exists", None, _MISSING)
    op = m.group(2)
    if op not in ("==", "!=", "<", ">", "<=", ">="):
        raise JsonPathError(f"unrecognized filter operator {op!r}")
    left, left_literal = _parse_operand(m.group(1))
    right, right_literal = _parse_operand(m.group(3))
    if left is None:  # literal on the left: swap so the path is evaluated
        flipped = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
        if right is None:
            raise JsonPathError(f"filter needs a path: {body!r}")
        return _Filter(right, flipped, None, left_literal)
    return _Filter(left, op, right, right_literal)


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value[k] for k in sorted(value)]
    if isinstance(value, list):
        return list(value)
    return []


def _descendants(value: Any) -> list[Any]:
    out = [value]
    for child in _children(value):
        out.extend(_descendants(child))
    return out


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "other"


def _compare(left: Any, op: str, right: Any) -> bool:
    kind = _kind(left)
    if kind != _kind(right) or kind == "other":
        raise JsonPathError(f"incompatible types for comparison: {left!r} {op} {right!r}")
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if kind == "bool":
        raise JsonPathError("invalid type for comparison")
    if op == "<":
        return bool(left < right)
    if op == ">":
        return bool(left > right)
    if op == "<=":
        return bool(left <= right)
    return bool(left >= right)


def _apply_index(value: list[Any], step: _Index) -> list[Any]:
    n = len(value)
    if not step.is_slice:
        assert step.start is not None
        index = step.start + n if step.start < 0 else step.start
        if index < 0 or index >= n:
            raise JsonPathError(f"array index out of bounds: index {step.start}, length {n}")
        return [value[index]]
    return value[slice(step.start, step.end, step.step)]


def _evaluate(steps: Sequence[_Step], values: list[Any]) -> list[Any]:
    for step in steps:
        out: list[Any] = []
        for value in values:
            if value is None:
                continue  # client-go skips nil values (a JSON null reached mid-path)
            if isinstance(step, _Field):
                if step.name == "*":
                    out.extend(_children(value))
                elif isinstance(value, dict) and step.name in value:
                    out.append(value[step.name])
            elif isinstance(step, _Union):
                if isinstance(value, dict):
                    out.extend(value[n] for n in step.names if n in value)
            elif isinstance(step, _Recursive):
                out.extend(_descendants(value))
            elif isinstance(step, _Index):
                if not isinstance(value, list):
                    raise JsonPathError("not an array or slice")
                out.extend(_apply_index(value, step))
            else:
                if not isinstance(value, list):
                    raise JsonPathError("not an array or slice and cannot be filtered")
                out.extend(item for item in value if _filter_matches(step, item))
        values = out
    return values


def _filter_matches(step: _Filter, item: Any) -> bool:
    lefts = _evaluate(step.left, [item])
    if not lefts:
        return False
    if len(lefts) > 1:
        raise JsonPathError("can only compare one element at a time")
    if step.op == "exists":
        return True
    if step.right is not None:
        rights = _evaluate(step.right, [item])
        if len(rights) != 1:
            raise JsonPathError("can only compare one element at a time")
        right = rights[0]
    else:
        right = step.literal
    return _compare(lefts[0], step.op, right)


# --------------------------------------------------------------------------------------------------
# Custom resource printer columns
# --------------------------------------------------------------------------------------------------
DEFAULT_CRD_COLUMNS: tuple[Obj, ...] = (
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)
"""What apiextensions serves when a CRD version lists no additionalPrinterColumns."""


def crd_columns(columns: Sequence[Mapping[str, Any]]) -> list[ColumnDef]:
    """Column definitions for a CRD version: Name, then each additionalPrinterColumn in order."""
    defs = [NAME]
    for col in columns or DEFAULT_CRD_COLUMNS:
        path = _s(col.get("jsonPath"))
        defs.append(
            column(
                _s(col.get("name")),
                _s(col.get("type")) or "string",
                _s(col.get("description")) or f"Custom resource column at JSONPath {path}",
                fmt=_s(col.get("format")),
                priority=_i(col.get("priority")),
            )
        )
    return defs


def _go_float(value: float) -> str:
    """A float as Go's ``%v`` prints it: shortest digits, exponent form below 1e-4 and from 1e6."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    parts = Decimal(repr(abs(value))).as_tuple()
    assert isinstance(parts.exponent, int)
    point = len(parts.digits) + parts.exponent  # position of the decimal point within the digits
    digits = "".join(map(str, parts.digits)).rstrip("0")
    exponent = point - 1
    if exponent < -4 or exponent >= 6:  # strconv 'g' with shortest precision decides with precision 6
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _go_json(value: Any) -> str:
    """``encoding/json`` output: compact, map keys sorted, and <, >, & escaped as Go does."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _as_text(value: Any) -> str | None:
    """How client-go's JSONPath printer renders one value into a string column."""
    if value is None:
        return None
    if isinstance(value, dict | list):
        return _go_json(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    return str(value)


def crd_cell(column_type: str, value: Any, now: float) -> Any:
    """One custom-resource cell from the first match: typed as the column says, None (``<none>``) otherwise."""
    if value is None:
        return None
    if column_type == "string":
        return _as_text(value)
    if column_type == "integer":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return int(value)
    if column_type == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)
    if column_type == "boolean":
        return value if isinstance(value, bool) else None
    if column_type == "date":
        if not isinstance(value, str):
            return None
        t = parse_time(value)
        if t is None:
            return "<invalid>"
        return human_duration(now - t)
    return None


def crd_cells(paths: Sequence[tuple[JsonPath | None, str]], obj: Obj, now: float) -> list[Any]:
    cells: list[Any] = [name_of(obj)]
    for path, column_type in paths:
        if path is None:
            cells.append(None)
            continue
        try:
            found = path.find(obj)
        except JsonPathError:
            found = []
        cells.append(crd_cell(column_type, found[0], now) if found else None)
    return cells


def _crd_printer(columns: Sequence[Mapping[str, Any]]) -> Printer:
    compiled: list[tuple[JsonPath | None, str]] = []
    for col in columns or DEFAULT_CRD_COLUMNS:
        try:
            path: JsonPath | None = compile_jsonpath(_s(col.get("jsonPath")))
        except JsonPathError:
            path = None  # CRD validation rejects these; render an empty cell rather than fail the list
        compiled.append((path, _s(col.get("type")) or "string"))
    return Printer(tuple(crd_columns(columns)), lambda obj, now: crd_cells(compiled, obj, now))


# --------------------------------------------------------------------------------------------------
# The Table
# --------------------------------------------------------------------------------------------------
def _row_object(obj: Obj, include_object: str, api_version: str) -> Obj | None:
    if include_object == "Object":
        return obj
    if include_object == "None":
        return None
    return {"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": _meta(obj)}


def build_table(
    kind: str,
    group: str,
    objects: Iterable[Obj],
    *,
    include_object: str = "Metadata",
    now: float,
    printer_columns: Sequence[Mapping[str, Any]] | None = None,
    with_columns: bool = True,
    list_meta: Mapping[str, Any] | None = None,
    api_version: str = TABLE_API_VERSION,
) -> Obj:
    """A ``meta.k8s.io`` Table of ``objects`` (items of one ``group``/``kind``), as kubectl asks with ``as=Table``.

    * ``printer_columns``: a custom resource version's ``additionalPrinterColumns`` (an empty list means the
      default Age column); None selects the built-in printer for ``(group, kind)`` or the default convertor.
    * ``include_object``: ``Metadata`` (also ``""``) puts PartialObjectMetadata in ``rows[].object``,
      ``Object`` the whole object, ``None`` a JSON null. Anything else is a 400, worded as upstream.
    * ``with_columns=False`` is for watch events after the first: ``columnDefinitions`` is then null, as
      upstream's ``noHeaders`` gives, and kubectl keeps the columns it already has.
    * ``list_meta`` (resourceVersion, continue, remainingItemCount) becomes the Table's metadata; without it
      a single object's resourceVersion is used.
    * ``api_version``: ``meta.k8s.io/v1`` or ``meta.k8s.io/v1beta1``, whichever the client negotiated.
    """
    if include_object == "":
        include_object = "Metadata"
    if include_object not in INCLUDE_OBJECT_VALUES:
        raise bad_request(f"unrecognized includeObject value: {json.dumps(include_object)}")
    printer = _crd_printer(printer_columns) if printer_columns is not None else printer_for(group, kind)
    items = list(objects)
    if printer.order is not None:
        items = printer.order(items)

    rows: list[Obj] = []
    for obj in items:
        row: Obj = {"cells": printer.cells(obj, now)}
        if printer.conditions is not None:
            conditions = printer.conditions(obj)
            if conditions:
                row["conditions"] = conditions
        row["object"] = _row_object(obj, include_object, api_version)
        rows.append(row)

    metadata: Obj = {}
    if list_meta is not None:
        for key in ("resourceVersion", "continue", "remainingItemCount"):
            if list_meta.get(key) not in (None, ""):
                metadata[key] = list_meta[key]
    elif len(items) == 1:
        rv = _meta(items[0]).get("resourceVersion")
        if rv:
            metadata["resourceVersion"] = rv

    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": metadata,
        "columnDefinitions": [dict(c) for c in printer.columns] if with_columns else None,
        "rows": rows,
    }

"""Normalize ``metav1.Time`` and ``metav1.MicroTime`` fields of built-in kinds the way upstream does.

Clients send times in many RFC 3339 shapes (kopf sends Python's ``isoformat()``, with ``+00:00`` and
microseconds). Upstream decodes them into Go time values and encodes them back as
``YYYY-MM-DDTHH:MM:SSZ`` (Time, seconds) or ``...SS.ffffffZ`` (MicroTime), so that is what a client reads
back. Which fields are which comes from the kinds' OpenAPI schemas (``$ref`` to the two definitions);
the paths are computed once per kind.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from vplane.kube import openapi

TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
MICRO_TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"
_REF = "#/components/schemas/"
_MAX_DEPTH = 12

Path = tuple[str, ...]
"""Field names; ``*`` stands for every list item or map value."""


def _target(schema: Mapping[str, Any]) -> str | None:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return ref[len(_REF) :]
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
        return _target(all_of[0])
    return None


def _walk(
    schemas: Mapping[str, Any],
    schema: Mapping[str, Any],
    path: Path,
    depth: int,
    out: list[tuple[Path, bool]],
    seen: tuple[str, ...],
) -> None:
    if depth > _MAX_DEPTH:
        return
    target = _target(schema)
    if target in (TIME, MICRO_TIME):
        out.append((path, target == MICRO_TIME))
        return
    if target is not None:
        if target in seen:
            return
        resolved = schemas.get(target)
        if isinstance(resolved, Mapping):
            _walk(schemas, resolved, path, depth + 1, out, (*seen, target))
        return
    for name, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, Mapping):
            _walk(schemas, sub, (*path, name), depth + 1, out, seen)
    items = schema.get("items")
    if isinstance(items, Mapping):
        _walk(schemas, items, (*path, "*"), depth + 1, out, seen)
    more = schema.get("additionalProperties")
    if isinstance(more, Mapping):
        _walk(schemas, more, (*path, "*"), depth + 1, out, seen)


@lru_cache(maxsize=256)
def time_paths(definition: str) -> tuple[tuple[Path, bool], ...]:
    """Every Time (False) and MicroTime (True) field path of a built-in definition."""
    schemas = openapi.load_builtin().schemas
    schema = schemas.get(definition)
    if not isinstance(schema, Mapping):
        return ()
    out: list[tuple[Path, bool]] = []
    _walk(schemas, schema, (), 0, out, (definition,))
    return tuple(out)


def _format(value: str, micro: bool) -> str | None:
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    parsed = parsed.astimezone(datetime.UTC)
    if micro:
        return parsed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return parsed.strftime("%Y-%m-%dT%H:%M:%SZ")


def _canonical(value: str, micro: bool) -> bool:
    """Already in upstream's form (the common case: our own timestamps); parsing it again costs time."""
    if micro:
        return len(value) == 27 and value[26] == "Z" and value[19] == "." and value[10] == "T"
    return len(value) == 20 and value[19] == "Z" and value[10] == "T" and value[13] == ":"


def _apply(value: Any, path: Path, micro: bool) -> None:
    if not path or value is None:
        return
    head, rest = path[0], path[1:]
    if head != "*":  # the common step: one named field, no list of children to build
        if not isinstance(value, dict):
            return
        child = value.get(head)
        if rest:
            _apply(child, rest, micro)
        elif isinstance(child, str) and not _canonical(child, micro):
            formatted = _format(child, micro)
            if formatted is not None:
                value[head] = formatted
        return
    children: list[tuple[Any, Any]]
    if isinstance(value, list):
        children = list(enumerate(value))
    elif isinstance(value, dict):
        children = list(value.items())
    else:
        return
    for key, child in children:
        if rest:
            _apply(child, rest, micro)
        elif isinstance(child, str) and not _canonical(child, micro):
            formatted = _format(child, micro)
            if formatted is not None:
                value[key] = formatted


def normalize(obj: dict[str, Any], definition: str) -> None:
    """Rewrite every Time and MicroTime field of ``obj`` (a built-in kind) to upstream's form, in place.

    Values that do not parse as RFC 3339 are left for validation to reject.
    """
    for path, micro in time_paths(definition):
        _apply(obj, path, micro)

"""The pieces every server-side Table is built from: column definitions, Go's duration and time formats,
and the label and selector formats kubectl users know (upstream ``pkg/printers``, apimachinery
``util/duration`` and ``labels``). Pure functions; times are injected (``now`` in epoch seconds).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

from vplane.kube.openapi import load_builtin

Obj = dict[str, Any]


class ColumnDef(TypedDict):
    """One ``columnDefinitions`` entry; every key is always present on the wire."""

    name: str
    type: str
    format: str
    description: str
    priority: int


def column(
    name: str, type_: str = "string", description: str = "", *, fmt: str = "", priority: int = 0
) -> ColumnDef:
    return {"name": name, "type": type_, "format": fmt, "description": description, "priority": priority}


def doc(field: str) -> str:
    """Upstream's description of ``<definition>.<field>`` (``ObjectMeta.name``, ``core.v1.PodSpec.nodeName``):
    upstream's printers describe most columns with the field's API documentation."""
    full = field if field.startswith("io.k8s.") else _SHORT.get(field.split(".", 1)[0], "") + field
    return load_builtin().descriptions.get(full, "")


_SHORT = {
    "ObjectMeta": "io.k8s.apimachinery.pkg.apis.meta.v1.",
    "Status": "io.k8s.apimachinery.pkg.apis.meta.v1.",
}


# --------------------------------------------------------------------------------------------------
# Durations and timestamps
# --------------------------------------------------------------------------------------------------
_NS = 1_000_000_000
_MINUTE = 60 * _NS
_HOUR = 60 * _MINUTE


def _trunc_div(a: int, b: int) -> int:
    """Integer division rounding toward zero, as Go's ``/`` on integers does."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``: 2-3 significant figures, Go's rounding.

    Thresholds: seconds below 2 minutes, ``XmYs`` below 10 minutes, minutes below 3 hours, ``XhYm`` below
    8 hours, hours below 2 days, ``XdYh`` below 8 days, days below 2 years, ``XyYd`` below 8 years, then years.
    Up to one second in the future reads ``0s`` (clock skew); further is ``<invalid>``.
    """
    d = round(seconds * _NS)
    secs = _trunc_div(d, _NS)
    if secs < -1:
        return "<invalid>"
    if secs < 0:
        return "0s"
    if secs < 60 * 2:
        return f"{secs}s"
    minutes = d // _MINUTE
    if minutes < 10:
        s = (d // _NS) % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = d // _HOUR
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp (Time or MicroTime) as epoch seconds; None if absent or malformed."""
    if not isinstance(value, str) or "T" not in value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()


def age(creation_timestamp: str | None, now: float) -> str:
    """How long ago a timestamp was, as ``kubectl get`` shows it; ``<unknown>`` for a zero/missing time."""
    if not creation_timestamp:
        return "<unknown>"
    t = parse_time(creation_timestamp)
    if t is None:
        return "<invalid>"
    return human_duration(now - t)


def rfc3339_utc(value: Any) -> str:
    """A timestamp re-rendered as Go's ``Time.UTC().Format(time.RFC3339)`` (zero time if missing)."""
    t = parse_time(value)
    if t is None:
        return "0001-01-01T00:00:00Z"
    return datetime.fromtimestamp(math.floor(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------------
# Small accessors and the label formats kubectl users know
# --------------------------------------------------------------------------------------------------
def d(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def lst(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def s(value: Any) -> str:
    return value if isinstance(value, str) else ""


def i(value: Any, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return int(value)


def meta(obj: Obj) -> Obj:
    return d(obj.get("metadata"))


def format_labels(labels: Mapping[str, Any] | None) -> str:
    """``labels.FormatLabels``: sorted ``k=v`` pairs, or ``<none>``."""
    pairs = sorted(f"{k}={v}" for k, v in (labels or {}).items())
    return ",".join(pairs) or "<none>"


def _requirement_string(key: str, op: str, values: Sequence[str]) -> str:
    if op == "Exists":
        return key
    if op == "DoesNotExist":
        return "!" + key
    joined = values[0] if len(values) == 1 else ",".join(sorted(values))
    if op == "=":
        return f"{key}={joined}"
    word = "in" if op == "In" else "notin"
    return f"{key} {word} ({joined})"


def selector_string(selector: Any) -> str:
    """``labels.Selector.String()`` of a LabelSelector: requirements sorted by key, ``""`` for nil or empty.

    Unlike upstream, key and value syntax is not validated (upstream prints ``<error>``/``<invalid>``).
    """
    sel = d(selector)
    reqs: list[tuple[str, str]] = []
    for key, value in d(sel.get("matchLabels")).items():
        reqs.append((key, _requirement_string(key, "=", [s(value)])))
    for expr in lst(sel.get("matchExpressions")):
        e = d(expr)
        key = s(e.get("key"))
        values = [s(v) for v in lst(e.get("values"))]
        reqs.append((key, _requirement_string(key, s(e.get("operator")), values)))
    reqs.sort(key=lambda r: r[0])
    return ",".join(r for _, r in reqs)


def format_label_selector(selector: Any) -> str:
    """``metav1.FormatLabelSelector``: the selector string, or ``<none>`` when it selects nothing/everything."""
    return selector_string(selector) or "<none>"


def containers_and_images(pod_spec: Any) -> tuple[str, str]:
    containers = [d(c) for c in lst(d(pod_spec).get("containers"))]
    return ",".join(s(c.get("name")) for c in containers), ",".join(s(c.get("image")) for c in containers)


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --------------------------------------------------------------------------------------------------
# Printers
# --------------------------------------------------------------------------------------------------
NAME = column("Name", description=doc("ObjectMeta.name"), fmt="name")
AGE = column("Age", description=doc("ObjectMeta.creationTimestamp"))
CREATED_AT = column("Created At", "date", doc("ObjectMeta.creationTimestamp"))
CONTAINERS = column("Containers", description="Names of each container in the template.", priority=1)
IMAGES = column("Images", description="Images referenced by each container in the template.", priority=1)

CellFn = Callable[[Obj, float], list[Any]]


@dataclass(frozen=True)
class Printer:
    """How one kind becomes table rows."""

    columns: tuple[ColumnDef, ...]
    cells: CellFn
    conditions: Callable[[Obj], list[Obj]] | None = None
    order: Callable[[list[Obj]], list[Obj]] | None = None
    """Rows in the order upstream prints a list of this kind (default: as listed)."""


def name_of(obj: Obj) -> str:
    return s(meta(obj).get("name"))


def obj_age(obj: Obj, now: float) -> str:
    return age(meta(obj).get("creationTimestamp"), now)


def default_cells(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), rfc3339_utc(meta(obj).get("creationTimestamp"))]


DEFAULT_PRINTER = Printer((NAME, CREATED_AT), default_cells)
"""Upstream's default convertor, used for kinds without a printer (Role, ClusterRole, CRD, ...)."""

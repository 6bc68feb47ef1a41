"""``metav1.Time`` on the wire (RFC 3339, whole seconds, ``Z``) and back, for pure decisions on floats."""

from __future__ import annotations

import datetime
from typing import Any


def format_time(ts: float) -> str:
    """``metav1.Time`` serializes to whole seconds (upstream's ``RFC3339`` layout)."""
    return datetime.datetime.fromtimestamp(int(ts), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_time_nano(ts: float) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: fractional digits only when non-zero, trailing zeros dropped."""
    whole = int(ts)
    base = datetime.datetime.fromtimestamp(whole, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    nanos = round((ts - whole) * 1e9)
    if nanos <= 0 or nanos >= 1_000_000_000:
        return base + "Z"
    return base + "." + f"{nanos:09d}".rstrip("0") + "Z"


def parse_time(value: Any) -> float | None:
    """Seconds since the epoch, or None for an absent or malformed time (upstream's zero time)."""
    if not isinstance(value, str) or not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        parsed = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()

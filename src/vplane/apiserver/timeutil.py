"""Kubernetes time formats: ``metav1.Time`` is RFC 3339 in seconds with ``Z``; MicroTime adds microseconds."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

Clock = Callable[[], float]


_last: tuple[int, str] = (-1, "")


def rfc3339(ts: float) -> str:
    """Formatted once per second: every write stamps times, and formatting is not free."""
    global _last
    second = int(ts)
    if _last[0] != second:
        _last = (second, datetime.datetime.fromtimestamp(second, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _last[1]


def rfc3339_micro(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str) -> float | None:
    """Accept what clients send: ``Z`` or offsets, with or without fractions (kopf sends isoformat)."""
    try:
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        parsed = datetime.datetime.fromisoformat(text)
    except (ValueError, AttributeError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()


def wall_clock() -> float:
    return time.time()

"""``events.k8s.io/v1`` Events as kube-scheduler's recorder (client-go ``tools/events``) writes them.

An event is keyed by what it is about (the full object reference, resourceVersion included), its
reason, action, reporting controller and related object. The first occurrence is created; a second one
within the series window turns it into a series (``series.count: 2``) and is written at once; later ones
only count up in memory and are written by the heartbeat, and once more when the series goes quiet for a
window, after which it is forgotten. Decisions are pure; the caller performs the writes.
"""

from __future__ import annotations

import socket
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vplane.controllers.leaderelection import format_micro_time
from vplane.kube.objects import Obj

Clock = Callable[[], float]

NORMAL = "Normal"
WARNING = "Warning"


def object_reference(obj: Mapping[str, Any], api_version: str = "v1", kind: str = "Pod") -> Obj:
    """``reference.GetReference``: what an event's ``regarding`` (or ``related``) holds."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    ref: Obj = {"kind": obj.get("kind") or kind, "apiVersion": obj.get("apiVersion") or api_version}
    for source, target in (
        ("namespace", "namespace"),
        ("name", "name"),
        ("uid", "uid"),
        ("resourceVersion", "resourceVersion"),
    ):
        if meta.get(source):
            ref[target] = meta[source]
    return ref


def _key(
    ref: Mapping[str, Any], related: Mapping[str, Any] | None, reason: str, action: str
) -> tuple[Any, ...]:
    return (
        tuple(sorted(ref.items())),
        tuple(sorted(related.items())) if related else (),
        reason,
        action,
    )


@dataclass(frozen=True, slots=True)
class Create:
    namespace: str
    event: Obj


@dataclass(frozen=True, slots=True)
class Patch:
    namespace: str
    name: str
    patch: Obj


Write = Create | Patch


@dataclass(slots=True)
class _Entry:
    event: Obj
    last: float
    written_count: int = 1


@dataclass(slots=True)
class EventRecorder:
    """The recorder's decisions for one reporting controller (``default-scheduler``)."""

    controller: str
    clock: Clock
    window: float = 360.0
    heartbeat: float = 1800.0
    cache_size: int = 4096
    instance: str = ""
    _cache: OrderedDict[tuple[Any, ...], _Entry] = field(default_factory=OrderedDict)
    _last_heartbeat: float | None = None

    def __post_init__(self) -> None:
        if not self.instance:
            self.instance = f"{self.controller}-{socket.gethostname()}"

    def record(
        self,
        regarding: Mapping[str, Any],
        event_type: str,
        reason: str,
        action: str,
        note: str,
        related: Mapping[str, Any] | None = None,
    ) -> Write | None:
        now = self.clock()
        ref = object_reference(regarding)
        related_ref = object_reference(related) if related is not None else None
        key = _key(ref, related_ref, reason, action)
        entry = self._cache.get(key)
        if entry is not None and now - entry.last <= self.window:
            entry.last = now
            series = entry.event.setdefault("series", {"count": 1})
            series["count"] = int(series.get("count", 1)) + 1
            series["lastObservedTime"] = format_micro_time(now)
            self._cache.move_to_end(key)
            if series["count"] == 2:
                return self._series_patch(entry)
            return None
        namespace = str(ref.get("namespace") or "default")
        event: Obj = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"{ref.get('name', '')}.{int(now * 1e9):x}", "namespace": namespace},
            "eventTime": format_micro_time(now),
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "regarding": ref,
            "note": note,
            "type": event_type,
        }
        if related_ref is not None:
            event["related"] = related_ref
        self._cache[key] = _Entry(event, now)
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return Create(namespace, event)

    def _series_patch(self, entry: _Entry) -> Patch:
        meta = entry.event["metadata"]
        series = entry.event["series"]
        entry.written_count = int(series["count"])
        return Patch(
            meta["namespace"],
            meta["name"],
            {"series": {"count": series["count"], "lastObservedTime": series["lastObservedTime"]}},
        )

    def tick(self) -> list[Patch]:
        """Periodic work: the heartbeat rewrites every series; quiet series are written one last time and,
        like quiet single events, forgotten."""
        now = self.clock()
        writes: list[Patch] = []
        heartbeat = self._last_heartbeat is None or now - self._last_heartbeat >= self.heartbeat
        if self._last_heartbeat is None:
            self._last_heartbeat = now
            heartbeat = False
        elif heartbeat:
            self._last_heartbeat = now
        for key, entry in list(self._cache.items()):
            series = entry.event.get("series")
            quiet = now - entry.last > self.window
            if series is not None and (heartbeat or quiet) and entry.written_count != series["count"]:
                writes.append(self._series_patch(entry))
            if quiet:
                del self._cache[key]
        return writes

    def next_tick(self) -> float:
        """How long until :meth:`tick` may have work (the sooner of a window and the heartbeat)."""
        return min(self.window, self.heartbeat)

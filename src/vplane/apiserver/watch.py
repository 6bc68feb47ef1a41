"""Watches: fan committed events out to every open watch stream.

The hub is a cache listener. It routes each event by resource to the registered watchers; a watcher
filters by namespace, name and selectors and queues the events it wants. Each event is framed once
(``{"type":...,"object":...}\\n`` around the stored bytes with the revision spliced in) and the same bytes
go to every plain-JSON watcher, so fan-out costs a queue put per watcher, not an encode.

Watchers have a bounded queue. One that falls too far behind is closed, as kube-apiserver does: the
client re-watches from the last revision it saw and loses nothing, while a stuck client cannot make the
server buffer without limit. A watcher whose client has gone is closed at once (the handler registers
:meth:`Watcher.close` for the connection's loss), and the hub counts each user's open watches so a
per-user cap can refuse more.

Bookmarks (for watches that allow them) come every ``bookmark_interval_seconds`` and once more 2 s before
the watch's timeout (:func:`next_bookmark_at`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from vplane.apiserver import codec
from vplane.kube.fields import FieldSelector
from vplane.kube.labels import Selector
from vplane.kube.objects import Obj
from vplane.storage.interface import Event, KeyValue

CLOSE = None

PRE_TIMEOUT_BOOKMARK_SECONDS = 2.0
"""A watch that allows bookmarks gets one this long before its timeout ends it, as from upstream's cacher
(``cacheWatcher.nextBookmarkTime``), so a reflector re-watches from a fresh revision, not from the last
event it happened to see."""


def next_bookmark_at(now: float, interval: float, deadline: float) -> float | None:
    """When a bookmark-enabled watch ending at ``deadline`` gets its next bookmark: ``interval`` from now,
    but no later than :data:`PRE_TIMEOUT_BOOKMARK_SECONDS` before the deadline; None once that moment has
    passed (no more bookmarks, so a watch of 2 s or less gets none, as upstream)."""
    at = min(now + interval, deadline - PRE_TIMEOUT_BOOKMARK_SECONDS)
    return at if at > now else None


@dataclass(slots=True)
class WatchEvent:
    """One committed change with its lazily computed forms, shared by every watcher."""

    event: Event
    _obj: Obj | None = None
    _prev_obj: Obj | None = None
    _frames: dict[str, bytes] = field(default_factory=dict)

    @property
    def revision(self) -> int:
        return self.event.revision

    def obj(self) -> Obj:
        if self._obj is None:
            self._obj = codec.decode_kv(self.event.kv)
        return self._obj

    def prev_obj(self) -> Obj | None:
        if self.event.prev is None:
            return None
        if self._prev_obj is None:
            self._prev_obj = codec.decode_kv(self.event.prev)
        return self._prev_obj

    def frame(self, event_type: str) -> bytes:
        framed = self._frames.get(event_type)
        if framed is None:
            framed = frame_bytes(event_type, codec.wire_bytes(self.event.kv))
            self._frames[event_type] = framed
        return framed


def frame_bytes(event_type: str, object_bytes: bytes) -> bytes:
    return b'{"type":"' + event_type.encode() + b'","object":' + object_bytes + b"}\n"


def frame_obj(event_type: str, obj: Any) -> bytes:
    return frame_bytes(event_type, orjson.dumps(obj))


@dataclass(slots=True)
class Delivery:
    type: str
    event: WatchEvent


class Watcher:
    """One watch stream's subscription: filters, and a bounded queue of deliveries."""

    def __init__(
        self,
        prefix: str,
        *,
        name: str = "",
        labels: Selector | None = None,
        fields: FieldSelector | None = None,
        field_values: Callable[[Obj], dict[str, str]] | None = None,
        capacity: int = 10_000,
    ) -> None:
        self.prefix = prefix
        self.name = name
        self.labels = labels if labels is not None and not labels.empty else None
        self.fields = fields if fields is not None and not fields.empty else None
        self.field_values = field_values
        self.queue: asyncio.Queue[Delivery | None] = asyncio.Queue()
        self.capacity = capacity
        self.last_revision = 0
        self.overflowed = False

    def close(self) -> None:
        """End the stream after what is queued (the client went, or the server stops)."""
        self.queue.put_nowait(CLOSE)

    @property
    def filtered(self) -> bool:
        return self.labels is not None or self.fields is not None

    def matches_obj(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.labels is not None and not self.labels.matches(meta.get("labels") or {}):
            return False
        if self.fields is not None:
            values = {
                "metadata.name": str(meta.get("name", "")),
                "metadata.namespace": str(meta.get("namespace", "")),
            }
            if self.field_values is not None:
                values.update(self.field_values(obj))
            if not self.fields.matches(values):
                return False
        return True

    def matches_key(self, kv: KeyValue) -> bool:
        if not kv.key.startswith(self.prefix):
            return False
        if self.name and kv.key[kv.key.rfind("/") + 1 :] != self.name:
            return False
        return True

    def offer(self, wevent: WatchEvent) -> None:
        """Queue the delivery this event means for this watcher, if any (called on the loop)."""
        if self.overflowed or wevent.revision <= self.last_revision:
            return
        event = wevent.event
        if not self.matches_key(event.kv):
            return
        if event.type == "DELETE":
            kind = "DELETED" if (not self.filtered or self.matches_obj(wevent.obj())) else ""
        elif not self.filtered:
            kind = "MODIFIED" if event.prev is not None else "ADDED"
        else:
            now = self.matches_obj(wevent.obj())
            before = self.matches_obj(wevent.prev_obj())
            kind = "MODIFIED" if now and before else "ADDED" if now else "DELETED" if before else ""
        self.last_revision = wevent.revision
        if not kind:
            return
        if self.queue.qsize() >= self.capacity:
            self.overflowed = True
            self.queue.put_nowait(CLOSE)
            return
        self.queue.put_nowait(Delivery(kind, wevent))


class WatchHub:
    """Routes cache events to watchers by storage bucket (``/<group>/<resource>/``)."""

    def __init__(self) -> None:
        self._buckets: dict[str, set[Watcher]] = {}
        self.on_event: list[Callable[[WatchEvent], None]] = []
        self._per_user: dict[str, int] = {}
        self._revision_waiters: dict[asyncio.Future[None], int] = {}

    def register(self, watcher: Watcher) -> None:
        self._buckets.setdefault(bucket_of(watcher.prefix), set()).add(watcher)

    def unregister(self, watcher: Watcher) -> None:
        bucket = self._buckets.get(bucket_of(watcher.prefix))
        if bucket is not None:
            bucket.discard(watcher)
            if not bucket:
                del self._buckets[bucket_of(watcher.prefix)]

    def close_all(self) -> None:
        """End every open watch stream (server shutdown): clients re-watch elsewhere or after restart."""
        for watchers in self._buckets.values():
            for watcher in watchers:
                watcher.close()

    def watcher_count(self) -> int:
        return sum(len(b) for b in self._buckets.values())

    # -- per-user accounting -----------------------------------------------------------------------------

    def admit(self, user: str, limit: int) -> bool:
        """Count one more open watch for ``user`` unless it already has ``limit``."""
        held = self._per_user.get(user, 0)
        if held >= limit:
            return False
        self._per_user[user] = held + 1
        return True

    def release(self, user: str) -> None:
        held = self._per_user.get(user, 0) - 1
        if held > 0:
            self._per_user[user] = held
        else:
            self._per_user.pop(user, None)

    def watches_of(self, user: str) -> int:
        return self._per_user.get(user, 0)

    # -- waiting for a revision --------------------------------------------------------------------------

    async def wait_for_revision(self, revision: int) -> None:
        """Return once events up to ``revision`` have been routed (the cache has reached it). Callers
        check the cache first and bound the wait with ``asyncio.timeout``; the waiter is gone afterwards
        however the wait ends, so a client asking for a revision far in the future leaves nothing behind."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._revision_waiters[future] = revision
        try:
            await future
        finally:
            self._revision_waiters.pop(future, None)

    def __call__(self, events: Sequence[Event]) -> None:
        for event in events:
            watchers = self._buckets.get(bucket_of(event.kv.key))
            if not watchers and not self.on_event:
                continue
            wevent = WatchEvent(event)
            if watchers:
                for watcher in list(watchers):
                    watcher.offer(wevent)
            for callback in self.on_event:
                callback(wevent)
        if self._revision_waiters and events:
            reached = events[-1].revision
            for future, revision in list(self._revision_waiters.items()):
                if revision <= reached and not future.done():
                    future.set_result(None)


def bucket_of(key: str) -> str:
    """``/core/configmaps/ns/name`` -> ``/core/configmaps/``."""
    first = key.find("/", 1)
    second = key.find("/", first + 1)
    return key[: second + 1] if second > 0 else key

"""Events as the kubelet records them: core/v1 Events from ``kubelet`` on this node, aggregated.

Recording never blocks the caller. An event identical to one written in the last ten minutes (same
object, field path, type, reason and message) updates that event's ``count`` and ``lastTimestamp``
instead of creating another, as client-go's event correlator does, so ``kubectl describe`` shows
``(x5 over 2m)``; repeats that arrive while the event waits to be written are folded into one write.
Each object may record 25 events at once and one more every five minutes after that (client-go's spam
filter), so a pod stuck in a back-off loop cannot flood the API server. Events are advisory: when too
many distinct ones wait, new ones are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from vplane.controllers.client import KubeAPI, Resource, TransportError
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj
from vplane.runtime.status import rfc3339

log = structlog.get_logger("vplane.runtime.events")

EVENTS = Resource("v1", "Event", "events", namespaced=True)
AGGREGATE_WINDOW_SECONDS = 600.0
MAX_REMEMBERED = 4096
MAX_PENDING = 4096
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0
WRITERS = 4

Key = tuple[str, str, str, str, str]


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    last_seen: float


@dataclass
class _Pending:
    involved: Obj
    type: str
    reason: str
    message: str
    namespace: str
    times: int = 1


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class SpamFilter:
    """A token bucket per object: ``burst`` events, then one per ``refill`` seconds."""

    burst: int = SPAM_BURST
    refill: float = SPAM_REFILL_SECONDS
    clock: Callable[[], float] = time.monotonic
    _buckets: OrderedDict[str, _Bucket] = field(default_factory=OrderedDict)

    def allow(self, key: str) -> bool:
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
            while len(self._buckets) > MAX_REMEMBERED:
                self._buckets.popitem(last=False)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) / self.refill)
        bucket.updated = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True


class EventRecorder:
    def __init__(self, client: KubeAPI, node_name: str, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.node_name = node_name
        self.clock = clock
        self.spam = SpamFilter()
        self._pending: OrderedDict[Key, _Pending] = OrderedDict()
        self._busy: set[Key] = set()
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._seen: OrderedDict[Key, _Seen] = OrderedDict()
        self._seq = 0

    def pod_event(self, pod: Obj, type_: str, reason: str, message: str, field_path: str = "") -> None:
        meta = pod.get("metadata") or {}
        involved = {
            "kind": "Pod",
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
            "apiVersion": "v1",
        }
        if field_path:
            involved["fieldPath"] = field_path
        self._put(involved, type_, reason, message, str(meta.get("namespace") or "default"))

    def node_event(self, type_: str, reason: str, message: str) -> None:
        # The kubelet refers to its node by name, with the name as UID too.
        involved = {"kind": "Node", "name": self.node_name, "uid": self.node_name, "apiVersion": "v1"}
        self._put(involved, type_, reason, message, "default")

    def _put(self, involved: Obj, type_: str, reason: str, message: str, namespace: str) -> None:
        key: Key = (str(involved.get("uid")), str(involved.get("fieldPath", "")), type_, reason, message)
        waiting = self._pending.get(key)
        if waiting is not None:
            waiting.times += 1  # folded into the write already waiting
            return
        if not self.spam.allow(str(involved.get("uid"))):
            return
        if len(self._pending) >= MAX_PENDING:
            log.warning("too many events waiting; event dropped", reason=reason)
            return
        self._pending[key] = _Pending(involved, type_, reason, message, namespace)
        self._idle.clear()
        self._ready.set()

    def _next(self) -> tuple[Key, _Pending] | None:
        for key in self._pending:
            if key not in self._busy:
                return key, self._pending.pop(key)
        return None

    async def run(self) -> None:
        """Write events with a few concurrent writers (never two for one event). Cancel to stop."""
        async with asyncio.TaskGroup() as group:
            for _ in range(WRITERS):
                group.create_task(self._writer())

    async def _writer(self) -> None:
        while True:
            item = self._next()
            if item is None:
                if not self._busy:
                    self._idle.set()
                self._ready.clear()
                await self._ready.wait()
                continue
            key, pending = item
            self._busy.add(key)
            try:
                await self._write(key, pending)
            except (StatusError, TransportError) as exc:
                log.debug("event not written", reason=pending.reason, error=str(exc))
            except Exception:
                log.exception("event not written", reason=pending.reason)
            finally:
                self._busy.discard(key)
                self._ready.set()

    async def flush(self, seconds: float = 2.0) -> None:
        """Give waiting events a moment to be written (on shutdown)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._idle.wait()

    async def _write(self, key: Key, pending: _Pending) -> None:
        now = self.clock()
        stamp = rfc3339(now)
        seen = self._seen.get(key)
        if seen is not None and now - seen.last_seen <= AGGREGATE_WINDOW_SECONDS:
            seen.count += pending.times
            seen.last_seen = now
            self._seen.move_to_end(key)
            try:
                await self.client.patch(
                    EVENTS,
                    seen.name,
                    {"count": seen.count, "lastTimestamp": stamp},
                    namespace=seen.namespace,
                    patch_type="merge",
                )
                return
            except StatusError as exc:
                if exc.code != 404:
                    raise
                # Deleted meanwhile (a namespace went away, or events expired): record it afresh.
        self._seq += 1
        name = f"{pending.involved.get('name')}.{time.time_ns() + self._seq:x}"
        event: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": pending.namespace},
            "involvedObject": pending.involved,
            "reason": pending.reason,
            "message": pending.message,
            "source": {"component": "kubelet", "host": self.node_name},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": pending.times,
            "type": pending.type,
            "reportingComponent": "kubelet",
            "reportingInstance": self.node_name,
        }
        await self.client.create(EVENTS, event, namespace=pending.namespace)
        self._seen[key] = _Seen(name, pending.namespace, pending.times, now)
        self._seen.move_to_end(key)
        while len(self._seen) > MAX_REMEMBERED:
            self._seen.popitem(last=False)

"""Events as the kubelet records them: core/v1 Events from ``kubelet`` on this node, aggregated.

Recording never blocks the caller: events queue and one task writes them. An event identical to one
written in the last ten minutes (same object, field path, type, reason and message) updates that event's
``count`` and ``lastTimestamp`` instead of creating another, as client-go's event correlator does, so
``kubectl describe`` shows ``(x5 over 2m)``. A full queue drops events (they are advisory).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from vplane.controllers.client import KubeAPI, Resource, TransportError
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj
from vplane.runtime.status import rfc3339

log = structlog.get_logger("vplane.runtime.events")

EVENTS = Resource("v1", "Event", "events", namespaced=True)
AGGREGATE_WINDOW_SECONDS = 600.0
MAX_REMEMBERED = 4096
QUEUE_LIMIT = 10_000


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    first: str
    last_seen: float


class EventRecorder:
    def __init__(self, client: KubeAPI, node_name: str, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.node_name = node_name
        self.clock = clock
        self._queue: asyncio.Queue[tuple[Obj, str, str, str, str]] = asyncio.Queue(QUEUE_LIMIT)
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
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
        try:
            self._queue.put_nowait((involved, type_, reason, message, namespace))
        except asyncio.QueueFull:
            log.warning("event queue full; event dropped", reason=reason)

    async def run(self) -> None:
        while True:
            involved, type_, reason, message, namespace = await self._queue.get()
            try:
                await self._write(involved, type_, reason, message, namespace)
            except (StatusError, TransportError) as exc:
                log.debug("event not written", reason=reason, error=str(exc))
            except Exception:
                log.exception("event not written", reason=reason)
            finally:
                self._queue.task_done()

    async def flush(self, seconds: float = 2.0) -> None:
        """Give queued events a moment to be written (on shutdown)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._queue.join()

    async def _write(self, involved: Obj, type_: str, reason: str, message: str, namespace: str) -> None:
        now = self.clock()
        stamp = rfc3339(now)
        key = (
            str(involved.get("uid")),
            str(involved.get("fieldPath", "")),
            type_,
            reason,
            message,
        )
        seen = self._seen.get(key)
        if seen is not None and now - seen.last_seen <= AGGREGATE_WINDOW_SECONDS:
            seen.count += 1
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
        name = f"{involved.get('name')}.{time.time_ns() + self._seq:x}"
        event: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "source": {"component": "kubelet", "host": self.node_name},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "type": type_,
            "reportingComponent": "kubelet",
            "reportingInstance": self.node_name,
        }
        await self.client.create(EVENTS, event, namespace=namespace)
        self._seen[key] = _Seen(name, namespace, 1, stamp, now)
        self._seen.move_to_end(key)
        while len(self._seen) > MAX_REMEMBERED:
            self._seen.popitem(last=False)

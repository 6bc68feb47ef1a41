"""core/v1 Events as upstream's controllers write them (client-go ``tools/record``).

:class:`EventRecorder` is what a controller calls (``recorder.event(obj, "Normal", reason, message)``);
it never blocks: events go on a bounded queue (1,000, excess dropped as upstream's broadcaster does) that
:class:`EventBroadcaster` drains into the API. Between the two sits :class:`EventCorrelator`, pure and
clocked from outside, which does what client-go's correlator does:

- *dedupe*: an event equal to one already written (same source, object, type, reason and message) is
  written again as a PATCH of the existing Event's ``count``, ``lastTimestamp`` and ``message``;
- *aggregation*: from the 10th distinct message with the same source, object, type and reason within 10
  minutes, events are folded into one whose message is ``(combined from similar events): <latest>``;
- *spam filter*: each source and object gets a token bucket of 25 events refilled at one per 5 minutes;
  events beyond it are dropped.

Event objects carry what ``makeEvent``/``generateEvent`` put there: the name ``<object>.<unix nanos in
hex>``, ``involvedObject`` (kind, namespace, name, uid, apiVersion, resourceVersion), ``source.component``,
``reportingComponent`` (the same), an empty ``reportingInstance``, ``firstTimestamp``/``lastTimestamp``,
``count`` and ``type``.
"""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog
from pydantic import BaseModel, ConfigDict, Field

from vplane.controllers.client import KubeAPI, TransportError
from vplane.controllers.kcm.resources import EVENTS
from vplane.controllers.kcm.timefmt import format_time
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

log = structlog.get_logger("vplane.controllers.kcm.events")

Clock = Callable[[], float]

NORMAL = "Normal"
WARNING = "Warning"
COMBINED_PREFIX = "(combined from similar events): "


class EventSettings(BaseModel):
    """client-go's correlator and broadcaster defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spam_burst: int = Field(default=25, ge=1)
    """Events one source may write about one object before the rate below applies."""
    spam_qps: float = Field(default=1.0 / 300.0, gt=0)
    """Refill of that allowance, events per second (one per 5 minutes)."""
    aggregate_max_events: int = Field(default=10, ge=1)
    """Distinct messages with the same reason after which events are combined into one."""
    aggregate_interval_seconds: float = Field(default=600.0, gt=0)
    """Window within which similar events count towards combining."""
    cache_size: int = Field(default=4096, ge=1)
    """Entries kept by each correlation cache (least recently used go first)."""
    queue_limit: int = Field(default=1000, ge=1)
    """Events waiting to be written; beyond this new ones are dropped."""
    retry_seconds: float = Field(default=10.0, ge=0)
    """Wait between attempts when the API server cannot be reached (the first wait is randomized)."""
    max_tries: int = Field(default=12, ge=1)
    """Attempts per event before it is given up."""


K = TypeVar("K")
V = TypeVar("V")


class _LRU(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self._size:
            self._data.popitem(last=False)


class _TokenBucket:
    """golang.org/x/time/rate as client-go's passive limiter uses it: starts full, refills continuously."""

    def __init__(self, qps: float, burst: int, now: float) -> None:
        self.qps = qps
        self.burst = burst
        self.tokens = float(burst)
        self.last = now

    def try_accept(self, now: float) -> bool:
        self.tokens = min(float(self.burst), self.tokens + max(now - self.last, 0.0) * self.qps)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def _involved(event: Obj) -> Obj:
    value = event.get("involvedObject")
    return value if isinstance(value, dict) else {}


def _source(event: Obj) -> Obj:
    value = event.get("source")
    return value if isinstance(value, dict) else {}


def event_key(event: Obj) -> str:
    """``getEventKey``: everything that makes two events the same event, message included."""
    obj, src = _involved(event), _source(event)
    return "".join(
        str(part or "")
        for part in (
            src.get("component"),
            src.get("host"),
            obj.get("kind"),
            obj.get("namespace"),
            obj.get("name"),
            obj.get("fieldPath"),
            obj.get("uid"),
            obj.get("apiVersion"),
            event.get("type"),
            event.get("reason"),
            event.get("message"),
        )
    )


def aggregate_key(event: Obj) -> tuple[str, str]:
    """``EventAggregatorByReasonFunc``: (what similar events share, what tells them apart)."""
    obj, src = _involved(event), _source(event)
    shared = "".join(
        str(part or "")
        for part in (
            src.get("component"),
            src.get("host"),
            obj.get("kind"),
            obj.get("namespace"),
            obj.get("name"),
            obj.get("uid"),
            obj.get("apiVersion"),
            event.get("type"),
            event.get("reason"),
            event.get("reportingComponent"),
            event.get("reportingInstance"),
        )
    )
    return shared, str(event.get("message") or "")


def spam_key(event: Obj) -> str:
    obj, src = _involved(event), _source(event)
    return "".join(
        str(part or "")
        for part in (
            src.get("component"),
            src.get("host"),
            obj.get("kind"),
            obj.get("namespace"),
            obj.get("name"),
            obj.get("uid"),
            obj.get("apiVersion"),
        )
    )


@dataclass
class _Aggregate:
    messages: set[str]
    last: float


@dataclass
class _Seen:
    count: int
    first_timestamp: Any
    name: str
    resource_version: str


@dataclass(frozen=True)
class Correlated:
    event: Obj
    patch: Obj | None
    """For a repeat: the strategic merge patch to send to the existing Event (``event.count > 1``)."""


class EventCorrelator:
    """Pure: decides, for each new event, whether to drop it, write it new, or patch an earlier one."""

    def __init__(
        self, settings: EventSettings, clock: Clock, namer: Callable[[str, float], str] | None = None
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._namer = namer or event_name
        self._aggregates: _LRU[str, _Aggregate] = _LRU(settings.cache_size)
        self._seen: _LRU[str, _Seen] = _LRU(settings.cache_size)
        self._buckets: _LRU[str, _TokenBucket] = _LRU(settings.cache_size)

    def correlate(self, new: Obj) -> Correlated | None:
        """The event to write (None: dropped by the spam filter)."""
        event, key = self._aggregate(new)
        observed, patch = self._observe(event, key)
        if not self._allow(observed):
            return None
        return Correlated(observed, patch)

    def _aggregate(self, new: Obj) -> tuple[Obj, str]:
        now = self._clock()
        shared, local = aggregate_key(new)
        record = self._aggregates.get(shared)
        if record is None or now - record.last > self.settings.aggregate_interval_seconds:
            record = _Aggregate(set(), now)
        record.messages.add(local)
        record.last = now
        self._aggregates.put(shared, record)
        if len(record.messages) < self.settings.aggregate_max_events:
            return new, event_key(new)
        record.messages.pop()  # upstream's PopAny keeps the set at its bound
        stamp = format_time(now)
        involved = _involved(new)
        combined: Obj = {
            "metadata": {
                "name": self._namer(str(involved.get("name") or ""), now),
                "namespace": (new.get("metadata") or {}).get("namespace"),
            },
            "involvedObject": involved,
            "reason": new.get("reason"),
            "message": COMBINED_PREFIX + str(new.get("message") or ""),
            "source": new.get("source"),
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "type": new.get("type"),
        }
        return combined, shared

    def _observe(self, event: Obj, key: str) -> tuple[Obj, Obj | None]:
        event = {**event, "metadata": dict(event.get("metadata") or {})}
        seen = self._seen.get(key)
        patch: Obj | None = None
        if seen is not None and seen.count > 0:
            event["metadata"]["name"] = seen.name
            if seen.resource_version:
                event["metadata"]["resourceVersion"] = seen.resource_version
            event["firstTimestamp"] = seen.first_timestamp
            event["count"] = seen.count + 1
            patch = {
                "count": event["count"],
                "lastTimestamp": event.get("lastTimestamp"),
                "message": event.get("message"),
            }
        self._seen.put(
            key,
            _Seen(
                int(event.get("count") or 0),
                event.get("firstTimestamp"),
                str(event["metadata"].get("name") or ""),
                str(event["metadata"].get("resourceVersion") or ""),
            ),
        )
        return event, patch

    def _allow(self, event: Obj) -> bool:
        now = self._clock()
        key = spam_key(event)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _TokenBucket(self.settings.spam_qps, self.settings.spam_burst, now)
        allowed = bucket.try_accept(now)
        self._buckets.put(key, bucket)
        return allowed

    def update_state(self, written: Obj) -> None:
        """Remember what the server answered (name, resourceVersion, count) for the next repeat."""
        meta = written.get("metadata") or {}
        self._seen.put(
            event_key(written),
            _Seen(
                int(written.get("count") or 0),
                written.get("firstTimestamp"),
                str(meta.get("name") or ""),
                str(meta.get("resourceVersion") or ""),
            ),
        )


def event_name(object_name: str, ts: float) -> str:
    """``<name>.<UnixNano in hex>``, as ``makeEvent`` names events."""
    return f"{object_name}.{int(ts * 1e9):x}"


def object_reference(obj: Obj) -> Obj:
    """``ref.GetReference``: what ``involvedObject`` holds."""
    meta = obj.get("metadata") or {}
    ref: Obj = {"kind": obj.get("kind", "")}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    ref["name"] = meta.get("name", "")
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    ref["apiVersion"] = obj.get("apiVersion", "")
    if meta.get("resourceVersion"):
        ref["resourceVersion"] = meta["resourceVersion"]
    return ref


class EventRecorder:
    """What a controller records events with; one per source component."""

    def __init__(self, broadcaster: EventBroadcaster, component: str) -> None:
        self._broadcaster = broadcaster
        self.component = component

    def event(self, obj: Obj, event_type: str, reason: str, message: str) -> None:
        self._broadcaster.submit(self._make(obj, event_type, reason, message))

    def _make(self, obj: Obj, event_type: str, reason: str, message: str) -> Obj:
        now = self._broadcaster.clock()
        ref = object_reference(obj)
        stamp = format_time(now)
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": self._broadcaster.unique_name(str(ref.get("name") or ""), now),
                "namespace": ref.get("namespace") or "default",
            },
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "source": {"component": self.component},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "type": event_type,
            "eventTime": None,
            "reportingComponent": self.component,
            "reportingInstance": "",
        }


class EventBroadcaster:
    """The process's one event queue and writer: correlates, then creates or patches Events in order."""

    def __init__(
        self,
        client: KubeAPI,
        settings: EventSettings | None = None,
        *,
        clock: Clock,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.settings = settings or EventSettings()
        self.clock = clock
        self.correlator = EventCorrelator(self.settings, clock, self.unique_name)
        self._queue: asyncio.Queue[Obj] | None = None
        self._rng = rng or random.Random()
        self._last_nanos: dict[str, int] = {}
        self.dropped = 0
        self.written = 0

    def recorder(self, component: str) -> EventRecorder:
        return EventRecorder(self, component)

    def unique_name(self, object_name: str, now: float) -> str:
        # Two events for one object in the same nanosecond (a coarse or fake clock) would collide on
        # create and the second would be lost; keep the hex stamp increasing per object name instead.
        nanos = int(now * 1e9)
        last = self._last_nanos.get(object_name)
        if last is not None and nanos <= last:
            nanos = last + 1
        self._last_nanos[object_name] = nanos
        if len(self._last_nanos) > self.settings.cache_size:
            self._last_nanos.pop(next(iter(self._last_nanos)))
        return f"{object_name}.{nanos:x}"

    def _q(self) -> asyncio.Queue[Obj]:
        if self._queue is None:
            self._queue = asyncio.Queue(self.settings.queue_limit)
        return self._queue

    def submit(self, event: Obj) -> None:
        try:
            self._q().put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            log.error("too many queued events, dropped event", reason=event.get("reason"))

    async def run(self) -> None:
        """Write queued events one at a time, forever. Cancel to stop."""
        queue = self._q()
        while True:
            event = await queue.get()
            try:
                await self._record(event)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("unable to write event", reason=event.get("reason"))
            finally:
                queue.task_done()

    async def drain(self) -> None:
        """Wait until every event queued so far has been written or given up (needs :meth:`run`)."""
        await self._q().join()

    async def _record(self, event: Obj) -> None:
        result = self.correlator.correlate(event)
        if result is None:
            return
        for attempt in range(self.settings.max_tries):
            if await self._write(result):
                return
            delay = self.settings.retry_seconds
            if attempt == 0:
                delay *= self._rng.random()
            await asyncio.sleep(delay)
        log.error("unable to write event (retry limit exceeded)", reason=event.get("reason"))

    async def _write(self, result: Correlated) -> bool:
        """True when done with the event (written, or refused for good); False to try again later."""
        event = result.event
        namespace = str((event.get("metadata") or {}).get("namespace") or "default")
        try:
            written: Obj | None = None
            if result.patch is not None:
                try:
                    written = await self.client.patch(
                        EVENTS,
                        event["metadata"]["name"],
                        result.patch,
                        namespace=namespace,
                        patch_type="strategic",
                    )
                except StatusError as exc:
                    if exc.code != 404:
                        raise
            if written is None:
                body = {
                    **event,
                    "metadata": {k: v for k, v in event["metadata"].items() if k != "resourceVersion"},
                }
                written = await self.client.create(EVENTS, body, namespace=namespace)
        except StatusError as exc:
            if exc.code != 409 and "is being terminated" not in exc.message:
                log.warning(
                    "server rejected event (will not retry)", reason=event.get("reason"), error=exc.message
                )
            return True
        except TransportError as exc:
            log.warning("unable to write event (may retry after sleeping)", error=str(exc))
            return False
        self.written += 1
        self.correlator.update_state(written)
        return True

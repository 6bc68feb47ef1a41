"""Events as client-go records them: dedupe into counts, aggregation of similar events, the per-object
spam filter (fake clock), and the writer creating then patching Events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from vplane.controllers.client import TransportError
from vplane.controllers.kcm.events import (
    COMBINED_PREFIX,
    EventBroadcaster,
    EventCorrelator,
    EventSettings,
)
from vplane.kube.errors import StatusError

T0 = 1_700_000_000.0
RS = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "metadata": {"name": "web-abc", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Sink:
    """The two calls the writer makes, recorded; Events are stored like a server would."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.events: dict[str, dict] = {}
        self.fail_transport = 0

    async def create(self, resource: Any, obj: dict, *, namespace: str | None = None) -> dict:
        if self.fail_transport:
            self.fail_transport -= 1
            raise TransportError("connection refused")
        self.calls.append(("create", obj))
        stored = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(len(self.calls))}}
        self.events[obj["metadata"]["name"]] = stored
        return stored

    async def patch(self, resource: Any, name: str, patch: Any, **kw: Any) -> dict:
        self.calls.append(("patch", (name, patch, kw.get("patch_type"))))
        if name not in self.events:
            raise StatusError(404, "NotFound", f'events "{name}" not found')
        self.events[name] = {**self.events[name], **patch}
        return self.events[name]


def broadcaster(sink: Sink, clock: Clock, **settings: Any) -> EventBroadcaster:
    return EventBroadcaster(sink, EventSettings(**settings), clock=clock)  # type: ignore[arg-type]


async def record(b: EventBroadcaster, *events: tuple[str, str, str]) -> None:
    task = asyncio.create_task(b.run())
    recorder = b.recorder("replicaset-controller")
    for event_type, reason, message in events:
        recorder.event(RS, event_type, reason, message)
    await b.drain()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_event_object_is_shaped_as_upstream() -> None:
    sink, clock = Sink(), Clock()
    await record(broadcaster(sink, clock), ("Normal", "SuccessfulCreate", "Created pod: web-abc-x1"))
    ((verb, event),) = sink.calls
    assert verb == "create"
    assert event["metadata"]["name"] == f"web-abc.{int(T0 * 1e9):x}"
    assert event["metadata"]["namespace"] == "ns"
    assert event["involvedObject"] == {
        "kind": "ReplicaSet",
        "namespace": "ns",
        "name": "web-abc",
        "uid": "u1",
        "apiVersion": "apps/v1",
        "resourceVersion": "7",
    }
    assert event["source"] == {"component": "replicaset-controller"}
    assert event["reportingComponent"] == "replicaset-controller"
    assert event["reportingInstance"] == ""
    assert event["count"] == 1
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2023-11-14T22:13:20Z"
    assert event["type"] == "Normal" and event["reason"] == "SuccessfulCreate"


async def test_repeats_patch_the_count() -> None:
    sink, clock = Sink(), Clock()
    b = broadcaster(sink, clock)
    await record(b, ("Warning", "FailedCreate", "Error creating: quota"))
    clock.now += 30
    await record(b, ("Warning", "FailedCreate", "Error creating: quota"))
    assert [c[0] for c in sink.calls] == ["create", "patch"]
    name, patch, patch_type = sink.calls[1][1]
    assert name == sink.calls[0][1]["metadata"]["name"]
    assert patch == {"count": 2, "lastTimestamp": "2023-11-14T22:13:50Z", "message": "Error creating: quota"}
    assert patch_type == "strategic"


async def test_a_vanished_event_is_created_again() -> None:
    sink, clock = Sink(), Clock()
    b = broadcaster(sink, clock)
    await record(b, ("Normal", "R", "m"))
    sink.events.clear()
    await record(b, ("Normal", "R", "m"))
    assert [c[0] for c in sink.calls] == ["create", "patch", "create"]
    assert sink.calls[2][1]["count"] == 2
    assert "resourceVersion" not in sink.calls[2][1]["metadata"]


def test_tenth_distinct_message_is_combined() -> None:
    clock = Clock()
    correlator = EventCorrelator(EventSettings(), clock)

    def event(message: str) -> dict:
        return {
            "metadata": {"name": f"x.{message}", "namespace": "ns"},
            "involvedObject": {"kind": "Deployment", "name": "web", "namespace": "ns", "uid": "d"},
            "source": {"component": "deployment-controller"},
            "type": "Normal",
            "reason": "ScalingReplicaSet",
            "message": message,
            "count": 1,
        }

    results = [correlator.correlate(event(f"Scaled up {n}")) for n in range(12)]
    messages = [r.event["message"] for r in results if r is not None]
    assert messages[:9] == [f"Scaled up {n}" for n in range(9)]
    assert messages[9] == COMBINED_PREFIX + "Scaled up 9"
    assert messages[10] == COMBINED_PREFIX + "Scaled up 10"
    assert results[10] is not None and results[10].event["count"] == 2  # the combined event counts up
    clock.now += 601  # a quiet window starts a fresh aggregate
    fresh = correlator.correlate(event("Scaled up 99"))
    assert fresh is not None and fresh.event["message"] == "Scaled up 99"


def test_spam_filter_allows_a_burst_then_one_per_five_minutes() -> None:
    clock = Clock()
    correlator = EventCorrelator(EventSettings(), clock)

    def event(n: int) -> dict:
        return {
            "metadata": {"name": f"x.{n}", "namespace": "ns"},
            "involvedObject": {"kind": "ReplicaSet", "name": "web", "namespace": "ns", "uid": "u"},
            "source": {"component": "replicaset-controller"},
            "type": "Normal",
            "reason": f"R{n}",  # distinct reasons: nothing aggregates
            "message": "m",
            "count": 1,
        }

    passed = [correlator.correlate(event(n)) is not None for n in range(30)]
    assert passed == [True] * 25 + [False] * 5
    clock.now += 299
    assert correlator.correlate(event(100)) is None
    clock.now += 2
    assert correlator.correlate(event(101)) is not None
    assert correlator.correlate(event(102)) is None


@pytest.mark.looptime
async def test_unreachable_server_is_retried_then_written() -> None:
    sink, clock = Sink(), Clock()
    sink.fail_transport = 2
    await record(broadcaster(sink, clock, retry_seconds=10), ("Normal", "R", "m"))
    assert [c[0] for c in sink.calls] == ["create"]


@pytest.mark.looptime
async def test_gives_up_after_max_tries() -> None:
    sink, clock = Sink(), Clock()
    sink.fail_transport = 100
    await record(broadcaster(sink, clock, retry_seconds=10, max_tries=3), ("Normal", "R", "m"))
    assert sink.calls == []
    assert sink.fail_transport == 97


async def test_full_queue_drops_events() -> None:
    sink, clock = Sink(), Clock()
    b = broadcaster(sink, clock, queue_limit=2)
    recorder = b.recorder("c")
    for n in range(5):
        recorder.event(RS, "Normal", "R", str(n))
    assert b.dropped == 3

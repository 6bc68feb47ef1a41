"""The events recorder: events.k8s.io objects, series on repetition, heartbeats and forgetting."""

from __future__ import annotations

from vplane.controllers.scheduler.events import Create, EventRecorder, Patch

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def recorder(clock: Clock) -> EventRecorder:
    return EventRecorder(
        "default-scheduler", clock, window=360, heartbeat=1800, instance="default-scheduler-h"
    )


def test_the_first_event_is_created_as_the_scheduler_writes_it() -> None:
    clock = Clock()
    write = recorder(clock).record(POD, "Normal", "Scheduled", "Binding", "Successfully assigned ns/p to n1")
    assert isinstance(write, Create) and write.namespace == "ns"
    event = write.event
    assert event["metadata"]["name"] == f"p.{int(clock.now * 1e9):x}"
    assert event["regarding"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "namespace": "ns",
        "name": "p",
        "uid": "u1",
        "resourceVersion": "7",
    }
    assert event["eventTime"] == "2023-11-14T22:13:20.000000Z"
    assert (event["reportingController"], event["reportingInstance"]) == (
        "default-scheduler",
        "default-scheduler-h",
    )
    assert (event["type"], event["reason"], event["action"]) == ("Normal", "Scheduled", "Binding")
    assert "series" not in event


def test_repeats_become_a_series_written_at_the_second_and_then_by_heartbeat() -> None:
    clock = Clock()
    rec = recorder(clock)
    first = rec.record(
        POD, "Warning", "FailedScheduling", "Scheduling", "0/1 nodes are available: 1 Insufficient cpu."
    )
    assert isinstance(first, Create)
    name = first.event["metadata"]["name"]
    clock.now += 10
    second = rec.record(
        POD, "Warning", "FailedScheduling", "Scheduling", "0/1 nodes are available: 1 Insufficient cpu."
    )
    assert isinstance(second, Patch) and second.name == name
    assert second.patch["series"]["count"] == 2
    clock.now += 10
    assert rec.record(POD, "Warning", "FailedScheduling", "Scheduling", "again") is None
    assert rec.tick() == []  # starts the heartbeat clock
    for _ in range(6):  # repeats every 5 minutes keep the series going past the heartbeat
        clock.now += 300
        assert rec.record(POD, "Warning", "FailedScheduling", "Scheduling", "again") is None
    beat = rec.tick()
    assert [p.patch["series"]["count"] for p in beat] == [9]
    assert rec.tick() == []  # nothing new to write


def test_a_quiet_series_is_written_once_more_and_forgotten() -> None:
    clock = Clock()
    rec = recorder(clock)
    rec.tick()
    rec.record(POD, "Warning", "FailedScheduling", "Scheduling", "m")
    rec.record(POD, "Warning", "FailedScheduling", "Scheduling", "m")
    rec.record(POD, "Warning", "FailedScheduling", "Scheduling", "m")
    clock.now += 361
    assert [p.patch["series"]["count"] for p in rec.tick()] == [3]
    assert isinstance(rec.record(POD, "Warning", "FailedScheduling", "Scheduling", "m"), Create)


def test_a_new_resource_version_is_a_new_event() -> None:
    clock = Clock()
    rec = recorder(clock)
    rec.record(POD, "Warning", "FailedScheduling", "Scheduling", "m")
    changed = {**POD, "metadata": {**POD["metadata"], "resourceVersion": "8"}}
    assert isinstance(rec.record(changed, "Warning", "FailedScheduling", "Scheduling", "m"), Create)


def test_related_objects_are_referenced() -> None:
    clock = Clock()
    other = {"metadata": {"name": "q", "namespace": "ns", "uid": "u2"}}
    write = recorder(clock).record(
        POD, "Normal", "Preempted", "Preempting", "Preempted by pod u2 on node n1", other
    )
    assert isinstance(write, Create)
    assert write.event["related"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "namespace": "ns",
        "name": "q",
        "uid": "u2",
    }


def test_the_cache_is_bounded() -> None:
    clock = Clock()
    rec = EventRecorder("s", clock, cache_size=2, instance="i")
    for i in range(3):
        rec.record({"metadata": {"name": f"p{i}", "namespace": "ns"}}, "Normal", "R", "A", "n")
    assert isinstance(
        rec.record({"metadata": {"name": "p0", "namespace": "ns"}}, "Normal", "R", "A", "n"), Create
    )

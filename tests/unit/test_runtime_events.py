"""The kubelet's event recorder: repeats are counted on one Event, and an object is rate-limited."""

from __future__ import annotations

import asyncio
from typing import Any

from vplane.runtime.events import EventRecorder, SpamFilter

POD = {"metadata": {"name": "web", "namespace": "ns", "uid": "u1"}}


class FakeAPI:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def create(
        self, resource: Any, obj: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        self.created.append(obj)
        return obj

    async def patch(self, resource: Any, name: str, patch: Any, **kwargs: Any) -> dict[str, Any]:
        self.patches.append((name, patch))
        return {}


async def _drain(recorder: EventRecorder) -> None:
    task = asyncio.create_task(recorder.run())
    await recorder.flush(2.0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_an_event_is_recorded_as_the_kubelet_does() -> None:
    api = FakeAPI()
    recorder = EventRecorder(api, "node-a", clock=lambda: 1_800_000_000.0)  # type: ignore[arg-type]
    recorder.pod_event(POD, "Normal", "Started", "Container started", "spec.containers{main}")
    await _drain(recorder)
    (event,) = api.created
    assert event["involvedObject"] == {
        "kind": "Pod",
        "namespace": "ns",
        "name": "web",
        "uid": "u1",
        "apiVersion": "v1",
        "fieldPath": "spec.containers{main}",
    }
    assert event["source"] == {"component": "kubelet", "host": "node-a"}
    assert (event["reportingComponent"], event["reportingInstance"], event["count"]) == (
        "kubelet",
        "node-a",
        1,
    )
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2027-01-15T08:00:00Z"


async def test_repeats_count_on_one_event_and_waiting_repeats_fold_into_one_write() -> None:
    api = FakeAPI()
    recorder = EventRecorder(api, "node-a")  # type: ignore[arg-type]
    recorder.pod_event(POD, "Warning", "BackOff", "Back-off restarting failed container")
    await _drain(recorder)
    for _ in range(3):  # all three wait together: one patch
        recorder.pod_event(POD, "Warning", "BackOff", "Back-off restarting failed container")
    await _drain(recorder)
    assert len(api.created) == 1
    assert [patch["count"] for _, patch in api.patches] == [4]


async def test_an_object_gets_a_burst_then_one_event_per_refill() -> None:
    now = [0.0]
    spam = SpamFilter(burst=3, refill=300, clock=lambda: now[0])
    assert [spam.allow("u1") for _ in range(4)] == [True, True, True, False]
    assert spam.allow("u2")  # another object has its own bucket
    now[0] = 300.0
    assert [spam.allow("u1"), spam.allow("u1")] == [True, False]

"""Time and MicroTime fields come back in upstream's canonical form."""

from __future__ import annotations

from vplane.kube import timefields

EVENT = "io.k8s.api.core.v1.Event"


def test_event_times_are_normalized_like_upstream() -> None:
    """kopf's isoformat times become Time (seconds, Z) and MicroTime (microseconds, Z)."""
    event = {
        "firstTimestamp": "2026-01-02T10:40:00.123456+00:00",
        "lastTimestamp": "2026-01-02T12:40:00+02:00",
        "eventTime": "2026-01-02T10:40:00.5+00:00",
        "metadata": {
            "creationTimestamp": "2026-01-02T10:40:00Z",
            "managedFields": [{"time": "2026-01-02T10:40:00.9Z"}],
        },
        "message": "2026-01-02T10:40:00+00:00 is not a time field",
    }
    timefields.normalize(event, EVENT)
    assert event["firstTimestamp"] == "2026-01-02T10:40:00Z"
    assert event["lastTimestamp"] == "2026-01-02T10:40:00Z"
    assert event["eventTime"] == "2026-01-02T10:40:00.500000Z"
    assert event["metadata"]["managedFields"][0]["time"] == "2026-01-02T10:40:00Z"
    assert event["message"] == "2026-01-02T10:40:00+00:00 is not a time field"


def test_paths_cover_lists_and_unparsable_values_are_left_alone() -> None:
    """List items are reached; a value that is not RFC 3339 stays for validation to reject."""
    paths = dict(timefields.time_paths("io.k8s.api.core.v1.Pod"))
    assert paths[("status", "conditions", "*", "lastTransitionTime")] is False
    pod = {
        "status": {
            "conditions": [
                {"lastTransitionTime": "2026-01-02T10:40:00.1+00:00"},
                {"lastTransitionTime": "soon"},
            ]
        }
    }
    timefields.normalize(pod, "io.k8s.api.core.v1.Pod")
    assert pod["status"]["conditions"][0]["lastTransitionTime"] == "2026-01-02T10:40:00Z"
    assert pod["status"]["conditions"][1]["lastTransitionTime"] == "soon"
    lease = {"spec": {"renewTime": "2026-01-02T10:40:00.123+00:00"}}
    timefields.normalize(lease, "io.k8s.api.coordination.v1.Lease")
    assert lease["spec"]["renewTime"] == "2026-01-02T10:40:00.123000Z"

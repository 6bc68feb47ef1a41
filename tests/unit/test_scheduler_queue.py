"""The scheduling queue: priority order, back-off 1 s → 10 s, moves on cluster changes, the 5-minute flush."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vplane.controllers.scheduler.queue import ACTIVE, BACKOFF, UNSCHEDULABLE, QueuedPod, SchedulingQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock) -> SchedulingQueue:
    return SchedulingQueue(1.0, 10.0, 300.0, clock=clock)


def test_higher_priority_first_then_first_come() -> None:
    clock = Clock()
    q = make(clock)
    q.add("a", 0)
    clock.now += 1
    q.add("b", 10)
    clock.now += 1
    q.add("c", 0)
    assert [q.pop().key for _ in range(3)] == ["b", "a", "c"]  # type: ignore[union-attr]
    assert q.pop() is None


def test_back_off_doubles_from_one_second_up_to_ten() -> None:
    q = make(Clock())
    durations = [q.backoff_duration(QueuedPod("p", 0, 0, attempts=n)) for n in range(7)]
    assert durations == [0, 1, 2, 4, 8, 10, 10]


def test_an_unschedulable_pod_waits_for_a_change() -> None:
    clock = Clock()
    q = make(clock)
    q.add("p", 0)
    q.pop()
    q.requeue_unschedulable("p", frozenset({"NodeResourcesFit"}))
    assert q.get("p").where == UNSCHEDULABLE  # type: ignore[union-attr]
    clock.now += 60
    assert q.pop() is None
    assert q.next_wakeup() == 1000 + 300  # the leftover flush
    assert q.move_all() == 1
    assert q.pop().key == "p"  # type: ignore[union-attr]  # back-off (1 s) long over


def test_a_change_right_after_the_failure_goes_through_back_off() -> None:
    clock = Clock()
    q = make(clock)
    q.add("p", 0)
    q.pop()
    q.requeue_unschedulable("p", frozenset())
    q.move_all()
    assert q.get("p").where == BACKOFF  # type: ignore[union-attr]
    assert q.pop() is None
    assert q.next_wakeup() == 1001
    clock.now = 1001
    assert q.pop().key == "p"  # type: ignore[union-attr]


def test_a_change_during_the_attempt_skips_the_unschedulable_wait() -> None:
    clock = Clock()
    q = make(clock)
    q.add("p", 0)
    q.pop()
    q.move_all()  # e.g. a node was added while the pod was being scheduled
    q.requeue_unschedulable("p", frozenset())
    assert q.get("p").where == BACKOFF  # type: ignore[union-attr]


def test_only_pods_the_change_may_help_move() -> None:
    clock = Clock()
    q = make(clock)
    for key, plugin in (("a", "InterPodAffinity"), ("b", "NodeResourcesFit")):
        q.add(key, 0)
        q.pop()
        q.requeue_unschedulable(key, frozenset({plugin}))
    clock.now += 5
    assert q.move_all(frozenset({"InterPodAffinity", "PodTopologySpread"})) == 1
    assert q.get("a").where == ACTIVE and q.get("b").where == UNSCHEDULABLE  # type: ignore[union-attr]


def test_a_change_during_the_attempt_only_counts_for_the_plugins_it_may_help() -> None:
    clock = Clock()
    q = make(clock)
    q.add("a", 0)
    q.add("b", 0)
    q.pop()
    q.pop()
    q.move_all(frozenset({"InterPodAffinity"}))  # e.g. a pod was bound elsewhere meanwhile
    q.requeue_unschedulable("a", frozenset({"InterPodAffinity"}))
    q.requeue_unschedulable("b", frozenset({"NodeResourcesFit"}))
    assert q.get("a").where == BACKOFF and q.get("b").where == UNSCHEDULABLE  # type: ignore[union-attr]


def test_pods_unschedulable_for_five_minutes_are_retried() -> None:
    clock = Clock()
    q = make(clock)
    q.add("p", 0)
    q.pop()
    q.requeue_unschedulable("p", frozenset())
    clock.now += 299
    assert q.pop() is None
    clock.now += 1
    assert q.pop().key == "p"  # type: ignore[union-attr]


def test_an_update_to_the_pod_retries_it() -> None:
    clock = Clock()
    q = make(clock)
    q.add("p", 0)
    q.pop()
    q.requeue_unschedulable("p", frozenset())
    q.update("p", 0, changed=False)
    assert q.get("p").where == UNSCHEDULABLE  # type: ignore[union-attr]
    clock.now += 2
    q.update("p", 0, changed=True)
    assert q.pop().key == "p"  # type: ignore[union-attr]


def test_errors_back_off_and_done_pods_leave() -> None:
    clock = Clock()
    q = make(clock)
    q.add("p", 0)
    q.pop()
    q.requeue_error("p")
    assert q.get("p").where == BACKOFF  # type: ignore[union-attr]
    clock.now += 1
    q.pop()
    q.done("p")
    assert "p" not in q and q.pop() is None and q.next_wakeup() is None


def test_a_deleted_pod_in_back_off_is_not_popped() -> None:
    clock = Clock()
    q = make(clock)
    q.add("p", 0)
    q.pop()
    q.requeue_error("p")
    q.delete("p")
    clock.now += 20
    assert q.pop() is None


def test_priority_changes_reorder_the_active_queue() -> None:
    q = make(Clock())
    q.add("a", 1)
    q.add("b", 2)
    q.update("a", 5, changed=True)
    assert q.pop().key == "a"  # type: ignore[union-attr]
    assert q.pop().key == "b"  # type: ignore[union-attr]
    assert q.pop() is None


@given(st.integers(0, 200), st.floats(0.01, 5), st.floats(5, 100))
def test_back_off_never_exceeds_the_maximum(attempts: int, initial: float, maximum: float) -> None:
    q = SchedulingQueue(initial, maximum, 300, clock=Clock())
    duration = q.backoff_duration(QueuedPod("p", 0, 0, attempts=attempts))
    assert duration <= maximum
    assert duration == 0 if attempts == 0 else duration >= min(initial, maximum)

"""The scheduling queue (upstream ``PriorityQueue``): active, back-off and unschedulable pods.

- *active*: ready to be tried, highest ``spec.priority`` first, then the longest waiting (PrioritySort);
- *back-off*: tried and failed, waiting ``initial * 2**(attempts-1)`` seconds (capped) since the failure;
- *unschedulable*: rejected by the plugins and waiting for the cluster to change. A change (node added or
  updated, a pod removed, ...) moves them to back-off, or straight to active when their back-off is
  already over; so does staying here for ``max_in_unschedulable`` seconds.

A pod that failed while the cluster changed during its attempt (a move request at or after the cycle it
was popped in) goes to back-off rather than waiting for a change it already missed. Errors (not
rejections) also go to back-off. Decisions take ``now`` from an injectable clock; the caller sleeps until
:meth:`SchedulingQueue.next_wakeup`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

Clock = Callable[[], float]

ACTIVE = "active"
BACKOFF = "backoff"
UNSCHEDULABLE = "unschedulable"
IN_FLIGHT = "in-flight"


@dataclass(slots=True)
class QueuedPod:
    key: str
    priority: int
    timestamp: float
    """When the pod last entered the queue (added, or put back after an attempt)."""
    attempts: int = 0
    unschedulable_plugins: frozenset[str] = frozenset()
    where: str = ""
    seq: int = 0
    updated_in_flight: bool = False
    cycle: int = 0
    """The scheduling cycle the pod was last popped in."""


@dataclass(slots=True)
class SchedulingQueue:
    initial_backoff: float
    max_backoff: float
    max_in_unschedulable: float
    clock: Clock
    scheduling_cycle: int = 0
    move_request_cycle: int = -1
    _pods: dict[str, QueuedPod] = field(default_factory=dict)
    _active: list[tuple[int, float, int, str]] = field(default_factory=list)
    _backoff: list[tuple[float, int, str]] = field(default_factory=list)
    _unschedulable: dict[str, QueuedPod] = field(default_factory=dict)
    _plugin_move_cycles: dict[str, int] = field(default_factory=dict)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    # -- what is where ---------------------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        return key in self._pods

    def get(self, key: str) -> QueuedPod | None:
        return self._pods.get(key)

    def counts(self) -> dict[str, int]:
        out = {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 0, IN_FLIGHT: 0}
        for pod in self._pods.values():
            out[pod.where] += 1
        return out

    def backoff_duration(self, pod: QueuedPod) -> float:
        """``calculateBackoffDuration``: 0 before the first attempt, then doubling up to the cap."""
        if pod.attempts == 0:
            return 0.0
        duration = self.initial_backoff
        for _ in range(1, pod.attempts):
            if duration > self.max_backoff - duration:
                return self.max_backoff
            duration += duration
        return min(duration, self.max_backoff)

    def backoff_expiry(self, pod: QueuedPod) -> float:
        return pod.timestamp + self.backoff_duration(pod)

    def backing_off(self, pod: QueuedPod, now: float) -> bool:
        return self.backoff_expiry(pod) > now

    # -- placing pods ----------------------------------------------------------------------------------

    def _place(self, pod: QueuedPod, where: str) -> None:
        if pod.where == UNSCHEDULABLE:
            self._unschedulable.pop(pod.key, None)
        pod.where = where
        if where == UNSCHEDULABLE:
            self._unschedulable[pod.key] = pod

    def _to_active(self, pod: QueuedPod) -> None:
        self._place(pod, ACTIVE)
        pod.seq = next(self._seq)
        heapq.heappush(self._active, (-pod.priority, pod.timestamp, pod.seq, pod.key))

    def _to_backoff(self, pod: QueuedPod) -> None:
        self._place(pod, BACKOFF)
        pod.seq = next(self._seq)
        heapq.heappush(self._backoff, (self.backoff_expiry(pod), pod.seq, pod.key))

    def _to_active_or_backoff(self, pod: QueuedPod, now: float) -> None:
        if self.backing_off(pod, now):
            self._to_backoff(pod)
        else:
            self._to_active(pod)

    def add(self, key: str, priority: int) -> None:
        """A new pending pod; one already queued is left where it is."""
        if key in self._pods:
            return
        pod = QueuedPod(key, priority, self.clock())
        self._pods[key] = pod
        self._to_active(pod)

    def update(self, key: str, priority: int, changed: bool) -> None:
        """The pod object changed; ``changed`` when something that can affect scheduling did (its spec or
        labels, not just its status), which gives an unschedulable pod another try."""
        pod = self._pods.get(key)
        if pod is None:
            self.add(key, priority)
            return
        if pod.where == IN_FLIGHT:
            pod.priority = priority
            pod.updated_in_flight = pod.updated_in_flight or changed
            return
        if priority != pod.priority:
            pod.priority = priority
            if pod.where == ACTIVE:
                self._to_active(pod)  # the old heap entry goes stale
        if changed and pod.where == UNSCHEDULABLE:
            self._to_active_or_backoff(pod, self.clock())

    def delete(self, key: str) -> None:
        self._pods.pop(key, None)
        self._unschedulable.pop(key, None)

    def pop(self) -> QueuedPod | None:
        """The next pod to try (now in flight), or None when none is ready."""
        self.flush()
        while self._active:
            _, _, seq, key = heapq.heappop(self._active)
            pod = self._pods.get(key)
            if pod is None or pod.where != ACTIVE or pod.seq != seq:
                continue
            self._place(pod, IN_FLIGHT)
            pod.attempts += 1
            pod.updated_in_flight = False
            self.scheduling_cycle += 1
            pod.cycle = self.scheduling_cycle
            return pod
        return None

    def done(self, key: str) -> None:
        """The pod was bound (or dropped): it leaves the queue."""
        pod = self._pods.get(key)
        if pod is not None and pod.where == IN_FLIGHT:
            del self._pods[key]

    def requeue_unschedulable(self, key: str, plugins: frozenset[str]) -> None:
        """``AddUnschedulableIfNotPresent`` after the plugins rejected the pod."""
        pod = self._pods.get(key)
        if pod is None or pod.where != IN_FLIGHT:
            return
        now = self.clock()
        pod.timestamp = now
        pod.unschedulable_plugins = plugins
        if pod.updated_in_flight or self._moved_since(pod):
            self._to_active_or_backoff(pod, now)
        else:
            self._place(pod, UNSCHEDULABLE)

    def requeue_error(self, key: str) -> None:
        """An error (not a rejection): try again after the back-off."""
        pod = self._pods.get(key)
        if pod is None or pod.where != IN_FLIGHT:
            return
        pod.timestamp = self.clock()
        pod.unschedulable_plugins = frozenset()
        self._to_backoff(pod)

    def move_all(self, plugins: frozenset[str] | None = None) -> int:
        """``MoveAllToActiveOrBackoffQueue``: the cluster changed; unschedulable pods get another try (only
        those a plugin in ``plugins`` rejected, when given). Pods in flight that the change may help go to
        back-off instead of waiting for another change. Returns how many moved."""
        if plugins is None:
            self.move_request_cycle = self.scheduling_cycle
        else:
            for plugin in plugins:
                self._plugin_move_cycles[plugin] = self.scheduling_cycle
        now = self.clock()
        moved = 0
        for pod in list(self._unschedulable.values()):
            if plugins is None or not pod.unschedulable_plugins.isdisjoint(plugins):
                self._to_active_or_backoff(pod, now)
                moved += 1
        return moved

    def _moved_since(self, pod: QueuedPod) -> bool:
        if self.move_request_cycle >= pod.cycle:
            return True
        return any(self._plugin_move_cycles.get(p, -1) >= pod.cycle for p in pod.unschedulable_plugins)

    # -- time ------------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Back-offs that are over go to active; pods unschedulable for too long go to active or back-off."""
        now = self.clock()
        while self._backoff and self._backoff[0][0] <= now:
            _, seq, key = heapq.heappop(self._backoff)
            pod = self._pods.get(key)
            if pod is not None and pod.where == BACKOFF and pod.seq == seq:
                self._to_active(pod)
        for pod in list(self._unschedulable.values()):
            if now - pod.timestamp >= self.max_in_unschedulable:
                self._to_active_or_backoff(pod, now)

    def next_wakeup(self) -> float | None:
        """When :meth:`pop` may next have something, if nothing is active now (None: only on a change)."""
        times = []
        while self._backoff:
            _, seq, key = self._backoff[0]
            pod = self._pods.get(key)
            if pod is not None and pod.where == BACKOFF and pod.seq == seq:
                times.append(self._backoff[0][0])
                break
            heapq.heappop(self._backoff)
        if self._unschedulable:
            oldest = min(p.timestamp for p in self._unschedulable.values())
            times.append(oldest + self.max_in_unschedulable)
        return min(times) if times else None

    def has_active(self) -> bool:
        while self._active:
            _, _, seq, key = self._active[0]
            pod = self._pods.get(key)
            if pod is not None and pod.where == ACTIVE and pod.seq == seq:
                return True
            heapq.heappop(self._active)
        return False

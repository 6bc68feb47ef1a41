"""The scheduler process: informers feed the cache and the queue; one loop schedules; bindings run beside it.

Everything here is asyncio glue around the pure parts (``algorithm``, ``preemption``, ``queue``,
``events``, ``cache``). It reaches the API only through :class:`SchedulerAPI` (the controllers'
``KubeClient``): pods are bound with ``pods/binding``, failures patch the pod's ``PodScheduled``
condition and ``status.nominatedNodeName`` with a strategic merge patch on ``pods/status``, victims of
preemption get a ``DisruptionTarget`` condition and are deleted, and events go to ``events.k8s.io/v1``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

from vplane.controllers.client import NAMESPACES, KubeAPI, Resource, TransportError
from vplane.controllers.informer import Informer, object_key
from vplane.controllers.scheduler import events as ev
from vplane.controllers.scheduler import preemption
from vplane.controllers.scheduler.algorithm import Algorithm, Result
from vplane.controllers.scheduler.cache import SchedulerCache, is_bound, is_terminal
from vplane.controllers.scheduler.framework import Code, truncate_note
from vplane.controllers.scheduler.interpodaffinity import NAME as INTER_POD_AFFINITY
from vplane.controllers.scheduler.model import PodInfo, pod_priority
from vplane.controllers.scheduler.queue import SchedulingQueue
from vplane.controllers.scheduler.settings import SchedulerSettings
from vplane.controllers.scheduler.topologyspread import NAME as POD_TOPOLOGY_SPREAD
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

log = structlog.get_logger("vplane.controllers.scheduler")

PODS = Resource("v1", "Pod", "pods", namespaced=True)
NODES = Resource("v1", "Node", "nodes", namespaced=False)
PDBS = Resource("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", namespaced=True)
EVENTS = Resource("events.k8s.io/v1", "Event", "events", namespaced=True)

REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"
MAX_QUEUED_EVENTS = 1000
"""client-go's event broadcaster drops events past this many waiting to be written."""
AFFINITY_PLUGINS = frozenset({INTER_POD_AFFINITY, POD_TOPOLOGY_SPREAD})
"""Plugins an assigned pod's arrival (or label change) may satisfy."""


class SchedulerAPI(KubeAPI, Protocol):
    """What the scheduler needs beyond :class:`KubeAPI`: posting to ``pods/binding``."""

    async def create_subresource(
        self, resource: Resource, name: str, subresource: str, body: Obj, *, namespace: str | None = None
    ) -> Obj: ...


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _scheduling_view(pod: Obj) -> tuple[Any, ...]:
    """What of a pending pod can change its scheduling (upstream ``isPodUpdated`` ignores status)."""
    meta = _d(pod.get("metadata"))
    return (meta.get("labels"), meta.get("annotations"), pod.get("spec"))


def _condition(pod: Obj, type_: str) -> dict[str, Any] | None:
    for condition in _d(pod.get("status")).get("conditions") or []:
        if _d(condition).get("type") == type_:
            return _d(condition)
    return None


class Scheduler:
    def __init__(
        self,
        client: SchedulerAPI,
        settings: SchedulerSettings | None = None,
        *,
        rng: random.Random | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.settings = settings = settings or SchedulerSettings()
        self.rng = rng or random.Random()
        self.wall_clock = wall_clock
        self.cache = SchedulerCache()
        self.queue = SchedulingQueue(
            settings.pod_initial_backoff_seconds,
            settings.pod_max_backoff_seconds,
            settings.pod_max_in_unschedulable_seconds,
            clock=self._now,
        )
        self.algorithm = Algorithm(
            settings.percentage_of_nodes_to_score, settings.hard_pod_affinity_weight, self.rng
        )
        self.recorder = ev.EventRecorder(
            settings.scheduler_name,
            wall_clock,
            window=settings.event_series_window_seconds,
            heartbeat=settings.event_series_heartbeat_seconds,
            cache_size=settings.event_cache_size,
        )
        informer = settings.informer
        self.pods = Informer(client, PODS, settings=informer)
        self.nodes = Informer(client, NODES, settings=informer)
        self.namespaces = Informer(client, NAMESPACES, settings=informer)
        self.budgets = Informer(client, PDBS, settings=informer)
        self.pods.add_handlers(
            on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted
        )
        self.nodes.add_handlers(
            on_add=self._node_added, on_update=self._node_updated, on_delete=self._node_deleted
        )
        self.namespaces.add_handlers(
            on_add=self.cache.set_namespace,
            on_update=self._namespace_updated,
            on_delete=lambda ns: self.cache.remove_namespace(object_key(ns)),
        )
        self.budgets.add_handlers(
            on_add=lambda pdb: self.cache.set_budget(object_key(pdb), pdb),
            on_update=lambda _old, pdb: self.cache.set_budget(object_key(pdb), pdb),
            on_delete=lambda pdb: self.cache.remove_budget(object_key(pdb)),
        )
        self._wake = asyncio.Event()
        self._bind_slots = asyncio.Semaphore(settings.bind_concurrency)
        self._events: asyncio.Queue[ev.Write] = asyncio.Queue(MAX_QUEUED_EVENTS)
        self._tasks: set[asyncio.Task[None]] = set()
        self.scheduled = 0
        """Pods bound so far (for benchmarks and tests)."""
        self.attempts = 0
        self._log = log.bind(scheduler=settings.scheduler_name)

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    # -- running ---------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled: informers, then the scheduling loop, event writers and the series ticker."""
        try:
            async with asyncio.TaskGroup() as tasks:
                for informer in (self.namespaces, self.budgets, self.nodes, self.pods):
                    tasks.create_task(informer.run())
                for informer in (self.namespaces, self.budgets, self.nodes, self.pods):
                    await informer.wait_for_sync()
                self._log.info("caches synced; scheduling", nodes=len(self.nodes.keys()))
                for _ in range(self.settings.bind_concurrency):
                    tasks.create_task(self._event_writer())
                tasks.create_task(self._event_ticker())
                tasks.create_task(self._loop())
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            pod = self.queue.pop()
            if pod is None:
                self._wake.clear()
                wakeup = self.queue.next_wakeup()
                timeout = None if wakeup is None else max(0.0, wakeup - self._now())
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                continue
            try:
                await self._schedule_one(pod.key)
            except Exception:
                self._log.exception("scheduling attempt failed", pod=pod.key)
                self.queue.requeue_error(pod.key)
            await asyncio.sleep(0)  # let informer events in between attempts

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- informer handlers -----------------------------------------------------------------------------

    def _ours(self, pod: Obj) -> bool:
        spec = _d(pod.get("spec"))
        return spec.get(
            "schedulerName", self.settings.scheduler_name
        ) == self.settings.scheduler_name and not spec.get("schedulingGates")

    def _move(self, plugins: frozenset[str] | None = None) -> None:
        moved = self.queue.move_all(plugins)
        if moved or self.queue.has_active():
            self._wake.set()

    def _pod_added(self, pod: Obj) -> None:
        if is_terminal(pod):
            return
        info = self.cache.set_pod(pod)
        if is_bound(pod):
            self._move(AFFINITY_PLUGINS)
        elif self._ours(pod):
            self.queue.add(info.key, info.priority)
            self._wake.set()

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        key = object_key(new)
        if _d(old.get("metadata")).get("uid") != _d(new.get("metadata")).get("uid"):
            self._pod_deleted(old)
            self._pod_added(new)
            return
        if is_terminal(new):
            self._pod_deleted(new)
            return
        self.cache.set_pod(new)
        if is_bound(new):
            self.queue.delete(key)
            if not is_bound(old) or _d(old.get("metadata")).get("labels") != _d(new.get("metadata")).get(
                "labels"
            ):
                self._move(AFFINITY_PLUGINS)
            return
        if not self._ours(new):
            self.queue.delete(key)
            return
        changed = _scheduling_view(old) != _scheduling_view(new)
        self.queue.update(key, pod_priority(new), changed)
        self._wake.set()

    def _pod_deleted(self, pod: Obj) -> None:
        key = object_key(pod)
        counted = key in self.cache.pod_node
        self.cache.remove_pod(key)
        self.queue.delete(key)
        if counted:
            self._move()

    def _node_added(self, node: Obj) -> None:
        self.cache.set_node(node)
        self._move()

    def _node_updated(self, old: Obj, new: Obj) -> None:
        self.cache.set_node(new)
        before = (
            _d(old.get("metadata")).get("labels"),
            old.get("spec"),
            _d(old.get("status")).get("allocatable"),
        )
        after = (
            _d(new.get("metadata")).get("labels"),
            new.get("spec"),
            _d(new.get("status")).get("allocatable"),
        )
        if before != after:
            self._move()

    def _node_deleted(self, node: Obj) -> None:
        self.cache.remove_node(object_key(node))

    def _namespace_updated(self, old: Obj, new: Obj) -> None:
        self.cache.set_namespace(new)
        if _d(old.get("metadata")).get("labels") != _d(new.get("metadata")).get("labels"):
            self._move(frozenset({INTER_POD_AFFINITY}))

    # -- one attempt -----------------------------------------------------------------------------------

    async def _schedule_one(self, key: str) -> None:
        pod = self.pods.get(key)
        if pod is None or is_bound(pod) or is_terminal(pod) or not self._ours(pod):
            self.queue.done(key)
            return
        self.attempts += 1
        meta = _d(pod.get("metadata"))
        if meta.get("deletionTimestamp"):
            self._event(
                pod, ev.WARNING, "FailedScheduling", "Scheduling", f"skip schedule deleting pod: {key}"
            )
            self.queue.done(key)
            return
        info = PodInfo.of(pod)
        result = self.algorithm.schedule(info, self.cache.snapshot())
        if result.node:
            self.cache.assume(info, result.node)
            await self._bind_slots.acquire()
            self._spawn(self._bind(info, result.node))
            return
        await self._failed(pod, info, result)

    async def _failed(self, pod: Obj, info: PodInfo, result: Result) -> None:
        nominate: str | None = None
        if result.no_nodes:
            nominate = ""
        elif result.state is not None:
            outcome = preemption.preempt(
                result.state,
                result.diagnosis,
                self.cache.snapshot(),
                list(self.cache.budgets.values()),
                now=self.wall_clock(),
                rng=self.rng,
                min_candidate_percentage=self.settings.min_candidate_nodes_percentage,
                min_candidate_absolute=self.settings.min_candidate_nodes_absolute,
            )
            result.diagnosis.post_filter_message = preemption.post_filter_message(
                outcome, self.settings.dra_post_filter_message
            )
            if outcome.nominate:
                nominate = outcome.node
            if outcome.code == Code.SUCCESS:
                await self._preempt(pod, info, outcome)
        message = result.message
        self._log.debug("pod is unschedulable", pod=info.key, message=message)
        if nominate is not None:
            self.cache.nominate(info, nominate)
        await self._report_failure(pod, REASON_UNSCHEDULABLE, message, nominate)
        self.queue.requeue_unschedulable(info.key, frozenset(result.diagnosis.unschedulable_plugins))

    async def _preempt(self, preemptor: Obj, info: PodInfo, outcome: preemption.Outcome) -> None:
        """``prepareCandidate``: mark and delete the victims, and clear lower nominations on the node."""
        condition = preemption.disruption_condition(self.settings.scheduler_name)
        for victim in outcome.victims:
            if victim.deleting:
                continue
            try:
                existing = _condition(victim.pod, condition["type"])
                if existing is None or any(existing.get(k) != v for k, v in condition.items()):
                    stamped = {**condition, "lastTransitionTime": _rfc3339(self.wall_clock())}
                    await self.client.patch(
                        PODS,
                        victim.name,
                        {"status": {"conditions": [stamped]}},
                        namespace=victim.namespace,
                        patch_type="strategic",
                        subresource="status",
                    )
                await self.client.delete(PODS, victim.name, namespace=victim.namespace)
            except StatusError as exc:
                if exc.code != 404:
                    raise
            self._event(
                victim.pod,
                ev.NORMAL,
                "Preempted",
                "Preempting",
                f"Preempted by pod {info.uid} on node {outcome.node}",
                related=preemptor,
            )
            self._log.info("preempted", victim=victim.key, preemptor=info.key, node=outcome.node)
        for other in outcome.clear_nominations:
            with contextlib.suppress(StatusError):
                await self.client.patch(
                    PODS,
                    other.name,
                    {"status": {"nominatedNodeName": None}},
                    namespace=other.namespace,
                    patch_type="strategic",
                    subresource="status",
                )
            self.cache.nominate(other, "")

    async def _report_failure(self, pod: Obj, reason: str, message: str, nominate: str | None) -> None:
        """``handleSchedulingFailure``: a ``FailedScheduling`` event and the pod's condition (and nomination)."""
        meta = _d(pod.get("metadata"))
        self._event(pod, ev.WARNING, "FailedScheduling", "Scheduling", truncate_note(message))
        status: dict[str, Any] = {}
        wanted = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
        current = _condition(pod, "PodScheduled")
        if current is None or any(current.get(k) != v for k, v in wanted.items()):
            condition: dict[str, Any] = dict(wanted)
            same_status = current is not None and current.get("status") == "False"
            condition["lastTransitionTime"] = (
                current.get("lastTransitionTime")
                if same_status and current is not None
                else _rfc3339(self.wall_clock())
            )
            if isinstance(meta.get("generation"), int):
                condition["observedGeneration"] = meta["generation"]
            status["conditions"] = [condition]
        current_nomination = _d(pod.get("status")).get("nominatedNodeName") or ""
        if nominate is not None and nominate != current_nomination:
            status["nominatedNodeName"] = nominate or None
        if not status:
            return
        try:
            await self.client.patch(
                PODS,
                str(meta.get("name")),
                {"status": status},
                namespace=str(meta.get("namespace")),
                patch_type="strategic",
                subresource="status",
            )
        except (StatusError, TransportError) as exc:
            self._log.warning("could not update the pod's status", pod=object_key(pod), error=str(exc))

    async def _bind(self, info: PodInfo, node: str) -> None:
        """``DefaultBinder``: POST a Binding to ``pods/binding``; on failure forget the pod and try again."""
        try:
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": info.name, "namespace": info.namespace, "uid": info.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            try:
                await self.client.create_subresource(
                    PODS, info.name, "binding", body, namespace=info.namespace
                )
            except (StatusError, TransportError) as exc:
                self._bind_failed(info, node, exc)
                return
            self.scheduled += 1
            self.queue.done(info.key)
            self._event(
                info.pod, ev.NORMAL, "Scheduled", "Binding", f"Successfully assigned {info.key} to {node}"
            )
        finally:
            self._bind_slots.release()

    def _bind_failed(self, info: PodInfo, node: str, exc: Exception) -> None:
        self._log.warning("binding failed", pod=info.key, node=node, error=str(exc))
        self.cache.forget(info.key)
        self._move()  # the room the pod held is free again
        current = self.pods.get(info.key)
        if current is None or is_bound(current):
            self.queue.done(info.key)  # deleted, or bound by someone else meanwhile
            return
        detail = exc.message if isinstance(exc, StatusError) else str(exc)
        message = f'running Bind plugin "DefaultBinder": {detail}'  # the framework wraps the binder's error
        self._spawn(self._report_failure(current, REASON_SCHEDULER_ERROR, message, None))
        self.queue.requeue_error(info.key)
        self._wake.set()

    # -- events ----------------------------------------------------------------------------------------

    def _event(
        self, regarding: Obj, event_type: str, reason: str, action: str, note: str, related: Obj | None = None
    ) -> None:
        write = self.recorder.record(regarding, event_type, reason, action, note, related)
        if write is None:
            return
        try:
            self._events.put_nowait(write)
        except asyncio.QueueFull:
            self._log.warning("too many events waiting; dropping one", reason=reason)

    async def _event_writer(self) -> None:
        while True:
            write = await self._events.get()
            try:
                if isinstance(write, ev.Create):
                    await self.client.create(EVENTS, write.event, namespace=write.namespace)
                else:
                    await self.client.patch(EVENTS, write.name, write.patch, namespace=write.namespace)
            except (StatusError, TransportError) as exc:
                self._log.warning("could not write an event", error=str(exc))

    async def _event_ticker(self) -> None:
        while True:
            await asyncio.sleep(self.recorder.next_tick())
            for write in self.recorder.tick():
                with contextlib.suppress(asyncio.QueueFull):
                    self._events.put_nowait(write)


def _rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


async def run_scheduler(client: SchedulerAPI, settings: SchedulerSettings | None = None) -> None:
    """Schedule pods through ``client`` until cancelled (the entry point the CLI and servers use)."""
    await Scheduler(client, settings).run()

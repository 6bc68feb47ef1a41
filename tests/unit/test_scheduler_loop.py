"""The scheduler's asyncio glue against an in-memory API (no server): handlers, binding, retries."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any

import pytest
from test_scheduler_builders import node, pod

from vplane.controllers.client import ListResult, Resource, WatchEvent
from vplane.controllers.informer import InformerSettings
from vplane.controllers.scheduler import Scheduler, SchedulerSettings
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj


class FakeAPI:
    """Just enough of an API server: objects by resource, a revision counter, watch streams."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Obj]] = {}
        self.revision = 0
        self.watchers: dict[str, list[asyncio.Queue[WatchEvent]]] = {}
        self.refuse_bindings = 0
        self.bindings: list[tuple[str, str]] = []
        self.status_patches: list[tuple[str, Any]] = []

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta['name']}"

    def put(self, resource: Resource, obj: Obj, event: str | None = None) -> Obj:
        self.revision += 1
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.revision)
        bucket = self.objects.setdefault(resource.plural, {})
        kind = event or ("MODIFIED" if self._key(obj) in bucket else "ADDED")
        bucket[self._key(obj)] = obj
        for queue in self.watchers.get(resource.plural, []):
            queue.put_nowait(WatchEvent(kind, copy.deepcopy(obj)))  # type: ignore[arg-type]
        return copy.deepcopy(obj)

    def remove(self, resource: Resource, key: str) -> None:
        obj = self.objects.get(resource.plural, {}).pop(key)
        self.revision += 1
        for queue in self.watchers.get(resource.plural, []):
            queue.put_nowait(WatchEvent("DELETED", copy.deepcopy(obj)))

    def get_pod(self, name: str, namespace: str = "default") -> Obj:
        return self.objects["pods"][f"{namespace}/{name}"]

    # -- KubeAPI ---------------------------------------------------------------------------------------

    async def list(self, resource: Resource, **_: Any) -> ListResult:
        items = [copy.deepcopy(o) for o in self.objects.get(resource.plural, {}).values()]
        return ListResult(items, str(self.revision))

    async def watch(self, resource: Resource, **_: Any) -> AsyncGenerator[WatchEvent, None]:
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        self.watchers.setdefault(resource.plural, []).append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self.watchers[resource.plural].remove(queue)

    async def create(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        return self.put(resource, obj)

    async def patch(
        self, resource: Resource, name: str, patch: Any, *, namespace: str | None = None, **_: Any
    ) -> Obj:
        key = f"{namespace or ''}/{name}"
        current = copy.deepcopy(self.objects[resource.plural][key])
        status = (patch or {}).get("status")
        if status:
            self.status_patches.append((name, copy.deepcopy(status)))
            target = current.setdefault("status", {})
            for condition in status.get("conditions", []):
                others = [c for c in target.get("conditions", []) if c["type"] != condition["type"]]
                target["conditions"] = [*others, condition]
            if "nominatedNodeName" in status:
                target["nominatedNodeName"] = status["nominatedNodeName"]
        if "series" in (patch or {}):
            current["series"] = patch["series"]
        return self.put(resource, current)

    async def delete(self, resource: Resource, name: str, *, namespace: str | None = None) -> None:
        self.remove(resource, f"{namespace or ''}/{name}")

    async def create_subresource(
        self, resource: Resource, name: str, subresource: str, body: Obj, *, namespace: str | None = None
    ) -> Obj:
        assert subresource == "binding"
        if self.refuse_bindings:
            self.refuse_bindings -= 1
            raise StatusError(500, "InternalError", "Internal error occurred: the store is busy")
        current = copy.deepcopy(self.get_pod(name, namespace or ""))
        current["spec"]["nodeName"] = body["target"]["name"]
        self.bindings.append((name, body["target"]["name"]))
        self.put(resource, current)
        return {"kind": "Status", "status": "Success", "code": 201}


PODS = Resource("v1", "Pod", "pods", namespaced=True)
NODES = Resource("v1", "Node", "nodes", namespaced=False)
EVENTS = Resource("events.k8s.io/v1", "Event", "events", namespaced=True)

FAST = SchedulerSettings(
    pod_initial_backoff_seconds=0.01,
    pod_max_backoff_seconds=0.05,
    informer=InformerSettings(backoff_base=0.01, backoff_max=0.05),
)


@pytest.fixture
async def api() -> AsyncIterator[FakeAPI]:
    yield FakeAPI()


@contextlib.asynccontextmanager
async def running(api: FakeAPI, settings: SchedulerSettings = FAST) -> AsyncIterator[Scheduler]:
    scheduler = Scheduler(api, settings, rng=random.Random(0))  # type: ignore[arg-type]
    task = asyncio.create_task(scheduler.run())
    try:
        yield scheduler
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def eventually(check: Callable[[], Any], what: str, within: float = 5) -> Any:
    try:
        async with asyncio.timeout(within):
            while True:
                value = check()
                if value:
                    return value
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"not within {within}s: {what}") from None


def events(api: FakeAPI, reason: str) -> list[Obj]:
    return [e for e in api.objects.get("events", {}).values() if e["reason"] == reason]


async def test_a_pending_pod_is_bound_with_an_event(api: FakeAPI) -> None:
    api.put(NODES, node("n1"))
    api.put(PODS, pod("p", cpu="1"))
    async with running(api):
        await eventually(lambda: api.get_pod("p")["spec"].get("nodeName") == "n1", "p is bound")
        scheduled = await eventually(lambda: events(api, "Scheduled"), "the Scheduled event")
    assert scheduled[0]["note"] == "Successfully assigned default/p to n1"
    assert scheduled[0]["action"] == "Binding" and scheduled[0]["reportingController"] == "default-scheduler"


async def test_no_nodes_then_a_node_arrives(api: FakeAPI) -> None:
    api.put(PODS, pod("p"))
    async with running(api):
        condition = await eventually(
            lambda: next(iter(api.get_pod("p")["status"].get("conditions", [])), None), "the condition"
        )
        assert condition["reason"] == "Unschedulable"
        assert condition["message"] == "no nodes available to schedule pods"
        api.put(NODES, node("n1"))
        await eventually(
            lambda: api.get_pod("p")["spec"].get("nodeName") == "n1", "p is bound after the node"
        )


async def test_a_refused_binding_frees_the_room_and_is_retried(api: FakeAPI) -> None:
    api.put(NODES, node("n1", cpu="1"))
    api.refuse_bindings = 1
    api.put(PODS, pod("p", cpu="1"))
    async with running(api) as scheduler:
        await eventually(lambda: api.get_pod("p")["spec"].get("nodeName") == "n1", "p is bound on the retry")
        failed = await eventually(lambda: events(api, "FailedScheduling"), "the failure is reported")
        assert (
            failed[0]["note"]
            == 'running Bind plugin "DefaultBinder": Internal error occurred: the store is busy'
        )
        condition = api.get_pod("p")["status"]["conditions"][0]
        assert condition["reason"] == "SchedulerError"
        assert scheduler.cache.nodes["n1"].requested["cpu"] == 1000  # counted once, not twice


async def test_gated_pods_and_other_schedulers_pods_wait(api: FakeAPI) -> None:
    api.put(NODES, node("n1"))
    api.put(PODS, pod("gated", schedulingGates=[{"name": "example.com/wait"}]))
    api.put(PODS, pod("theirs", schedulerName="other"))
    api.put(PODS, pod("ours"))
    async with running(api):
        await eventually(lambda: api.get_pod("ours")["spec"].get("nodeName"), "ours is bound")
        assert not api.get_pod("gated")["spec"].get("nodeName")
        assert not api.get_pod("theirs")["spec"].get("nodeName")
        ungated = copy.deepcopy(api.get_pod("gated"))
        del ungated["spec"]["schedulingGates"]
        api.put(PODS, ungated)
        await eventually(lambda: api.get_pod("gated")["spec"].get("nodeName"), "the ungated pod is bound")
    assert [name for name, _ in api.bindings] == ["ours", "gated"]


async def test_a_deleted_blocker_lets_the_waiting_pod_in(api: FakeAPI) -> None:
    api.put(NODES, node("n1", cpu="1"))
    api.put(PODS, pod("blocker", cpu="1", node_name="n1"))
    api.put(PODS, pod("waiting", cpu="1"))
    async with running(api) as scheduler:
        await eventually(
            lambda: api.get_pod("waiting")["status"].get("conditions"), "waiting is unschedulable"
        )
        assert scheduler.queue.counts()["unschedulable"] == 1
        api.remove(PODS, "default/blocker")
        await eventually(lambda: api.get_pod("waiting")["spec"].get("nodeName") == "n1", "waiting is bound")


async def test_a_repeated_failure_is_one_event_with_a_series(api: FakeAPI) -> None:
    api.put(NODES, node("n1", cpu="1"))
    api.put(PODS, pod("big", cpu="2"))
    settings = FAST.model_copy(update={"pod_max_in_unschedulable_seconds": 0.05})
    async with running(api, settings):
        await eventually(
            lambda: any(
                (e.get("series") or {}).get("count", 0) >= 2 for e in events(api, "FailedScheduling")
            ),
            "a series",
        )
    notes = {e["note"] for e in events(api, "FailedScheduling")}
    assert notes == {
        "0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, preemption: "
        "0/1 nodes are available: 1 No preemption victims found for incoming pod."
    }


async def test_preemption_deletes_the_victim_and_nominates_the_node(api: FakeAPI) -> None:
    api.put(NODES, node("n1", cpu="1"))
    api.put(PODS, pod("low", cpu="1", node_name="n1", priority=1))
    api.put(PODS, pod("high", cpu="1", priority=100))
    async with running(api):
        await eventually(lambda: api.get_pod("high")["spec"].get("nodeName") == "n1", "high is bound")
    assert "default/low" not in api.objects["pods"]
    low_patches = [status for name, status in api.status_patches if name == "low"]
    assert low_patches[0]["conditions"][0] | {"lastTransitionTime": None} == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": "default-scheduler: preempting to accommodate a higher priority pod",
        "lastTransitionTime": None,
    }
    high_patches = [status for name, status in api.status_patches if name == "high"]
    assert high_patches[0]["nominatedNodeName"] == "n1"
    assert high_patches[0]["conditions"][0]["message"] == "0/1 nodes are available: 1 Insufficient cpu."
    preempted = events(api, "Preempted")
    assert preempted[0]["note"] == "Preempted by pod uid-default-high on node n1"
    assert preempted[0]["related"]["name"] == "high" and preempted[0]["action"] == "Preempting"

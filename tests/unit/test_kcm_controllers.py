"""The controller manager's controllers against an in-memory API (no server, no sockets) holding hundreds of
objects, with fake time (looptime) where timers matter: minReadySeconds, progressDeadlineSeconds and the
queue's back-offs. The fake answers like an API server for what the controllers use: generateName,
resourceVersion conflicts, generation bumps on spec changes, /status, merge and strategic merge patches,
list then watch.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import pytest
import structlog

from vplane.controllers.client import ListResult, Resource, WatchEvent
from vplane.controllers.kcm import deploymentutil as du
from vplane.controllers.kcm.manager import ControllerManager
from vplane.controllers.kcm.resources import (
    CONFIGMAPS,
    DEPLOYMENTS,
    ENDPOINTS,
    EVENTS,
    NAMESPACES,
    PODS,
    REPLICASETS,
    REPLICATIONCONTROLLERS,
    SERVICEACCOUNTS,
    SERVICES,
)
from vplane.controllers.kcm.settings import ControllerManagerSettings
from vplane.controllers.kcm.timefmt import format_time
from vplane.kube import openapi
from vplane.kube import patch as patchlib
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj
from vplane.kube.schema_meta import SchemaNode

T0 = 1_700_000_000.0
ROOT_CA = b"-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"
GENERATION_KINDS = {"Deployment", "ReplicaSet", "ReplicationController"}
STATUS_KINDS = {"Deployment", "ReplicaSet", "Pod", "Service", "Namespace", "ReplicationController"}

CreateHook = Callable[[Resource, Obj], None]


class FakeKube:
    """An in-memory KubeAPI: one revision counter, objects by resource and key, an event log for watches."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.revision = 0
        self.store: dict[str, dict[str, Obj]] = {}
        self.history: dict[str, list[tuple[int, str, Obj]]] = {}
        self.changed = asyncio.Condition()
        self.create_hook: CreateHook | None = None
        self.write_hook: Callable[[str, Resource, Obj], None] | None = None
        self.calls: dict[str, int] = {}
        self._names = itertools.count()

    # -- helpers ----------------------------------------------------------------------------------

    def _count(self, verb: str, resource: Resource) -> None:
        key = f"{verb} {resource.plural}"
        self.calls[key] = self.calls.get(key, 0) + 1

    @staticmethod
    def _key(resource: Resource, namespace: str | None, name: str) -> str:
        return f"{namespace}/{name}" if resource.namespaced else name

    def objects(self, resource: Resource, namespace: str | None = None) -> list[Obj]:
        return [
            copy.deepcopy(o)
            for o in self.store.get(resource.plural, {}).values()
            if namespace is None or o["metadata"].get("namespace") == namespace
        ]

    def peek(self, resource: Resource, namespace: str | None, name: str) -> Obj | None:
        return self.store.get(resource.plural, {}).get(self._key(resource, namespace, name))

    async def _commit(self, resource: Resource, event: str, obj: Obj) -> Obj:
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        key = self._key(resource, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        bucket = self.store.setdefault(resource.plural, {})
        if event == "DELETED":
            bucket.pop(key, None)
        else:
            bucket[key] = obj
        self.history.setdefault(resource.plural, []).append((self.revision, event, copy.deepcopy(obj)))
        if self.write_hook is not None:
            self.write_hook(event, resource, obj)
        async with self.changed:
            self.changed.notify_all()
        await asyncio.sleep(0)  # a request takes a turn of the loop, as a socket round trip would
        return copy.deepcopy(obj)

    def _not_found(self, resource: Resource, name: str) -> StatusError:
        qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
        return StatusError(
            404,
            "NotFound",
            f'{qualified} "{name}" not found',
            details={"name": name, "kind": resource.plural},
        )

    def _conflict(self, resource: Resource, name: str) -> StatusError:
        qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
        return StatusError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; please apply your changes to the latest version and try again',
        )

    # -- KubeAPI -------------------------------------------------------------------------------------

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        self._count("get", resource)
        found = self.peek(resource, namespace, name)
        if found is None:
            raise self._not_found(resource, name)
        return copy.deepcopy(found)

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | None = None,
        field_selector: Mapping[str, str] | None = None,
        chunk_size: int | None = None,
    ) -> ListResult:
        self._count("list", resource)
        items = [o for o in self.objects(resource, namespace) if self._fields_match(o, field_selector)]
        return ListResult(items, str(self.revision))

    @staticmethod
    def _fields_match(obj: Obj, field_selector: Mapping[str, str] | None) -> bool:
        for field, value in (field_selector or {}).items():
            assert field == "metadata.name", field
            if obj["metadata"]["name"] != value:
                return False
        return True

    async def create(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        self._count("create", resource)
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if resource.namespaced:
            meta["namespace"] = namespace or meta.get("namespace")
        if self.create_hook is not None:
            self.create_hook(resource, obj)
        if not meta.get("name"):
            meta["name"] = f"{meta['generateName']}{next(self._names):05d}"[-63:]
        if self.peek(resource, meta.get("namespace"), meta["name"]) is not None:
            qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
            raise StatusError(409, "AlreadyExists", f'{qualified} "{meta["name"]}" already exists')
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = format_time(self.clock())
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        if resource.kind in GENERATION_KINDS:
            meta["generation"] = 1
        if resource.kind == "Pod":
            obj["status"] = {"phase": "Pending"}
        elif resource.kind in STATUS_KINDS and resource.kind != "Namespace":
            obj.pop("status", None)
        if resource.kind == "Namespace":
            obj["status"] = {"phase": "Active"}
        return await self._commit(resource, "ADDED", obj)

    def _update(self, resource: Resource, old: Obj, new: Obj, subresource: str | None) -> Obj:
        new = copy.deepcopy(new)
        if subresource == "status":
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status", {})
            return merged
        for field in ("uid", "creationTimestamp", "generation", "namespace", "name"):
            if field in old["metadata"]:
                new["metadata"][field] = old["metadata"][field]
        if resource.kind in STATUS_KINDS and "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        if resource.kind in GENERATION_KINDS and new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        return new

    async def _replace(
        self, resource: Resource, obj: Obj, namespace: str | None, subresource: str | None
    ) -> Obj:
        name = obj["metadata"]["name"]
        old = self.peek(resource, namespace or obj["metadata"].get("namespace"), name)
        if old is None:
            raise self._not_found(resource, name)
        rv = obj["metadata"].get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise self._conflict(resource, name)
        return await self._commit(resource, "MODIFIED", self._update(resource, old, obj, subresource))

    async def replace(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        self._count("replace", resource)
        return await self._replace(resource, obj, namespace, None)

    async def replace_status(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        self._count("replace_status", resource)
        return await self._replace(resource, obj, namespace, "status")

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: str = "merge",
        field_manager: str | None = None,
        force: bool = False,
        subresource: str | None = None,
    ) -> Obj:
        self._count(f"patch{'_status' if subresource else ''}", resource)
        old = self.peek(resource, namespace, name)
        if old is None:
            raise self._not_found(resource, name)
        if patch_type == "merge":
            patched = patchlib.apply_merge_patch_to_object(old, patch)
        elif patch_type == "strategic":
            definition = openapi.load_builtin().definition_for(
                resource.group, resource.version, resource.kind
            )
            node = SchemaNode.from_component(definition or "", openapi.load_builtin().schemas)
            patched = patchlib.apply_strategic_merge_patch(old, patch, node)
        else:
            raise AssertionError(patch_type)
        if patched["metadata"].get("uid") != old["metadata"]["uid"]:
            raise StatusError(422, "Invalid", "uid is immutable")
        return await self._commit(resource, "MODIFIED", self._update(resource, old, patched, subresource))

    async def apply(self, *args: Any, **kwargs: Any) -> Obj:
        raise NotImplementedError

    apply_status = apply

    async def delete(self, resource: Resource, name: str, *, namespace: str | None = None) -> None:
        self._count("delete", resource)
        old = self.peek(resource, namespace, name)
        if old is None:
            raise self._not_found(resource, name)
        await self._commit(resource, "DELETED", copy.deepcopy(old))

    async def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: Mapping[str, str] | None = None,
        field_selector: Mapping[str, str] | None = None,
        timeout_seconds: int | None = None,
    ) -> AsyncGenerator[WatchEvent, None]:
        since = int(resource_version or self.revision)
        while True:
            log = self.history.get(resource.plural, [])
            for revision, event, obj in log:
                if revision <= since:
                    continue
                since = revision
                if namespace and obj["metadata"].get("namespace") != namespace:
                    continue
                if not self._fields_match(obj, field_selector):
                    continue
                yield WatchEvent(event, copy.deepcopy(obj))  # type: ignore[arg-type]
            seen = since

            def newer(seen: int = seen) -> bool:
                log = self.history.get(resource.plural)
                return bool(log) and log[-1][0] > seen

            async with self.changed:
                await self.changed.wait_for(newer)

    async def close(self) -> None:
        pass

    # -- a kubelet stand-in ------------------------------------------------------------------------------

    async def mark_ready(
        self, namespace: str, name: str, *, ready: bool = True, ip: str | None = None
    ) -> None:
        pod = await self.get(PODS, name, namespace=namespace)
        pod["status"] = {
            "phase": "Running",
            "podIP": ip or f"10.0.{len(name) % 200}.{int(self.revision) % 250 + 1}",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": format_time(self.clock()),
                }
            ],
        }
        pod["status"]["podIPs"] = [{"ip": pod["status"]["podIP"]}]
        await self.replace_status(PODS, pod, namespace=namespace)


# -- fixtures -------------------------------------------------------------------------------------------------


def loop_clock() -> Callable[[], float]:
    loop = asyncio.get_running_loop()
    return lambda: T0 + loop.time()


class Cluster:
    def __init__(self, kube: FakeKube, manager: ControllerManager) -> None:
        self.kube = kube
        self.manager = manager

    async def eventually(self, check: Callable[[], bool], what: str, within: float = 60.0) -> None:
        try:
            async with asyncio.timeout(within):
                while not check():  # noqa: ASYNC110 - state in the fake API and other tasks, polled
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"not within {within}s: {what}") from None

    def pods(self, namespace: str = "ns") -> list[Obj]:
        return self.kube.objects(PODS, namespace)

    def obj(self, resource: Resource, name: str, namespace: str = "ns") -> Obj:
        found = self.kube.peek(resource, namespace, name)
        assert found is not None, name
        return copy.deepcopy(found)

    def events(self, reason: str | None = None) -> list[Obj]:
        return [e for e in self.kube.objects(EVENTS) if reason is None or e["reason"] == reason]


@pytest.fixture(autouse=True)
def plain_tracebacks() -> Iterator[None]:
    """structlog's default renders every logged traceback with its frames' locals, which for a fake API
    holding hundreds of objects takes seconds; a plain traceback says what these tests need."""
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.format_exc_info,
            structlog.dev.ConsoleRenderer(colors=False),
        ]
    )
    yield
    structlog.reset_defaults()


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    clock = loop_clock()
    kube = FakeKube(clock)
    await kube.create(NAMESPACES, {"metadata": {"name": "ns"}})
    settings = ControllerManagerSettings(controllers=["*"])
    manager = ControllerManager(kube, settings, root_ca=ROOT_CA, clock=clock)
    task = asyncio.create_task(manager.run())
    async with asyncio.timeout(10):
        await manager.ready.wait()
    yield Cluster(kube, manager)
    if task.done():
        task.result()  # a controller that died fails the test with its error
        raise AssertionError("the controller manager stopped")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def rs_body(name: str, replicas: int, **spec: Any) -> Obj:
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "i:1"}]},
            },
            **spec,
        },
    }


def deployment_body(name: str, replicas: int, image: str = "i:1", **spec: Any) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
            **spec,
        },
    }


async def kubelet(kube: FakeKube, namespace: str = "ns", stop: asyncio.Event | None = None) -> None:
    """Mark every pod Ready soon after it appears, as a node would once its containers run."""
    while stop is None or not stop.is_set():
        for pod in kube.objects(PODS, namespace):
            if pod["status"].get("phase") == "Pending":
                try:
                    await kube.mark_ready(namespace, pod["metadata"]["name"])
                except StatusError as exc:
                    if exc.code not in (404, 409):  # deleted or changed meanwhile: look again next round
                        raise
        await asyncio.sleep(0.5)


# -- ReplicaSets ------------------------------------------------------------------------------------------------


@pytest.mark.looptime
async def test_replicaset_creates_300_pods_then_scales_down(cluster: Cluster) -> None:
    kube = cluster.kube
    await kube.create(REPLICASETS, rs_body("web", 300), namespace="ns")
    await cluster.eventually(lambda: len(cluster.pods()) == 300, "300 pods")
    rs = cluster.obj(REPLICASETS, "web")
    for pod in cluster.pods()[:3]:
        assert pod["metadata"]["name"].startswith("web-")
        assert pod["metadata"]["labels"] == {"app": "web"}
        (ref,) = pod["metadata"]["ownerReferences"]
        assert ref == {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web",
            "uid": rs["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    assert kube.calls["create pods"] == 300  # expectations: no second round while the cache caught up
    await cluster.eventually(
        lambda: cluster.obj(REPLICASETS, "web").get("status", {}).get("replicas") == 300, "status"
    )
    status = cluster.obj(REPLICASETS, "web")["status"]
    assert status == {"replicas": 300, "fullyLabeledReplicas": 300, "observedGeneration": 1}
    created = cluster.events("SuccessfulCreate")
    # nine distinct messages, then one event combining the rest until the spam filter's burst (25) is spent
    assert len(created) == 10
    assert all(e["message"].startswith("Created pod: web-") for e in created[:9])
    assert created[9]["message"].startswith("(combined from similar events): Created pod: web-")
    assert created[9]["count"] == 25 - 9

    for pod in cluster.pods()[:100]:
        await kube.mark_ready("ns", pod["metadata"]["name"])
    rs = cluster.obj(REPLICASETS, "web")
    rs["spec"]["replicas"] = 100
    await kube.replace(REPLICASETS, rs, namespace="ns")
    await cluster.eventually(lambda: len(cluster.pods()) == 100, "100 pods")
    # not-ready pods go first: the 100 ready ones are the ones kept
    assert all(p["status"]["phase"] == "Running" for p in cluster.pods())
    await cluster.eventually(
        lambda: (
            cluster.obj(REPLICASETS, "web")["status"].get("readyReplicas") == 100
            and cluster.obj(REPLICASETS, "web")["status"].get("observedGeneration") == 2
        ),
        "status after scale down",
    )


@pytest.mark.looptime
async def test_creates_stop_after_a_failing_slow_start_batch(cluster: Cluster) -> None:
    kube = cluster.kube
    attempts: list[str] = []
    controller = cluster.manager.controllers["replicaset"].controller
    reconcile = controller._reconcile

    async def marked(key: str) -> float | None:
        attempts.append("sync")
        return await reconcile(key)

    controller._reconcile = marked

    def quota(resource: Resource, obj: Obj) -> None:
        if resource is not PODS:
            return
        attempts.append("create")
        if len(kube.objects(PODS, "ns")) >= 3:
            raise StatusError(
                403,
                "Forbidden",
                f'pods "{obj["metadata"]["generateName"]}" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=3, limited: pods=3',
            )

    kube.create_hook = quota
    await kube.create(REPLICASETS, rs_body("web", 50), namespace="ns")
    await cluster.eventually(lambda: len(cluster.events("FailedCreate")) == 1, "a FailedCreate event")
    await asyncio.sleep(1)
    # the first sync: batches of 1 and 2 succeed, the batch of 4 fails and no further batch is tried;
    # every later sync tries one create and stops at its failure
    creates_per_sync = [
        len(list(group))
        for is_create, group in itertools.groupby(attempts, lambda a: a == "create")
        if is_create
    ]
    assert creates_per_sync[0] == 7
    assert set(creates_per_sync[1:]) == {1}
    assert len(cluster.pods()) == 3
    (event,) = cluster.events("FailedCreate")
    assert event["type"] == "Warning"
    assert (
        event["message"]
        == 'Error creating: pods "web-" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=3, limited: pods=3'
    )
    assert event["count"] >= 2  # repeats of the same failure count up on one Event
    await cluster.eventually(
        lambda: "conditions" in cluster.obj(REPLICASETS, "web").get("status", {}), "condition"
    )
    (cond,) = cluster.obj(REPLICASETS, "web")["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("ReplicaFailure", "True", "FailedCreate")
    assert "exceeded quota" in cond["message"]
    kube.create_hook = None  # the quota is raised: the back-off brings the set to 50 and clears the condition
    await cluster.eventually(lambda: len(cluster.pods()) == 50, "50 pods", within=120)
    await cluster.eventually(
        lambda: "conditions" not in cluster.obj(REPLICASETS, "web").get("status", {}), "cleared"
    )


@pytest.mark.looptime
async def test_min_ready_seconds_delays_availability(cluster: Cluster) -> None:
    kube = cluster.kube
    await kube.create(REPLICASETS, rs_body("web", 3, minReadySeconds=30), namespace="ns")
    await cluster.eventually(lambda: len(cluster.pods()) == 3, "3 pods")
    start = asyncio.get_running_loop().time()
    for pod in cluster.pods():
        await kube.mark_ready("ns", pod["metadata"]["name"])
    await cluster.eventually(
        lambda: cluster.obj(REPLICASETS, "web")["status"].get("readyReplicas") == 3, "ready"
    )
    assert cluster.obj(REPLICASETS, "web")["status"].get("availableReplicas", 0) == 0
    await cluster.eventually(
        lambda: cluster.obj(REPLICASETS, "web")["status"].get("availableReplicas") == 3, "available"
    )
    waited = asyncio.get_running_loop().time() - start
    assert 30 <= waited < 33  # requeued for the moment they become available, not a resync later


@pytest.mark.looptime
async def test_orphans_are_adopted_and_mismatches_released(cluster: Cluster) -> None:
    kube = cluster.kube
    for n in range(4):
        await kube.create(
            PODS,
            {
                "metadata": {"name": f"stray-{n}", "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
            namespace="ns",
        )
    await kube.create(
        PODS,
        {
            "metadata": {"name": "other", "labels": {"app": "other"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        },
        namespace="ns",
    )
    await kube.create(REPLICASETS, rs_body("web", 6), namespace="ns")
    await cluster.eventually(lambda: len(cluster.pods()) == 7, "2 created, 4 adopted")
    rs_uid = cluster.obj(REPLICASETS, "web")["metadata"]["uid"]
    for n in range(4):
        (ref,) = cluster.obj(PODS, f"stray-{n}")["metadata"]["ownerReferences"]
        assert ref["uid"] == rs_uid and ref["controller"] is True
    assert "ownerReferences" not in cluster.obj(PODS, "other")["metadata"]
    relabelled = cluster.obj(PODS, "stray-0")
    await kube.patch(PODS, "stray-0", {"metadata": {"labels": {"app": "gone"}}}, namespace="ns")
    await cluster.eventually(
        lambda: not cluster.obj(PODS, "stray-0")["metadata"].get("ownerReferences"), "released"
    )
    await cluster.eventually(lambda: len(cluster.pods()) == 8, "a replacement")
    assert relabelled["metadata"]["uid"] == cluster.obj(PODS, "stray-0")["metadata"]["uid"]


# -- Deployments ------------------------------------------------------------------------------------------------


@pytest.mark.looptime
async def test_rolling_update_of_100_replicas_keeps_surge_and_history(cluster: Cluster) -> None:
    kube = cluster.kube
    peak = {"total": 0}

    def watch_sizes(event: str, resource: Resource, obj: Obj) -> None:
        if resource is REPLICASETS and event != "DELETED":
            total = sum(du.replicas(rs) for rs in kube.store.get("replicasets", {}).values())
            peak["total"] = max(peak["total"], total)

    kube.write_hook = watch_sizes
    stop = asyncio.Event()
    node = asyncio.create_task(kubelet(kube, stop=stop))
    await kube.create(DEPLOYMENTS, deployment_body("web", 100, revisionHistoryLimit=2), namespace="ns")

    def complete() -> bool:
        d = cluster.obj(DEPLOYMENTS, "web")
        return du.deployment_complete(d, d.get("status", {})) and len(cluster.pods()) == 100

    await cluster.eventually(complete, "first rollout", within=300)
    for version in range(2, 6):
        d = cluster.obj(DEPLOYMENTS, "web")
        d["spec"]["template"]["spec"]["containers"][0]["image"] = f"i:{version}"
        await kube.replace(DEPLOYMENTS, d, namespace="ns")
        await cluster.eventually(complete, f"rollout {version}", within=600)
    stop.set()
    await node
    assert peak["total"] <= 125  # replicas + maxSurge (25%) at every step
    d = cluster.obj(DEPLOYMENTS, "web")
    assert d["metadata"]["annotations"][du.REVISION] == "5"
    status = d["status"]
    assert (status["replicas"], status["updatedReplicas"], status["availableReplicas"]) == (100, 100, 100)
    assert {c["type"]: c["reason"] for c in status["conditions"]} == {
        "Available": "MinimumReplicasAvailable",
        "Progressing": "NewReplicaSetAvailable",
    }
    await cluster.eventually(
        lambda: len(kube.objects(REPLICASETS, "ns")) == 3, "history trimmed to 2 old sets"
    )
    sets = {rs["metadata"]["annotations"][du.REVISION]: rs for rs in kube.objects(REPLICASETS, "ns")}
    assert sorted(sets) == ["3", "4", "5"]
    assert du.replicas(sets["5"]) == 100 and du.replicas(sets["3"]) == 0
    new = sets["5"]
    assert new["metadata"]["name"] == f"web-{new['metadata']['labels'][du.POD_TEMPLATE_HASH]}"
    assert (
        new["spec"]["selector"]["matchLabels"][du.POD_TEMPLATE_HASH]
        == new["metadata"]["labels"][du.POD_TEMPLATE_HASH]
    )
    assert new["metadata"]["annotations"][du.DESIRED_REPLICAS] == "100"
    assert new["metadata"]["annotations"][du.MAX_REPLICAS] == "125"
    scaling = [e["message"] for e in cluster.events("ScalingReplicaSet")]
    assert any(m.startswith("Scaled up replica set web-") and m.endswith(" to 25") for m in scaling)


@pytest.mark.looptime
async def test_progress_deadline_exceeded_after_progress_deadline_seconds(cluster: Cluster) -> None:
    kube = cluster.kube
    await kube.create(DEPLOYMENTS, deployment_body("stuck", 2, progressDeadlineSeconds=600), namespace="ns")
    await cluster.eventually(lambda: len(cluster.pods()) == 2, "pods")  # never Ready: no kubelet here

    def progressing() -> Obj:
        cond = du.get_condition(cluster.obj(DEPLOYMENTS, "stuck").get("status", {}), "Progressing")
        assert cond is not None
        return cond

    await cluster.eventually(
        lambda: cluster.obj(DEPLOYMENTS, "stuck").get("status", {}).get("updatedReplicas") == 2, "status"
    )
    recorded = [
        cond
        for _, _, d in kube.history["deployments"]
        if (cond := du.get_condition(d.get("status") or {}, "Progressing")) is not None
    ]
    assert recorded[0]["reason"] == "NewReplicaSetCreated"
    assert recorded[0]["message"].startswith('Created new replica set "stuck-')
    assert progressing()["reason"] == "ReplicaSetUpdated"  # the pods being created counts as progress
    await asyncio.sleep(550)
    assert progressing()["reason"] == "ReplicaSetUpdated"
    await cluster.eventually(
        lambda: progressing()["reason"] == "ProgressDeadlineExceeded", "the deadline", within=120
    )
    cond = progressing()
    rs_name = cond["message"].split('"')[1]
    assert cond["status"] == "False"
    assert cond["message"] == f'ReplicaSet "{rs_name}" has timed out progressing.'
    available = du.get_condition(cluster.obj(DEPLOYMENTS, "stuck")["status"], "Available")
    assert available is not None and available["reason"] == "MinimumReplicasUnavailable"


@pytest.mark.looptime
async def test_recreate_removes_old_pods_before_new_ones(cluster: Cluster) -> None:
    kube = cluster.kube
    stop = asyncio.Event()
    node = asyncio.create_task(kubelet(kube, stop=stop))
    body = deployment_body("web", 5)
    body["spec"]["strategy"] = {"type": "Recreate"}
    await kube.create(DEPLOYMENTS, body, namespace="ns")
    await cluster.eventually(
        lambda: cluster.obj(DEPLOYMENTS, "web").get("status", {}).get("availableReplicas") == 5, "up"
    )
    overlap: list[int] = []

    def check(event: str, resource: Resource, obj: Obj) -> None:
        if resource is PODS and event == "ADDED" and obj["spec"]["containers"][0]["image"] == "i:2":
            overlap.append(
                sum(1 for p in kube.store["pods"].values() if p["spec"]["containers"][0]["image"] == "i:1")
            )

    kube.write_hook = check
    d = cluster.obj(DEPLOYMENTS, "web")
    d["spec"]["template"]["spec"]["containers"][0]["image"] = "i:2"
    await kube.replace(DEPLOYMENTS, d, namespace="ns")
    await cluster.eventually(
        lambda: (
            cluster.obj(DEPLOYMENTS, "web")["status"].get("updatedReplicas") == 5
            and cluster.obj(DEPLOYMENTS, "web")["status"].get("availableReplicas") == 5
        ),
        "recreated",
    )
    stop.set()
    await node
    assert overlap and set(overlap) == {0}


@pytest.mark.looptime
async def test_paused_deployment_scales_but_does_not_roll(cluster: Cluster) -> None:
    kube = cluster.kube
    stop = asyncio.Event()
    node = asyncio.create_task(kubelet(kube, stop=stop))
    await kube.create(DEPLOYMENTS, deployment_body("web", 4), namespace="ns")
    await cluster.eventually(
        lambda: cluster.obj(DEPLOYMENTS, "web").get("status", {}).get("availableReplicas") == 4, "up"
    )
    d = cluster.obj(DEPLOYMENTS, "web")
    d["spec"]["paused"] = True
    d["spec"]["template"]["spec"]["containers"][0]["image"] = "i:2"
    d["spec"]["replicas"] = 6
    await kube.replace(DEPLOYMENTS, d, namespace="ns")
    await cluster.eventually(lambda: len(cluster.pods()) == 6, "scaled while paused")
    assert len(kube.objects(REPLICASETS, "ns")) == 1  # no new set while paused
    cond = du.get_condition(cluster.obj(DEPLOYMENTS, "web")["status"], "Progressing")
    assert cond is not None and (cond["status"], cond["reason"], cond["message"]) == (
        "Unknown",
        "DeploymentPaused",
        "Deployment is paused",
    )
    d = cluster.obj(DEPLOYMENTS, "web")
    d["spec"]["paused"] = False
    await kube.replace(DEPLOYMENTS, d, namespace="ns")
    await cluster.eventually(lambda: len(kube.objects(REPLICASETS, "ns")) == 2, "rolling after resume")
    resumed = [
        e
        for e in kube.history["deployments"]
        if (du.get_condition(e[2].get("status", {}), "Progressing") or {}).get("reason")
        == "DeploymentResumed"
    ]
    assert resumed
    await cluster.eventually(
        lambda: (
            cluster.obj(DEPLOYMENTS, "web")["status"].get("updatedReplicas") == 6
            and cluster.obj(DEPLOYMENTS, "web")["status"].get("availableReplicas") == 6
            and cluster.obj(DEPLOYMENTS, "web")["status"].get("replicas") == 6
        ),
        "done",
    )
    stop.set()
    await node


# -- Endpoints, ServiceAccounts, the root CA ----------------------------------------------------------------


@pytest.mark.looptime
async def test_endpoints_follow_readiness_of_200_pods(cluster: Cluster) -> None:
    kube = cluster.kube
    await kube.create(
        SERVICES,
        {
            "metadata": {"name": "web", "labels": {"tier": "front"}},
            "spec": {
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
            },
        },
        namespace="ns",
    )
    for n in range(200):
        await kube.create(
            PODS,
            {
                "metadata": {"name": f"web-{n}", "labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "x",
                            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                        }
                    ]
                },
            },
            namespace="ns",
        )
    for n in range(200):
        await kube.mark_ready("ns", f"web-{n}", ready=n % 4 != 0, ip=f"10.1.{n // 250}.{n % 250 + 1}")

    def subset() -> Obj:
        ep = kube.peek(ENDPOINTS, "ns", "web")
        return (ep or {}).get("subsets", [{}])[0]

    await cluster.eventually(
        lambda: (
            len(subset().get("addresses", [])) == 150 and len(subset().get("notReadyAddresses", [])) == 50
        ),
        "endpoints",
    )
    ep = cluster.obj(ENDPOINTS, "web")
    assert ep["metadata"]["labels"] == {"tier": "front", "service.kubernetes.io/headless": ""}
    assert subset()["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert "endpoints.kubernetes.io/last-change-trigger-time" in ep["metadata"]["annotations"]
    await kube.delete(PODS, "web-1", namespace="ns")
    await cluster.eventually(lambda: len(subset().get("addresses", [])) == 149, "one gone")
    await kube.delete(SERVICES, "web", namespace="ns")
    await cluster.eventually(
        lambda: kube.peek(ENDPOINTS, "ns", "web") is None, "endpoints deleted with the service"
    )


@pytest.mark.looptime
async def test_every_namespace_gets_default_account_and_root_ca(cluster: Cluster) -> None:
    kube = cluster.kube
    for n in range(100):
        await kube.create(NAMESPACES, {"metadata": {"name": f"team-{n}"}})
    await cluster.eventually(
        lambda: len(kube.objects(SERVICEACCOUNTS)) == 101 and len(kube.objects(CONFIGMAPS)) == 101, "defaults"
    )
    cm = cluster.obj(CONFIGMAPS, "kube-root-ca.crt", "team-7")
    assert cm["data"] == {"ca.crt": ROOT_CA.decode()}
    assert cm["metadata"]["annotations"]["kubernetes.io/description"].startswith("Contains a CA bundle")
    await kube.delete(SERVICEACCOUNTS, "default", namespace="team-7")
    await kube.patch(CONFIGMAPS, "kube-root-ca.crt", {"data": {"ca.crt": "tampered"}}, namespace="team-8")
    await cluster.eventually(
        lambda: kube.peek(SERVICEACCOUNTS, "team-7", "default") is not None, "account back"
    )
    await cluster.eventually(
        lambda: cluster.obj(CONFIGMAPS, "kube-root-ca.crt", "team-8")["data"]["ca.crt"] == ROOT_CA.decode(),
        "CA back",
    )
    terminating = await kube.create(NAMESPACES, {"metadata": {"name": "leaving"}})
    terminating["status"] = {"phase": "Terminating"}
    await kube.replace_status(NAMESPACES, terminating)
    await asyncio.sleep(1)
    # One made before the phase changed is fine; once it is deleted, a terminating namespace gets none back.
    if kube.peek(SERVICEACCOUNTS, "leaving", "default") is not None:
        await kube.delete(SERVICEACCOUNTS, "default", namespace="leaving")
    await asyncio.sleep(5)
    assert kube.peek(SERVICEACCOUNTS, "leaving", "default") is None
    # ... while an active namespace's deleted account does come back (the same wait, the other answer).
    await kube.delete(SERVICEACCOUNTS, "default", namespace="team-9")
    await asyncio.sleep(5)
    assert kube.peek(SERVICEACCOUNTS, "team-9", "default") is not None


@pytest.mark.looptime
async def test_queue_back_off_reaches_its_time_under_a_ticking_clock() -> None:
    """Back-offs of 5 ms doubling land between the fake clock's 1 µs ticks (0.075 + float error); the key
    must still come back, not spin a worker at a standstill (the queue used to wait forever here)."""
    from vplane.controllers.workqueue import WorkQueue

    queue: WorkQueue[str] = WorkQueue()
    seen: list[float] = []

    async def failing_worker() -> None:
        while True:
            key = await queue.get()
            seen.append(asyncio.get_running_loop().time())
            queue.add_rate_limited(key)
            queue.done(key)

    worker = asyncio.create_task(failing_worker())
    queue.add("k")
    async with asyncio.timeout(30):
        while len(seen) < 8:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    worker.cancel()
    await asyncio.gather(worker, return_exceptions=True)
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(seen)]
    assert gaps == [0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32]


@pytest.mark.looptime
async def test_one_list_and_watch_per_resource(cluster: Cluster) -> None:
    """Shared informers: three controllers read pods, one list of pods was made."""
    assert cluster.kube.calls["list pods"] == 1
    assert cluster.kube.calls["list replicasets"] == 1
    assert cluster.kube.calls["list namespaces"] == 1


@pytest.mark.looptime
async def test_hash_collision_bumps_collision_count(cluster: Cluster) -> None:
    kube = cluster.kube
    body = deployment_body("web", 2)
    taken = f"web-{du.compute_hash(body['spec']['template'], None)}"
    squatter = rs_body("squatter", 0)
    squatter["metadata"]["name"] = taken  # same name, another template, not the Deployment's to adopt
    await kube.create(REPLICASETS, squatter, namespace="ns")
    await kube.create(DEPLOYMENTS, body, namespace="ns")
    await cluster.eventually(lambda: len(kube.objects(REPLICASETS, "ns")) == 2, "a second name")
    d = cluster.obj(DEPLOYMENTS, "web")
    assert d["status"]["collisionCount"] == 1
    (mine,) = [rs for rs in kube.objects(REPLICASETS, "ns") if rs["metadata"]["name"] != taken]
    assert mine["metadata"]["name"] == f"web-{du.compute_hash(body['spec']['template'], 1)}"
    await cluster.eventually(lambda: len(cluster.pods()) == 2, "pods")


@pytest.mark.looptime
async def test_replication_controller_is_the_same_controller_with_a_map_selector(cluster: Cluster) -> None:
    """The ReplicationController adapter (core/v1, plain map selector, its own event source); the kind is
    not served by vplane yet, the fake serves it."""
    kube = cluster.kube
    assert "replicationcontroller" in cluster.manager.controllers
    body = {
        "metadata": {"name": "legacy"},
        "spec": {
            "replicas": 3,
            "selector": {"app": "legacy"},
            "template": {
                "metadata": {"labels": {"app": "legacy"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    }
    await kube.create(REPLICATIONCONTROLLERS, body, namespace="ns")
    await cluster.eventually(lambda: len(cluster.pods()) == 3, "three pods")
    rc = cluster.obj(REPLICATIONCONTROLLERS, "legacy")
    for pod in cluster.pods():
        (ref,) = pod["metadata"]["ownerReferences"]
        assert (ref["apiVersion"], ref["kind"], ref["uid"]) == (
            "v1",
            "ReplicationController",
            rc["metadata"]["uid"],
        )
    await cluster.eventually(
        lambda: cluster.obj(REPLICATIONCONTROLLERS, "legacy").get("status", {}).get("replicas") == 3, "status"
    )
    created = cluster.events("SuccessfulCreate")
    assert created and created[0]["source"] == {"component": "replication-controller"}
    assert created[0]["involvedObject"]["kind"] == "ReplicationController"

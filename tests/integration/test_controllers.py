"""The controllers runtime against a real ``vplane apiserver``: leader election, informer, reconciler.

Everything goes through ``KubeClient`` (lightkube) over HTTPS with the server's kubeconfig, exactly as
against a real cluster. Timings are shrunk through the settings objects; waits are bounded, never
asserted.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from harness import APIServerProcess, Kubectl
from vplane.controllers.client import CONFIGMAPS, LEASES, NAMESPACES, KubeClient
from vplane.controllers.informer import Informer, InformerSettings
from vplane.controllers.leaderelection import LeaderElectionSettings, LeaderElector
from vplane.controllers.reconciler import Controller
from vplane.controllers.workqueue import WorkQueueSettings
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

pytestmark = pytest.mark.integration

MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
LEASE = "vcluster-demo-controller"
SHORT = LeaderElectionSettings(lease_duration=3, renew_deadline=2, retry_period=0.5)


async def eventually(check: Callable[[], bool], what: str, within: float = 10) -> None:
    """Poll ``check`` (state that lives in another process or task) until it holds, at most ``within`` s."""
    try:
        async with asyncio.timeout(within):
            while True:
                if check():
                    return
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not within {within}s: {what}") from None


@pytest.fixture
async def kube(shared_apiserver: APIServerProcess) -> AsyncIterator[KubeClient]:
    client = KubeClient.from_kubeconfig(shared_apiserver.kubeconfig, field_manager="vplane-tests")
    yield client
    await client.close()


class Replica:
    """One elector with a connection of its own, as a separate replica would have."""

    def __init__(
        self, server: APIServerProcess, namespace: str, identity: str, settings: LeaderElectionSettings
    ):
        self.client = KubeClient.from_kubeconfig(server.kubeconfig)
        self.leaders: list[str] = []
        self.working = False
        self.elector = LeaderElector(
            self.client,
            namespace=namespace,
            name=LEASE,
            identity=identity,
            settings=settings,
            on_started_leading=self._work,
            on_new_leader=self.leaders.append,
        )
        self.task = asyncio.create_task(self.elector.run())

    async def _work(self) -> None:
        self.working = True
        try:
            await asyncio.Event().wait()
        finally:
            self.working = False

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.client.close()


async def _elect(server: APIServerProcess, namespace: str, settings: LeaderElectionSettings) -> list[Replica]:
    replicas = [
        Replica(server, namespace, f"replica-{i}-external-vcluster-controller", settings) for i in (1, 2)
    ]
    await eventually(lambda: any(r.elector.is_leader for r in replicas), "a leader is elected")
    return replicas


# -- leader election ---------------------------------------------------------------------------------------


async def test_two_electors_one_leader_then_graceful_handover(
    shared_apiserver: APIServerProcess, namespace: str, kube: KubeClient, kubectl: Kubectl
) -> None:
    """Exactly one of two replicas leads through several renewals; stopping it hands the Lease to the other."""
    replicas = await _elect(shared_apiserver, namespace, SHORT)
    try:
        for _ in range(6):  # three renewal periods
            await asyncio.sleep(0.25)
            assert [r.elector.is_leader for r in replicas].count(True) == 1
        leader, follower = sorted(replicas, key=lambda r: not r.elector.is_leader)
        assert leader.working and not follower.working
        assert follower.leaders == [leader.elector.identity]

        lease = await kube.get(LEASES, LEASE, namespace=namespace)
        spec = lease["spec"]
        assert spec["holderIdentity"] == leader.elector.identity
        assert spec["leaseDurationSeconds"] == 3
        assert spec["leaseTransitions"] == 0
        assert MICRO_TIME.match(spec["acquireTime"]) and MICRO_TIME.match(spec["renewTime"])
        assert spec["renewTime"] > spec["acquireTime"]  # it has renewed

        table = (
            await asyncio.to_thread(kubectl.run, "get", "lease", LEASE, "-n", namespace)
        ).out.splitlines()
        assert table[0].split() == ["NAME", "HOLDER", "AGE"]
        assert table[1].split()[:2] == [LEASE, leader.elector.identity]

        # Every write to the Lease from here on, in order: the release must come before the takeover.
        history: list[tuple[str, int]] = []
        start = (await kube.get(LEASES, LEASE, namespace=namespace))["metadata"]["resourceVersion"]

        async def record() -> None:
            async for event in kube.watch(LEASES, namespace=namespace, resource_version=start):
                spec = event.object["spec"]
                history.append((spec["holderIdentity"], spec["leaseDurationSeconds"]))

        watching = asyncio.create_task(record())
        await leader.stop()
        await eventually(
            lambda: follower.elector.is_leader, "the follower takes over", within=SHORT.lease_duration
        )
        await eventually(lambda: (follower.elector.identity, 3) in history, "the takeover's write")
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        takeover = history.index((follower.elector.identity, 3))
        assert history[takeover - 1] == ("", 1)  # released: no holder, 1 s
        assert set(history[: takeover - 1]) <= {(leader.elector.identity, 3)}  # only the leader's renewals

        assert follower.working
        spec = (await kube.get(LEASES, LEASE, namespace=namespace))["spec"]
        assert spec["holderIdentity"] == follower.elector.identity
        assert spec["leaseTransitions"] == 1
        assert follower.leaders == [leader.elector.identity, follower.elector.identity]
    finally:
        for r in replicas:
            await r.stop()


async def test_a_crashed_leader_is_replaced_after_the_lease_expires(
    shared_apiserver: APIServerProcess, namespace: str, kube: KubeClient
) -> None:
    """A leader that stops without releasing keeps the Lease until it expires; then the other replica leads."""
    settings = SHORT.model_copy(update={"release_on_cancel": False})
    replicas = await _elect(shared_apiserver, namespace, settings)
    leader, follower = sorted(replicas, key=lambda r: not r.elector.is_leader)
    try:
        await leader.stop()
        spec = (await kube.get(LEASES, LEASE, namespace=namespace))["spec"]
        assert spec["holderIdentity"] == leader.elector.identity  # not released
        assert not follower.elector.is_leader
        bound = settings.lease_duration + settings.retry_period * (1 + settings.jitter_factor) + 1
        await eventually(
            lambda: follower.elector.is_leader, "the follower takes over after expiry", within=bound
        )
        spec = (await kube.get(LEASES, LEASE, namespace=namespace))["spec"]
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == (follower.elector.identity, 1)
    finally:
        await follower.stop()


# -- informer ---------------------------------------------------------------------------------------------


class Recorder:
    def __init__(self, informer: Informer) -> None:
        self.events: list[tuple[str, str, Any]] = []
        informer.add_handlers(
            on_add=lambda o: self.events.append(("add", o["metadata"]["name"], o.get("data"))),
            on_update=lambda old, new: self.events.append(
                ("update", new["metadata"]["name"], new.get("data"))
            ),
            on_delete=lambda o: self.events.append(("delete", o["metadata"]["name"], None)),
        )

    def saw(self, *events: tuple[str, str, Any]) -> Callable[[], bool]:
        return lambda: all(e in self.events for e in events)


async def test_informer_sees_add_update_delete(namespace: str, kube: KubeClient) -> None:
    """The first list reports existing objects as adds; the watch then reports each change once."""
    await kube.create(CONFIGMAPS, {"metadata": {"name": "pre"}, "data": {"v": "0"}}, namespace=namespace)
    informer = Informer(kube, CONFIGMAPS, namespace=namespace)
    recorder = Recorder(informer)
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(10):
            await informer.wait_for_sync()
        assert recorder.events == [("add", "pre", {"v": "0"})]
        assert informer.get(f"{namespace}/pre") is not None

        await kube.create(CONFIGMAPS, {"metadata": {"name": "a"}, "data": {"v": "1"}}, namespace=namespace)
        await kube.patch(CONFIGMAPS, "a", {"data": {"v": "2"}}, namespace=namespace)
        await kube.delete(CONFIGMAPS, "a", namespace=namespace)
        await eventually(recorder.saw(("delete", "a", None)), "the delete event")
        assert recorder.events[1:] == [
            ("add", "a", {"v": "1"}),
            ("update", "a", {"v": "2"}),
            ("delete", "a", None),
        ]
        assert informer.keys() == [f"{namespace}/pre"]
        assert informer.list_count == 1
        late = Recorder(informer)  # a handler added after sync hears about the cached objects
        assert late.events == [("add", "pre", {"v": "0"})]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def small(apiserver: APIServerProcess) -> AsyncIterator[tuple[APIServerProcess, KubeClient]]:
    """A server that keeps five revisions and compacts five times a second, so old revisions expire fast."""
    await asyncio.to_thread(apiserver.start, history_window=5, compact_interval_seconds=0.2)
    client = KubeClient.from_kubeconfig(apiserver.kubeconfig, field_manager="vplane-tests")
    for ns in ("inf", "churn"):
        await client.create(NAMESPACES, {"metadata": {"name": ns}})
    yield apiserver, client
    await client.close()


async def _churn(kube: KubeClient, prefix: str, count: int = 12) -> None:
    for i in range(count):
        await kube.create(CONFIGMAPS, {"metadata": {"name": f"{prefix}-{i}"}}, namespace="churn")


async def _compacted(server: APIServerProcess, revision: str) -> None:
    """Wait until ``revision`` is below the compaction point (an exact list there answers 410)."""
    query = urllib.parse.urlencode({"resourceVersion": revision, "resourceVersionMatch": "Exact"})

    async def status() -> int:
        code, _, _ = await asyncio.to_thread(
            server.request, "GET", f"/api/v1/namespaces/inf/configmaps?{query}"
        )
        return code

    async with asyncio.timeout(10):
        while True:
            if await status() == 410:
                return
            await asyncio.sleep(0.1)


async def test_informer_relists_when_its_watch_expires(small: tuple[APIServerProcess, KubeClient]) -> None:
    """A watch resumed from a compacted revision gets 410; the informer relists and keeps going.

    Writes elsewhere move the server's revision on while the informer's stays at its last event. When
    the server ends the (short) watch, it resumes from that compacted revision, is refused, and relists.
    """
    server, kube = small
    informer = Informer(kube, CONFIGMAPS, namespace="inf", settings=InformerSettings(watch_timeout_seconds=1))
    recorder = Recorder(informer)
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(10):
            await informer.wait_for_sync()
        await kube.create(CONFIGMAPS, {"metadata": {"name": "a"}, "data": {"v": "1"}}, namespace="inf")
        await eventually(recorder.saw(("add", "a", {"v": "1"})), "the add event")
        stale = informer.resource_version
        assert stale is not None
        await _churn(kube, "live")
        await _compacted(server, stale)
        await eventually(lambda: informer.list_count == 2, "a relist after 410")
        assert int(informer.resource_version or 0) > int(stale)
        assert recorder.events == [("add", "a", {"v": "1"})]  # nothing changed here, so nothing replayed

        await kube.create(CONFIGMAPS, {"metadata": {"name": "b"}, "data": {}}, namespace="inf")
        await eventually(recorder.saw(("add", "b", {})), "an event after the relist")
        assert sorted(informer.keys()) == ["inf/a", "inf/b"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_restarted_informer_resumes_or_relists_with_the_missed_changes(
    small: tuple[APIServerProcess, KubeClient],
) -> None:
    """run() again resumes from the last revision; if that was compacted, the relist's difference is
    reported as the delete, update and add the informer missed while stopped."""
    server, kube = small
    for name in ("a", "b"):
        await kube.create(CONFIGMAPS, {"metadata": {"name": name}, "data": {"v": "1"}}, namespace="inf")
    informer = Informer(kube, CONFIGMAPS, namespace="inf")
    recorder = Recorder(informer)

    async def run_until(check: Callable[[], bool], what: str) -> None:
        task = asyncio.create_task(informer.run())
        try:
            await eventually(check, what)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    await run_until(lambda: informer.has_synced, "the first list")
    assert sorted(recorder.events) == [("add", "a", {"v": "1"}), ("add", "b", {"v": "1"})]

    # Stopped briefly: the missed change is still in the server's history, so the watch resumes.
    await kube.patch(CONFIGMAPS, "a", {"data": {"v": "2"}}, namespace="inf")
    await run_until(recorder.saw(("update", "a", {"v": "2"})), "the missed update, from the watch")
    assert informer.list_count == 1

    # Stopped for long: the history is compacted past the informer's revision.
    stale = informer.resource_version
    assert stale is not None
    await kube.delete(CONFIGMAPS, "a", namespace="inf")
    await kube.patch(CONFIGMAPS, "b", {"data": {"v": "3"}}, namespace="inf")
    await kube.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"v": "1"}}, namespace="inf")
    await _churn(kube, "stopped")
    await _compacted(server, stale)
    missed = [("delete", "a", None), ("update", "b", {"v": "3"}), ("add", "c", {"v": "1"})]
    await run_until(recorder.saw(*missed), "the missed changes, from a relist")
    assert informer.list_count == 2
    assert sorted(informer.keys()) == ["inf/b", "inf/c"]


# -- reconciler ---------------------------------------------------------------------------------------------


async def test_reconciler_processes_keys_and_retries_failures(namespace: str, kube: KubeClient) -> None:
    """Every object's key is reconciled; a failing key is retried after back-off; a delete reaches reconcile."""
    informer = Informer(kube, CONFIGMAPS, namespace=namespace)
    attempts: dict[str, int] = {}
    gone: list[str] = []

    async def reconcile(key: str) -> None:
        attempts[key] = attempts.get(key, 0) + 1
        obj: Obj | None = informer.get(key)
        if obj is None:
            gone.append(key)
            return
        if key.endswith("/flaky") and attempts[key] == 1:
            raise RuntimeError("transient failure")
        if (obj["metadata"].get("annotations") or {}).get("reconciled") != "yes":
            name = obj["metadata"]["name"]
            await kube.patch(
                CONFIGMAPS, name, {"metadata": {"annotations": {"reconciled": "yes"}}}, namespace=namespace
            )

    controller = Controller(
        "annotate", informer, reconcile, workers=2, queue_settings=WorkQueueSettings(backoff_base=0.05)
    )
    await kube.create(CONFIGMAPS, {"metadata": {"name": "x"}}, namespace=namespace)
    task = asyncio.create_task(controller.run())
    try:
        for name in ("y", "flaky"):
            await kube.create(CONFIGMAPS, {"metadata": {"name": name}}, namespace=namespace)

        def all_reconciled() -> bool:
            objs = [informer.get(f"{namespace}/{n}") for n in ("x", "y", "flaky")]
            return all(
                o is not None and (o["metadata"].get("annotations") or {}).get("reconciled") for o in objs
            )

        await eventually(all_reconciled, "every configmap annotated")
        assert attempts[f"{namespace}/flaky"] >= 2

        await kube.delete(CONFIGMAPS, "y", namespace=namespace)
        await eventually(lambda: gone == [f"{namespace}/y"], "reconcile of the deleted key")
        with pytest.raises(StatusError) as info:
            await kube.get(CONFIGMAPS, "y", namespace=namespace)
        assert info.value.code == 404
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    raw = json.dumps(await kube.get(CONFIGMAPS, "x", namespace=namespace))
    assert '"reconciled": "yes"' in raw

"""Lease leader election: the pure decisions with fake time, and the loop against an in-memory KubeAPI.

The loop tests run on looptime's fake clock (the elector's clock is the loop's), so a 60 s lease
expires instantly and the assertions can name exact times. Every test is ``async`` on purpose: with
looptime 0.9 and pytest-asyncio 1.x on Python 3.11, a sync test makes looptime create (and leak) an
event loop, whose ResourceWarning can fail a later async test.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import pytest
from pydantic import ValidationError

from vplane.controllers.client import LEASES, ListResult, Resource, TransportError, WatchEvent
from vplane.controllers.leaderelection import (
    LeaderElectionSettings,
    LeaderElector,
    LeaseRecord,
    Observation,
    claim,
    format_micro_time,
    lease_expired,
    may_acquire,
    observe,
    parse_micro_time,
    released,
)
from vplane.kube import errors
from vplane.kube.objects import Obj

NS, NAME = "kube-system", "vcluster-demo-controller"
FAST = LeaderElectionSettings(jitter_factor=0)  # the documented timings, without random spread


# -- a fake API server ----------------------------------------------------------------------------------


class FakeKube:
    """An in-memory ``KubeAPI`` with a global revision, 404 and 409 like a server, and failure injection."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], Obj] = {}
        self.revision = itertools.count(1)
        self.failing = False
        self.writes = 0

    async def _io(self) -> None:
        await asyncio.sleep(0)  # a request yields to the loop, so concurrent candidates interleave
        if self.failing:
            raise TransportError("connection refused")

    def _key(self, resource: Resource, namespace: str | None, name: str) -> tuple[str, str | None, str]:
        return resource.plural, namespace if resource.namespaced else None, name

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        await self._io()
        obj = self.objects.get(self._key(resource, namespace, name))
        if obj is None:
            raise errors.not_found(resource.plural, name, resource.group)
        return copy.deepcopy(obj)

    async def create(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        await self._io()
        meta = obj["metadata"]
        key = self._key(resource, namespace or meta.get("namespace"), meta["name"])
        if key in self.objects:
            raise errors.already_exists(resource.plural, meta["name"], resource.group)
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(next(self.revision))
        self.objects[key] = stored
        self.writes += 1
        return copy.deepcopy(stored)

    async def replace(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        await self._io()
        meta = obj["metadata"]
        key = self._key(resource, namespace or meta.get("namespace"), meta["name"])
        current = self.objects.get(key)
        if current is None:
            raise errors.not_found(resource.plural, meta["name"], resource.group)
        if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise errors.conflict(resource.plural, meta["name"], resource.group)
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(next(self.revision))
        self.objects[key] = stored
        self.writes += 1
        return copy.deepcopy(stored)

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | None = None,
        field_selector: Mapping[str, str] | None = None,
        chunk_size: int | None = None,
    ) -> ListResult:
        raise NotImplementedError

    async def replace_status(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        raise NotImplementedError

    async def patch(self, resource: Resource, name: str, patch: Any, **kwargs: Any) -> Obj:
        raise NotImplementedError

    async def apply(self, resource: Resource, obj: Obj, **kwargs: Any) -> Obj:
        raise NotImplementedError

    async def apply_status(self, resource: Resource, obj: Obj, **kwargs: Any) -> Obj:
        raise NotImplementedError

    async def delete(self, resource: Resource, name: str, *, namespace: str | None = None) -> None:
        raise NotImplementedError

    async def watch(self, resource: Resource, **kwargs: Any) -> AsyncGenerator[WatchEvent, None]:
        raise NotImplementedError
        yield  # pragma: no cover

    async def close(self) -> None:
        pass

    def lease(self) -> Obj:
        return self.objects[("leases", NS, NAME)]


class Candidate:
    """An elector plus what its callbacks saw, timed by the (fake) loop clock."""

    def __init__(self, kube: FakeKube, identity: str, settings: LeaderElectionSettings = FAST) -> None:
        self.started: list[float] = []
        self.stopped: list[float] = []
        self.work_cancelled = False
        self.leading = asyncio.Event()
        self.new_leaders: list[str] = []
        loop = asyncio.get_running_loop()
        self.elector = LeaderElector(
            kube,
            namespace=NS,
            name=NAME,
            identity=identity,
            settings=settings,
            on_started_leading=self._work,
            on_stopped_leading=lambda: self.stopped.append(loop.time()),
            on_new_leader=self.new_leaders.append,
            clock=loop.time,
        )
        self.task: asyncio.Task[None] | None = None

    async def _work(self) -> None:
        self.started.append(asyncio.get_running_loop().time())
        self.leading.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.work_cancelled = True
            raise

    def start(self) -> Candidate:
        self.task = asyncio.create_task(self.elector.run())
        return self

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


# -- settings ---------------------------------------------------------------------------------------------


async def test_settings_default_to_the_documented_timings() -> None:
    """60 s lease, 40 s renew deadline, 15 s retry (spec §2.2 item 5, vcluster chart defaults)."""
    settings = LeaderElectionSettings()
    assert (settings.lease_duration, settings.renew_deadline, settings.retry_period) == (60.0, 40.0, 15.0)
    assert settings.lease_duration_seconds == 60
    assert settings.release_on_cancel is True


async def test_settings_reject_timings_client_go_rejects() -> None:
    """leaseDuration > renewDeadline > retryPeriod*JitterFactor, with client-go's messages."""
    with pytest.raises(ValidationError, match="leaseDuration must be greater than renewDeadline"):
        LeaderElectionSettings(lease_duration=40, renew_deadline=40)
    with pytest.raises(
        ValidationError, match="renewDeadline must be greater than retryPeriod\\*JitterFactor"
    ):
        LeaderElectionSettings(renew_deadline=18, retry_period=15)


async def test_fractional_lease_duration_rounds_up_on_the_wire() -> None:
    """spec.leaseDurationSeconds is an integer; others must never wait less than configured."""
    settings = LeaderElectionSettings(lease_duration=1.5, renew_deadline=1, retry_period=0.2)
    assert settings.lease_duration_seconds == 2


# -- pure decisions ----------------------------------------------------------------------------------------


async def test_micro_time_round_trips() -> None:
    """MicroTime is RFC 3339 with six fractional digits and Z; parsing accepts offsets too."""
    assert format_micro_time(1_700_000_000.25) == "2023-11-14T22:13:20.250000Z"
    assert parse_micro_time("2023-11-14T22:13:20.250000Z") == 1_700_000_000.25
    assert parse_micro_time("2023-11-14T23:13:20.250000+01:00") == 1_700_000_000.25
    assert parse_micro_time("not a time") is None
    assert parse_micro_time(None) is None


async def test_record_reads_and_writes_lease_spec() -> None:
    """LeaseRecord maps the five election fields of spec; missing ones read as empty."""
    spec = {
        "holderIdentity": "a",
        "leaseDurationSeconds": 60,
        "acquireTime": "2023-11-14T22:13:20.000000Z",
        "renewTime": "2023-11-14T22:13:35.000000Z",
        "leaseTransitions": 3,
    }
    record = LeaseRecord.from_spec(spec)
    assert record == LeaseRecord("a", 60, 1_700_000_000.0, 1_700_000_015.0, 3)
    assert record.to_spec() == spec
    assert LeaseRecord.from_spec(None) == LeaseRecord()
    assert LeaseRecord.from_spec({"holderIdentity": None}).holder == ""


async def test_observation_time_moves_only_when_the_record_changes() -> None:
    """A record seen again unchanged keeps its first observation time; a changed one starts anew."""
    record = LeaseRecord("a", 60, 0.0, 0.0, 0)
    first = observe(None, record, 10.0)
    assert observe(first, record, 50.0) is first
    renewed = LeaseRecord("a", 60, 0.0, 15.0, 0)
    assert observe(first, renewed, 50.0) == Observation(renewed, 50.0)


async def test_lease_expires_after_its_duration_from_observation() -> None:
    """Expiry counts from when *we* saw the record change, not from its renewTime (skew-proof)."""
    seen = Observation(LeaseRecord("a", 60, 0.0, -1000.0, 0), observed_at=100.0)
    assert not lease_expired(seen, 159.999)
    assert lease_expired(seen, 160.0)


async def test_may_acquire_absent_released_own_or_expired_lease() -> None:
    """Acquire when there is no lease, no holder, we hold it, or it expired; otherwise wait."""
    held = Observation(LeaseRecord("a", 60, 0.0, 0.0, 0), observed_at=0.0)
    assert may_acquire(None, "b", 0.0)
    assert not may_acquire(held, "b", 59.0)
    assert may_acquire(held, "a", 59.0)
    assert may_acquire(held, "b", 60.0)
    assert may_acquire(Observation(released(held.record, 5.0), observed_at=5.0), "b", 5.0)


async def test_claim_counts_transitions_only_on_a_change_of_holder() -> None:
    """Creating starts at 0; renewing keeps acquireTime and count; a takeover bumps the count."""
    created = claim(None, "a", 60, 10.0)
    assert created == LeaseRecord("a", 60, 10.0, 10.0, 0)
    renewed = claim(created, "a", 60, 25.0)
    assert renewed == LeaseRecord("a", 60, 10.0, 25.0, 0)
    taken = claim(renewed, "b", 60, 90.0)
    assert taken == LeaseRecord("b", 60, 90.0, 90.0, 1)
    after_release = claim(released(taken, 100.0), "a", 60, 101.0)
    assert after_release == LeaseRecord("a", 60, 101.0, 101.0, 2)


async def test_release_empties_the_holder_and_keeps_the_count() -> None:
    """client-go's release: no holder, a 1 s duration, both times now, transitions unchanged."""
    assert released(LeaseRecord("a", 60, 0.0, 15.0, 4), 20.0) == LeaseRecord("", 1, 20.0, 20.0, 4)


# -- the loop against an in-memory API ------------------------------------------------------------------


@pytest.mark.looptime
async def test_a_lone_candidate_creates_the_lease_and_renews_every_retry_period(looptime: float) -> None:
    """The first candidate creates the Lease at once, starts its work, and renews every 15 s."""
    kube = FakeKube()
    a = Candidate(kube, "a").start()
    await asyncio.sleep(1)
    assert a.elector.is_leader
    assert a.started == [0]
    assert a.new_leaders == ["a"]
    assert kube.lease()["spec"] == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 60,
        "acquireTime": format_micro_time(0),
        "renewTime": format_micro_time(0),
        "leaseTransitions": 0,
    }
    await asyncio.sleep(30)
    spec = kube.lease()["spec"]
    assert spec["renewTime"] == format_micro_time(30)
    assert spec["acquireTime"] == format_micro_time(0)
    assert kube.writes == 3  # create at 0, renewals at 15 and 30
    await a.stop()


@pytest.mark.looptime
async def test_after_a_crash_the_other_candidate_waits_for_expiry(looptime: float) -> None:
    """A leader that dies without releasing is replaced one lease duration after its last renewal was seen."""
    kube = FakeKube()
    crashing = LeaderElectionSettings(jitter_factor=0, release_on_cancel=False)
    a = Candidate(kube, "a", crashing).start()
    await asyncio.sleep(1)
    b = Candidate(kube, "b").start()  # tries at 1, 16, 31, ...
    await asyncio.sleep(19)
    await a.stop()  # at 20; its last renewal was at 15, seen by b at 16
    assert a.stopped == [20] and a.work_cancelled
    assert kube.lease()["spec"]["holderIdentity"] == "a"
    await b.leading.wait()
    assert b.started == [76]  # 16 + 60
    spec = kube.lease()["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    assert spec["acquireTime"] == format_micro_time(76)
    assert b.new_leaders == ["a", "b"]
    await b.stop()


@pytest.mark.looptime
async def test_a_graceful_stop_releases_so_the_successor_need_not_wait(looptime: float) -> None:
    """Cancelling the leader stops its work, then empties holderIdentity; the next attempt takes over."""
    kube = FakeKube()
    a = Candidate(kube, "a").start()
    await asyncio.sleep(1)
    b = Candidate(kube, "b").start()
    await asyncio.sleep(19)
    await a.stop()  # at 20
    assert a.work_cancelled and a.stopped == [20]
    released_spec = kube.lease()["spec"]
    assert (released_spec["holderIdentity"], released_spec["leaseDurationSeconds"]) == ("", 1)
    await asyncio.sleep(15)
    assert b.elector.is_leader
    assert b.started == [31]  # b's next attempt, not 16 + 60
    assert kube.lease()["spec"]["leaseTransitions"] == 1
    await b.stop()


@pytest.mark.looptime
async def test_a_leader_that_cannot_renew_steps_down_before_the_lease_expires(looptime: float) -> None:
    """Renewals fail from 10 s on: tries at 15, 30, 45, gives up at 15 + 40 = 55 s, before others may take over at 60 s."""
    kube = FakeKube()
    a = Candidate(kube, "a")
    run = asyncio.create_task(a.elector.run())
    await asyncio.sleep(10)
    kube.failing = True
    await run  # run() returns when leadership is lost
    assert looptime == 55
    assert a.stopped == [55] and a.work_cancelled
    assert not a.elector.is_leader


@pytest.mark.looptime
async def test_candidates_starting_together_elect_exactly_one(looptime: float) -> None:
    """Both see no Lease and create it; the server's AlreadyExists leaves one leader, for as long as it renews."""
    kube = FakeKube()
    candidates = [Candidate(kube, name).start() for name in ("a", "b", "c")]
    for _ in range(20):
        await asyncio.sleep(10)
        assert sum(c.elector.is_leader for c in candidates) == 1
    leader = next(c for c in candidates if c.elector.is_leader)
    assert kube.lease()["spec"]["holderIdentity"] == leader.elector.identity
    assert kube.lease()["spec"]["leaseTransitions"] == 0
    for c in candidates:
        assert c.new_leaders == [leader.elector.identity]
        await c.stop()


@pytest.mark.looptime
async def test_cancelling_a_waiting_candidate_leaves_the_lease_alone(looptime: float) -> None:
    """A candidate that never led neither releases nor reports stopping."""
    kube = FakeKube()
    a = Candidate(kube, "a").start()
    await asyncio.sleep(1)
    b = Candidate(kube, "b").start()
    await asyncio.sleep(5)
    before = copy.deepcopy(kube.lease())
    await b.stop()
    assert b.stopped == [] and b.started == []
    assert kube.lease() == before
    await a.stop()


@pytest.mark.looptime
async def test_the_lease_keeps_fields_the_elector_does_not_own(looptime: float) -> None:
    """Renewals rewrite only the election fields: labels and other spec fields survive."""
    kube = FakeKube()
    await kube.create(
        LEASES,
        {
            "metadata": {"name": NAME, "namespace": NS, "labels": {"app": "vcluster"}},
            "spec": {"holderIdentity": "", "strategy": "OldestEmulationVersion"},
        },
    )
    a = Candidate(kube, "a").start()
    await asyncio.sleep(20)
    lease = kube.lease()
    assert lease["metadata"]["labels"] == {"app": "vcluster"}
    assert lease["spec"]["strategy"] == "OldestEmulationVersion"
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseTransitions"] == 1  # "" -> "a" is a change of holder, as in client-go
    await a.stop()

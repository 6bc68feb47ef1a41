"""Lease-based leader election (``coordination.k8s.io/v1`` Lease), after client-go's ``leaderelection``.

Replicas of a controller compete for one Lease; the holder renews it every ``retry_period`` and the
others take it over once they have seen it unchanged for ``leaseDurationSeconds``. The defaults are the
chart defaults of vcluster's controller election (spec §2.2 item 5, C-LE): 60 s / 40 s / 15 s. They
are chosen so that a leader that cannot renew steps down (after at most ``retry_period +
renew_deadline`` = 55 s without a successful renewal) before any other replica may take over (60 s).

Expiry is judged by the candidate's *own* clock from the moment it saw the record change, never by
comparing ``renewTime`` with local time, so clock skew between replicas does not matter (client-go's
``observedTime``). Writes are guarded by ``resourceVersion``: two candidates that both see an expired
lease race on one update and the loser gets 409 Conflict.

The decisions (:func:`observe`, :func:`lease_expired`, :func:`may_acquire`, :func:`claim`,
:func:`released`) are pure functions of a record and a time; :class:`LeaderElector` is the thin loop that
reads and writes the Lease through a :class:`~vplane.controllers.client.KubeAPI`.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Self

import structlog
from pydantic import BaseModel, ConfigDict, model_validator

from vplane.controllers.client import LEASES, KubeAPI, TransportError
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

log = structlog.get_logger("vplane.controllers.leaderelection")

Clock = Callable[[], float]


class LeaderElectionSettings(BaseModel):
    """Timings of one election, in seconds; defaults are vcluster's chart defaults (C-LE)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lease_duration: float = 60.0
    """How long others wait, after they last saw the lease change, before they take it over."""
    renew_deadline: float = 40.0
    """How long the leader keeps retrying one renewal before it gives up leadership."""
    retry_period: float = 15.0
    """The wait between attempts to acquire, and between renewals."""
    jitter_factor: float = 1.2
    """Acquire attempts wait ``retry_period * (1 + random() * jitter_factor)`` so candidates spread out
    (client-go's ``JitterFactor``)."""
    release_on_cancel: bool = True
    """When the leader stops (cancelled, or after a failed renewal) it empties ``holderIdentity`` so a
    successor need not wait for expiry (client-go ``ReleaseOnCancel``)."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        # client-go's NewLeaderElector checks, with the same wording.
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("leaseDuration must be greater than renewDeadline")
        if self.renew_deadline <= self.jitter_factor * self.retry_period:
            raise ValueError("renewDeadline must be greater than retryPeriod*JitterFactor")
        if self.retry_period <= 0 or self.jitter_factor < 0:
            raise ValueError("retryPeriod must be greater than zero")
        return self

    @property
    def lease_duration_seconds(self) -> int:
        """``spec.leaseDurationSeconds`` is an integer; round up so others never wait less than configured."""
        return max(1, math.ceil(self.lease_duration))


# -- pure decisions ------------------------------------------------------------------------------------


def format_micro_time(ts: float) -> str:
    """``metav1.MicroTime`` on the wire: RFC 3339 with microseconds, UTC, ``Z``."""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class LeaseRecord:
    """The election fields of a Lease's ``spec`` (client-go's ``LeaderElectionRecord``)."""

    holder: str = ""
    lease_duration_seconds: int = 0
    acquire_time: float | None = None
    renew_time: float | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> LeaseRecord:
        spec = spec or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=parse_micro_time(spec.get("acquireTime")),
            renew_time=parse_micro_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    @classmethod
    def from_lease(cls, lease: Obj) -> LeaseRecord:
        return cls.from_spec(lease.get("spec"))

    def to_spec(self) -> Obj:
        spec: Obj = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = format_micro_time(self.acquire_time)
        if self.renew_time is not None:
            spec["renewTime"] = format_micro_time(self.renew_time)
        return spec


@dataclass(frozen=True)
class Observation:
    """A record as this candidate last saw it, and when (by its own clock) it last saw it change."""

    record: LeaseRecord
    observed_at: float


def observe(previous: Observation | None, record: LeaseRecord, now: float) -> Observation:
    """The clock starts again only when the record changes: a dead leader's lease ages, a live one doesn't."""
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def lease_expired(observation: Observation, now: float) -> bool:
    return observation.observed_at + observation.record.lease_duration_seconds <= now


def may_acquire(observation: Observation | None, identity: str, now: float) -> bool:
    """Absent, released (empty holder), ours, or unchanged for longer than its duration."""
    if observation is None:
        return True
    holder = observation.record.holder
    return not holder or holder == identity or lease_expired(observation, now)


def claim(current: LeaseRecord | None, identity: str, lease_duration_seconds: int, now: float) -> LeaseRecord:
    """The record to write when ``identity`` acquires or renews; a change of holder is a transition."""
    if current is None:
        return LeaseRecord(identity, lease_duration_seconds, now, now, 0)
    if current.holder == identity:
        acquired = current.acquire_time if current.acquire_time is not None else now
        return replace(
            current, lease_duration_seconds=lease_duration_seconds, acquire_time=acquired, renew_time=now
        )
    return LeaseRecord(identity, lease_duration_seconds, now, now, current.transitions + 1)


def released(current: LeaseRecord, now: float) -> LeaseRecord:
    """What a leader writes when it steps down gracefully (client-go ``release``): no holder, 1 s duration."""
    return LeaseRecord("", 1, now, now, current.transitions)


# -- the loop -----------------------------------------------------------------------------------------


class LeaderElector:
    """One candidate in the election for the Lease ``namespace/name``.

    :meth:`run` campaigns until this candidate leads, calls ``on_started_leading`` in a task of its own,
    renews until a renewal fails for ``renew_deadline``, then cancels that task, calls
    ``on_stopped_leading`` and returns. Cancelling :meth:`run` is the graceful stop: the work task is
    cancelled first, then the lease is released (``release_on_cancel``), so two leaders never overlap.
    To campaign again after losing, call :meth:`run` again; vcluster instead exits the process (C-LE).
    """

    def __init__(
        self,
        client: KubeAPI,
        *,
        namespace: str,
        name: str,
        identity: str,
        settings: LeaderElectionSettings | None = None,
        on_started_leading: Callable[[], Awaitable[None]] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        clock: Clock = time.time,
        rng: random.Random | None = None,
    ) -> None:
        if not identity:
            raise ValueError("leader election requires a non-empty identity")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.settings = settings or LeaderElectionSettings()
        self._on_started_leading = on_started_leading
        self._on_stopped_leading = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._clock = clock
        self._rng = rng or random.Random()
        self._observation: Observation | None = None
        self._reported_leader = ""
        self._leading = False
        self._log = log.bind(lease=f"{namespace}/{name}", identity=identity)

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def leader(self) -> str:
        """The holder this candidate last observed ("" when none)."""
        return self._observation.record.holder if self._observation else ""

    async def run(self) -> None:
        """Campaign, lead, return when leadership is lost; cancel to stop (see the class docstring)."""
        await self._acquire()
        await self._lead()

    # -- phases ---------------------------------------------------------------------------------------

    async def _acquire(self) -> None:
        self._log.info("attempting to acquire leader lease")
        settings = self.settings
        while not await self._attempt():
            period = settings.retry_period * (1 + self._rng.random() * settings.jitter_factor)
            await asyncio.sleep(period)
        self._log.info("successfully acquired lease")

    async def _lead(self) -> None:
        self._leading = True
        work = asyncio.create_task(self._work()) if self._on_started_leading else None
        try:
            while True:
                await asyncio.sleep(self.settings.retry_period)
                if not await self._renew():
                    self._log.warning("failed to renew lease", renew_deadline=self.settings.renew_deadline)
                    break
        finally:
            if work is not None:
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
            if self.settings.release_on_cancel:
                await self._release()
            self._leading = False
            self._log.info("stopped leading")
            if self._on_stopped_leading is not None:
                try:
                    self._on_stopped_leading()
                except Exception:
                    self._log.exception("on_stopped_leading failed")

    async def _work(self) -> None:
        assert self._on_started_leading is not None
        try:
            await self._on_started_leading()
        except asyncio.CancelledError:
            raise
        except Exception:
            self._log.exception("on_started_leading failed")

    async def _renew(self) -> bool:
        """Retry every ``retry_period`` until one renewal succeeds or ``renew_deadline`` passes."""
        deadline = self._clock() + self.settings.renew_deadline
        while True:
            remaining = deadline - self._clock()
            if remaining <= 0:
                return False
            try:
                async with asyncio.timeout(remaining):
                    if await self._attempt():
                        return True
            except TimeoutError:
                return False
            await asyncio.sleep(min(self.settings.retry_period, max(0.0, deadline - self._clock())))

    async def _release(self) -> None:
        """Best effort, bounded by ``retry_period``: a successor falls back to waiting for expiry."""
        if self.leader != self.identity:
            return
        try:
            async with asyncio.timeout(self.settings.retry_period):
                lease = await self.client.get(LEASES, self.name, namespace=self.namespace)
                record = LeaseRecord.from_lease(lease)
                if record.holder != self.identity:
                    return
                now = self._clock()
                lease["spec"] = {**(lease.get("spec") or {}), **released(record, now).to_spec()}
                updated = await self.client.replace(LEASES, lease)
                self._observation = Observation(LeaseRecord.from_lease(updated), now)
                self._log.info("released leader lease")
        except (StatusError, TransportError, TimeoutError) as exc:
            self._log.warning("failed to release lease", error=str(exc))

    # -- one read-decide-write step -------------------------------------------------------------------

    async def _attempt(self) -> bool:
        try:
            return await self._try_acquire_or_renew()
        except StatusError as exc:
            if exc.code != 409:  # a lost race is routine; anything else is worth a line
                self._log.warning("error acquiring or renewing lease", code=exc.code, error=exc.message)
            return False
        except TransportError as exc:
            self._log.warning("error acquiring or renewing lease", error=str(exc))
            return False
        finally:
            self._report_leader()

    async def _try_acquire_or_renew(self) -> bool:
        now = self._clock()
        duration = self.settings.lease_duration_seconds
        try:
            lease = await self.client.get(LEASES, self.name, namespace=self.namespace)
        except StatusError as exc:
            if exc.code != 404:
                raise
            record = claim(None, self.identity, duration, now)
            body = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": record.to_spec()}
            created = await self.client.create(LEASES, body)
            self._observation = Observation(LeaseRecord.from_lease(created), now)
            return True
        current = LeaseRecord.from_lease(lease)
        self._observation = observe(self._observation, current, now)
        if not may_acquire(self._observation, self.identity, now):
            return False
        # Keep fields this elector does not own (strategy, preferredHolder); resourceVersion guards the write.
        lease["spec"] = {
            **(lease.get("spec") or {}),
            **claim(current, self.identity, duration, now).to_spec(),
        }
        updated = await self.client.replace(LEASES, lease)
        self._observation = Observation(LeaseRecord.from_lease(updated), now)
        return True

    def _report_leader(self) -> None:
        holder = self.leader
        if not holder or holder == self._reported_leader:
            return
        self._reported_leader = holder
        self._log.info("new leader elected", leader=holder)
        if self._on_new_leader is not None:
            try:
                self._on_new_leader(holder)
            except Exception:
                self._log.exception("on_new_leader failed")

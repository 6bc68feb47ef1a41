"""The peer cache of one proxied group/version in one replica: which of the target's control-plane
replicas a request may dial, and their health (spec §3).

Pure: it takes an injectable clock and returns what happened as events; the asyncio glue turns events
into log lines and metrics. The state machine, per host:

    HEALTHY(failures<threshold) --dial fails--> HEALTHY(failures+1)
    HEALTHY --threshold-th consecutive failure--> QUARANTINED(until=now+quarantine)   event QUARANTINED
    QUARANTINED --now >= until--> HALF_OPEN: exactly one trial dial is handed out; others skip the host
    HALF_OPEN trial --ok--> HEALTHY                                                  event RECOVERED
    HALF_OPEN trial --fails--> QUARANTINED(until=now+quarantine)                     event QUARANTINED
    HEALTHY(failures>0) --dial ok--> HEALTHY(failures=0)                             event RECOVERED

A publication replaces the host set: hosts that stay keep their state, new hosts start healthy (a
replacement endpoint never counts as a recovery), departed hosts are forgotten. A host is the peer's node
id together with the endpoints and session it published: a restarted replica is a new host.

Decisions recorded (docs/resource-proxy.md): the precheck order is no peer list ever -> stale -> empty
list -> nothing selectable; a failed dial is not retried on another peer within one request (the request
carries that dial's reason); the round-robin cursor is per group/version and replica.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field


class PeerSettings(BaseModel):
    """The runbook's fixed thresholds (spec §9), as named settings so tests can shrink them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dial_timeout_seconds: float = Field(default=5.0, gt=0)
    """A dial (direct or relayed) that takes longer fails with reason ``timeout``."""
    quarantine_threshold: int = Field(default=3, ge=1)
    """Consecutive dial failures that take a host out of rotation."""
    quarantine_seconds: float = Field(default=20.0, gt=0)
    """How long a quarantined host stays out of rotation before its single half-open trial."""
    stale_after_seconds: float = Field(default=60.0, gt=0)
    """After the platform subscription drops, the cached list is trusted this long (from the drop)."""
    startup_sync_seconds: float = Field(default=60.0, gt=0)
    """Start-up waits this long for the first peer list before logging that it did not sync."""
    departed_memory_seconds: float = Field(default=60.0, ge=0)
    """A host that leaves the peer list and comes back (the same process, which only reconnected to the
    platform) within this long keeps its health: its failures, its quarantine, whether a success is a
    recovery. Later it is a new host."""


class HostState(enum.StrEnum):
    HEALTHY = "healthy"
    QUARANTINED = "quarantined"
    HALF_OPEN = "half_open"


class Reason(enum.StrEnum):
    """Precheck outcomes (also the ``reason`` label values they produce)."""

    NO_PEER = "no_peer"
    STALE_PEERS = "stale_peers"
    ALL_QUARANTINED = "all_quarantined"


@dataclass(frozen=True, slots=True)
class Host:
    """A dialable endpoint of the target: a control-plane replica as one session published it."""

    peer_id: str
    name: str
    key: str
    """Identity for health tracking: node id, endpoints and session, so a restarted replica is new."""


@dataclass(slots=True)
class _Health:
    host: Host
    failures: int = 0
    quarantined_until: float | None = None
    trial_out: bool = False
    was_failing: bool = False


class EventKind(enum.Enum):
    QUARANTINED = "quarantined"
    ALL_QUARANTINED = "all_quarantined"
    RECOVERED = "recovered"


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind
    host: Host | None = None
    consecutive_failures: int = 0


@dataclass(slots=True)
class Selection:
    host: Host
    trial: bool
    """This is the host's single half-open trial dial."""
    dialled: bool = False
    """A dial was attempted for it (a pooled connection may serve a request without one)."""


@dataclass
class PeerCache:
    settings: PeerSettings = field(default_factory=PeerSettings)
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._hosts: dict[str, _Health] = {}
        self._departed: dict[str, tuple[_Health, float]] = {}
        """Hosts that left the list, with when: remembered for ``departed_memory_seconds``."""
        self._order: list[str] = []
        self._cursor = 0
        self._received_at: float | None = None
        self._subscription_up = False
        self._down_since: float | None = None
        self.publications = 0

    # -- the platform's feed -------------------------------------------------------------------------

    def publish(self, hosts: Iterable[Host]) -> list[Event]:
        """A fresh peer list from a live subscription: replaces the host set, resets the stale clock.
        ``ALL_QUARANTINED`` when it leaves only hosts out of rotation (the ones that answered departed)."""
        now = self.clock()
        all_out_before = self._all_out(now)
        memory = self.settings.departed_memory_seconds
        self._departed = {k: (h, at) for k, (h, at) in self._departed.items() if now - at <= memory}
        new: dict[str, _Health] = {}
        for host in hosts:
            kept = self._hosts.get(host.key)
            if kept is None:
                departed = self._departed.pop(host.key, None)
                kept = departed[0] if departed is not None else _Health(host)
            new[host.key] = kept
        for key, health in self._hosts.items():
            if key not in new and memory > 0:
                health.trial_out = False  # a trial in flight to it ends as a dial of a departed peer
                self._departed[key] = (health, now)
        self._hosts = new
        self._order = sorted(new)
        self._received_at = now
        self._subscription_up = True
        self._down_since = None
        self.publications += 1
        if self._all_out(now) and not all_out_before:
            return [Event(EventKind.ALL_QUARANTINED)]
        return []

    def subscription_down(self) -> None:
        if self._subscription_up or self._down_since is None:
            self._subscription_up = False
            self._down_since = self.clock()

    def subscription_up(self) -> None:
        """The subscription is back and the platform's list is the one held (the feed's sequence did not
        move), so it is current again; a changed list arrives through :meth:`publish` instead."""
        self._subscription_up = True

    # -- readings ------------------------------------------------------------------------------------

    @property
    def received(self) -> bool:
        return self._received_at is not None

    def stale(self) -> bool:
        if self._received_at is None or self._subscription_up or self._down_since is None:
            return False
        return self.clock() - self._down_since > self.settings.stale_after_seconds

    def synced(self) -> bool:
        """A current, trusted snapshot exists (even an empty one): ``vcluster_proxy_peer_cache_synced``."""
        return self.received and not self.stale()

    def list_age(self) -> float | None:
        """Seconds since the last publication (None before the first)."""
        return None if self._received_at is None else self.clock() - self._received_at

    def hosts(self) -> list[Host]:
        return [self._hosts[k].host for k in self._order]

    def has(self, host: Host) -> bool:
        return host.key in self._hosts

    def counts(self) -> dict[HostState, int]:
        """Hosts per state, computed now (so expired quarantines already read as half-open)."""
        counts = dict.fromkeys(HostState, 0)
        for health in self._hosts.values():
            counts[self._state(health, self.clock())] += 1
        return counts

    def _state(self, health: _Health, now: float) -> HostState:
        if health.quarantined_until is None:
            return HostState.HEALTHY
        if now >= health.quarantined_until:
            return HostState.HALF_OPEN
        return HostState.QUARANTINED

    # -- a request -----------------------------------------------------------------------------------

    def precheck(self) -> Reason | None:
        if not self.received:
            return Reason.NO_PEER
        if self.stale():
            return Reason.STALE_PEERS
        if not self._hosts:
            return Reason.NO_PEER
        return None

    def select(self) -> Selection | Reason:
        """The next host in round-robin order, or why there is none."""
        reason = self.precheck()
        if reason is not None:
            return reason
        now = self.clock()
        count = len(self._order)
        for step in range(count):
            key = self._order[(self._cursor + step) % count]
            health = self._hosts[key]
            state = self._state(health, now)
            if state is HostState.QUARANTINED:
                continue
            if state is HostState.HALF_OPEN:
                if health.trial_out:
                    continue
                health.trial_out = True
                self._cursor = (self._cursor + step + 1) % count
                return Selection(health.host, trial=True)
            self._cursor = (self._cursor + step + 1) % count
            return Selection(health.host, trial=False)
        return Reason.ALL_QUARANTINED

    def dial_succeeded(self, host: Host) -> list[Event]:
        health = self._hosts.get(host.key)
        if health is None:
            return []
        recovered = health.was_failing
        health.failures = 0
        health.quarantined_until = None
        health.trial_out = False
        health.was_failing = False
        return [Event(EventKind.RECOVERED, host)] if recovered else []

    def dial_failed(self, host: Host, *, trial: bool = False) -> list[Event]:
        """Record a failed dial; ``trial`` for the half-open trial's failure (re-quarantined at once).

        ``ALL_QUARANTINED`` is the transition to no selectable host: it comes with the quarantine that
        takes the last healthy or half-open host out, also while another host's trial is out (so once
        per quarantine cycle while all are down; handing out a trial alone does not count).
        """
        health = self._hosts.get(host.key)
        if health is None:
            return []
        now = self.clock()
        health.was_failing = True
        health.trial_out = False
        if health.quarantined_until is not None and not trial and now < health.quarantined_until:
            return []
        health.failures += 1
        if not trial and health.failures < self.settings.quarantine_threshold:
            return []
        all_out_before = self._all_out(now)
        health.quarantined_until = now + self.settings.quarantine_seconds
        events = [Event(EventKind.QUARANTINED, host, consecutive_failures=health.failures)]
        if self._all_out(now) and not all_out_before:
            events.append(Event(EventKind.ALL_QUARANTINED))
        return events

    def _any_selectable(self, now: float) -> bool:
        """A request could get a host now: a healthy one, or a half-open one whose trial is not out (spec
        §3.1: all-quarantined also covers the only candidate being mid-trial)."""
        for health in self._hosts.values():
            state = self._state(health, now)
            if state is HostState.HEALTHY or (state is HostState.HALF_OPEN and not health.trial_out):
                return True
        return False

    def _all_out(self, now: float) -> bool:
        """There are hosts and none is selectable (the all-quarantined state; no hosts is ``no_peer``)."""
        return bool(self._hosts) and not self._any_selectable(now)

    def release_trial(self, host: Host) -> None:
        """Give back the host's half-open trial when it ended without a verdict on the host: never dialled
        (the caller went away first), or a dial its caller or a deadline cut short. Kept out, the host would
        wait in half-open for ever and every request read all-quarantined."""
        health = self._hosts.get(host.key)
        if health is not None:
            health.trial_out = False

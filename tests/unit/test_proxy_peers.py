"""The proxy's peer cache: quarantine, half-open trial, recoveries, staleness, round-robin (fake clock)."""

from __future__ import annotations

import pytest

from vplane.proxy.peers import EventKind, Host, HostState, PeerCache, PeerSettings, Reason, Selection


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def host(name: str, generation: int = 0) -> Host:
    return Host(peer_id=f"n-{name}", name=name, key=f"{name}#{generation}")


def make(**overrides: object) -> tuple[PeerCache, Clock]:
    clock = Clock()
    return PeerCache(PeerSettings.model_validate(overrides), clock), clock


def pick(cache: PeerCache) -> Selection:
    selected = cache.select()
    assert isinstance(selected, Selection), selected
    return selected


def kinds(events: list) -> list[EventKind]:  # type: ignore[type-arg]
    return [e.kind for e in events]


def test_no_list_yet_then_empty_list_is_no_peer() -> None:
    cache, _ = make()
    assert cache.select() is Reason.NO_PEER
    assert not cache.synced()
    assert cache.list_age() is None
    cache.publish([])
    assert cache.select() is Reason.NO_PEER
    assert cache.synced()  # a fresh, empty list is a current snapshot


def test_round_robin_over_replicas() -> None:
    cache, _ = make()
    a, b, c = host("a"), host("b"), host("c")
    cache.publish([a, b, c])
    assert [pick(cache).host.name for _ in range(6)] == ["a", "b", "c", "a", "b", "c"]


def test_quarantine_after_three_consecutive_failures_then_single_trial() -> None:
    cache, clock = make()
    a = host("a")
    cache.publish([a])
    assert cache.dial_failed(a) == []
    assert cache.dial_failed(a) == []
    events = cache.dial_failed(a)
    assert kinds(events) == [EventKind.QUARANTINED, EventKind.ALL_QUARANTINED]
    assert events[0].consecutive_failures == 3
    assert cache.counts()[HostState.QUARANTINED] == 1
    assert cache.select() is Reason.ALL_QUARANTINED
    clock.now += 19.9
    assert cache.select() is Reason.ALL_QUARANTINED
    clock.now += 0.1
    assert cache.counts()[HostState.HALF_OPEN] == 1  # computed at read time
    trial = pick(cache)
    assert trial.trial
    assert cache.select() is Reason.ALL_QUARANTINED  # the only candidate is mid-trial
    assert kinds(cache.dial_succeeded(a)) == [EventKind.RECOVERED]
    assert cache.counts()[HostState.HEALTHY] == 1
    assert not pick(cache).trial


def test_failed_trial_requarantines_and_counts_again() -> None:
    cache, clock = make(quarantine_seconds=5)
    a = host("a")
    cache.publish([a])
    for _ in range(3):
        cache.dial_failed(a)
    clock.now += 5
    trial = pick(cache)
    events = cache.dial_failed(a, trial=trial.trial)
    assert kinds(events) == [EventKind.QUARANTINED, EventKind.ALL_QUARANTINED]
    assert cache.select() is Reason.ALL_QUARANTINED


def test_success_resets_failures_and_counts_recovery_for_a_failing_host() -> None:
    cache, _ = make()
    a = host("a")
    cache.publish([a])
    cache.dial_failed(a)
    assert kinds(cache.dial_succeeded(a)) == [EventKind.RECOVERED]
    assert cache.dial_succeeded(a) == []  # healthy and never failing since: nothing to recover
    cache.dial_failed(a)
    cache.dial_failed(a)
    assert cache.counts()[HostState.HEALTHY] == 1  # two failures after a success: not three in a row


def test_all_quarantined_only_when_the_last_selectable_host_goes() -> None:
    cache, _ = make(quarantine_threshold=1)
    a, b = host("a"), host("b")
    cache.publish([a, b])
    assert kinds(cache.dial_failed(a)) == [EventKind.QUARANTINED]
    assert pick(cache).host == b
    assert kinds(cache.dial_failed(b)) == [EventKind.QUARANTINED, EventKind.ALL_QUARANTINED]


def test_all_quarantined_when_the_last_healthy_host_goes_while_another_is_mid_trial() -> None:
    cache, clock = make(quarantine_threshold=1, quarantine_seconds=5)
    a, b = host("a"), host("b")
    cache.publish([a, b])
    assert kinds(cache.dial_failed(a)) == [EventKind.QUARANTINED]
    clock.now += 5
    trial = pick(cache)
    assert trial.host == a and trial.trial
    # b fails while a's trial is out: no host is left to give a request (spec §3.1), a transition.
    assert kinds(cache.dial_failed(b)) == [EventKind.QUARANTINED, EventKind.ALL_QUARANTINED]
    assert cache.select() is Reason.ALL_QUARANTINED


def test_a_peer_list_that_leaves_only_quarantined_hosts_counts_all_quarantined() -> None:
    cache, _ = make(quarantine_threshold=1)
    a, b = host("a"), host("b")
    assert cache.publish([a, b]) == []
    cache.dial_failed(a)
    assert kinds(cache.publish([a])) == [EventKind.ALL_QUARANTINED]  # b, which answered, departed
    assert cache.select() is Reason.ALL_QUARANTINED
    assert cache.publish([a]) == []  # still all out: no new transition
    assert cache.publish([]) == []  # no host at all is no_peer, not all-quarantined
    assert cache.select() is Reason.NO_PEER


def test_replacement_endpoint_starts_healthy_and_never_counts_as_recovery() -> None:
    cache, _ = make(quarantine_threshold=1)
    old = host("a", generation=1)
    cache.publish([old])
    cache.dial_failed(old)
    assert cache.select() is Reason.ALL_QUARANTINED
    new = host("a", generation=2)  # the replica restarted: new endpoints
    cache.publish([new])
    selected = pick(cache)
    assert selected.host == new and not selected.trial
    assert cache.dial_succeeded(new) == []
    assert cache.dial_failed(old) == []  # a late failure of a departed host changes nothing


def test_hosts_that_stay_keep_their_state_across_publications() -> None:
    cache, _ = make(quarantine_threshold=1)
    a, b = host("a"), host("b")
    cache.publish([a, b])
    cache.dial_failed(a)
    cache.publish([a, b])
    assert cache.counts() == {HostState.HEALTHY: 1, HostState.QUARANTINED: 1, HostState.HALF_OPEN: 0}


def test_a_host_that_leaves_and_comes_back_keeps_its_health() -> None:
    """The same replica process dropped from the list and published again (it only reconnected to the
    platform) is the host it was: still quarantined, and its first success is a recovery. Past
    ``departed_memory_seconds`` it is a new host."""
    cache, clock = make(quarantine_threshold=1)
    a = host("a")
    cache.publish([a])
    cache.dial_failed(a)
    cache.publish([])
    clock.now += 5
    cache.publish([a])
    assert cache.counts()[HostState.QUARANTINED] == 1
    clock.now += 20
    trial = pick(cache)
    assert trial.trial
    assert kinds(cache.dial_succeeded(a)) == [EventKind.RECOVERED]

    cache.dial_failed(a)
    cache.publish([])
    clock.now += 61
    cache.publish([a])
    assert cache.counts()[HostState.HEALTHY] == 1
    assert cache.dial_succeeded(a) == []


def test_stale_sixty_seconds_after_the_subscription_drops() -> None:
    cache, clock = make()
    cache.publish([host("a")])
    clock.now += 500  # an old list is fine while the subscription is up
    assert cache.precheck() is None
    cache.subscription_down()
    clock.now += 60
    assert cache.precheck() is None
    clock.now += 0.1
    assert cache.select() is Reason.STALE_PEERS
    assert not cache.synced()
    assert cache.list_age() == pytest.approx(560.1)
    cache.publish([host("a")])  # a fresh publication resets the clock
    assert cache.synced() and cache.precheck() is None


def half_open() -> tuple[PeerCache, Host]:
    """A cache whose one host has been quarantined and is now half-open."""
    cache, clock = make(quarantine_threshold=1)
    a = host("a")
    cache.publish([a])
    cache.dial_failed(a)
    clock.now += 20
    return cache, a


def test_release_gives_an_unused_trial_back() -> None:
    cache, _ = half_open()
    trial = pick(cache)
    cache.release_trial(trial.host)
    assert pick(cache).trial


def test_an_abandoned_trial_dial_gives_the_trial_back() -> None:
    """A trial dial its caller or a deadline cut short (a discovery answer's budget, say) neither fails the
    host nor keeps the trial out: the next request makes it, instead of every one reading all-quarantined."""
    cache, a = half_open()
    trial = pick(cache)
    assert trial.trial and cache.select() is Reason.ALL_QUARANTINED  # the one trial is out
    cache.release_trial(a)
    assert pick(cache).trial
    assert cache.counts()[HostState.HALF_OPEN] == 1


def test_late_failure_of_an_in_flight_dial_does_not_extend_quarantine() -> None:
    cache, clock = make()
    a = host("a")
    cache.publish([a])
    for _ in range(3):
        cache.dial_failed(a)
    clock.now += 10
    assert cache.dial_failed(a) == []
    clock.now += 10
    assert cache.counts()[HostState.HALF_OPEN] == 1

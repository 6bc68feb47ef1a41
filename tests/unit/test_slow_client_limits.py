"""The pure parts of the slow-client defences: connection deadlines, connection slots, the watch hub's
per-user counts and revision waits, and the Status shapes clients see."""

from __future__ import annotations

import asyncio
import math

import pytest

from vplane.apiserver.watch import WatchHub
from vplane.kube import errors
from vplane.storage.interface import Event, KeyValue
from vplane.support.httpserver import (
    BODY_TOO_SLOW,
    HEADER_TIMEOUT,
    SEND_TIMEOUT,
    ConnectionDeadlines,
    ConnectionLimits,
    ConnectionSlots,
)

LIMITS = ConnectionLimits(header_timeout=32.0, body_grace=30.0, body_min_rate=1024.0, send_timeout=60.0)


def test_headers_are_due_from_the_connection_start() -> None:
    d = ConnectionDeadlines(LIMITS, now=100.0)
    assert d.next_deadline() == 132.0
    assert d.expired(131.9) is None
    assert d.expired(132.0) == HEADER_TIMEOUT


def test_trickled_bytes_do_not_move_the_header_deadline() -> None:
    d = ConnectionDeadlines(LIMITS, now=0.0)
    assert not d.request_bytes(10.0)  # already under the deadline of the connection's start
    assert d.expired(32.0) == HEADER_TIMEOUT


def test_a_started_request_is_not_under_the_header_deadline() -> None:
    """A watch streams for as long as it likes once its headers are in."""
    d = ConnectionDeadlines(LIMITS, now=0.0)
    d.request_started(1.0, has_body=False)
    assert d.next_deadline() == math.inf
    assert d.expired(10_000.0) is None


def test_a_kept_alive_connection_is_timed_from_the_next_requests_first_byte() -> None:
    d = ConnectionDeadlines(LIMITS, now=0.0)
    d.request_started(1.0, has_body=False)
    assert d.expired(500.0) is None  # idle between requests: aiohttp's keep-alive timer's business
    assert d.request_bytes(500.0)
    assert d.next_deadline() == 532.0
    assert d.expired(532.0) == HEADER_TIMEOUT


def test_a_body_must_average_the_minimum_rate_after_the_grace() -> None:
    d = ConnectionDeadlines(LIMITS, now=0.0)
    d.request_started(0.0, has_body=True)
    assert d.next_deadline() == 30.0
    d.body_received(10 * 1024)
    assert d.next_deadline() == 40.0
    assert d.expired(39.0) is None
    assert d.expired(40.0) == BODY_TOO_SLOW
    d.body_done()
    assert d.expired(10_000.0) is None


def test_time_the_server_is_not_reading_does_not_count_against_the_body() -> None:
    d = ConnectionDeadlines(LIMITS, now=0.0)
    d.request_started(0.0, has_body=True)
    d.reading_paused(5.0)
    assert d.next_deadline() == math.inf
    assert d.expired(1_000.0) is None
    d.reading_resumed(105.0)
    assert d.next_deadline() == 130.0


def test_no_minimum_rate_means_no_body_deadline() -> None:
    d = ConnectionDeadlines(
        ConnectionLimits(header_timeout=32.0, body_grace=30.0, body_min_rate=0.0, send_timeout=60.0), now=0.0
    )
    d.request_started(0.0, has_body=True)
    assert not d.in_body and d.next_deadline() == math.inf


def test_a_client_that_takes_no_response_bytes_is_dropped() -> None:
    d = ConnectionDeadlines(LIMITS, now=0.0)
    d.request_started(0.0, has_body=False)
    d.writing_paused(10.0)
    d.writing_paused(20.0)  # still the first stall's deadline
    assert d.next_deadline() == 70.0
    assert d.expired(70.0) == SEND_TIMEOUT
    d.writing_resumed()
    assert d.expired(70.0) is None


def test_connection_slots_refuse_over_the_limit_and_count_refusals() -> None:
    slots = ConnectionSlots(2)
    assert slots.acquire() and slots.acquire()
    assert not slots.acquire()
    assert (slots.open, slots.refused) == (2, 1)
    slots.release()
    assert slots.acquire()


async def test_the_hub_counts_watches_per_user() -> None:
    hub = WatchHub()
    assert hub.admit("alice", 2) and hub.admit("alice", 2)
    assert not hub.admit("alice", 2)
    assert hub.admit("bob", 2)
    hub.release("alice")
    assert hub.watches_of("alice") == 1
    assert hub.admit("alice", 2)
    for _ in range(2):
        hub.release("alice")
    assert hub.watches_of("alice") == 0 and "alice" not in hub._per_user


def _event(revision: int) -> Event:
    return Event("PUT", KeyValue("/core/configmaps/ns/x", b"{}", revision, revision), None)


async def test_a_revision_wait_ends_when_the_revision_is_routed() -> None:
    hub = WatchHub()
    waiter = asyncio.create_task(hub.wait_for_revision(5))
    await asyncio.sleep(0)
    hub([_event(4)])
    await asyncio.sleep(0)
    assert not waiter.done()
    hub([_event(5)])
    await asyncio.wait_for(waiter, 1)


async def test_a_revision_wait_that_times_out_leaves_nothing_behind() -> None:
    hub = WatchHub()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await hub.wait_for_revision(10**18)
    assert not hub._revision_waiters


async def test_too_large_resource_version_is_upstreams_status() -> None:
    exc = errors.too_large_resource_version(120, 42)
    assert exc.headers == {"Retry-After": "1"}
    assert exc.to_status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Timeout: Too large resource version: 120, current: 42",
        "reason": "Timeout",
        "details": {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
        "code": 504,
    }

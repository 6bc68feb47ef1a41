"""The work queue: de-duplication, one key in flight at a time, delays and per-key back-off, on fake time.

Every test is ``async`` on purpose: with looptime 0.9 and pytest-asyncio 1.x on Python 3.11, a sync test
makes looptime create (and leak) an event loop, whose ResourceWarning can fail a later async test.
"""

from __future__ import annotations

import asyncio

import pytest

from vplane.controllers.workqueue import ExponentialBackoff, ShutDown, WorkQueue, WorkQueueSettings


async def test_settings_default_to_client_go_controller_rate_limiter() -> None:
    """5 ms base, 1000 s cap (client-go DefaultTypedControllerRateLimiter's per-item limiter)."""
    settings = WorkQueueSettings()
    assert (settings.backoff_base, settings.backoff_max) == (0.005, 1000.0)


async def test_backoff_doubles_per_failure_and_caps() -> None:
    """Each failure of a key doubles its delay up to the cap; keys count separately; forget resets."""
    backoff: ExponentialBackoff[str] = ExponentialBackoff(1.0, 10.0)
    assert [backoff.when("a") for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.when("b") == 1.0
    assert backoff.retries("a") == 6
    backoff.forget("a")
    assert backoff.retries("a") == 0
    assert backoff.when("a") == 1.0


async def test_backoff_survives_very_many_failures() -> None:
    """A key that fails forever stays at the cap instead of overflowing a float."""
    backoff: ExponentialBackoff[str] = ExponentialBackoff(0.005, 1000.0)
    delays = [backoff.when("k") for _ in range(5000)]
    assert delays[-1] == 1000.0


async def test_a_key_added_twice_is_handed_out_once() -> None:
    """Adding a queued key again does not queue it twice; order is first-added first."""
    queue: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a", "b", "a"):
        queue.add(key)
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["a", "b"]
    assert len(queue) == 0


async def test_a_key_in_flight_is_queued_again_only_when_done() -> None:
    """A key added while a worker holds it waits for done(), so two workers never share a key."""
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0
    queue.done("a")
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    assert len(queue) == 0


@pytest.mark.looptime
async def test_add_after_delivers_at_the_delay(looptime: float) -> None:
    """A delayed key is handed out when its delay has passed, not before."""
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 5)
    assert len(queue) == 0
    assert await queue.get() == "a"
    assert looptime == 5


@pytest.mark.looptime
async def test_add_after_keeps_the_earliest_time(looptime: float) -> None:
    """Delaying a key already waiting keeps the earlier time, and it is delivered once."""
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 10)
    queue.add_after("a", 5)
    queue.add_after("a", 20)
    assert await queue.get() == "a"
    assert looptime == 5
    queue.done("a")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(100):
            await queue.get()


@pytest.mark.looptime
async def test_a_waiting_get_wakes_for_an_earlier_delay(looptime: float) -> None:
    """A get() sleeping until a later key's time wakes for a key added with an earlier time."""
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("late", 30)
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(1)
    queue.add_after("early", 2)
    assert await getter == "early"
    assert looptime == 3


@pytest.mark.looptime
async def test_rate_limited_retries_back_off_until_forgotten(looptime: float) -> None:
    """A failing key comes back after 1, 2, 4 s; after forget() its next failure waits 1 s again."""
    queue: WorkQueue[str] = WorkQueue(WorkQueueSettings(backoff_base=1, backoff_max=4))
    delivered = []
    queue.add("a")
    for _ in range(4):
        key = await queue.get()
        delivered.append(float(looptime))
        queue.add_rate_limited(key)
        queue.done(key)
    assert delivered == [0, 1, 3, 7]
    assert queue.num_requeues("a") == 4
    await queue.get()
    assert looptime == 11  # capped at 4 s
    queue.forget("a")
    queue.add_rate_limited("a")
    queue.done("a")
    await queue.get()
    assert looptime == 12


async def test_injected_clock_decides_when_a_delay_is_over() -> None:
    """The queue reads time from its clock, so a test can move time by hand."""
    now = [100.0]
    queue: WorkQueue[str] = WorkQueue(clock=lambda: now[0])
    queue.add_after("a", 5)
    now[0] = 104.9
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0):
            await queue.get()
    now[0] = 105.0
    assert await queue.get() == "a"


async def test_concurrent_workers_get_different_keys() -> None:
    """Two waiting workers each receive one of two keys."""
    queue: WorkQueue[str] = WorkQueue()
    workers = [asyncio.create_task(queue.get()) for _ in range(2)]
    await asyncio.sleep(0)
    queue.add("a")
    queue.add("b")
    assert sorted(await asyncio.gather(*workers)) == ["a", "b"]


async def test_shut_down_releases_waiting_workers_and_ignores_new_keys() -> None:
    """After shut_down(), waiting and later get() calls raise ShutDown; adds are ignored."""
    queue: WorkQueue[str] = WorkQueue()
    waiting = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add_after("later", 1)
    queue.shut_down()
    with pytest.raises(ShutDown):
        await waiting
    queue.add("a")
    assert len(queue) == 0
    with pytest.raises(ShutDown):
        await queue.get()

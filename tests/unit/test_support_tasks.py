"""Background-task helpers: a wait on an event that is cancelled as the event fires stays cancelled."""

from __future__ import annotations

import asyncio

import pytest

from vplane.support.tasks import wait_event


async def test_wait_event_reports_set_and_timeout() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 10) is True


async def test_a_cancel_that_arrives_as_the_event_fires_is_not_swallowed() -> None:
    """asyncio.wait_for on 3.11 returns normally here, and a `while True` loop around it never ends."""
    event = asyncio.Event()

    async def loop() -> None:
        while True:
            await wait_event(event, 10)
            event.clear()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)  # the task now waits on the event
    event.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)

"""Background task helpers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable


async def cancel_and_wait(tasks: Iterable[asyncio.Task[object]]) -> None:
    """Cancel background tasks and wait for them, ignoring how they end (process shutdown)."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass; True when it was set.

    Not ``asyncio.wait_for``: on Python 3.11 it swallows a cancellation that arrives as the inner wait
    completes, and a background loop built on it then outlives its ``cancel()`` (a server's stop hung
    on that)."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True

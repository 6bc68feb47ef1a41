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

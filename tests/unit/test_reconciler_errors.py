"""The controller loop's handling of failed reconciles: an API answer (a 409 conflict, above all) is one log
line and a rate-limited retry; anything else is logged with its traceback and retried the same way."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog

from vplane.controllers.reconciler import Controller
from vplane.kube import errors


class NoInformer:
    """Only what the controller calls on an informer it does not run."""

    def add_handlers(self, **_: Any) -> None:
        pass

    async def wait_for_sync(self) -> None:
        pass


@pytest.mark.parametrize(
    ("failure", "traceback"),
    [(errors.StatusError(409, "Conflict", "the object has been modified"), False), (KeyError("x"), True)],
)
async def test_a_failed_reconcile_is_logged_and_retried(failure: Exception, traceback: bool) -> None:
    calls: list[str] = []
    retried = asyncio.Event()

    async def reconcile(key: str) -> float | None:
        calls.append(key)
        if len(calls) == 1:
            raise failure
        retried.set()
        return None

    controller = Controller("things", NoInformer(), reconcile, run_informer=False)  # type: ignore[arg-type]
    controller.enqueue("ns/a")
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(controller.run())
        async with asyncio.timeout(10):
            await retried.wait()  # after the rate limiter's first (5 ms) delay
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    [failed] = [entry for entry in logs if entry["event"] == "reconcile failed"]
    assert failed["key"] == "ns/a"
    assert ("exc_info" in failed) is traceback
    assert failed["log_level"] == ("error" if traceback else "warning")
    if not traceback:
        assert (failed["code"], failed["error"]) == (409, "the object has been modified")


async def test_a_reconcile_that_keeps_asking_for_now_backs_off_and_yields() -> None:
    """A Deployment whose rollout completed and whose pods became unavailable after its progress deadline
    asks for a progress check "now" (0 s) on every pass, as upstream's does. Taken again at once, the key
    never let the event loop run: a connected cluster's API server stopped answering (replay of runbook
    003). Re-queued rate-limited, other tasks run and the passes thin out."""
    calls = 0

    async def reconcile(key: str) -> float | None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)  # lets the test end on the old code too (there it spun without one)
        return 0.0

    controller = Controller("things", NoInformer(), reconcile, run_informer=False)  # type: ignore[arg-type]
    controller.enqueue("ns/a")
    task = asyncio.create_task(controller.run())
    async with asyncio.timeout(10):
        await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # 5 ms, 10 ms, 20 ms, ... of back-off: a handful of passes in 0.2 s, not thousands
    assert 1 <= calls <= 10

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

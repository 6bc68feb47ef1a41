"""A container process that starts and ends between two of the runtime's reads ran: it is not a StartError."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from vplane.runtime import containers
from vplane.runtime.containers import ContainerProcess


def test_a_process_that_ended_between_the_reads_counts_as_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    process = ContainerProcess(tmp_path, tmp_path / "log", "vplane://abc")
    state = {"pid": 4242, "startTime": "1", "shimPid": 0, "startedAt": 5_000_000_000}
    real = containers.read_json
    calls: list[Path] = []

    def racing(path: Path) -> dict[str, Any] | None:
        calls.append(path)
        if path.name == "state.json" and len(calls) == 1:
            # The shim writes both files right after this first read: the process ran and ended at once.
            (tmp_path / "state.json").write_text(json.dumps(state))
            (tmp_path / "exit.json").write_text(json.dumps({"exitCode": 1, "finishedAt": 6_000_000_000}))
            return None
        return real(path)

    monkeypatch.setattr(containers, "read_json", racing)
    assert asyncio.run(process.wait_started(5)) is None
    assert process.pid == 4242


def test_a_process_that_could_not_start_is_a_start_error(tmp_path: Path) -> None:
    process = ContainerProcess(tmp_path, tmp_path / "log", "vplane://abc")
    doc = {"exitCode": 128, "startError": 'exec: "x": not found', "finishedAt": 6_000_000_000}
    (tmp_path / "exit.json").write_text(json.dumps(doc))
    failed = asyncio.run(process.wait_started(5))
    assert failed is not None and failed.exit_code == 128 and failed.start_error == 'exec: "x": not found'

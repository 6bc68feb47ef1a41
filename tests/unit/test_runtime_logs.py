"""Container logs: the CRI line format the shim writes, and the kubelet's reading options."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from vplane.runtime import logs
from vplane.runtime.shim import LogWriter, rfc3339_nano

T0 = "2026-01-02T03:04:05.000000001Z"
T1 = "2026-01-02T03:04:06.500000000Z"
T2 = "2026-01-02T03:04:08.000000000Z"
FILE = (f"{T0} stdout F first\n{T1} stderr P par\n{T1} stderr F tial\n{T2} stdout F last line\n").encode()


async def _read(path: Path, options: logs.LogOptions, running: bool = False) -> bytes:
    return b"".join([chunk async for chunk in logs.read_log(path, options, lambda: running, 0.01)])


async def test_cri_lines_parse_and_partial_lines_join(tmp_path: Path) -> None:
    assert logs.parse_line(f"{T0} stdout F hello world".encode()) == logs.LogLine(
        T0, "stdout", False, b"hello world"
    )
    assert logs.parse_line(b"not a log line") is None
    path = tmp_path / "0.log"
    path.write_bytes(FILE)
    assert await _read(path, logs.LogOptions()) == b"first\npartial\nlast line\n"


async def test_timestamps_prefix_each_line_once(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(FILE)
    assert await _read(path, logs.LogOptions(timestamps=True)) == (
        f"{T0} first\n{T1} partial\n{T2} last line\n".encode()
    )


@pytest.mark.parametrize(
    ("lines", "expected"),
    [(0, b""), (1, b"last line\n"), (3, b"partial\nlast line\n"), (9, b"first\npartial\nlast line\n")],
)
async def test_tail_lines_counts_lines_of_the_file(tmp_path: Path, lines: int, expected: bytes) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(FILE)
    assert await _read(path, logs.LogOptions(tail_lines=lines)) == expected


async def test_since_and_limit_bytes(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(FILE)
    since = logs.parse_rfc3339(T1)
    assert await _read(path, logs.LogOptions(since=since)) == b"partial\nlast line\n"
    assert await _read(path, logs.LogOptions(limit_bytes=8)) == b"first\npa"


async def test_follow_reads_until_the_container_stops(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(FILE[:40])
    running = [True]

    async def follow() -> bytes:
        out = b""

        async def append_later() -> None:
            await asyncio.sleep(0.05)
            with path.open("ab") as f:
                f.write(FILE[40:])
            await asyncio.sleep(0.05)
            running[0] = False

        writer = asyncio.create_task(append_later())
        async for chunk in logs.read_log(path, logs.LogOptions(follow=True), lambda: running[0], 0.01):
            out += chunk
        await writer
        return out

    assert await follow() == b"first\npartial\nlast line\n"


def test_query_options_as_the_api_server_passes_them() -> None:
    options = logs.options_from_query(
        {
            "follow": "true",
            "tailLines": "10",
            "sinceSeconds": "60",
            "timestamps": "true",
            "previous": "false",
            "limitBytes": "5",
        },
        1000.0,
    )
    assert options == logs.LogOptions(follow=True, tail_lines=10, since=940.0, timestamps=True, limit_bytes=5)
    assert logs.options_from_query({"sinceTime": T0}, 0).since == pytest.approx(logs.parse_rfc3339(T0))


def test_the_shim_writes_full_lines_and_splits_long_ones(tmp_path: Path) -> None:
    import os

    path = tmp_path / "0.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    writer = LogWriter(fd, "stdout")
    writer.feed(b"one\ntw")
    writer.feed(b"o\r\n" + b"x" * (16 * 1024 + 10))
    writer.flush()
    os.close(fd)
    parsed = [logs.parse_line(line) for line in path.read_bytes().splitlines()]
    assert [(p.text[:5], p.partial) for p in parsed if p is not None] == [
        (b"one", False),
        (b"two", False),
        (b"xxxxx", True),
        (b"xxxxx", False),
    ]
    assert rfc3339_nano(1_000_000_000_123) == "1970-01-01T00:16:40.000000123Z"

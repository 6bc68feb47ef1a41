"""Container logs: the CRI log format the shim writes and the kubelet's way of serving it.

Each line of ``<pod dir>/logs/<container>/<instance>.log`` is ``<RFC 3339 nano time> <stdout|stderr>
<F|P> <text>`` (``P`` marks part of a line longer than the writer's buffer). Reading honours the
``PodLogOptions`` the kubelet does: ``tailLines`` (the last N lines), ``sinceSeconds``/``sinceTime``
(lines logged at or after), ``timestamps`` (each line prefixed with its time), ``limitBytes`` (stop after
that many bytes) and ``follow`` (keep reading until the container stops running). The parsing and
filtering are pure; :func:`read_log` is the thin asynchronous reader.
"""

from __future__ import annotations

import asyncio
import datetime
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

TAIL_BLOCK = 64 * 1024


@dataclass(frozen=True)
class LogLine:
    timestamp: str
    """As written: RFC 3339 with nanoseconds."""
    stream: str
    partial: bool
    text: bytes

    @property
    def time(self) -> float:
        return parse_rfc3339(self.timestamp)


def parse_rfc3339(value: str) -> float:
    """Seconds since the epoch of an RFC 3339 time with up to nanosecond precision (``Z`` or an offset)."""
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    main, dot, rest = text.partition(".")
    fraction = 0.0
    if dot:
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        fraction = float("0." + digits) if digits else 0.0
        text = main + rest
    parsed = datetime.datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp() + fraction


def parse_line(raw: bytes) -> LogLine | None:
    """One CRI log line (without its newline); None for a line that is not one."""
    parts = raw.split(b" ", 3)
    if len(parts) < 3:
        return None
    timestamp, stream, tag = parts[0], parts[1], parts[2]
    text = parts[3] if len(parts) > 3 else b""
    if stream not in (b"stdout", b"stderr") or tag not in (b"F", b"P"):
        return None
    return LogLine(timestamp.decode(errors="replace"), stream.decode(), tag == b"P", text)


@dataclass(frozen=True)
class LogOptions:
    follow: bool = False
    tail_lines: int | None = None
    since: float | None = None
    """Only lines logged at or after this time (seconds since the epoch)."""
    timestamps: bool = False
    limit_bytes: int | None = None
    previous: bool = False


def _bool(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def options_from_query(query: dict[str, str], now: float) -> LogOptions:
    """``PodLogOptions`` from the kubelet's query string (already validated by the API server)."""
    tail = query.get("tailLines")
    limit = query.get("limitBytes")
    since: float | None = None
    if query.get("sinceSeconds"):
        since = now - int(query["sinceSeconds"])
    elif query.get("sinceTime"):
        since = parse_rfc3339(query["sinceTime"])
    return LogOptions(
        follow=_bool(query.get("follow")),
        tail_lines=int(tail) if tail not in (None, "") else None,
        since=since,
        timestamps=_bool(query.get("timestamps")),
        limit_bytes=int(limit) if limit not in (None, "") else None,
        previous=_bool(query.get("previous")),
    )


class LineFormatter:
    """Turns log lines into what a client reads: the text (partial lines joined), optionally prefixed
    with the line's time; counts bytes against ``limitBytes``."""

    def __init__(self, options: LogOptions) -> None:
        self.options = options
        self.sent = 0
        self._in_partial = False

    @property
    def exhausted(self) -> bool:
        return self.options.limit_bytes is not None and self.sent >= self.options.limit_bytes

    def format(self, line: LogLine) -> bytes:
        if self.options.since is not None and line.time < self.options.since:
            return b""
        prefix = b""
        if self.options.timestamps and not self._in_partial:
            prefix = line.timestamp.encode() + b" "
        out = prefix + line.text + (b"" if line.partial else b"\n")
        self._in_partial = line.partial
        if self.options.limit_bytes is not None:
            room = self.options.limit_bytes - self.sent
            out = out[: max(room, 0)]
        self.sent += len(out)
        return out


def tail_offset(path: Path, lines: int) -> int:
    """Where the last ``lines`` lines of the file begin (0 for the whole file)."""
    if lines <= 0:
        try:
            return path.stat().st_size
        except OSError:
            return 0
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            position = end
            count = 0
            # A trailing newline ends the last line; it does not start another.
            first = True
            while position > 0:
                step = min(TAIL_BLOCK, position)
                position -= step
                f.seek(position)
                block = f.read(step)
                if first and block.endswith(b"\n"):
                    block = block[:-1]
                    first = False
                index = len(block)
                while True:
                    index = block.rfind(b"\n", 0, index)
                    if index < 0:
                        break
                    count += 1
                    if count == lines:
                        return position + index + 1
                first = False
            return 0
    except OSError:
        return 0


async def read_log(
    path: Path,
    options: LogOptions,
    still_running: Callable[[], bool],
    poll_interval: float = 0.1,
) -> AsyncIterator[bytes]:
    """The log's bytes as the kubelet serves them; with ``follow``, new lines as they are written, until
    the container is no longer running and the file has been read to its end."""
    formatter = LineFormatter(options)
    offset = tail_offset(path, options.tail_lines) if options.tail_lines is not None else 0
    pending = b""
    handle = None
    try:
        while True:
            if handle is None:
                try:
                    handle = path.open("rb")
                    handle.seek(offset)
                except FileNotFoundError:
                    handle = None
            chunk = handle.read(TAIL_BLOCK) if handle is not None else b""
            if chunk:
                pending += chunk
                lines = pending.split(b"\n")
                pending = lines.pop()
                out = []
                for raw in lines:
                    parsed = parse_line(raw)
                    if parsed is None:
                        continue
                    text = formatter.format(parsed)
                    if text:
                        out.append(text)
                    if formatter.exhausted:
                        break
                if out:
                    yield b"".join(out)
                if formatter.exhausted:
                    return
                continue
            if not options.follow:
                return
            running = still_running()
            await asyncio.sleep(poll_interval)
            if not running:
                # One more read after the container stopped: what it wrote last is not lost.
                if handle is not None:
                    rest = handle.read()
                    pending += rest
                    for raw in pending.split(b"\n"):
                        parsed = parse_line(raw)
                        text = formatter.format(parsed) if parsed is not None else b""
                        if text:
                            yield text
                        if formatter.exhausted:
                            return
                return
    finally:
        if handle is not None:
            handle.close()

"""Shared command-line plumbing: ``--set name=value`` overrides for any settings field, and running a
server until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def build_settings(model: type[M], base: dict[str, Any], overrides: tuple[str, ...]) -> M:
    values = dict(base)
    for item in overrides:
        name, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint="--set")
        values[name.strip().replace("-", "_")] = yaml.safe_load(raw) if raw else ""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise click.UsageError(str(exc)) from None


GC_YOUNG_THRESHOLD = 10_000
"""Net container allocations between young-generation collections (CPython's default is 700).

A server under load keeps a few thousand objects alive per batch of in-flight requests; at the default
every collection walks them all a few hundred times a second, about 5% of the CPU of a create-heavy load
(measured in bench/apiserver). Ten thousand keeps young collections to a few per second."""


def run_until_signalled(
    start: Callable[[], Awaitable[Any]],
    stop: Callable[[], Awaitable[Any]],
    ready_file: Path | None = None,
    ready_text: Callable[[], str] | None = None,
) -> None:
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        await start()
        if ready_file is not None:
            tmp = ready_file.with_suffix(".tmp")
            tmp.write_text(ready_text() if ready_text else "ready")
            tmp.replace(ready_file)
        try:
            await stopping.wait()
        finally:
            await stop()

    if os.environ.get("VPLANE_UVLOOP", "1") != "0":
        try:
            import uvloop  # optional speed-up
        except ImportError:
            asyncio.run(main())
        else:
            uvloop.run(main())
    else:
        asyncio.run(main())

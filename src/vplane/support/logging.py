"""Structured logging: structlog over the standard library, console lines by default, JSON on request.

Every component logs through ``structlog.get_logger(<name>)``; the runbooks' log substrings are the
event names, so ``grep`` on a process's output finds them. Records from libraries (httpx2 under lightkube,
aiohttp, asyncio) go through the same renderer, at WARNING unless the level is ``debug``: their INFO lines
(one ``HTTP Request: ...`` per client call) would otherwise be most of a server's output.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

LEVEL_ENV = "VPLANE_LOG_LEVEL"
"""Read when ``--log-level`` is not given; set by :func:`configure` so the processes a server starts
(tenant replicas) log at the level it was started with."""

DEBUG_ENV = "DEBUG"
"""``DEBUG=true`` in a tenant control plane's environment (``controlPlane.statefulSet.env``, upstream's switch
for the syncer's debug mode) makes that replica log at debug, whatever level the platform runs at."""

OWN_LOGGER = "vplane"


def library_level(level: int) -> int:
    """The threshold for other packages' loggers: theirs is detail we show only when debugging."""
    return level if level <= logging.DEBUG else max(level, logging.WARNING)


def configure(level: str | None = None, json_output: bool | None = None) -> None:
    level_name = (level or os.environ.get(LEVEL_ENV) or "info").upper()
    if json_output is None:
        json_output = os.environ.get("VPLANE_LOG_FORMAT", "") == "json"
    numeric = getattr(logging, level_name, None)
    if not isinstance(numeric, int):
        level_name, numeric = "INFO", logging.INFO
    os.environ[LEVEL_ENV] = level_name.lower()
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_output else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso"),
    ]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(library_level(numeric))
    logging.getLogger(OWN_LOGGER).setLevel(numeric)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )

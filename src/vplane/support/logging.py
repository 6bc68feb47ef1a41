"""Structured logging: structlog over the standard library, console lines by default, JSON on request.

Every component logs through ``structlog.get_logger(<name>)``; the runbooks' log substrings are the
event names, so ``grep`` on a process's output finds them.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure(level: str | None = None, json_output: bool | None = None) -> None:
    level_name = (level or os.environ.get("VPLANE_LOG_LEVEL") or "info").upper()
    if json_output is None:
        json_output = os.environ.get("VPLANE_LOG_FORMAT", "") == "json"
    numeric = getattr(logging, level_name, logging.INFO)
    logging.basicConfig(stream=sys.stderr, level=numeric, format="%(message)s", force=True)
    # Client libraries log every request at INFO; that is noise in a server's log.
    for noisy in ("httpx", "httpcore", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_output else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )

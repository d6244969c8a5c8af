"""structlog set-up: JSON lines by default, human console output on a TTY."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Route structlog (and stdlib loggers of our dependencies) to ``stream`` in the chosen format."""
    stream = stream or sys.stderr
    console = fmt == "console" or (fmt == "auto" and stream.isatty())
    renderer: structlog.typing.Processor = structlog.processors.JSONRenderer()
    if console:  # keys in the order logged: what a line is about first
        renderer = structlog.dev.ConsoleRenderer(colors=False, sort_keys=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    # APScheduler warns on every skipped run of a hung job; warptd reports that as a metric instead.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)

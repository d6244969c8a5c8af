"""structlog set-up: JSON lines by default, human console output on a TTY.

``import structlog`` imports ``structlog.dev`` and ``structlog.tracebacks``, and they import ``rich``
(which imports ``pygments``) wherever it is installed, as tpu-info and the test tools install it:
3.7 MiB of the daemon's RSS, for rich tracebacks and colours warptd never renders (JSON lines, or the
console renderer without colours, after ``format_exc_info``). So the first import of structlog in the
process is made here, with ``rich`` marked absent for its duration: structlog takes the path it takes
where rich is not installed, its own fallback. The mark is lifted afterwards: a later ``import rich``
(tpu-info's) works. The ``warptd`` command imports this module before anything that imports structlog.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


@contextmanager
def _not_installed(*names: str) -> Iterator[None]:
    """For the block, ``import NAME`` raises ImportError as for a package not installed: a None entry in
    ``sys.modules``, the import system's documented mark for that. A module already imported stays."""
    marked = [name for name in names if name not in sys.modules]
    sys.modules.update(dict.fromkeys(marked))
    try:
        yield
    finally:
        for name in marked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


with _not_installed("rich"):
    import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """structlog's logger ``name``, for modules that import this one first (the ``warptd`` command)."""
    return structlog.get_logger(name)


#: The handler that renders the standard library's records (asyncio's, our dependencies') as
#: structlog renders its own; replaced, never added to, when the logging is configured again.
_stdlib_handler: logging.Handler | None = None


def configure_logging(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Route structlog, and the standard library's loggers (asyncio's, our dependencies') and warnings,
    to ``stream`` in the chosen format and at the chosen level: nothing else writes there. Without a
    handler, logging's last resort printed asyncio's warnings bare on stderr, whatever the level."""
    global _stdlib_handler
    stream = stream or sys.stderr
    console = fmt == "console" or (fmt == "auto" and stream.isatty())
    renderer: structlog.typing.Processor = structlog.processors.JSONRenderer()
    if console:  # keys in the order logged: what a line is about first
        renderer = structlog.dev.ConsoleRenderer(colors=False, sort_keys=False)
    stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            stamp,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                stamp,
                structlog.processors.format_exc_info,
            ],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    if _stdlib_handler is not None:
        root.removeHandler(_stdlib_handler)
    root.addHandler(handler)
    root.setLevel(_LEVELS[level])
    _stdlib_handler = handler
    logging.captureWarnings(True)
    # APScheduler warns on every skipped run of a hung job; warptd reports that as a metric instead.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)

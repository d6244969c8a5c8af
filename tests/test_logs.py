"""Everything the daemon logs goes through structlog, at its level and in its format: the standard
library's loggers too (asyncio's ``socket.send() raised exception.`` once went to stderr bare,
29,005 lines in 3 s, whatever the level: issue 39, finding 8)."""

from __future__ import annotations

import io
import json
import logging
import warnings

import pytest

from warptd.logs import configure_logging


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    logging.captureWarnings(False)  # an earlier test may have left it on, bound to its own hook
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


def test_the_standard_librarys_records_are_structlogs_lines(restore_logging):
    stream = io.StringIO()
    configure_logging("warning", "json", stream)
    logging.getLogger("asyncio").warning("socket.send() raised exception.")
    logging.getLogger("asyncio").info("below the level")
    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError:
        logging.getLogger("asyncio").error("Exception in callback", exc_info=True)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("deprecated", DeprecationWarning, stacklevel=1)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["logger"], line["level"]) for line in lines] == [
        ("asyncio", "warning"),
        ("asyncio", "error"),
        ("py.warnings", "warning"),
    ]
    assert lines[0]["event"] == "socket.send() raised exception." and "timestamp" in lines[0]
    assert "ZeroDivisionError: boom" in lines[1]["exception"]


def test_configured_again_it_writes_each_record_once_at_the_new_level(restore_logging):
    first, second = io.StringIO(), io.StringIO()
    configure_logging("warning", "json", first)
    configure_logging("info", "console", second)  # a SIGHUP with another level and format
    logging.getLogger("asyncio").info("now shown")
    assert first.getvalue() == ""
    assert second.getvalue().count("now shown") == 1 and not second.getvalue().startswith("{")


def test_logs_are_json_lines_off_a_tty(capsys):
    import io
    import json

    import structlog

    from warptd.logs import configure_logging

    stream = io.StringIO()
    configure_logging("info", "auto", stream)
    structlog.get_logger("t").info("hello", backend="cpu")
    structlog.get_logger("t").debug("hidden")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["event"] == "hello"
    stream = io.StringIO()
    configure_logging("debug", "console", stream)
    structlog.get_logger("t").debug("shown")
    assert "shown" in stream.getvalue() and not stream.getvalue().startswith("{")

"""A daemon thread that polls something off the scrape path until it is stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger("warptd.poller")


class PollingThread:
    """Calls ``poll()``, then waits ``interval()`` seconds (read each time: it may be reconfigured),
    until :meth:`stop`. An exception is logged and polling goes on: one bad answer must not end it."""

    def __init__(self, name: str, poll: Callable[[], None], interval: Callable[[], float]) -> None:
        self.name = name
        self._poll = poll
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll()
            except Exception:
                log.exception("poll_failed", poller=self.name)
            self._stop.wait(self._interval())

    def stop(self, timeout: float = 5.0) -> None:
        """Stop, waiting at most ``timeout`` seconds for a poll in progress."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

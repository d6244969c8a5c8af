"""One thread that ends open windows at their deadlines (a lease not renewed in time, or the maximum
duration), sleeping until the nearest one rather than waking per window or per second."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger("warptd.windows")


class Reaper:
    """Sleeps until the nearest of ``deadlines()`` (monotonic time and the reason to end with, by id),
    woken through ``condition`` when a nearer one appears, then calls ``end(id, reason)`` for each one
    past, until ``closing()``. ``deadlines`` and ``closing`` are called with ``condition`` held (its
    owner's lock), ``end`` without it."""

    def __init__(
        self,
        condition: threading.Condition,
        deadlines: Callable[[], dict[str, tuple[float, str]]],
        end: Callable[[str, str], None],
        closing: Callable[[], bool],
    ) -> None:
        self._condition, self._deadlines, self._end, self._closing = condition, deadlines, end, closing
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread, once (with the condition held)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="warptd-window-reaper", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._condition:
                if self._closing():
                    return
                now = time.monotonic()
                deadlines = self._deadlines()
                due = [(key, reason) for key, (at, reason) in deadlines.items() if at <= now]
                if not due:
                    nearest = min((at for at, _ in deadlines.values()), default=float("inf"))
                    self._condition.wait(None if nearest == float("inf") else nearest - now)
                    continue
            for key, reason in due:
                try:
                    self._end(key, reason)
                except Exception:  # the reaper outlives any one window's end, without spinning on it
                    log.exception("window_end_failed", window=key, reason=reason)
                    time.sleep(1.0)

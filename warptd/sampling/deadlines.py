"""Gives up on a scheduled read that runs past ``--sample-timeout``, with no thread waiting on each read.

A thread per read waiting for its result would wake once more per sample; this one thread wakes at the
earliest deadline of the reads in flight, or once per timeout when none is, so a hung read is marked
at its deadline and a read that returns in time costs nothing here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger("warptd.sampler")


class Deadlines:
    """Reads in flight by backend name; ``on_timeout(name)`` is called once for each past its deadline."""

    def __init__(self, timeout: Callable[[], float], on_timeout: Callable[[str], None]) -> None:
        self._timeout = timeout  # read at each check: a reload may change it
        self._on_timeout = on_timeout
        self._armed: dict[str, float] = {}  # backend -> monotonic start of its read in flight
        self._expired: set[str] = set()  # reads given up on that have not returned yet
        self._condition = threading.Condition()  # re-entrant: a report may call resume()
        #: Held by the deadline thread from a check to its reports; taken by a cut from elsewhere.
        self.lock = self._condition
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="warptd-deadlines", daemon=True)
        self._thread.start()

    def arm(self, name: str, started: float) -> None:
        """A read of ``name`` began at ``started`` (monotonic). No wake-up: the thread wakes at least
        once per timeout, and then sleeps until this read's deadline."""
        with self._condition:
            self._armed[name] = started

    def finish(self, name: str) -> bool:
        """The read of ``name`` returned; True when it had been given up on (its result is dropped)."""
        with self._condition:
            self._armed.pop(name, None)
            if name in self._expired:
                self._expired.discard(name)
                return True
            return False

    def resume(self, name: str, started: float | None) -> None:
        """``name``'s read was cut at a hung device rather than given up on: the backend is not
        hung. ``started``: a read of it still in flight (queued behind the cut one) is armed afresh
        from then."""
        with self._condition:
            self._expired.discard(name)
            if started is None:
                self._armed.pop(name, None)
            else:
                self._armed[name] = started
                self._condition.notify()

    def armed(self, name: str) -> bool:
        """Whether a read of ``name`` is in flight and not yet past its deadline."""
        with self._condition:
            return name in self._armed

    def expired(self, name: str) -> bool:
        """Whether ``name``'s read was given up on and has not returned yet (it hangs)."""
        with self._condition:
            return name in self._expired

    def stop(self) -> None:
        with self._condition:
            self._stopped = True
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        with self._condition:
            while not self._stopped:
                due, wait = self._due(time.monotonic())
                # Under the lock, so a read returning now is dropped (finish) only once its backend
                # is marked stale, never after a newer sample was published; the callback takes no
                # lock of ours.
                for name in due:
                    try:
                        self._on_timeout(name)
                    except Exception as exc:  # the thread must go on watching the others
                        log.error("deadline_callback_failed", backend=name, error=repr(exc))
                if not due:
                    self._condition.wait(wait)

    def _due(self, now: float) -> tuple[list[str], float]:
        """The reads past their deadline (moved to expired), and how long to sleep until the next one."""
        timeout = self._timeout()
        due = [name for name, started in self._armed.items() if now - started >= timeout]
        for name in due:
            del self._armed[name]
            self._expired.add(name)
        wait = min((started + timeout - now for started in self._armed.values()), default=timeout)
        return due, max(wait, 0.001)

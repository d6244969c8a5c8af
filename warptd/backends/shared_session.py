"""One SDK initialisation per process, shared by every backend that uses the SDK.

An accelerator backend and its companion power backend both read one SDK (NVML, amdsmi, HLML);
the SDK is initialised by the first user and shut down when the last one releases it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

S = TypeVar("S")


class SharedSession(Generic[S]):
    """A reference-counted session: ``open()`` on the first :meth:`acquire`, ``close`` on the last release."""

    def __init__(self, open_: Callable[[], S], close: Callable[[S], None]) -> None:
        self._open, self._close = open_, close
        self._lock = threading.Lock()
        self._session: S | None = None
        self._refs = 0

    def acquire(self) -> S:
        """Return the process-wide session, opening it on first use (its errors propagate)."""
        with self._lock:
            if self._session is None:
                self._session = self._open()
            self._refs += 1
            return self._session

    def release(self, session: S | None = None) -> None:
        """Drop a reference to ``session`` (default: the current one); it is closed when its last user
        releases it. Releasing a session that is no longer the current one (closed) does nothing."""
        with self._lock:
            if session is not None and session is not self._session:
                return
            self._refs = max(0, self._refs - 1)
            if self._refs == 0 and self._session is not None:
                session, self._session = self._session, None
                self._close(session)

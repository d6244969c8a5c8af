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

    def lease(self) -> Lease[S]:
        """One user's hold on the session, released at most once however often it is asked."""
        return Lease(self, self.acquire())

    def release(self, session: S) -> None:
        """Drop a reference to ``session``; it is closed when its last user releases it. Releasing a
        session that is no longer the current one (closed) does nothing."""
        with self._lock:
            if session is not self._session:
                return
            self._refs = max(0, self._refs - 1)
            if self._refs == 0 and self._session is not None:
                session, self._session = self._session, None
                self._close(session)


class Lease(Generic[S]):
    """A user's reference to a :class:`SharedSession`; :meth:`release` is idempotent, so a backend's
    ``shutdown()`` can be called twice without closing the SDK under the session's other users."""

    def __init__(self, shared: SharedSession[S], session: S) -> None:
        self.session = session
        self._shared = shared
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._shared.release(self.session)

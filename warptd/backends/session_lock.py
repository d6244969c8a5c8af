"""A lock that an SDK session's reads share and its re-initialisation holds alone.

Reads of different devices may run at once (one device's hung call must not stop the others'), but
none may meet a half-reset SDK. The standard library has no such lock, and the readers-writer locks
of maintained packages (``fasteners``) neither time out nor let a reader become the writer, which a
reopen needs: a writer here waits at most a timeout, then gives up (the reopen is tried later), since a
hung call may hold its share for ever. Re-entrant both ways, as the ``RLock`` it replaces was.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType


class SessionLock:
    """Shared by reads (``with lock:``), held alone by a re-initialisation (``lock.exclusive(t)``).

    Readers never wait for a writer that only waits: a waiting reopen does not stop the reads of the
    devices that answer (a reader may re-enter while it holds its share)."""

    def __init__(self) -> None:
        #: The condition's own lock, taken directly on the readers' path (each device of each sample).
        self._lock = threading.Lock()
        self._condition = threading.Condition(self._lock)
        self._readers: dict[int, int] = {}  # thread id -> depth
        self._writer: int | None = None
        self._depth = 0  # the writer's
        self._waiting = 0  # threads waiting on the condition: a reader leaving wakes only those

    def __enter__(self) -> SessionLock:
        me = threading.get_ident()
        with self._lock:
            if self._writer is not None and self._writer != me:
                self._wait_for(lambda: self._writer is None or self._writer == me, None)
            self._readers[me] = self._readers.get(me, 0) + 1
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        me = threading.get_ident()
        with self._lock:
            depth = self._readers[me] - 1
            if depth:
                self._readers[me] = depth
            else:
                del self._readers[me]
                if self._waiting:
                    self._condition.notify_all()

    def _wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """``Condition.wait_for``, counted in :attr:`_waiting` meanwhile (the lock held)."""
        self._waiting += 1
        try:
            return self._condition.wait_for(predicate, timeout)
        finally:
            self._waiting -= 1

    @contextmanager
    def exclusive(self, timeout: float) -> Iterator[bool]:
        """Hold the lock alone (a reader may, when it is the only one): yields False, not holding it,
        where other readers or a writer did not let go within ``timeout`` seconds."""
        me = threading.get_ident()
        with self._lock:
            held = self._wait_for(
                lambda: self._writer in (None, me) and all(reader == me for reader in self._readers),
                timeout,
            )
            if held:
                self._writer = me
                self._depth += 1
        try:
            yield held
        finally:
            if held:
                with self._lock:
                    self._depth -= 1
                    if not self._depth:
                        self._writer = None
                        if self._waiting:
                            self._condition.notify_all()

    def readers(self) -> int:
        """Threads holding a share now (for tests and logs)."""
        with self._lock:
            return len(self._readers)

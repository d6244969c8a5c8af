"""The one place where vendor SDK exceptions are caught, classified and counted."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Hashable
from typing import TypeVar

import structlog

from warptd.backends.costs import ReadCosts
from warptd.errors import ErrorKind

T = TypeVar("T")
log = structlog.get_logger("warptd.backend")


class GuardedSDK:
    """Mixin that turns SDK exceptions into ``None`` plus a counted :class:`ErrorKind`.

    A call that answered "not supported" once is remembered under its key and never made again,
    so an unsupported field costs nothing per sample and is an absent series, not a 0.
    """

    name: str = "unnamed"

    def __init__(self) -> None:
        self._errors: Counter[ErrorKind] = Counter()
        self._errors_lock = threading.Lock()
        self._unsupported: set[Hashable] = set()
        #: The CPU each kind of read takes (:mod:`warptd.backends.costs`), charged by the reads.
        self.read_costs = ReadCosts()

    def classify_error(self, exc: BaseException) -> ErrorKind:
        """Map an exception raised by the SDK to an error kind; backends override for their SDK."""
        if isinstance(exc, PermissionError):
            return ErrorKind.PERMISSION
        if isinstance(exc, FileNotFoundError | NotImplementedError):
            return ErrorKind.NOT_SUPPORTED
        return ErrorKind.UNEXPECTED

    def guarded(self, key: Hashable, fn: Callable[..., T], *args: object) -> T | None:
        """Call ``fn(*args)``; on failure count the error kind, remember unsupported keys, return None."""
        if key in self._unsupported:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            kind = self.classify_error(exc)
            self.on_error(key, kind, exc)
            return None

    def on_error(self, key: Hashable, kind: ErrorKind, exc: BaseException) -> None:
        """Record one failed call; subclasses extend this (device-lost tracking)."""
        if kind is ErrorKind.NOT_SUPPORTED:
            self._unsupported.add(key)
            return
        self.count_error(kind)
        log.debug("sdk_call_failed", backend=self.name, key=str(key), kind=str(kind), error=repr(exc))

    def count_error(self, kind: ErrorKind, n: int = 1) -> None:
        with self._errors_lock:
            self._errors[kind] += n

    def take_errors(self) -> Counter[ErrorKind]:
        """Return and clear the errors counted since the last call."""
        with self._errors_lock:
            errors, self._errors = self._errors, Counter()
        return errors

"""Guarded NVML calls of one device: a failure becomes ``None`` and is counted once, by the backend.

A call answering "not supported" is remembered by the device and never made again (an absent series,
not a 0); a lost GPU or a shut-down NVML marks the device lost for the rest of its read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from warptd.backends.base import AcceleratorBackend

T = TypeVar("T")
#: One version of a call: (what it is remembered as, the function, its arguments).
Version = tuple[str, Callable[..., Any], tuple[object, ...]]


class Guard(Protocol):
    """What a device's readers (GPM, MIG listing) need: a guarded call and a failure to report."""

    def call(self, what: str, fn: Callable[..., T], *args: object) -> T | None: ...

    def failed(self, what: str, exc: BaseException) -> None: ...


class DeviceGuard:
    """One GPU's guard: what it lacks and whether this read found it lost. ``report(guard, what, exc)``
    classifies and counts a failure (the backend's), marking the guard lost or the call unsupported."""

    __slots__ = ("_report", "index", "lost", "refusals", "unsupported")

    def __init__(self, index: int, report: Callable[[DeviceGuard, str, BaseException], None]) -> None:
        self.index = index
        self._report = report
        self.lost = False  # lost during the current read: its other calls are not made
        self.unsupported: set[str] = set()
        self.refusals = 0  # bumped by every call newly found unsupported: plans made before are stale

    def call(self, what: str, fn: Callable[..., T], *args: object) -> T | None:
        """``fn(*args)``, or None: not made once lost or unsupported, a failure reported."""
        if self.lost or what in self.unsupported:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            self._report(self, what, exc)
            return None

    def call_versions(self, *versions: Version) -> Any:
        """The first of several versions of one call that the driver supports: a later one is asked
        only once the earlier answered "not supported" (an older driver without the newer function)."""
        for what, fn, args in versions:
            if what in self.unsupported:
                continue
            value = self.call(what, fn, *args)
            if value is not None or what not in self.unsupported:
                return value
        return None

    def failed(self, what: str, exc: BaseException) -> None:
        self._report(self, what, exc)

    def refuse(self, what: str) -> None:
        """``what`` is not supported by this device: never asked again."""
        if what not in self.unsupported:
            self.unsupported.add(what)
            self.refusals += 1


class IndexGuard:
    """A :class:`Guard` over a backend's own guarded calls for device ``index`` (``nvidia_mig``)."""

    __slots__ = ("_backend", "_index")

    def __init__(self, backend: AcceleratorBackend, index: int) -> None:
        self._backend, self._index = backend, index

    def call(self, what: str, fn: Callable[..., T], *args: object) -> T | None:
        return self._backend.call(self._index, what, fn, *args)

    def failed(self, what: str, exc: BaseException) -> None:
        backend = self._backend
        backend.on_error((what, self._index), backend.classify_error(exc), exc)

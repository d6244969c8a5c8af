"""The bytes that energy windows' time series may take (``--window-memory``), enforced.

Every window's series (open, or ended and kept in the history) is charged here. Over the bound, the
oldest ended window's series goes first; then the open window holding the most bytes thins its
series (every other point, as past its point limit). Summaries are never touched: they stay exact.
Ended windows' series take at most an eighth of the bound (older ones dropped, the newest thinned,
then dropped). Opening a window is refused when the open windows' minimum series would not fit.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading
from collections.abc import Callable
from typing import Protocol

from warptd.recording.series import DEVICE_ROW_BYTES, DOMAIN_ROW_BYTES

#: Points per target an open window keeps at least, as far as the bound is concerned when it opens.
FLOOR_POINTS = 64
#: Bytes released before the heap is trimmed (glibc keeps freed memory otherwise; see trim_heap).
TRIM_AFTER_BYTES = 2**20
#: Ended windows' series take at most this fraction (1/8) of the bound: the rest is for open ones.
HISTORY_SHARE = 8
#: Seconds from the release of series to the heap's trim.
TRIM_DELAY_S = 1.0


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None (musl, macOS: nothing to call, the fallback is to do nothing)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim_heap() -> bool:
    """Hand freed heap pages back to the OS. glibc keeps the memory of freed series in its arenas
    (a process that had freed 16 MiB of series kept 18 MiB more RSS without it); ``malloc_trim(0)`` returns
    every whole free page of every arena. True when it did."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


class Charged(Protocol):
    """A recording whose series are charged: it can say its bytes, thin them and drop them."""

    @property
    def series_bytes(self) -> int: ...
    def thin_series(self) -> bool: ...
    def drop_series(self) -> None: ...


def floor_bytes(devices: int, domains: int = 0) -> int:
    """The bytes an open window on ``devices`` devices and ``domains`` power domains is promised
    when it opens: FLOOR_POINTS rows of each, at the row size its store will keep."""
    return FLOOR_POINTS * (devices * DEVICE_ROW_BYTES + domains * DOMAIN_ROW_BYTES)


class SeriesBudget:
    """Accounts the series bytes of open and ended recordings against ``capacity()`` bytes."""

    def __init__(self, capacity: Callable[[], int]) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._enforcing = threading.Lock()
        self._open: dict[Charged, int] = {}  # member -> its floor bytes
        self._ended: list[Charged] = []  # oldest first
        self._used: dict[Charged, int] = {}
        self._total = 0  # the sum of _used
        self._released = 0  # bytes released since the heap was last trimmed
        self._trim_timer: threading.Timer | None = None

    def _charge(self, member: Charged, nbytes: int) -> None:
        self._total += nbytes - self._used.get(member, 0)
        self._used[member] = nbytes

    @property
    def used(self) -> int:
        """Bytes charged now, over every member."""
        with self._lock:
            return self._total

    def admit(self, member: Charged, devices: int, domains: int = 0) -> bool:
        """Take an opening window in unless the open windows' floors and its own exceed the bound."""
        floor = floor_bytes(devices, domains)
        with self._lock:
            if sum(self._open.values()) + floor > self.capacity():
                return False
            self._open[member] = floor
            self._charge(member, member.series_bytes)
        return True

    def ended(self, member: Charged) -> None:
        """The member stopped recording: its series is kept, and the first to go under pressure (it
        then keeps its summary, charged at the few bytes its empty series still take). Ended series
        take at most an eighth of the bound: older ones are dropped first, then the newest is thinned
        (its client may still read it) and dropped only if thinning cannot bring it under. The last
        window to end trims the heap, so a daemon whose windows all ended gives their memory back."""
        with self._lock:
            if self._open.pop(member, None) is not None:
                self._ended.append(member)
            share = self.capacity() // HISTORY_SHARE
            history = sum(self._used.get(m, 0) for m in self._ended)
            dropped = []
            while history > share and len(self._ended) > 1:
                oldest = self._ended.pop(0)
                history -= self._used.get(oldest, 0)
                dropped.append(oldest)
            newest = self._ended[-1] if self._ended and history > share else None
            idle = not self._open
        for oldest in dropped:
            oldest.drop_series()
            self._recharge(oldest)
        if newest is not None:
            self._fit_newest(newest, share)
        if idle:
            self._trim_soon()

    def _fit_newest(self, newest: Charged, share: int) -> None:
        """Thin the newest ended series until the history fits its share; drop it if it cannot."""
        while True:
            with self._lock:
                if newest not in self._ended:
                    return  # released, or dropped under pressure, meanwhile
                if sum(self._used.get(m, 0) for m in self._ended) <= share:
                    return
            thinned = newest.thin_series()
            if not thinned:
                newest.drop_series()
                with self._lock:
                    if newest in self._ended:
                        self._ended.remove(newest)
            self._recharge(newest)
            if not thinned:
                return

    def _recharge(self, member: Charged) -> None:
        """Re-read the bytes of a member that gave some up; what it gave up counts toward the trim."""
        nbytes = member.series_bytes
        with self._lock:
            if member not in self._used:
                return
            freed = self._used[member] - nbytes
            self._charge(member, nbytes)
        self._gave_up(freed)

    def _gave_up(self, nbytes: int) -> None:
        """Count ``nbytes`` given up (released, dropped or thinned); past TRIM_AFTER_BYTES, trim."""
        if nbytes <= 0:
            return
        with self._lock:
            self._released += nbytes
            trim = self._released >= TRIM_AFTER_BYTES
            if trim:
                self._released = 0
        if trim:
            self._trim_soon()

    def release(self, member: Charged) -> None:
        """The member is gone (dropped from the history, or refused): it costs nothing any more."""
        with self._lock:
            self._open.pop(member, None)
            released = self._used.pop(member, 0)
            self._total -= released
            if member in self._ended:
                self._ended.remove(member)
        self._gave_up(released)

    def _trim_soon(self) -> None:
        """Trim the heap a moment from now, once: after the request that freed the series has
        answered (its response's buffers are freed too), and at most once however many end."""
        with self._lock:
            if self._trim_timer is not None:
                return
            self._trim_timer = threading.Timer(TRIM_DELAY_S, self._trim)
            self._trim_timer.daemon = True
        self._trim_timer.start()

    def _trim(self) -> None:
        with self._lock:
            self._trim_timer = None
        trim_heap()

    def update(self, member: Charged) -> None:
        """Re-read the member's bytes (it grew); over the bound, make room."""
        with self._lock:
            if member not in self._used:
                return
            self._charge(member, member.series_bytes)
            over = self._total > self.capacity()
        if over:
            self._enforce()

    def _enforce(self) -> None:
        """Drop ended series oldest first, then thin the largest open series that can still be
        thinned, until under the bound. One thread at a time; a member thinned here updates without
        enforcing again."""
        if not self._enforcing.acquire(blocking=False):
            return
        try:
            while True:
                with self._lock:
                    if self._total <= self.capacity():
                        return
                    ended = self._ended.pop(0) if self._ended else None
                    largest_first = sorted(self._open, key=lambda m: self._used.get(m, 0), reverse=True)
                if ended is not None:
                    ended.drop_series()
                    victim = ended
                else:
                    victim = next((m for m in largest_first if m.thin_series()), None)
                    if victim is None:
                        return  # nothing left to give (every open window is down to its last points)
                self._recharge(victim)
        finally:
            self._enforcing.release()

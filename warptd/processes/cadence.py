"""When a GPU's per-process utilization is read: at a cadence of its own, not at every process poll.

The driver keeps the samples of its last 100 sampling windows (72 in older drivers; NVML documents
1/6 s to 1 s for its utilization samples), and a read returns
every one newer than the last read's, so a read every few seconds loses nothing of a process's mean
share; each read is a firmware round trip (2.1 ms of CPU on an H200). A GPU is read:

- never while it lists no process: there is no one to attribute a sample to (the driver would say
  NOT_FOUND, at the same price);
- at once when it lists a process the last read did not: the read closes the span of the processes
  before it, so a newcomer's weight is never taken over a span it was absent from most of;
- one second after such a read (the driver's longest window: the newcomer's first samples are in);
- else every ``period`` (``--process-utilization-interval``), or at every poll where polls are that
  far apart. A process that leaves needs no read: its weight is dropped at once.
"""

from __future__ import annotations

from warptd.backends.cadence import is_due

#: The longest sampling window of the driver's per-process samples (NVML: 1/6 s to 1 s by product).
DRIVER_WINDOW_S = 1.0


class UtilizationCadence:
    """One GPU's reads of per-process utilization: when the last was made, and whom it covered."""

    __slots__ = ("_covered", "_follow_up", "_last")

    def __init__(self) -> None:
        self._covered: frozenset[int] = frozenset()  # pids listed at the last read, less those gone
        self._last: float | None = None  # monotonic time of the last read
        self._follow_up = False  # the last read was made for a newcomer: the next one a window on

    def due(self, pids: frozenset[int], now: float, period: float, pace: float) -> bool:
        """Whether this poll reads the GPU's utilization, its processes being ``pids``; ``pace`` is
        how often the GPU is polled; half a poll of slack, as a device's own reads have (:func:`is_due`)."""
        self._covered &= pids  # a pid that left and comes back (reused) is a newcomer
        if not pids:
            return False
        if pids - self._covered:
            return True
        if self._follow_up:
            period = min(period, DRIVER_WINDOW_S)
        return is_due(self._last, now, period, pace)

    def read(self, pids: frozenset[int], now: float) -> None:
        """A read covering ``pids`` was made at ``now`` (a failed one is not: the next poll asks again)."""
        self._follow_up = bool(pids - self._covered)
        self._covered, self._last = pids, now

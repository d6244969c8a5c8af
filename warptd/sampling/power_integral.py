"""Energy from the power a device reports: the driver's trailing average tiling the past, the instant
power's trapezoid where it has none, and how late the average runs (issue 38)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

#: The window of the driver's own power average (NVML's ``nvmlDeviceGetPowerUsage`` and field 185 on
#: Ampere and newer: the last second), which tiles the past: ``F(t) = F(t - W) + W * average(t)``.
AVERAGE_WINDOW_S = 1.0
#: Read several times a window, how far each reading's tile is drawn toward the instant power's step.
CHAIN_DAMPING = 0.1


class PowerIntegral:
    """Energy (J) drawn since it began, from the power a device reports at each reading.

    The driver's trailing average tiles the past: ``F(t) = F(t - W) + W * A(t)`` from the history of
    earlier readings, one tile per window whatever the sampling rate. It counts what a load changing
    faster than the sampler drew (a 1 Hz sample of instant power cannot), and between readings under
    a window apart it gives each its share (the difference of two overlapping windows). Over the
    first window, where the history does not reach back, and for devices without an average, the
    instant power's trapezoid; sampled slower than the window, the time before it at the powers on
    both sides. An average that lags the counter tiles a past as late as it is: :meth:`tail` adds the
    energy of the last ``lag`` s (:class:`AverageLag`, learnt from the instant power against the
    average) to a span.
    """

    __slots__ = ("_history", "_last", "lag", "tiled_from", "window")

    def __init__(self, window: float = AVERAGE_WINDOW_S) -> None:
        self.window = window
        self.lag = AverageLag()
        #: (time, F, the instant power's trapezoid, the instant power or None), oldest first
        self._history: deque[tuple[float, float, float, float | None]] = deque()
        #: The last reading: time, F, trapezoid, instant power, average power (None: unknown)
        self._last: tuple[float, float, float, float | None, float | None] | None = None
        #: When F began to be tiled from the average (None: not yet since the start or a gap): what F
        #: counts from then on owes nothing to the first window's trapezoid.
        self.tiled_from: float | None = None

    def add(self, now: float, instant: float | None, average: float | None) -> float | None:
        """F at ``now`` given this reading's powers (W); None where neither is known (nothing added)."""
        if instant is None and average is None:
            return None
        last = self._last
        if last is None:
            self._record(now, 0.0, 0.0, instant, average)
            return 0.0
        then, total, trapezoid, before, before_average = last
        dt = now - then
        if dt <= 0:
            return total
        between = _mean(before, instant)  # the trapezoid's power, else the averages'
        if between is None:
            between = _mean(before_average, average)
        trapezoid += dt * (between or 0.0)
        window = self.window
        start = now - window
        back = self._at(start, within=dt / 2) if start < then else None
        if average is None:
            total += dt * (between or 0.0)
        elif start >= then:  # read slower than the window: the time before it at the powers around it
            total += (start - then) * (between or 0.0) + window * average
        elif back is None:  # the history does not reach a window back at this pace yet
            total += dt * (between or 0.0)
        else:
            if self.tiled_from is None:
                self.tiled_from = now
            tiled = back[0] + window * average
            # Read several times a window, each reading starts a chain of tiles of its own, whose
            # offsets (from where each began) are drawn toward the trapezoid's steps, so they fade.
            total = (
                tiled + CHAIN_DAMPING * (total + dt * (between or 0.0) - tiled) if dt < window / 2 else tiled
            )
            if dt <= DENSE_S and instant is not None and back[2] is not None:
                # Read densely, the instant power's trapezoid over the window is the energy drawn in
                # it: against the average's tile, what the average lags by.
                self.lag.learn(trapezoid - back[1] - window * average, instant - back[2])
        self._record(now, total, trapezoid, instant, average)
        return total

    def tail(self, since: float | None) -> float:
        """The energy of the last ``lag`` s that the tiles hold only later, as of now less as of a time
        the instant power was ``since`` W: the lag times the instant power's change (0 where either is
        unknown)."""
        now = self.last_instant
        return self.lag.seconds * (now - since) if now is not None and since is not None else 0.0

    def _at(self, t: float, within: float) -> tuple[float, float, float | None] | None:
        """F, the trapezoid and the instant power at time ``t`` between two readings of the history, one
        of them at most ``within`` s from it (or the oldest reading, that close after it: a read a
        little early); None where it does not reach back, or only across a wider gap (read sparsely
        then: what fell between is not known at this reading's pace)."""
        later = None
        for at, total, trapezoid, power in reversed(self._history):
            if at <= t:
                if later is None:
                    return total, trapezoid, power
                if min(t - at, later[0] - t) > within:
                    return None
                share = (t - at) / (later[0] - at)
                between = power if power is None or later[3] is None else power + (later[3] - power) * share
                return total + (later[1] - total) * share, trapezoid + (later[2] - trapezoid) * share, between
            later = (at, total, trapezoid, power)
        if later is not None and later[0] - t <= within:
            return later[1], later[2], later[3]
        return None

    def _record(
        self, now: float, total: float, trapezoid: float, instant: float | None, average: float | None
    ) -> None:
        history = self._history
        history.append((now, total, trapezoid, instant))
        horizon = now - self.window
        while len(history) > 2 and history[1][0] <= horizon:
            history.popleft()
        self._last = (now, total, trapezoid, instant, average)

    @property
    def last_instant(self) -> float | None:
        """The instant power of the last reading (W), where it had one."""
        return self._last[3] if self._last is not None else None

    def restart(self) -> None:
        """Forget the history (a gap in readings): the next reading starts anew. The lag is kept."""
        self._history.clear()
        self._last = self.tiled_from = None


def _mean(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else (a + b) / 2


#: Readings at most this far apart resolve a window well enough to tell the average's lag from (read
#: once a second, a step between two readings is anywhere between them: a load in step with the
#: sampler would look like a lag).
DENSE_S = 0.25
#: The most an average's lag may be taken to be (s): beyond, the fit is not of a lag.
MAX_LAG_S = 0.3
#: W² of power change the fit leans on toward no lag before it moves: one pair of readings alone
#: (a step of 100 W) moves it halfway.
LAG_PRIOR = 100.0**2
#: How much of the fit each further reading leaves of the earlier ones.
LAG_MEMORY = 0.99


@dataclass(slots=True)
class AverageLag:
    """How late the driver's average is (s): a least-squares slope (within ``[0, MAX_LAG_S]``, leaning on
    :data:`LAG_PRIOR` toward none, older pairs fading by :data:`LAG_MEMORY`) of what the tiles missed
    against how much the instant power changed, from two kinds of pairs. At each read of the counter,
    what it found since its last read beyond the tiles of that time, against the instant power's change
    since (an average ``lag`` s late misses the last ``lag`` s before the later read and counts those
    before the earlier one). Read densely (:data:`DENSE_S` apart at most), the instant power's
    trapezoid over the last window beyond its tile, against the instant power's change over the window
    (read once a second, a step between two readings could be anywhere between them: a load in step
    with the sampler would look like a lag).
    """

    seconds: float = 0.0
    _moment: float = 0.0  #: sum of (difference * power change)
    _spread: float = 0.0  #: sum of power change squared

    def learn(self, missed: float, change: float) -> None:
        """The tiles missed ``missed`` J of what was drawn while the instant power changed ``change`` W."""
        self._moment = self._moment * LAG_MEMORY + missed * change
        self._spread = self._spread * LAG_MEMORY + change * change
        self.seconds = min(MAX_LAG_S, max(0.0, self._moment / (self._spread + LAG_PRIOR)))

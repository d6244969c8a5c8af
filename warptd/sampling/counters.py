"""Turn raw hardware counters, which wrap and reset, into monotonic totals."""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog

from warptd.metrics.catalog import SUMS
from warptd.models import LabelledValues

log = structlog.get_logger("warptd.counters")

#: No single power domain draws more; a counter decrease implying more is a reset, not a wrap. Also
#: the ceiling on what a reset or restored energy counter may add per second where the device has
#: no power limit to bound it (RAPL domains, devices without one).
MAX_PLAUSIBLE_WATTS = 5000.0


@dataclass(slots=True)
class MonotonicCounter:
    """A cumulative hardware counter made monotonic.

    A decrease is a wrap when the counter has a known range (RAPL's ``max_energy_range_uj``)
    and the wrapped delta is plausible (an implied power under ``MAX_PLAUSIBLE_WATTS``, or
    without a time base under half the range); otherwise it is a reset (driver reload), after
    which the new raw value is the amount counted since the reset, at most ``ceiling`` (W) times
    the seconds since the last reading where the caller knows both: the rest is ``dropped``, since
    a counter that restarted then cannot have counted more. Sampling must be faster than
    one wrap period (about 160 s at 400 W on AMD's 65.5 kJ range) to see every wrap: the sampler
    reads a backend at least every ``max_interval`` (RAPL's, see ``warptd.power.rapl``).
    The total starts at the first raw value, so a daemon restart is invisible while the
    hardware counter itself does not reset.
    """

    wrap_range: float | None = None
    total: float | None = None
    previous: float | None = None
    wraps: int = 0
    resets: int = 0
    dropped: float = 0.0  #: counted by resets beyond ``ceiling * dt``, left out of ``total``

    def update(self, raw: float, dt: float | None = None, ceiling: float | None = None) -> float:
        """Feed one raw reading (``dt`` s after the last); return the delta it adds (0 at first)."""
        if self.previous is None or self.total is None:
            self.previous, self.total = raw, raw
            return 0.0
        delta = raw - self.previous
        if delta < 0:
            wrapped = (self.wrap_range - self.previous) + raw if self.wrap_range else None
            if wrapped is not None and self._plausible(wrapped, dt):
                delta = wrapped
                self.wraps += 1
            else:
                delta = self.bounded(raw, ceiling, dt)
                self.resets += 1
        self.previous = raw
        self.total += delta
        return delta

    def bounded(self, added: float, ceiling: float | None, seconds: float | None) -> float:
        """``added``, at most ``ceiling * seconds`` (either unknown: unbounded); the excess is dropped."""
        if ceiling is None or seconds is None:
            return added
        most = ceiling * max(seconds, 0.0)
        if added <= most:
            return added
        self.dropped += added - most
        return most

    def _plausible(self, wrapped: float, dt: float | None) -> bool:
        if wrapped < 0 or self.wrap_range is None:
            return False
        if dt:
            return wrapped / dt <= MAX_PLAUSIBLE_WATTS
        return wrapped <= self.wrap_range / 2

    def rebase(self, raw: float, total: float) -> None:
        """Continue from ``total`` with ``raw`` as the new baseline (no jump when switching source)."""
        self.previous, self.total = raw, total


#: How far behind its read a driver's energy counter may be: NVML refreshes it every 100 ms. The total
#: between two reads of the counter counts the integrated power only up to that long before, so that
#: the next read of the counter finds the total at or below itself (it takes its own value then).
BRIDGE_LAG_S = 0.1


@dataclass(slots=True)
class EnergyTracker:
    """Energy of one device or domain: from its counter where it has one, else integrated power.

    Power is derived from the counter delta when the hardware reports energy only (RAPL, i915).
    A gap in readings (:meth:`gap`) is never integrated across: the next reading starts anew.

    Where the counter is read less often than the power (its own cadence: NVML's costs 2.9 ms of CPU),
    a reading without it advances the total by the power integrated since the counter's last read
    (the bridge, less :data:`BRIDGE_LAG_S` of the newest power); the counter's next read re-anchors
    it. The total is the counter's own at every read of it, and never goes down: where the bridge ran
    ahead of the counter, the total holds until the counter passes it.
    """

    counter: MonotonicCounter | None = None
    integrated: float | None = None
    last_power: float | None = None
    last_time: float | None = None  # of the last reading (integrated) or of the counter's last read
    bridge: float = 0.0  #: joules integrated from the power since the counter's last read
    #: The newest power and its time, where the bridge integrates from (None: from the next one).
    bridge_from: tuple[float, float] | None = None
    published: float | None = None  #: the total last handed out: a later one is never lower
    #: A total saved by an earlier run of the daemon, the raw counter then, whether that run was
    #: on this same boot, the Unix time of that reading and the power then (W); not yet applied.
    resumed: tuple[float, float | None, bool, float | None, float | None] | None = None

    def resume_from(
        self,
        total: float,
        raw: float | None,
        same_boot: bool = False,
        read_at: float | None = None,
        power: float | None = None,
    ) -> None:
        """Continue from an earlier run's ``total``, computed up to the raw counter ``raw``, read at
        Unix time ``read_at`` while the device drew ``power`` watts.

        A counter that ran on across the gap measured it: at or above ``raw`` on the same boot (or
        with the boot unknown), or below it on the same boot with a known wrap range (a wrap; more
        than one cannot be told from one). What it adds is at most the ceiling (the device's power
        limit) times the time since ``read_at``. A counter that restarted meanwhile (``raw`` None
        after a reboot, else lower without a wrap: a driver reload) counted only since then, and
        its reading is no measure of the gap: it adds at most the gap's estimate from the power on
        both sides of it (``power`` and the first reading's; the one known, where the other is
        not), and nothing where neither is known. Beyond either bound is dropped
        (:attr:`dropped_joules`), never the power limit times the gap. A ``read_at`` in the future
        (the wall clock stepped back) takes the time since boot instead, logged.
        """
        self.resumed = (total, raw, same_boot, read_at, power)

    @property
    def dropped_joules(self) -> float:
        """Energy a reset or restored counter claimed beyond the ceiling, left out of the total."""
        return self.counter.dropped if self.counter is not None else 0.0

    def snapshot(self, wall_offset: float = 0.0) -> dict[str, float | None]:
        """What a restart needs: the total, the raw counter it was computed from, when that was
        read (``last_time`` plus ``wall_offset``: Unix time when ``last_time`` is monotonic) and the
        power then (W), one side of the gap a restart leaves."""
        at = self.last_time + wall_offset if self.last_time is not None else None
        if self.counter is not None:
            total, raw = self.counter.total, self.counter.previous
        else:
            total, raw = self.integrated, None
        return {"total": total, "raw": raw, "at": at, "power": self.last_power}

    def update(
        self,
        now: float,
        power: float | None,
        energy: float | None,
        wrap_range: float | None = None,
        limit_watts: float | None = None,
    ) -> tuple[float | None, float | None]:
        """Return (power in W, monotonic energy in J) for this reading. ``limit_watts``: the
        device's power limit, the most a reset or restored counter may add per second
        (``MAX_PLAUSIBLE_WATTS`` without one)."""
        dt = now - self.last_time if self.last_time is not None else None
        if energy is not None:
            ceiling = limit_watts or MAX_PLAUSIBLE_WATTS
            if self.counter is None:
                self.counter = MonotonicCounter(wrap_range=wrap_range)
                if self.resumed is not None:  # continue an earlier run's total
                    self.counter.rebase(energy, self._resumed_total(energy, power, wrap_range, ceiling))
                    self.resumed = None
                elif self.integrated is not None:  # the counter appeared late: continue, don't jump
                    self.counter.rebase(energy, self.integrated)
            first = self.counter.previous is None
            delta = self.counter.update(energy, dt, ceiling)
            if power is None and not first and dt:
                power = delta / dt
            self.last_power, self.last_time = power, now
            self.bridge, self.bridge_from = 0.0, (now, power) if power is not None else None
            return power, self._publish(self.counter.total)
        if self.counter is not None:
            # Between two reads of the counter (or it is unreadable now): the bridge advances the total.
            return power, self._publish(self.counter.total + self._bridged(now, power))
        if power is None:
            self.last_power, self.last_time = None, None
            return None, self.integrated
        if self.integrated is None:
            self.integrated = self.resumed[0] if self.resumed is not None else 0.0
            self.resumed = None
        elif self.last_power is not None and dt:
            self.integrated += (self.last_power + power) / 2 * dt
        self.last_power, self.last_time = power, now
        return power, self.integrated

    def _bridged(self, now: float, power: float | None) -> float:
        """The joules the power drew since the counter's last read, as far as the counter can know them:
        each interval at the lower of its two readings (a reading is the power as of the driver's last
        refresh, so a step between two of them is not known to be earlier), and :data:`BRIDGE_LAG_S` of
        the higher one short of now. The next read of the counter then finds itself at or above it."""
        start = self.bridge_from
        if power is None:
            self.bridge_from = None  # nothing to integrate from: the bridge waits for the next power
            return self.bridge
        higher = power
        if start is not None and now > start[0]:
            self.bridge += min(start[1], power) * (now - start[0])
            higher = max(start[1], power)
        self.bridge_from = (now, power)
        return max(0.0, self.bridge - higher * BRIDGE_LAG_S)

    def _publish(self, total: float | None) -> float | None:
        """``total``, or the last one handed out where that was higher (the bridge ran ahead)."""
        published = self.published
        if total is not None and (published is None or total > published):
            self.published = published = total
        return published

    def _resumed_total(
        self, energy: float, power: float | None, wrap_range: float | None, ceiling: float
    ) -> float:
        """The resumed total at the first reading (``energy`` J, ``power`` W) after the gap."""
        assert self.resumed is not None and self.counter is not None
        total, raw, same_boot, read_at, power_before = self.resumed
        since = time.time() - read_at if read_at is not None else None
        if since is not None and since < 0:  # the wall clock stepped back since that reading
            behind, since = -since, uptime()
            log.warning(
                "energy_restore_clock_behind", behind_s=round(behind, 3), bounded_by_s=round(since, 3)
            )
        if raw is not None and energy >= raw:  # it ran on: the difference is the gap's energy
            return total + self.counter.bounded(energy - raw, ceiling, since)
        if raw is not None and same_boot and wrap_range:  # it wrapped while the daemon was down
            self.counter.wraps += 1
            return total + self.counter.bounded((wrap_range - raw) + energy, ceiling, since)
        # It restarted (a reboot; a reset, or the boot unknown): the gap's power as measured around it.
        measured = [watts for watts in (power_before, power) if watts is not None]
        estimate = min(sum(measured) / len(measured), ceiling) if measured else 0.0
        return total + self.counter.bounded(energy, estimate, since if since is not None else 0.0)

    def gap(self) -> None:
        """The device or domain was not read this time: integrate nothing across the hole.

        A counter's next delta is energy really used meanwhile: only its bridge stops (until the next
        power reading), keeping what it integrated before the hole.
        """
        if self.counter is None:
            self.last_power, self.last_time = None, None
        self.bridge_from = None


def uptime() -> float:
    """Seconds since boot: no counter of this boot, nor one reset since, has counted longer."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):  # not Linux
        return time.monotonic()


@dataclass(slots=True)
class ThrottleTracker:
    """Seconds spent in one throttle reason: the hardware violation counter, else sampled time."""

    counter: MonotonicCounter | None = None
    accumulated: float = 0.0
    last_time: float | None = None

    def update(self, now: float, active: bool, counter_seconds: float | None) -> float:
        """Return the monotonic seconds total for this reading."""
        dt = now - self.last_time if self.last_time is not None else 0.0
        self.last_time = now
        if counter_seconds is not None:
            if self.counter is None:
                self.counter = MonotonicCounter()
            self.counter.update(counter_seconds)
            return self.counter.total or 0.0
        if self.counter is not None:  # the counter failed this once: hold its total
            return self.counter.total or 0.0
        if active:
            self.accumulated += dt
        return self.accumulated


class ThrottleSeconds:
    """Seconds in each throttle reason of one device. A reading with no reason active and its
    counters as last read changes no total: the last totals are kept, not recomputed (the common
    case, each sample); the trackers catch up on its time at the next reading that does change."""

    __slots__ = ("_last", "_skipped_at", "trackers")

    def __init__(self) -> None:
        self.trackers: dict[str, ThrottleTracker] = {}
        self._last: tuple[dict[str, bool], dict[str, float], dict[str, float]] | None = None
        self._skipped_at: float | None = None

    def update(self, now: float, active: dict[str, bool], counted: dict[str, float]) -> dict[str, float]:
        """The monotonic seconds total of each reason of this reading (by the device's reasons)."""
        last = self._last
        if last is not None and True not in active.values() and last[0] == active and last[1] == counted:
            self._skipped_at = now
            return last[2]
        trackers = self.trackers
        if self._skipped_at is not None and last is not None:
            # The readings kept were read too: the time of each reason they had runs from the last.
            for reason in last[0].keys() | last[1].keys():
                trackers[reason].last_time = self._skipped_at
            self._skipped_at = None
        seconds = {}
        for reason in active.keys() | counted.keys():
            tracker = trackers.get(reason)
            if tracker is None:
                tracker = trackers[reason] = ThrottleTracker()
            seconds[reason] = tracker.update(now, active.get(reason, False), counted.get(reason))
        self._last = (active, counted, seconds)
        return seconds


class CounterTotals:
    """A device's further hardware counters (by metric, then by the values of its own labels) made
    monotonic: a decrease is a reset (driver reload). Health counters mostly stand still: a reading's
    counters, or a metric's values, as last time keep last time's totals (one C-level comparison).
    The catalog's sums (a GPU's NVLink totals) add up each instance's total, the last one kept for an
    instance this reading lacks, so that a link missing from one read does not take the sum down."""

    __slots__ = ("_last", "_last_by_metric", "_series")

    def __init__(self) -> None:
        self._series: dict[str, dict[tuple[str, ...], MonotonicCounter]] = {}
        #: metric -> the raw values last read and the totals they gave
        self._last_by_metric: dict[str, tuple[LabelledValues, LabelledValues]] = {}
        #: the last reading's raw counters and the totals they gave
        self._last: tuple[dict[str, LabelledValues], dict[str, LabelledValues]] | None = None

    def update(self, counters: dict[str, LabelledValues]) -> dict[str, LabelledValues]:
        """The monotonic totals of one reading's raw ``counters``, keyed the same way."""
        last = self._last
        if last is not None and last[0] == counters:
            return last[1]
        totals: dict[str, LabelledValues] = {}
        for metric, values in counters.items():
            last_metric = self._last_by_metric.get(metric)
            if last_metric is not None and last_metric[0] == values:
                totals[metric] = last_metric[1]
                continue
            series = self._series.setdefault(metric, {})
            totals[metric] = metric_totals = {}
            for labels, raw in values.items():
                counter = series.get(labels)
                if counter is None:
                    counter = series[labels] = MonotonicCounter()
                counter.update(raw)
                metric_totals[labels] = counter.total or 0.0
            self._last_by_metric[metric] = (values, metric_totals)
        for total in SUMS:
            of = total.of.name
            if of in totals:
                last_sum = self._last_by_metric.get(total.total.name)
                if last_sum is None or last_sum[0] is not totals[of]:
                    kept = {labels: counter.total or 0.0 for labels, counter in self._series[of].items()}
                    last_sum = self._last_by_metric[total.total.name] = (totals[of], total.series(kept))
                totals[total.total.name] = last_sum[1]
        self._last = (counters, totals)
        return totals

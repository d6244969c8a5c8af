"""Turn raw hardware counters, which wrap and reset, into monotonic totals."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import structlog

from warptd.metrics.catalog import SUMS
from warptd.models import DriverInstance, LabelledValues
from warptd.sampling.power_integral import PowerIntegral
from warptd.sampling.restart import Resumed

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


#: Of the estimate's growth, the share that goes to absorb what a total ran ahead of its counter.
ABSORB = 0.5


@dataclass(slots=True)
class Reconciled:
    """A total handed out from an estimate that an exact counter corrects at its reads, never going
    down. Where the estimate is at or above the total, the total is the estimate (behind the counter
    at a read, it steps up to it); where it is below (the total ran ahead of the counter), the total
    goes on at ``1 - ABSORB`` of the estimate's growth, never stopping, and meets it once the
    estimate has grown by the excess over :data:`ABSORB`."""

    value: float | None = None
    target: float | None = None  #: the estimate last given

    def to(self, target: float) -> float:
        """The total once the estimate is ``target``."""
        value, last = self.value, self.target
        self.target = target
        if value is None or target >= value:
            self.value = value = target
        elif last is not None and target > last:
            self.value = value = value + (target - last) * (1.0 - ABSORB)
        return value


@dataclass(slots=True)
class _Anchor:
    """Where the estimate is counted from: the total there, and the power's estimate then."""

    total: float
    at: float | None  #: monotonic time (None: the integral restarted, its next reading anchors)
    estimate: float = 0.0  #: the integral's F then
    power: float | None = None  #: the instant power then (W)
    counted: bool = False  #: the total is the counter's own, read then (not a reset's, nor held)


@dataclass(slots=True)
class EnergyTracker:
    """Energy of one device or domain: from its counter where it has one, else integrated power.

    Power is derived from the counter delta when the hardware reports energy only (RAPL, i915).
    A gap in readings (:meth:`gap`) is never integrated across: the next reading starts anew.

    Where the counter is read less often than the power (its own cadence: NVML's costs 2.9 ms of CPU),
    a reading without it adds the energy the power drew since the counter's last read
    (:class:`PowerIntegral`: the driver's average tiles, the instant power where it has none). The
    counter's next read anchors it again, and the total handed out follows :class:`Reconciled`: never
    down, up to the counter where behind it, slowed where ahead.
    """

    counter: MonotonicCounter | None = None
    integrated: float | None = None
    last_power: float | None = None
    last_time: float | None = None  # of the last reading (integrated) or of the counter's last read
    #: The monotonic time of the counter's last read (None: never read).
    counter_read_at: float | None = None
    power: PowerIntegral = field(default_factory=PowerIntegral)
    anchor: _Anchor | None = None
    published: Reconciled = field(default_factory=Reconciled)
    #: A total saved by an earlier run of the daemon, not yet applied (at the first reading).
    resumed: Resumed | None = None
    #: The most a reset or restored counter may add per second (W): the device's power limit.
    ceiling: float = MAX_PLAUSIBLE_WATTS
    #: The most this run told the state file it would hand out before its next save (J).
    promise: float | None = None
    #: Joules added at a restart after the counter restarted (a driver reload, a reboot), so that the
    #: total is not below what the run before may have handed out after its last save.
    overcount: float = 0.0
    #: The driver's current initialisation of the device, where its backend tells it.
    driver: DriverInstance | None = None

    def resume_from(self, resumed: Resumed) -> None:
        """Continue from an earlier run's total, applied at the first reading (:meth:`Resumed.continued`):
        nothing handed out goes back, and what a restarted counter adds is counted in :attr:`overcount`."""
        self.resumed = resumed

    @property
    def dropped_joules(self) -> float:
        """Energy a reset or restored counter claimed beyond the ceiling, left out of the total."""
        return self.counter.dropped if self.counter is not None else 0.0

    @property
    def total(self) -> float | None:
        """The total handed out last (J)."""
        return self.published.value if self.counter is not None else self.integrated

    def snapshot(self, wall_offset: float = 0.0) -> dict[str, float | str | None]:
        """What a restart needs: the total, the raw counter it was computed from, when that was read
        (``last_time`` plus ``wall_offset``: Unix time when ``last_time`` is monotonic), the power then
        (W), one side of the gap a restart leaves, and the total handed out."""
        at = self.last_time + wall_offset if self.last_time is not None else None
        if self.counter is not None:
            total, raw = self.counter.total, self.counter.previous
        else:
            total, raw = self.integrated, None
        driver = self.driver or DriverInstance()
        return {
            "total": total,
            "raw": raw,
            "at": at,
            "power": self.last_power,
            "published": self.total,
            "driver_up_since": driver.up_since,
            "driver_sysfs": driver.sysfs,
        }

    def next_promise(self, seconds: float) -> float | None:
        """The most to hand out before the next save, ``seconds`` on: the total now plus that long at
        the ceiling (J); kept as :attr:`promise` once the state file holds it."""
        total = self.total
        return None if total is None else total + self.ceiling * seconds

    @property
    def over_promise(self) -> bool:
        """Whether the total reached its promise: the state file must take a new one first."""
        total, promise = self.total, self.promise
        return promise is not None and total is not None and total >= promise

    def _kept(self, total: float | None) -> float | None:
        """``total``, at most the promise the state file holds (the next save lifts it)."""
        promise = self.promise
        if promise is None or total is None or total <= promise:
            return total
        if self.counter is not None:
            self.published.value = promise
        return promise

    def update(
        self,
        now: float,
        power: float | None,
        energy: float | None,
        wrap_range: float | None = None,
        limit_watts: float | None = None,
        *,
        average: float | None = None,
    ) -> tuple[float | None, float | None]:
        """Return (power in W, monotonic energy in J) for this reading: ``power`` the instant power,
        ``average`` the driver's own over :data:`AVERAGE_WINDOW_S` (None: it has none), ``energy`` the
        counter where this reading read it. ``limit_watts``: the device's power limit, the most a reset
        or restored counter may add per second (``MAX_PLAUSIBLE_WATTS`` without one)."""
        estimate = self.power.add(now, power, average)
        ceiling = self.ceiling = limit_watts or MAX_PLAUSIBLE_WATTS
        if energy is not None:
            return self._counted(now, power, energy, estimate, wrap_range=wrap_range, ceiling=ceiling)
        if self.counter is not None:
            # Between two reads of the counter (or it is unreadable now): the power's estimate since.
            return power, self._kept(self.published.to(self._bridged(now, estimate)))
        if estimate is None:  # no power: a gap, nothing integrated across it
            self.gap()
            return None, self.integrated
        if self.integrated is None:
            resumed = self.resumed
            self.integrated = 0.0 if resumed is None else max(resumed.total, resumed.published or 0.0)
            self.resumed = None
            self.anchor = _Anchor(self.integrated, now, estimate, power)
        else:
            self.integrated = self._kept(self._bridged(now, estimate))
        self.last_power, self.last_time = power, now
        return power, self.integrated

    def _counted(
        self,
        now: float,
        power: float | None,
        energy: float,
        estimate: float | None,
        *,
        wrap_range: float | None,
        ceiling: float,
    ) -> tuple[float | None, float | None]:
        """A reading with the counter: its total, made monotonic, anchors the estimate again."""
        dt = now - self.last_time if self.last_time is not None else None
        if self.counter is None:
            self.counter = MonotonicCounter(wrap_range=wrap_range)
            if self.resumed is not None:  # continue an earlier run's total
                self.counter.rebase(energy, self._resumed_total(energy, power, wrap_range, ceiling))
            elif self.integrated is not None:  # the counter appeared late: continue, don't jump
                self.counter.rebase(energy, self.integrated)
        first, resets = self.counter.previous is None, self.counter.resets
        delta = self.counter.update(energy, dt, ceiling)
        if self.counter.resets != resets and self.anchor is not None:
            self.anchor.counted = False  # a reset between: no measure of the tiles
        if power is None and not first and dt:
            power = delta / dt
        self.last_power, self.last_time, self.counter_read_at = power, now, now
        total = self.counter.total or 0.0
        self._learn_lag(total, estimate, power)
        at = now if estimate is not None else None  # without a power now, the next one anchors
        self.anchor = _Anchor(
            total, at, estimate or 0.0, power if estimate is not None else None, counted=True
        )
        if self.resumed is not None:  # nothing the earlier run handed out goes back
            self.published.value, self.resumed = max(total, self.resumed.published or 0.0), None
        return power, self._kept(self.published.to(total))

    def _learn_lag(self, total: float, estimate: float | None, power: float | None) -> None:
        """What the counter found since its last read beyond the tiles (their energy since then, all of
        it tiled: none from the first window's trapezoid, no reset between), against the instant power's
        change since: the average's lag by the counter's own measure (:class:`AverageLag`)."""
        anchor, tiled_from = self.anchor, self.power.tiled_from
        if (
            anchor is None
            or anchor.at is None
            or not anchor.counted
            or tiled_from is None
            or anchor.at < tiled_from
            or estimate is None
            or power is None
            or anchor.power is None
        ):
            return
        self.power.lag.learn((total - anchor.total) - (estimate - anchor.estimate), power - anchor.power)

    def _bridged(self, now: float, estimate: float | None) -> float:
        """The anchor's total plus the energy the power drew since; held where this reading has no
        power (the next one anchors anew: nothing is integrated across the hole)."""
        anchor = self.anchor
        assert anchor is not None
        if estimate is None:
            self._hold()
            return self.anchor.total  # type: ignore[union-attr]
        if anchor.at is None:  # the first power after a hole: counted from here
            self.anchor = _Anchor(anchor.total, now, estimate, self.power.last_instant)
            return anchor.total
        return anchor.total + estimate - anchor.estimate + self.power.tail(anchor.power)

    def _hold(self) -> None:
        """Nothing integrated from here until the next reading with a power, which anchors anew."""
        self.power.restart()
        anchor = self.anchor
        if anchor is not None and anchor.at is not None:
            held = self.published.target if self.counter is not None else self.integrated
            self.anchor = _Anchor(held if held is not None else anchor.total, None)

    def _resumed_total(
        self, energy: float, power: float | None, wrap_range: float | None, ceiling: float
    ) -> float:
        """The resumed total at the first reading (``energy`` J, ``power`` W) after the gap, whose length
        a reading time in the future (the wall clock stepped back) takes from the boot instead."""
        resumed, counter = self.resumed, self.counter
        assert resumed is not None and counter is not None
        since = time.time() - resumed.read_at if resumed.read_at is not None else None
        if since is not None and since < 0:  # the wall clock stepped back since that reading
            behind, since = -since, uptime()
            log.warning(
                "energy_restore_clock_behind", behind_s=round(behind, 3), bounded_by_s=round(since, 3)
            )
        total, overcount = resumed.continued(
            counter, energy, power, wrap_range=wrap_range, ceiling=ceiling, since=since, driver=self.driver
        )
        self.overcount += overcount
        return total

    def gap(self) -> None:
        """The device or domain was not read this time: integrate nothing across the hole.

        A counter's next delta is energy really used meanwhile: only its bridge stops (until the next
        power reading), keeping what it integrated before the hole.
        """
        self._hold()
        if self.counter is None:
            self.last_power, self.last_time = None, None


def uptime() -> float:
    """Seconds since boot: no counter of this boot, nor one reset since, has counted longer."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):  # not Linux
        return time.monotonic()


@dataclass(slots=True)
class ThrottleTracker:
    """Seconds spent in one throttle reason: the hardware counter where one is read (at its own
    cadence), bridged between two reads by the time the reason was seen active since the last one
    (:class:`Reconciled`: never down, up to the counter at each read); else the sampled time alone."""

    counter: MonotonicCounter | None = None
    accumulated: float = 0.0  #: seconds seen active, each reading's interval counted where it is
    last_time: float | None = None
    #: The counter's total at its last read and ``accumulated`` then.
    anchor: tuple[float, float] | None = None
    published: Reconciled = field(default_factory=Reconciled)

    def update(self, now: float, active: bool, counter_seconds: float | None) -> float:
        """Return the monotonic seconds total for this reading."""
        dt = now - self.last_time if self.last_time is not None else 0.0
        self.last_time = now
        if active:
            self.accumulated += dt
        if counter_seconds is not None:
            if self.counter is None:
                self.counter = MonotonicCounter()
            self.counter.update(counter_seconds)
            self.anchor = (self.counter.total or 0.0, self.accumulated)
            return self.published.to(self.anchor[0])
        if self.anchor is not None:  # between two reads of the counter
            total, accumulated = self.anchor
            return self.published.to(total + self.accumulated - accumulated)
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

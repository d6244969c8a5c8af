"""A recording's targets, each with its running summary and bounded series (series.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from warptd.models import DeviceKind
from warptd.power.base import DomainPower
from warptd.recording.aggregates import ActivitySums, Mean, Span, Trapezoid
from warptd.recording.anchors import CounterAnchors
from warptd.recording.digest import SampleDigest
from warptd.recording.schema import EnergySource, Point, TargetKind, TargetRecording
from warptd.recording.series import NAN, SeriesStore, layout_of

#: The extra value a workload's rows keep after the readings: its share of the target's energy so far.
ATTRIBUTED = ("attributed_energy_joules",)
ATTRIBUTED_ONLY = layout_of((), (), ATTRIBUTED)


@dataclass(frozen=True, slots=True)
class Target:
    """A device (``nvidia:0``: backend and index) or a power domain (``rapl:package-0``)."""

    kind: TargetKind
    backend: str
    key: str  # the device index as text, or the domain name
    source: str | None = None  # a domain's power source (its id's prefix)
    model: str | None = None
    uuid: str | None = None
    device_kind: DeviceKind | None = None  # a device's: accelerator or cpu

    @property
    def id(self) -> str:
        return f"{self.source or self.backend}:{self.key}"


@dataclass(frozen=True, slots=True)
class Baseline:
    """A target's sample from before it was added (a workload's device: the sample the split's first
    delta for it started from): its energy and power count as the start of the target's own."""

    at: float
    energy_joules: float | None
    power_watts: float | None
    #: The counter's own total where that sample read it (:attr:`DeviceSample.energy_counted_joules`).
    counted_joules: float | None = None


@dataclass
class TargetState:
    """Running summary and bounded series of one target of a recording."""

    target: Target
    samples: int = 0
    up: bool = True
    last_at: float | None = None
    counter_seen: bool = False
    power: Mean = field(default_factory=Mean)
    temperature: Mean = field(default_factory=Mean)
    utilization: Mean = field(default_factory=Mean)
    activity: ActivitySums = field(default_factory=ActivitySums)
    energy: Span = field(default_factory=Span)
    #: The counter's own totals at its reads against the total handed out then (which may have run
    #: ahead of it): the energy from the counter's first read to its last is its own.
    anchors: CounterAnchors = field(default_factory=CounterAnchors)
    integrated: Trapezoid = field(default_factory=Trapezoid)
    throttle_first: dict[str, float] = field(default_factory=dict)  # seconds throttled, per reason
    throttle_last: dict[str, float] = field(default_factory=dict)
    throttle_seen: set[str] = field(default_factory=set)
    series: SeriesStore = field(default_factory=SeriesStore)
    attributed: float | None = None  # a workload's share of the target's energy so far (workloads only)
    #: Its energy span, its integral, start at a Baseline's energy, power (each counts as a reading).
    based: tuple[bool, bool] = (False, False)
    first_power: tuple[float, float] | None = None  # (at, W) of the first sample with a power reading
    last_power: tuple[float, float] | None = None

    def edge_joules(self, start: float, end: float) -> float:
        """Energy between the recording's edges and its first and last samples, at their power
        (not after a device was lost)."""
        joules = 0.0
        if self.first_power is not None:
            joules += self.first_power[1] * max(0.0, self.first_power[0] - start)
        if self.last_power is not None and self.up:
            joules += self.last_power[1] * max(0.0, end - self.last_power[0])
        return joules

    def seed(self, baseline: Baseline) -> None:
        """Start the energy span and the integral at ``baseline`` (no point, no sample counted)."""
        self.energy.add(baseline.energy_joules)
        if baseline.energy_joules is not None:  # the span starts there, read or bridged
            start = baseline.counted_joules if baseline.counted_joules is not None else baseline.energy_joules
            self.anchors.add(0.0, start)
        self.integrated.add(baseline.at, baseline.power_watts)
        self.last_at = baseline.at
        self.based = (baseline.energy_joules is not None, baseline.power_watts is not None)

    def add_device(
        self, seen: SampleDigest, at: float, offset: float, max_points: int, attributed: float | None
    ) -> None:
        """Count a device sample read at ``at``, ``offset`` s into the recording (its point kept on the
        series' stride); ``attributed``: a workload's share of its energy so far, kept beside it."""
        handed = self._count(at, seen.power, seen.energy)
        self.counter_seen |= seen.counter
        if seen.counted is not None and handed is not None:
            self.anchors.add(handed, seen.counted)
        self.temperature.add(seen.hottest)
        self.utilization.add(seen.compute)
        self.activity.add(seen.layout, seen.activity)
        throttle = seen.throttle_seconds
        if not throttle.keys() <= self.throttle_first.keys():
            for reason, seconds in throttle.items():
                self.throttle_first.setdefault(reason, seconds)
        self.throttle_last.update(throttle)
        self.throttle_seen.update(seen.active)
        row = (offset, _nan(seen.power), _nan(handed), _nan(seen.hottest), _nan(seen.compute))
        layout, keyed = seen.layout, seen.keyed
        if attributed is not None:
            layout = layout_of(layout.clocks, layout.activity, ATTRIBUTED)
            keyed = (*keyed, attributed)
        self.series.append(row, max_points, layout, keyed, seen.active)

    def add_domain(
        self, domain: DomainPower, at: float, offset: float, max_points: int, attributed: float | None
    ) -> None:
        """Count a power domain sample, as :meth:`add_device` a device's: domains are energy counters
        (RAPL) or their sampler's totals."""
        handed = self._count(at, domain.power_watts, domain.energy_joules)
        self.counter_seen = True
        row = (offset, _nan(domain.power_watts), _nan(handed), NAN, NAN)
        if attributed is None:
            self.series.append(row, max_points)
        else:
            self.series.append(row, max_points, ATTRIBUTED_ONLY, (attributed,))

    def _count(self, at: float, watts: float | None, energy: float | None) -> float | None:
        """A reading counted: its power into the mean, the peak and the integral, its energy into the
        span; the energy since the span began."""
        self.up = True
        self.samples += 1
        if watts is not None:
            self.first_power = self.first_power or (at, watts)
            self.last_power = (at, watts)
        self.power.add(watts)
        self.integrated.add(at, watts)
        self.energy.add(energy)
        return self.energy.delta

    def lost(self, at: float) -> None:
        """A sample saying the target is gone: it is down, and no power is integrated across."""
        self.up = False
        self.integrated.add(at, None)

    def points(self) -> list[Point]:
        """The kept points, their energy the counter's own at each of its reads (the total handed out
        may have run ahead of it: see :class:`CounterAnchors`)."""
        points = self.series.points()
        if self.anchors.covers(self.energy.delta or 0.0):
            for point in points:
                if point.energy_joules is not None:
                    point.energy_joules = self.anchors.counted(point.energy_joules)
        return points

    def spans(self, energy: bool) -> bool:
        """Two readings or more of the energy (else of the power), a baseline's included: a figure to
        give over time."""
        return self.samples + self.based[0 if energy else 1] >= 2

    def accept(self, at: float) -> bool:
        """Only samples newer than the last one count (a fast and a normal read may cross)."""
        if self.last_at is not None and at <= self.last_at:
            return False
        self.last_at = at
        return True

    def summary(self, span: tuple[float, float] | None, points: bool = True) -> TargetRecording:
        """The target's part of the recording: its energy from the counter where it was read, else the
        power's integral (over ``span``, the recording's edges, where they were read), and the rest."""
        target = self.target
        counted = self.energy.delta if self.spans(energy=True) and self.counter_seen else None
        if counted is not None and self.anchors.covers(counted):
            # From the counter's first read to its last its own totals (the edges' reads), and on from
            # there as the total handed out grew.
            counted = self.anchors.counted(counted)
        integrated = self.integrated.joules if self.spans(energy=False) else None
        estimated = None
        if span is not None:
            # The counter is read at the recording's edges (windows, profiles): its delta is the energy.
            # The power's integral is extended over the few ms to the first and last samples.
            edge = self.edge_joules(*span)
            integrated = None if integrated is None else integrated + edge
            if self.samples == 1 and self.first_power is not None:
                estimated = edge  # one reading: its power over the whole span (up to a loss)
        energy, source = _first_energy(
            (counted, "counter"), (integrated, "integrated"), (estimated, "power_times_duration")
        )
        disagreement = None
        if counted and integrated is not None:
            disagreement = round(abs(counted - integrated) / counted, 6)
        first, last = self.throttle_first, self.throttle_last
        throttle = {r: round(last[r] - first[r], 6) for r in last if last[r] - first[r]}
        for reason in self.throttle_seen:
            throttle.setdefault(reason, 0.0)
        return TargetRecording(
            id=target.id,
            kind=target.kind,
            device_kind=target.device_kind,
            backend=target.backend,
            model=target.model,
            uuid=target.uuid,
            samples=self.samples,
            up=self.up,
            energy_joules=energy,
            energy_source=source,
            energy_counter_joules=counted,
            energy_integrated_joules=integrated,
            energy_disagreement_ratio=disagreement,
            power_mean_watts=self.power.mean,
            power_peak_watts=self.power.peak,
            temperature_peak_celsius=self.temperature.peak,
            utilization_mean_ratio=self.utilization.mean,
            activity_mean=self.activity.means(),
            throttle_seconds=dict(sorted(throttle.items())),
            attributed_energy_joules=self.attributed,
            points=self.points() if points else [],
        )


def _nan(value: float | None) -> float:
    return NAN if value is None else value


def _first_energy(*candidates: tuple[float | None, EnergySource]) -> tuple[float | None, EnergySource | None]:
    """The first energy figure there is, with its source, in the order of preference given."""
    return next(((joules, source) for joules, source in candidates if joules is not None), (None, None))

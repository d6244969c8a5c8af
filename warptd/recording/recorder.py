"""Build a :class:`Recording` from the samplers' own samples, as a sampler listener.

Summaries are running aggregates, exact for the whole recording however long; the time series is
bounded: past ``max_points`` per target every other point is dropped and the stride doubles, so a
long recording keeps an even, coarser series.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

from warptd.models import DeviceKind, DeviceReading
from warptd.power.base import DomainPower
from warptd.recording.schema import (
    EnergySource,
    Point,
    Recording,
    RecordingKind,
    TargetKind,
    TargetRecording,
)
from warptd.sampling.snapshot import DeviceSample

#: Points kept per target before the series is thinned (summaries stay exact).
MAX_POINTS = 2048
#: The most points one recording keeps over all its targets: a window on 8 GPUs keeps 512 per GPU.
MAX_RECORDING_POINTS = 4096
JOULES_PER_KWH = 3.6e6


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


@dataclass(slots=True)
class _Mean:
    """Mean and peak of a stream of values; None values are not counted."""

    count: int = 0
    total: float = 0.0
    peak: float | None = None

    def add(self, value: float | None) -> None:
        if value is None:
            return
        self.count += 1
        self.total += value
        self.peak = value if self.peak is None else max(self.peak, value)

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


@dataclass(slots=True)
class _Span:
    """First and last value of a monotonic total (energy, throttle seconds)."""

    first: float | None = None
    last: float | None = None

    def add(self, value: float | None) -> None:
        if value is not None:
            self.first = value if self.first is None else self.first
            self.last = value

    @property
    def delta(self) -> float | None:
        return None if self.first is None or self.last is None else self.last - self.first


@dataclass(slots=True)
class _Trapezoid:
    """Integral of power over the sample times; a missing reading breaks it (nothing across gaps)."""

    joules: float | None = None
    last: tuple[float, float] | None = None

    def add(self, at: float, watts: float | None) -> None:
        if watts is None:
            self.last = None
            return
        if self.joules is None:
            self.joules = 0.0
        if self.last is not None and at > self.last[0]:
            self.joules += (self.last[1] + watts) / 2 * (at - self.last[0])
        self.last = (at, watts)


#: Activity ratio gauges a backend may export (``warptd_device_<name>_ratio``), by their short name.
ACTIVITY_METRICS = (
    "sm_active",
    "sm_occupancy",
    "dram_bandwidth",
    "pipe_active",
    "engine_active",
    "encoder_utilization",
    "decoder_utilization",
)


def activity_ratios(reading: DeviceReading) -> dict[str, float]:
    """The activity ratios in a reading's gauges (NVIDIA GPM and the like): ``sm_active``, and one
    per label value for labelled ones (``pipe_active_tensor``)."""
    gauges = reading.gauges
    ratios: dict[str, float] = {}
    for short in ACTIVITY_METRICS:
        for labels, value in gauges.get(f"warptd_device_{short}_ratio", {}).items():
            if value is not None:
                ratios[sys.intern("_".join((short, *labels)))] = float(value)  # one string per key
    return ratios


@dataclass
class _TargetState:
    """Running summary and bounded series of one target."""

    target: Target
    samples: int = 0
    up: bool = True
    last_at: float | None = None
    counter_seen: bool = False
    power: _Mean = field(default_factory=_Mean)
    temperature: _Mean = field(default_factory=_Mean)
    utilization: _Mean = field(default_factory=_Mean)
    activity: dict[str, _Mean] = field(default_factory=dict)
    energy: _Span = field(default_factory=_Span)
    integrated: _Trapezoid = field(default_factory=_Trapezoid)
    throttle: dict[str, _Span] = field(default_factory=dict)
    throttle_seen: set[str] = field(default_factory=set)
    points: list[Point] = field(default_factory=list)
    stride: int = 1
    first_power: tuple[float, float] | None = None  # (at, W) of the first sample with a power reading
    last_power: tuple[float, float] | None = None

    def note_power(self, at: float, watts: float | None) -> None:
        if watts is not None:
            self.first_power = self.first_power or (at, watts)
            self.last_power = (at, watts)

    def edge_joules(self, start: float, end: float) -> float:
        """Energy between the recording's edges and its first and last samples, at their power
        (not after a device was lost)."""
        joules = 0.0
        if self.first_power is not None:
            joules += self.first_power[1] * max(0.0, self.first_power[0] - start)
        if self.last_power is not None and self.up:
            joules += self.last_power[1] * max(0.0, end - self.last_power[0])
        return joules

    def accept(self, at: float) -> bool:
        """Only samples newer than the last one count (a fast and a normal read may cross)."""
        if self.last_at is not None and at <= self.last_at:
            return False
        self.last_at = at
        return True

    def keep(self, point: Point, max_points: int) -> None:
        """Keep every ``stride``-th sample's point (the first included); past ``max_points``, every
        other kept point goes and the stride doubles, so the series stays evenly spaced."""
        if (self.samples - 1) % self.stride:
            return
        self.points.append(point)
        if len(self.points) > max_points:
            del self.points[1::2]
            self.stride *= 2


class Recorder:
    """Summarises the samples of a set of targets from ``start()`` until ``finish()``.

    Feed it with :meth:`on_sample` as a sampler listener (it ignores other targets). Thread-safe.
    """

    def __init__(
        self,
        targets: list[Target],
        *,
        kind: RecordingKind,
        name: str,
        labels: dict[str, str] | None = None,
        recording_id: str | None = None,
        max_points: int = MAX_POINTS,
        interval_seconds: float | None = None,
        edges: bool = False,
    ) -> None:
        """``edges``: the energy spans the recording's own start and end (windows, profiles), the
        few ms to the first and last samples extrapolated at their power; else only what the
        samples span (a stress run's timed part)."""
        self.kind, self.name, self.labels = kind, name, dict(labels or {})
        self.id = recording_id or uuid.uuid4().hex[:12]
        self.interval_seconds = interval_seconds
        self.targets = list(targets)
        self.max_points = max(64, min(max_points, MAX_RECORDING_POINTS // max(1, len(self.targets))))
        self.edges = edges
        self._states = {(t.kind, t.backend, t.key): _TargetState(t) for t in targets}
        self._lock = threading.Lock()
        self.recording = False
        self.started_at: float | None = None  # unix time
        self.started_mono: float | None = None
        self.ended_at: float | None = None
        self.ended_mono: float | None = None
        self.end_reason: str | None = None
        self.workload: dict[str, float | str | None] = {}

    def add_target(self, target: Target) -> None:
        """Also record ``target`` from now on (a domain first seen after the recording began)."""
        with self._lock:
            if (target.kind, target.backend, target.key) not in self._states:
                self.targets.append(target)
                self._states[(target.kind, target.backend, target.key)] = _TargetState(target)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            self.recording = True
            self.started_at, self.started_mono = time.time(), time.monotonic()

    def stop(self, reason: str = "ended") -> None:
        with self._lock:
            if self.recording:
                self.recording = False
                self.ended_at, self.ended_mono = time.time(), time.monotonic()
                self.end_reason = reason

    # -- feeding ------------------------------------------------------------------------------
    def on_sample(
        self,
        backend: str,
        devices: list[DeviceSample] | None,
        domains: list[DomainPower] | None,
        at: float | None = None,
    ) -> None:
        """Sampler listener: record the samples of this recording's targets."""
        at = time.monotonic() if at is None else at
        for sample in devices or ():
            state = self._states.get(("device", backend, str(sample.reading.index)))
            if state is None:
                continue
            expected, read = state.target.uuid, sample.reading
            if expected and read.uuid and read.uuid != expected:
                # The index names another device now (MIG instances re-listed): this one is gone.
                gone = DeviceSample(DeviceReading(index=read.index, uuid=expected, up=False))
                self.add_device(state.target, gone, at)
            else:
                self.add_device(state.target, sample, at)
        for domain in domains or ():
            state = self._states.get(("domain", backend, domain.domain))
            if state is not None:
                self.add_domain(state.target, domain, at)

    def add_device(self, target: Target, sample: DeviceSample, at: float) -> None:
        reading = sample.reading
        with self._lock:
            state = self._states[(target.kind, target.backend, target.key)]
            if not self.recording or not state.accept(at):
                return
            state.up = reading.up
            if not reading.up:
                state.integrated.add(at, None)
                return
            state.samples += 1
            state.note_power(at, reading.power_watts)
            state.counter_seen |= reading.energy_counter_joules is not None
            state.power.add(reading.power_watts)
            state.integrated.add(at, reading.power_watts)
            state.energy.add(sample.energy_joules)
            hottest = max(reading.temperatures_celsius.values(), default=None)
            state.temperature.add(hottest)
            compute = reading.utilization.compute if reading.utilization else None
            state.utilization.add(compute)
            activity = activity_ratios(reading)
            for key, ratio in activity.items():
                state.activity.setdefault(key, _Mean()).add(ratio)
            for reason, seconds in sample.throttle_seconds.items():
                state.throttle.setdefault(reason, _Span()).add(seconds)
            active = sorted(r for r, on in reading.throttle_active.items() if on)
            state.throttle_seen.update(active)
            point = Point(
                t=self._since_start(at),
                power_watts=reading.power_watts,
                energy_joules=_since(state.energy),
                temperature_celsius=hottest,
                utilization_ratio=compute,
                clocks_hertz=dict(reading.clocks_hertz),
                activity=activity,
                throttle_active=active,
            )
            state.keep(point, self.max_points)

    def add_domain(self, target: Target, domain: DomainPower, at: float) -> None:
        with self._lock:
            state = self._states[(target.kind, target.backend, target.key)]
            if not self.recording or not state.accept(at):
                return
            state.up = domain.readable
            if not domain.readable:
                state.integrated.add(at, None)
                return
            state.samples += 1
            state.note_power(at, domain.power_watts)
            state.power.add(domain.power_watts)
            state.integrated.add(at, domain.power_watts)
            state.energy.add(domain.energy_joules)
            state.counter_seen = True  # domains are energy counters (RAPL) or their sampler totals
            point = Point(
                t=self._since_start(at), power_watts=domain.power_watts, energy_joules=_since(state.energy)
            )
            state.keep(point, self.max_points)

    def _since_start(self, at: float) -> float:
        return round(at - (self.started_mono or at), 6)

    # -- the result ---------------------------------------------------------------------------
    def recording_now(
        self, carbon_intensity: float | None = None, energy_price: float | None = None
    ) -> Recording:
        """The recording so far (``status: open`` while it runs), with carbon and cost where set."""
        with self._lock:
            now_mono = self.ended_mono or time.monotonic()
            span = (self.started_mono, now_mono) if self.edges and self.started_mono is not None else None
            targets = [_summary(state, span) for state in self._states.values()]
            duration = max(0.0, now_mono - (self.started_mono or now_mono))
            recording = Recording(
                kind=self.kind,
                id=self.id,
                name=self.name,
                labels=self.labels,
                status="open" if self.recording or self.started_at is None else "ended",
                end_reason=self.end_reason,
                started_at=self.started_at or time.time(),
                ended_at=self.ended_at,
                duration_seconds=round(duration, 6),
                interval_seconds=self.interval_seconds,
                targets=targets,
                energy_joules=_total_energy(targets),
                workload=dict(self.workload),
            )
        return with_carbon_and_cost(recording, carbon_intensity, energy_price)


def _since(span: _Span) -> float | None:
    return None if span.last is None or span.first is None else span.last - span.first


def _summary(state: _TargetState, span: tuple[float, float] | None) -> TargetRecording:
    target = state.target
    counted = state.energy.delta if state.samples >= 2 and state.counter_seen else None
    integrated = state.integrated.joules if state.samples >= 2 else None
    estimated = None
    if span is not None:
        edge = state.edge_joules(*span)
        counted = None if counted is None else counted + edge
        integrated = None if integrated is None else integrated + edge
        if state.samples == 1 and state.first_power is not None:
            estimated = edge  # one reading: its power over the whole span (up to a loss)
    energy, source = _first_energy(
        (counted, "counter"), (integrated, "integrated"), (estimated, "power_times_duration")
    )
    disagreement = None
    if counted and integrated is not None:
        disagreement = round(abs(counted - integrated) / counted, 6)
    throttle = {r: round(s.delta or 0.0, 6) for r, s in state.throttle.items() if s.delta}
    for reason in state.throttle_seen:
        throttle.setdefault(reason, 0.0)
    return TargetRecording(
        id=target.id,
        kind=target.kind,
        device_kind=target.device_kind,
        backend=target.backend,
        model=target.model,
        uuid=target.uuid,
        samples=state.samples,
        up=state.up,
        energy_joules=energy,
        energy_source=source,
        energy_counter_joules=counted,
        energy_integrated_joules=integrated,
        energy_disagreement_ratio=disagreement,
        power_mean_watts=state.power.mean,
        power_peak_watts=state.power.peak,
        temperature_peak_celsius=state.temperature.peak,
        utilization_mean_ratio=state.utilization.mean,
        activity_mean={k: m.mean for k, m in sorted(state.activity.items()) if m.mean is not None},
        throttle_seconds=dict(sorted(throttle.items())),
        points=list(state.points),
    )


def _first_energy(*candidates: tuple[float | None, EnergySource]) -> tuple[float | None, EnergySource | None]:
    """The first energy figure there is, with its source, in the order of preference given."""
    return next(((joules, source) for joules, source in candidates if joules is not None), (None, None))


def is_top_level_domain(domain: str) -> bool:
    """CPU packages: they do not nest in one another (psys contains them, core/uncore/dram in them)."""
    return domain.startswith("package-")


def _total_energy(targets: list[TargetRecording]) -> float | None:
    """Devices plus top-level domains; None when none of them has an energy figure."""
    parts = [
        t.energy_joules
        for t in targets
        if t.energy_joules is not None and (t.kind == "device" or is_top_level_domain(t.id.partition(":")[2]))
    ]
    return sum(parts) if parts else None


def with_carbon_and_cost(
    recording: Recording, carbon_intensity: float | None, energy_price: float | None
) -> Recording:
    """Add grams CO2e (``carbon_intensity`` gCO2e/kWh) and cost (``energy_price`` per kWh) where set."""
    if carbon_intensity is None and energy_price is None:
        return recording

    def per_kwh(joules: float | None, factor: float | None) -> float | None:
        return None if joules is None or factor is None else joules / JOULES_PER_KWH * factor

    targets = [
        t.model_copy(
            update={
                "carbon_grams": per_kwh(t.energy_joules, carbon_intensity),
                "cost": per_kwh(t.energy_joules, energy_price),
            }
        )
        for t in recording.targets
    ]
    return recording.model_copy(
        update={
            "targets": targets,
            "carbon_intensity_g_per_kwh": carbon_intensity,
            "energy_price_per_kwh": energy_price,
            "carbon_grams": per_kwh(recording.energy_joules, carbon_intensity),
            "cost": per_kwh(recording.energy_joules, energy_price),
        }
    )

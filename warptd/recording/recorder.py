"""Build a :class:`Recording` from the samplers' own samples, as a sampler listener.

Summaries are running aggregates, exact for the whole recording however long; the time series is
bounded: past ``max_points`` per target every other point is dropped and the stride doubles, so a
long recording keeps an even, coarser series. The series is stored compactly (series.py) and turned
into the schema's points only when a recording is asked for.
"""

from __future__ import annotations

import bisect
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

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
from warptd.recording.series import NAN, Layout, SeriesStore, layout_of
from warptd.sampling.snapshot import DeviceSample

#: Points kept per target before the series is thinned (summaries stay exact).
MAX_POINTS = 2048
#: The most points one recording keeps over all its targets: a window on 8 GPUs keeps 512 per GPU.
MAX_RECORDING_POINTS = 4096
JOULES_PER_KWH = 3.6e6
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


@dataclass(slots=True)
class _ActivitySums:
    """Sums and counts of the activity ratios: while a device's keys stay the same (nearly always)
    a sample is added in one ``map`` over the run's totals; when they change, the run is folded."""

    layout: Layout | None = None
    totals: list[float] = field(default_factory=list)
    count: int = 0
    folded: dict[str, tuple[int, float]] = field(default_factory=dict)  # key -> (count, total)

    def add(self, layout: Layout, ratios: tuple[float, ...]) -> None:
        if layout is not self.layout:
            self.fold()
            self.layout, self.totals, self.count = layout, [0.0] * len(ratios), 0
        self.totals = list(map(float.__add__, self.totals, ratios))
        self.count += 1

    def fold(self) -> None:
        if self.layout is not None and self.count:
            for key, total in zip(self.layout.activity, self.totals, strict=True):
                count, before = self.folded.get(key, (0, 0.0))
                self.folded[key] = (count + self.count, before + total)
        self.layout, self.totals, self.count = None, [], 0

    def means(self) -> dict[str, float]:
        sums = dict(self.folded)
        if self.layout is not None and self.count:
            for key, total in zip(self.layout.activity, self.totals, strict=True):
                count, before = sums.get(key, (0, 0.0))
                sums[key] = (count + self.count, before + total)
        return {key: total / count for key, (count, total) in sorted(sums.items()) if count}


@dataclass(frozen=True, slots=True)
class _Digest:
    """What a recording takes from one device sample, derived once however many recordings take it."""

    power: float | None
    energy: float | None
    counted: float | None  # the counter's own total, where this sample read it
    hottest: float | None
    compute: float | None
    counter: bool
    layout: Layout  # the clock domains and activity ratios this sample has, in ``keyed``'s order
    keyed: tuple[float, ...]  # the clocks' values, then the activity ratios'
    activity: tuple[float, ...]
    active: tuple[str, ...]
    throttle_seconds: dict[str, float]

    @classmethod
    def of(cls, sample: DeviceSample) -> _Digest:
        reading = sample.reading
        clocks = {k: float(v) for k, v in reading.clocks_hertz.items() if v is not None}
        activity = activity_ratios(reading)
        return cls(
            power=reading.power_watts,
            energy=sample.energy_joules,
            counted=sample.energy_counted_joules,
            hottest=max(reading.temperatures_celsius.values(), default=None),
            compute=reading.utilization.compute if reading.utilization else None,
            counter=reading.energy_counter_joules is not None,
            layout=layout_of(tuple(clocks), tuple(activity)),
            keyed=(*clocks.values(), *activity.values()),
            activity=tuple(activity.values()),
            active=tuple(sorted(r for r, on in reading.throttle_active.items() if on)),
            throttle_seconds={r: s for r, s in sample.throttle_seconds.items() if s is not None},
        )


_digests = threading.local()


def _digest(sample: DeviceSample) -> _Digest:
    """The digest of a (frozen) sample, from a small per-thread cache: 64 windows on one GPU hand
    the same sample to 64 recorders, which derive its activity ratios and throttle reasons once."""
    cache: dict[int, tuple[DeviceSample, _Digest]] | None = getattr(_digests, "cache", None)
    if cache is None:
        cache = _digests.cache = {}
    hit = cache.get(id(sample))
    if hit is not None and hit[0] is sample:
        return hit[1]
    if len(cache) >= 256:
        cache.clear()
    made = _Digest.of(sample)
    cache[id(sample)] = (sample, made)  # the sample is held, so its id is not reused meanwhile
    return made


def forget_digests() -> None:
    """Let go of the samples this thread's digest cache holds, once a fan-out to many recorders is
    done. Held until the cache next filled, the last 256 samples of a 10 Hz run (their readings
    scattered over the sampler thread's heap) kept about 1 MiB of it after every window ended."""
    cache: dict[int, tuple[DeviceSample, _Digest]] | None = getattr(_digests, "cache", None)
    if cache:
        cache.clear()


class CounterAnchors:
    """The energy handed out mapped onto the counter's own totals: at each read of the counter
    (handed out, counted), straight lines between, the handed-out growth after the last read.

    Between reads of the counter the daemon hands out a total tiled on from the power's average,
    which may run ahead of the counter and is then held back until the counter catches up. Mapped
    through the anchors, a point at a read of the counter holds the counter's own total and the
    points between share out its growth, so a rate taken from the points is the counter's. The span
    starts at the counter's first read: a total bridged before it (a read in flight as a window
    opened) may be up to a refresh behind.
    """

    #: Anchors kept at most: past it every other interior one goes (a day of 1 s reads is 86 400).
    LIMIT: ClassVar[int] = 4096
    __slots__ = ("_counted", "_first", "_handed")

    def __init__(self) -> None:
        self._handed: list[float] = []
        self._counted: list[float] = []
        self._first = 0.0  # the counter's own total at its first read

    def add(self, handed: float, counter: float) -> None:
        """A read of the counter: ``handed`` the total handed out since the start, ``counter`` the
        counter's own total."""
        handed_at, counted_at = self._handed, self._counted
        if not handed_at:
            self._first = counter
        counted = counter - self._first
        if handed_at and handed <= handed_at[-1]:  # nothing handed out since: the later read stands
            counted_at[-1] = max(counted_at[-1], counted)
            return
        offset = counted - handed
        if len(handed_at) >= 2 and all(abs(c - h - offset) < 1e-9 for h, c in self._last_two()):
            handed_at[-1], counted_at[-1] = handed, counted  # on one line: the middle one says nothing
            return
        handed_at.append(handed)
        counted_at.append(counted)
        if len(handed_at) > self.LIMIT:
            del handed_at[1:-1:2], counted_at[1:-1:2]

    def _last_two(self) -> zip[tuple[float, float]]:
        return zip(self._handed[-2:], self._counted[-2:], strict=True)

    def covers(self, handed: float) -> bool:
        """The counter was read, and more was handed out after its first read (else its span is empty)."""
        return len(self._handed) > 1 or (bool(self._handed) and handed > self._handed[0])

    def counted(self, handed: float) -> float:
        """The counter's own total since its first read where ``handed`` had been handed out."""
        handed_at, counted_at = self._handed, self._counted
        at = bisect.bisect_right(handed_at, handed) - 1
        if at < 0:
            return 0.0
        if at == len(handed_at) - 1:
            return counted_at[at] + handed - handed_at[at]
        share = (handed - handed_at[at]) / (handed_at[at + 1] - handed_at[at])
        return counted_at[at] + share * (counted_at[at + 1] - counted_at[at])


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
    activity: _ActivitySums = field(default_factory=_ActivitySums)
    energy: _Span = field(default_factory=_Span)
    #: The counter's own totals at its reads against the total handed out then (which may have run
    #: ahead of it): the energy from the counter's first read to its last is its own.
    anchors: CounterAnchors = field(default_factory=CounterAnchors)
    integrated: _Trapezoid = field(default_factory=_Trapezoid)
    throttle_first: dict[str, float] = field(default_factory=dict)  # seconds throttled, per reason
    throttle_last: dict[str, float] = field(default_factory=dict)
    throttle_seen: set[str] = field(default_factory=set)
    series: SeriesStore = field(default_factory=SeriesStore)
    attributed: float | None = None  # a workload's share of the target's energy so far (workloads only)
    #: Its energy span, its integral, start at a Baseline's energy, power (each counts as a reading).
    based: tuple[bool, bool] = (False, False)
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

    def seed(self, baseline: Baseline) -> None:
        """Start the energy span and the integral at ``baseline`` (no point, no sample counted)."""
        self.energy.add(baseline.energy_joules)
        if baseline.energy_joules is not None:  # the span starts there, read or bridged
            start = baseline.counted_joules if baseline.counted_joules is not None else baseline.energy_joules
            self.anchors.add(0.0, start)
        self.integrated.add(baseline.at, baseline.power_watts)
        self.last_at = baseline.at
        self.based = (baseline.energy_joules is not None, baseline.power_watts is not None)

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
        max_recording_points: int = MAX_RECORDING_POINTS,
        interval_seconds: float | None = None,
        edges: bool = False,
        on_grow: Callable[[Recorder], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """``edges``: the recording's first and last samples are read at its own start and end
        (windows, profiles: every counter exactly), and the power's integral spans them, the few ms
        to the first and last samples extrapolated at their power; else only what the samples span
        (a stress run's timed part). ``on_grow`` is called (no lock held) after a
        sample added points: the windows' memory bound (memory.py). ``clock`` (monotonic, the
        samples' ``at``) and ``wall`` (Unix time) date its start and end."""
        self.kind, self.name, self.labels = kind, name, dict(labels or {})
        self.id = recording_id or uuid.uuid4().hex[:12]
        self.interval_seconds = interval_seconds
        self.targets = list(targets)
        self._max_points = (max_points, max_recording_points)
        self.max_points = self._points_per_target()
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
        self._on_grow = on_grow
        self._clock, self._wall = clock, wall

    def _points_per_target(self) -> int:
        """Points each target keeps: its own limit, or its part of the recording's (at least 64)."""
        per_target, per_recording = self._max_points
        return max(64, min(per_target, per_recording // max(1, len(self.targets))))

    def add_target(self, target: Target, baseline: Baseline | None = None) -> None:
        """Also record ``target`` from now on (a domain first seen after the recording began, a device
        a workload came to); each target's part of the recording's points shrinks to fit it (a longer
        series is thinned at its next sample). ``baseline``: where its energy starts, if not at its
        first sample."""
        with self._lock:
            if (target.kind, target.backend, target.key) not in self._states:
                self.targets.append(target)
                state = self._states[(target.kind, target.backend, target.key)] = _TargetState(target)
                if baseline is not None:
                    state.seed(baseline)
                self.max_points = self._points_per_target()

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            self.recording = True
            self.started_at, self.started_mono = self._wall(), self._clock()

    def stop(self, reason: str = "ended") -> None:
        """End the recording. One never started (a stress run that failed while it started) ends
        where it stands, with no samples: ended, never left open."""
        with self._lock:
            if self.started_mono is None:
                self.recording, self.started_at, self.started_mono = True, self._wall(), self._clock()
            if self.recording:
                self.recording = False
                self.ended_at, self.ended_mono = self._wall(), self._clock()
                self.end_reason = reason

    def resume(self) -> None:
        """Record again after a stop (a workload seen again within its retention): same start, no end."""
        with self._lock:
            if not self.recording and self.started_mono is not None:
                self.recording = True
                self.ended_at = self.ended_mono = self.end_reason = None

    # -- feeding ------------------------------------------------------------------------------
    def on_sample(
        self,
        backend: str,
        devices: list[DeviceSample] | None,
        domains: list[DomainPower] | None,
        at: float | None = None,
    ) -> None:
        """Sampler listener: record the samples of this recording's targets."""
        at = self._clock() if at is None else at
        grew = False
        for sample in devices or ():
            state = self._states.get(("device", backend, str(sample.reading.index)))
            if state is None:
                continue
            expected, read = state.target.uuid, sample.reading
            if expected and read.uuid and read.uuid != expected:
                # The index names another device now (MIG instances re-listed): this one is gone.
                gone = DeviceSample(DeviceReading(index=read.index, uuid=expected, up=False))
                grew |= self.add_device(state.target, gone, at)
            else:
                grew |= self.add_device(state.target, sample, at)
        for domain in domains or ():
            state = self._states.get(("domain", backend, domain.domain))
            if state is not None:
                grew |= self.add_domain(state.target, domain, at)
        if grew and self._on_grow is not None:
            self._on_grow(self)

    def add_device(
        self, target: Target, sample: DeviceSample, at: float, attributed: float | None = None
    ) -> bool:
        """Record one device sample, read at ``at`` (or when its backend says it read it: a read of
        many devices takes a while); True when it was counted (its point may have been kept).
        ``attributed``: a workload's share of the device's energy so far, kept beside the readings."""
        if not sample.reading.up:
            return self._lost(target, at, attributed)
        at = sample.reading.read_at or at
        seen = _digest(sample)
        with self._lock:
            state = self._states[(target.kind, target.backend, target.key)]
            if self.recording and attributed is not None:
                state.attributed = attributed
            if not self.recording or not state.accept(at):
                return False
            state.up = True
            state.samples += 1
            state.note_power(at, seen.power)
            state.counter_seen |= seen.counter
            state.energy.add(seen.energy)
            handed = _since(state.energy)
            if seen.counted is not None and handed is not None:
                state.anchors.add(handed, seen.counted)
            state.power.add(seen.power)
            state.integrated.add(at, seen.power)
            state.temperature.add(seen.hottest)
            state.utilization.add(seen.compute)
            state.activity.add(seen.layout, seen.activity)
            if not seen.throttle_seconds.keys() <= state.throttle_first.keys():
                for reason, seconds in seen.throttle_seconds.items():
                    state.throttle_first.setdefault(reason, seconds)
            state.throttle_last.update(seen.throttle_seconds)
            state.throttle_seen.update(seen.active)
            row = (self._since_start(at), _nan(seen.power), _nan(_since(state.energy)), _nan(seen.hottest))
            row += (_nan(seen.compute),)
            layout, keyed = seen.layout, seen.keyed
            if attributed is not None:
                layout = layout_of(layout.clocks, layout.activity, ATTRIBUTED)
                keyed = (*keyed, attributed)
            state.series.append(row, self.max_points, layout, keyed, seen.active)
        return True

    def add_domain(
        self, target: Target, domain: DomainPower, at: float, attributed: float | None = None
    ) -> bool:
        """Record one power domain sample; True when it was counted. ``attributed`` as for a device."""
        if not domain.readable:
            return self._lost(target, at, attributed)
        with self._lock:
            state = self._states[(target.kind, target.backend, target.key)]
            if self.recording and attributed is not None:
                state.attributed = attributed
            if not self.recording or not state.accept(at):
                return False
            state.up = True
            state.samples += 1
            state.note_power(at, domain.power_watts)
            state.power.add(domain.power_watts)
            state.integrated.add(at, domain.power_watts)
            state.energy.add(domain.energy_joules)
            state.counter_seen = True  # domains are energy counters (RAPL) or their sampler totals
            row = (self._since_start(at), _nan(domain.power_watts), _nan(_since(state.energy)), NAN, NAN)
            if attributed is None:
                state.series.append(row, self.max_points)
            else:
                state.series.append(row, self.max_points, ATTRIBUTED_ONLY, (attributed,))
        return True

    def _lost(self, target: Target, at: float, attributed: float | None = None) -> bool:
        """A sample saying the target is gone: it is down, and no power is integrated across."""
        with self._lock:
            state = self._states[(target.kind, target.backend, target.key)]
            if self.recording and attributed is not None:
                state.attributed = attributed
            if self.recording and state.accept(at):
                state.up = False
                state.integrated.add(at, None)
        return False

    # -- the series' memory (memory.py) ---------------------------------------------------------
    @property
    def series_bytes(self) -> int:
        """Bytes the kept points take, over every target."""
        with self._lock:
            return sum(state.series.nbytes for state in self._states.values())

    def thin_series(self) -> bool:
        """Halve the points kept per target (every other one; the spacing doubles, so the series
        grows back half as fast) to give memory back; False when every target has two points or
        fewer left."""
        with self._lock:
            thinned = False
            for state in self._states.values():
                if len(state.series) > 2:
                    state.series.halve()
                    thinned = True
            return thinned

    def with_points(self, recording: Recording) -> Recording:
        """``recording`` (this recorder's, summaries only) with the points it keeps now."""
        with self._lock:
            series = {state.target.id: state.points() for state in self._states.values()}
        targets = [t.model_copy(update={"points": series.get(t.id, [])}) for t in recording.targets]
        return recording.model_copy(update={"targets": targets})

    def compact_series(self) -> None:
        """Copy every target's kept points into arrays of their own (SeriesStore.compact): for a
        recording kept after it ended, while others come and go."""
        with self._lock:
            for state in self._states.values():
                state.series.compact()

    def drop_series(self) -> None:
        """Drop every kept point (the summaries stay): an ended window whose memory is needed."""
        with self._lock:
            for state in self._states.values():
                state.series.clear()

    def _since_start(self, at: float) -> float:
        return round(at - (at if self.started_mono is None else self.started_mono), 6)

    # -- the result ---------------------------------------------------------------------------
    def recording_now(
        self,
        carbon_intensity: float | None = None,
        energy_price: float | None = None,
        *,
        points: bool = True,
    ) -> Recording:
        """The recording so far (``status: open`` while it runs), with carbon and cost where set;
        ``points=False``: summaries only (a listing)."""
        with self._lock:
            now_mono = self.ended_mono or self._clock()
            span = (self.started_mono, now_mono) if self.edges and self.started_mono is not None else None
            targets = [_summary(state, span, points) for state in self._states.values()]
            duration = max(0.0, now_mono - (now_mono if self.started_mono is None else self.started_mono))
            recording = Recording(
                kind=self.kind,
                id=self.id,
                name=self.name,
                labels=self.labels,
                status="open" if self.recording or self.started_at is None else "ended",
                end_reason=self.end_reason,
                started_at=self.started_at or self._wall(),
                ended_at=self.ended_at,
                duration_seconds=round(duration, 6),
                interval_seconds=self.interval_seconds,
                targets=targets,
                energy_joules=_total_energy(targets),
                workload=dict(self.workload),
            )
        return with_carbon_and_cost(recording, carbon_intensity, energy_price)


def _nan(value: float | None) -> float:
    return NAN if value is None else value


def _since(span: _Span) -> float | None:
    return None if span.last is None or span.first is None else span.last - span.first


def _summary(state: _TargetState, span: tuple[float, float] | None, points: bool = True) -> TargetRecording:
    target = state.target
    counted = state.energy.delta if state.spans(energy=True) and state.counter_seen else None
    if counted is not None and state.anchors.covers(counted):
        # From the counter's first read to its last its own totals (the edges' reads), and on from
        # there as the total handed out grew.
        counted = state.anchors.counted(counted)
    integrated = state.integrated.joules if state.spans(energy=False) else None
    estimated = None
    if span is not None:
        # The counter is read at the recording's edges (windows, profiles): its delta is the energy.
        # The power's integral is extended over the few ms to the first and last samples.
        edge = state.edge_joules(*span)
        integrated = None if integrated is None else integrated + edge
        if state.samples == 1 and state.first_power is not None:
            estimated = edge  # one reading: its power over the whole span (up to a loss)
    energy, source = _first_energy(
        (counted, "counter"), (integrated, "integrated"), (estimated, "power_times_duration")
    )
    disagreement = None
    if counted and integrated is not None:
        disagreement = round(abs(counted - integrated) / counted, 6)
    first, last = state.throttle_first, state.throttle_last
    throttle = {r: round(last[r] - first[r], 6) for r in last if last[r] - first[r]}
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
        activity_mean=state.activity.means(),
        throttle_seconds=dict(sorted(throttle.items())),
        attributed_energy_joules=state.attributed,
        points=state.points() if points else [],
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

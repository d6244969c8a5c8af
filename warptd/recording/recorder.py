"""Build a :class:`Recording` from the samplers' own samples, as a sampler listener.

Summaries are running aggregates, exact for the whole recording however long; the time series is
bounded: past ``max_points`` per target every other point is dropped and the stride doubles, so a
long recording keeps an even, coarser series. The series is stored compactly (series.py) and turned
into the schema's points only when a recording is asked for.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from warptd.models import DeviceReading
from warptd.power.base import DomainPower
from warptd.recording.digest import digest
from warptd.recording.schema import Recording, RecordingKind, TargetRecording
from warptd.recording.target_state import Baseline, Target, TargetState
from warptd.sampling.snapshot import DeviceSample

#: Points kept per target before the series is thinned (summaries stay exact).
MAX_POINTS = 2048
#: The most points one recording keeps over all its targets: a window on 8 GPUs keeps 512 per GPU.
MAX_RECORDING_POINTS = 4096
JOULES_PER_KWH = 3.6e6


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
        self._states = {(t.kind, t.backend, t.key): TargetState(t) for t in targets}
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
                state = self._states[(target.kind, target.backend, target.key)] = TargetState(target)
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
        seen = digest(sample)
        with self._lock:
            state = self._taking(target, at, attributed)
            if state is None:
                return False
            state.add_device(seen, at, self._since_start(at), self.max_points, attributed)
        return True

    def add_domain(
        self, target: Target, domain: DomainPower, at: float, attributed: float | None = None
    ) -> bool:
        """Record one power domain sample; True when it was counted. ``attributed`` as for a device."""
        if not domain.readable:
            return self._lost(target, at, attributed)
        with self._lock:
            state = self._taking(target, at, attributed)
            if state is None:
                return False
            state.add_domain(domain, at, self._since_start(at), self.max_points, attributed)
        return True

    def _lost(self, target: Target, at: float, attributed: float | None = None) -> bool:
        """A sample saying the target is gone: it is down, and no power is integrated across."""
        with self._lock:
            state = self._taking(target, at, attributed)
            if state is not None:
                state.lost(at)
        return False

    def _taking(self, target: Target, at: float, attributed: float | None) -> TargetState | None:
        """The target's state where a sample read at ``at`` counts: while recording, and newer than
        its last (a fast and a normal read may cross); ``attributed`` is kept while recording. Called
        with the lock held."""
        state = self._states[(target.kind, target.backend, target.key)]
        if not self.recording:
            return None
        if attributed is not None:
            state.attributed = attributed
        return state if state.accept(at) else None

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
            targets = [state.summary(span, points) for state in self._states.values()]
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

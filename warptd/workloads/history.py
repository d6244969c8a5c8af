"""Each workload's recording (``GET /workloads/KIND/ID/recording``): while it runs, and through its
retention once it ended, the readings of the devices it held and of the CPU packages, each sample with
the workload's share of that device's or package's energy so far.

It is a listener of the energy split (:class:`~warptd.workloads.energy.WorkloadEnergy`), and every
workload's series is a :class:`~warptd.recording.recorder.Recorder` (the windows' own, compact and
thinned the same way). Bounded three ways: the workloads recorded are the ones the split tracks
(``--workload-max``, live and retained); a workload keeps at most :data:`WORKLOAD_POINTS` points over
all its targets, downsampled (past it every other point goes and the spacing doubles, so a 24 h job
keeps an even series from its first hour to its last, which a ring would lose); and every workload's
series together take at most ``memory_bytes`` (:class:`~warptd.recording.memory.SeriesBudget`: ended
workloads' series go first, oldest first, then the largest running ones are thinned). Summaries are
never thinned.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from warptd.recording.memory import SeriesBudget
from warptd.recording.recorder import Baseline, Recorder, Target
from warptd.recording.schema import Recording, WorkloadView
from warptd.sampling.deltas import TotalDeltas
from warptd.workloads.placement import WorkloadKey

if TYPE_CHECKING:
    from warptd.power.base import DomainPower
    from warptd.sampling.snapshot import DeviceSample
    from warptd.workloads.tracked import WorkloadTotals

#: Points a workload's recording keeps over all its targets (8 GPUs and a CPU package: 227 each).
WORKLOAD_POINTS = 2048
#: Bytes every workload's series may take together (see docs/workloads.md for what a workload costs).
SERIES_MEMORY_BYTES = 32 * 2**20
#: A workload's bytes are charged to the budget every this many samples it counted (reading them walks
#: its series: a third of the listener's time at 1000 workloads when done at each), so the bound may be
#: passed by this many rows per workload before it is enforced.
CHARGE_EVERY = 8
#: How a workload's recording ends, in its ``end_reason``.
END_REASON = "workload_ended"


def is_cpu_package(domain: DomainPower) -> bool:
    """The domains whose energy the split gives to workloads by CPU time: RAPL packages."""
    return str(domain.source) == "rapl" and domain.domain.startswith("package")


@dataclass
class _Recorded:
    """One workload's recorder, and its share of each CPU package's energy so far."""

    recorder: Recorder
    cpu_seen: float = 0.0  # the workload's CPU joules at the last sample handed over
    packages: dict[str, float] = field(default_factory=dict)  # domain id -> joules, cumulative
    targets: dict[str, Target] = field(default_factory=dict)  # the recorder's, by id
    uncharged: int = 0  # samples counted since its bytes were last charged to the budget


class WorkloadHistory:
    """Records every workload the split tracks; ``recording(view)`` builds one's recording."""

    def __init__(
        self,
        *,
        known_targets: Callable[[], Mapping[str, Target]] = dict,
        interval: Callable[[], float | None] = lambda: None,
        memory_bytes: int = SERIES_MEMORY_BYTES,
        max_points: int = WORKLOAD_POINTS,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """``known_targets``: the node's devices and domains by id (their model and UUID), from the
        snapshot; ``clock`` and ``wall`` as the split's (a sample's ``at`` is on ``clock``)."""
        self._known, self._interval = known_targets, interval
        self.max_points = max_points
        self._clock, self._wall = clock, wall
        self.budget = SeriesBudget(lambda: memory_bytes)
        self._recorded: dict[WorkloadKey, _Recorded] = {}
        self._packages: TotalDeltas[str] = TotalDeltas()  # each package's energy total at the last sample
        #: Each device's and package's newest sample (and its device's UUID): where a target a workload
        #: comes to starts its energy, as the split's first delta for it does.
        self._last: dict[str, tuple[Baseline, str | None]] = {}
        self._lock = threading.Lock()

    # -- what the split tells (a copy, one call at a time) ----------------------------------------
    def after_poll(self, workloads: Mapping[WorkloadKey, WorkloadTotals]) -> None:
        """Start recording new workloads, stop ended ones (resume one seen again), forget gone ones."""
        with self._lock:
            for key, workload in workloads.items():
                recorder = self._recorded_for(key).recorder
                if workload.ended_at is not None and recorder.recording:
                    recorder.stop(END_REASON)
                    self.budget.update(recorder)  # charged in full before it joins the ended ones
                    self.budget.ended(recorder)
                elif workload.ended_at is None and not recorder.recording:
                    self.budget.release(recorder)  # back among the running: charged as one again
                    recorder.resume()
                    self.budget.admit(recorder, 0)
            for key in [key for key in self._recorded if key not in workloads]:
                self.budget.release(self._recorded.pop(key).recorder)

    def _recorded_for(self, key: WorkloadKey) -> _Recorded:
        """The workload's recording, started if it has none yet (under the lock)."""
        recorded = self._recorded.get(key)
        if recorded is None:
            recorded = self._recorded[key] = _Recorded(self._recorder(key))
            self.budget.admit(recorded.recorder, 0)
            recorded.recorder.start()
        return recorded

    def after_sample(
        self,
        backend: str,
        devices: list[DeviceSample] | None,
        domains: list[DomainPower] | None,
        at: float | None,
        workloads: Mapping[WorkloadKey, WorkloadTotals],
    ) -> None:
        """Each running workload records the samples of the devices it got energy on, and of the CPU
        packages once it has a CPU share, each with its cumulative share of their energy."""
        at = self._clock() if at is None else at
        packages = [d for d in domains or () if is_cpu_package(d)]
        deltas = self._package_deltas(packages)
        by_id = {f"{backend}:{sample.reading.index}": sample for sample in devices or ()}
        grown = []
        with self._lock:
            for key, workload in workloads.items():
                if workload.ended_at is not None:
                    continue
                # A workload the split found between a poll and the poll's end (after_poll) already
                # has shares of this sample: its recording starts now, so that none is left out.
                recorded = self._recorded_for(key)
                grew = bool(by_id) and self._add_devices(recorded, workload, backend, by_id, at)
                if packages and workload.cpu_joules is not None:
                    grew |= self._add_packages(recorded, workload.cpu_joules, packages, deltas, at)
                if grew:
                    recorded.uncharged += 1
                    if recorded.uncharged >= CHARGE_EVERY:
                        recorded.uncharged = 0
                        grown.append(recorded.recorder)
            self._remember(by_id, packages, at)
        for recorder in grown:
            self.budget.update(recorder)

    def _add_devices(
        self,
        recorded: _Recorded,
        workload: WorkloadTotals,
        backend: str,
        samples: Mapping[str, DeviceSample],
        at: float,
    ) -> bool:
        """Each sample of a device the workload has a share of, with that share so far."""
        grew = False
        for device, (_, joules) in workload.devices.items():
            sample = samples.get(device)
            if sample is not None:
                index, uuid = str(sample.reading.index), sample.reading.uuid
                target = self._target(recorded, device, "device", backend, index, at=at, uuid=uuid)
                grew |= recorded.recorder.add_device(target, sample, at, joules)
        return grew

    def _package_deltas(self, packages: list[DomainPower]) -> dict[str, float]:
        """Each package's joules since the last sample, as the split counts them (the same helper:
        0 for its first, and for a lower total, an older read published late)."""
        deltas = {}
        with self._lock:
            for domain in packages:
                key = f"{domain.source}:{domain.domain}"
                deltas[key] = self._packages.delta(key, domain.energy_joules)
        return deltas

    def _add_packages(
        self,
        recorded: _Recorded,
        cpu_joules: float,
        packages: list[DomainPower],
        deltas: dict[str, float],
        at: float,
    ) -> bool:
        """The workload's new CPU joules shared among the packages as their energy grew (the split
        gives it one share of their sum), then each package's sample with its part so far."""
        added, recorded.cpu_seen = max(0.0, cpu_joules - recorded.cpu_seen), cpu_joules
        total = sum(deltas.values())
        grew = False
        for domain in packages:
            key = f"{domain.source}:{domain.domain}"
            part = added * (deltas[key] / total if total > 0 else 1 / len(packages))
            recorded.packages[key] = recorded.packages.get(key, 0.0) + part
            target = self._target(recorded, key, "domain", str(domain.source), domain.domain, at=at)
            grew |= recorded.recorder.add_domain(target, domain, at, recorded.packages[key])
        return grew

    def _target(
        self,
        recorded: _Recorded,
        target_id: str,
        kind: str,
        backend: str,
        key: str,
        *,
        at: float,
        uuid: str | None = None,
    ) -> Target:
        """The recorder's target for this device or domain, added (with its model, from the
        snapshot) the first time the workload has a share of it, its energy counted from the sample
        before (the workload's share is the split's delta from that one)."""
        made = recorded.targets.get(target_id)
        if made is not None:
            return made
        known = self._known().get(target_id)
        if known is None:
            device = kind == "device"
            known = Target(
                "device" if device else "domain",
                backend,
                key,
                source=None if device else backend,
                device_kind="accelerator" if device else None,
            )
        recorded.recorder.add_target(known, self._baseline(target_id, at, uuid))
        recorded.targets[target_id] = known
        return known

    def _baseline(self, target_id: str, at: float, uuid: str | None) -> Baseline | None:
        """The device's or package's sample before ``at`` (the same device: not another one listed
        at its index since), where a workload's first share of it began."""
        last = self._last.get(target_id)
        if last is None or last[0].at >= at or (uuid and last[1] and last[1] != uuid):
            return None
        return last[0]

    def _remember(self, devices: Mapping[str, DeviceSample], packages: list[DomainPower], at: float) -> None:
        """Keep each device's and package's sample as the next one's baseline (a later one only)."""
        last = self._last
        for target_id, sample in devices.items():
            kept = last.get(target_id)
            if kept is None or kept[0].at < at:
                reading, counted = sample.reading, sample.energy_counted_joules
                baseline = Baseline(at, sample.energy_joules, reading.power_watts, counted)
                last[target_id] = (baseline, reading.uuid)
        for domain in packages:
            target_id = f"{domain.source}:{domain.domain}"
            kept = last.get(target_id)
            if kept is None or kept[0].at < at:
                last[target_id] = (Baseline(at, domain.energy_joules, domain.power_watts), None)

    def _recorder(self, key: WorkloadKey) -> Recorder:
        return Recorder(
            [],
            kind="workload",
            name=f"{key.kind} {key.id}",
            recording_id=f"{key.kind}/{key.id}",
            max_recording_points=self.max_points,
            interval_seconds=self._interval(),
            clock=self._clock,
            wall=self._wall,
        )

    # -- what the endpoint reads ----------------------------------------------------------------
    @property
    def recorded(self) -> int:
        with self._lock:
            return len(self._recorded)

    def recording(self, view: WorkloadView) -> Recording:
        """The workload's recording: its devices' and packages' readings with its share of their
        energy (each device's share as ``view`` says, which is what GET /workloads/KIND/ID answers),
        its identity and dates from ``view``."""
        with self._lock:
            recorded = self._recorded.get(WorkloadKey(view.kind, view.id))
        if recorded is None:  # seen by a poll whose end this listener has not been told of yet
            recorder = self._recorder(WorkloadKey(view.kind, view.id))
            recorder.start()
            recording = recorder.recording_now()
        else:
            recording = recorded.recorder.recording_now()
        shares = {device.device: device.joules for device in view.devices}
        targets = [
            t.model_copy(update={"attributed_energy_joules": shares[t.id]}) if t.id in shares else t
            for t in recording.targets
        ]
        ended = view.ended_at is not None
        return recording.model_copy(
            update={
                "targets": targets,
                "started_at": view.started_at,
                "ended_at": view.ended_at,
                "status": "ended" if ended else "open",
                "end_reason": END_REASON if ended else None,
                "attribution": view,
            }
        )

"""The shared Recorder on hand-made samples: exact summaries, bounded series, both energies, carbon, cost."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from tests.samples import gpu_samples, sample, telemetry_sample
from warptd.models import DeviceReading, MemoryUsage, Utilization
from warptd.power.base import DomainPower, DomainReading, PowerSource
from warptd.recording.recorder import Recorder, Target
from warptd.stress.telemetry import TelemetryRecorder
from warptd.workloads.history import WorkloadHistory
from warptd.workloads.placement import WorkloadKey
from warptd.workloads.tracked import Workload

GPU = Target("device", "nvidia", "0", model="H100", uuid="GPU-0")


PACKAGE = Target("domain", "rapl", "package-0", source="rapl")


def test_domains_and_the_total():
    recorder = Recorder([GPU, PACKAGE], kind="profile", name="p")
    recorder.start()
    for at, energy in ((0.0, 100.0), (1.0, 150.0)):
        recorder.add_device(GPU, sample(100, energy), at)
        recorder.on_sample("rapl", None, [DomainPower("package-0", PowerSource.RAPL, 40, energy / 2)], at)
        recorder.on_sample(
            "rapl", None, [DomainPower("psys", PowerSource.RAPL, 90, energy)], at
        )  # not a target
    recording = recorder.recording_now()
    package = recording.targets[1]
    assert package.id == "rapl:package-0" and package.energy_joules == 25 and package.kind == "domain"
    assert recording.energy_joules == 75


def test_summary_from_rapl_packages_for_the_cpu():
    rec = TelemetryRecorder(recording=True)
    rec.add_device(telemetry_sample(None, None, None, 0.9, 50))
    for energy, power in ((100.0, 50.0), (160.0, 60.0)):
        rec.add_domains(
            [
                DomainPower("package-0", PowerSource.RAPL, power, energy),
                DomainPower(
                    "core-0", PowerSource.RAPL, power / 2, energy / 2
                ),  # inside the package: not added
                DomainPower("psys", PowerSource.RAPL, power * 2, energy * 2),  # contains it: not added
            ]
        )
    s = rec.summary()
    assert s.energy_joules == 60 and s.energy_source == "rapl"
    assert s.power_mean_watts == 55 and s.power_peak_watts == 60


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (DeviceReading(index=0), "uuid"),
        (MemoryUsage(total=2, used=1, free=1), "used"),
        (Utilization(compute=0.5), "compute"),
        (DomainReading("package-0"), "power_watts"),
        (DomainPower("package-0", PowerSource.RAPL, 1.0, 2.0), "energy_joules"),
    ],
)
def test_readings_handed_on_cannot_be_changed(value, field):
    with pytest.raises(FrozenInstanceError):
        setattr(value, field, None)


def workload_of(key: WorkloadKey) -> Workload:
    return Workload(key, "alice", started_at=1_780_000_000.0, seen=0.0)


def test_a_long_job_keeps_at_most_its_points_evenly_over_its_whole_run():
    """Over two hours at 1 Hz on 8 GPUs and a package: downsampled to at most 2048 points
    over its targets, from its first sample to its last, each point's share still cumulative."""
    history = WorkloadHistory(clock=lambda: 0.0)
    key = WorkloadKey("slurm_job", "7")
    workload = workload_of(key)
    workloads = {key: workload}
    history.after_poll(workloads)
    seconds = 8_000
    for second in range(1, seconds + 1):
        for i in range(8):
            workload.add_device(f"nvidia:{i}", f"GPU-{i}", 150.0)
        workload.add_cpu(10.0)
        domain = DomainPower("package-0", PowerSource.RAPL, 90.0, 90.0 * second)
        history.after_sample("nvidia", gpu_samples(8, 300.0 * second), None, float(second), workloads)
        history.after_sample("rapl", None, [domain], float(second), workloads)
    recording = history.recording(workload.view())
    points = [len(t.points) for t in recording.targets]
    assert len(points) == 9 and sum(points) <= 2048 and min(points) >= 2048 // 9 // 2
    for target in recording.targets:
        times = [p.t for p in target.points]
        assert times[0] <= 1.0 and times[-1] >= seconds - seconds / len(times) * 2  # the whole run
        shares = [p.attributed_energy_joules for p in target.points]
        assert shares == sorted(shares)
    assert recording.targets[0].attributed_energy_joules == pytest.approx(150.0 * seconds)
    package = next(t for t in recording.targets if t.id == "rapl:package-0")
    assert package.attributed_energy_joules == pytest.approx(10.0 * seconds)
    assert history.budget.used <= history.budget.capacity()

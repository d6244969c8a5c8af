"""Recordings built from scripted timelines (a load ramp, heating, a power-cap episode), for report tests."""

from __future__ import annotations

import math

from warptd.recording.schema import Point, Recording, TargetRecording
from warptd.stress.base import DeviceRef
from warptd.stress.job import Job, JobStatus, StressParameters
from warptd.stress.jobs import JobManager

HOSTILE = '<img id="evil" src=x onerror="document.title=1">'


def gpu_points(count: int, interval: float, peak_watts: float, throttled: range) -> list[Point]:
    """A GPU under a load that ramps up over the first third, heats with it and is power-capped
    at the samples in ``throttled``; every value differs from sample to sample."""
    points = []
    for i in range(count):
        load = min(1.0, i / (count / 3))
        points.append(
            Point(
                t=round(i * interval, 3),
                power_watts=round(60 + (peak_watts - 60) * load + 3 * math.sin(i), 2),
                energy_joules=round(i * interval * (60 + (peak_watts - 60) * load), 2),
                temperature_celsius=round(35 + 40 * load + 0.1 * i, 1),
                utilization_ratio=round(min(1.0, 0.05 + 0.9 * load + 0.001 * i), 3),
                clocks_hertz={"sm": 1.98e9 - 1e6 * i, "memory": 2.6e9},
                activity={"sm_active": round(0.8 * load + 0.002 * i, 3)},
                throttle_active=["power_cap"] if i in throttled else [],
            )
        )
    return points


def domain_points(count: int, interval: float) -> list[Point]:
    """A CPU package power domain: power only, no temperature or clocks (absent, not 0)."""
    return [Point(t=round(i * interval, 3), power_watts=round(40 + 0.5 * i, 2)) for i in range(count)]


def _summary(target: TargetRecording, interval: float) -> TargetRecording:
    powers = [p.power_watts for p in target.points if p.power_watts is not None]
    temps = [p.temperature_celsius for p in target.points if p.temperature_celsius is not None]
    utils = [p.utilization_ratio for p in target.points if p.utilization_ratio is not None]
    throttled = sum(interval for p in target.points if "power_cap" in p.throttle_active)
    return target.model_copy(
        update={
            "samples": len(target.points),
            "energy_joules": target.points[-1].energy_joules or sum(powers) * interval,
            "energy_source": "counter" if target.kind == "device" else "integrated",
            "power_mean_watts": sum(powers) / len(powers),
            "power_peak_watts": max(powers),
            "temperature_peak_celsius": max(temps) if temps else None,
            "utilization_mean_ratio": sum(utils) / len(utils) if utils else None,
            "throttle_seconds": {"power_cap": throttled} if throttled else {},
        }
    )


def sample_recording(count: int = 40, interval: float = 0.5, name: str = "matmul on nvidia:0") -> Recording:
    """Two GPUs (the second with a hostile model string) and a RAPL package domain."""
    targets = [
        TargetRecording(
            id="nvidia:0",
            kind="device",
            backend="nvidia",
            model="NVIDIA H100 80GB HBM3",
            points=gpu_points(count, interval, 690.0, range(20, 26)),
        ),
        TargetRecording(
            id="nvidia:1",
            kind="device",
            backend="nvidia",
            model=HOSTILE,
            points=gpu_points(count, interval, 410.0, range(0)),
        ),
        _package(count, interval),
    ]
    return _recording(
        targets,
        count,
        interval,
        kind="stress",
        id="3f2a9c1b7d4e",
        name=name,
        labels={"team": HOSTILE},
        workload={"throughput": 4.1e14, "unit": "FLOP/s"},
    )


def _package(count: int, interval: float) -> TargetRecording:
    return TargetRecording(
        id="rapl:package-0", kind="domain", backend="rapl", points=domain_points(count, interval)
    )


def _recording(targets: list[TargetRecording], count: int, interval: float, **identity: object) -> Recording:
    """An ended recording of ``targets`` (summarised from their points) over ``count`` samples."""
    targets = [_summary(t, interval) for t in targets]
    return Recording(
        started_at=1_780_000_000.0,
        ended_at=1_780_000_000.0 + count * interval,
        duration_seconds=count * interval,
        interval_seconds=interval,
        targets=targets,
        energy_joules=sum(t.energy_joules or 0 for t in targets),
        **identity,
    )


def finished_job(
    manager: JobManager, recording: Recording | None, status: str = "succeeded", job_id: str | None = None
) -> Job:
    """A stress job as the manager holds it once ended, carrying ``recording`` as finished jobs do
    (``Job.recording``), put straight into ``manager``'s history."""
    job = Job(
        id=job_id or (recording.id if recording is not None else "0123456789ab"),
        params=StressParameters(test="matmul", device="cpu:0", duration_s=20.0),
        device=DeviceRef("cpu", 0, "cpu", False),
        status=JobStatus(status),
        recorder=None,
    )
    job.recording = recording
    with manager.jobs._lock:
        manager.jobs._jobs[job.id] = job
    return job


def busy_recording(gpus: int = 12, count: int = 30, interval: float = 0.5) -> Recording:
    """More GPUs than the palette has colours, each with four clock domains (the memory clock steady),
    utilization and three activity ratios, the first throttled for a while; and a RAPL package."""
    targets = []
    for index in range(gpus):
        points = gpu_points(count, interval, 300.0 + 40 * index, range(5, 12) if index == 0 else range(0))
        for point in points:
            point.clocks_hertz = {**point.clocks_hertz, "graphics": point.clocks_hertz["sm"], "video": 1.5e9}
            point.activity = {
                **point.activity,
                "pipe_tensor": round(point.activity["sm_active"] / 2, 3),
                "dram_bandwidth": round(0.3 + 0.001 * index, 3),
            }
        targets.append(
            TargetRecording(
                id=f"nvidia:{index}", kind="device", backend="nvidia", model="NVIDIA H200", points=points
            )
        )
    targets.append(_package(count, interval))
    return _recording(
        targets, count, interval, kind="window", id="9c1b7d4e3f2a", name="epoch-3", end_reason="ended"
    )

"""The versioned recording schema shared by stress results, energy windows, ``warptd profile`` and the
workloads' recordings (``--workloads``).

Absent figures are ``None`` (never 0): a device without a temperature sensor has no peak temperature.
Times in a recording's samples are seconds since the recording started; everything else is in base
units (W, J, s, °C, Hz, ratios 0..1).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, TypeAdapter

from warptd.config import WorkloadKind
from warptd.models import DeviceKind, WireModel

#: Bumped whenever a field changes meaning, takes a new value or goes away; adding optional fields
#: keeps it. 2: ``energy_source`` may be ``power_times_duration`` (a window with fewer than two samples).
#: 3: ``kind`` may be ``workload`` (a Slurm job's, unit's, container's or user's recording, with its
#: ``attribution`` and each target's and point's ``attributed_energy_joules``).
SCHEMA_VERSION = 3
#: The versions a recording may carry and still be read: each version only added values and optional
#: fields, so a saved version 1 or 2 recording is a valid version 3 one.
SchemaVersion = Literal[1, 2, 3]

RecordingKind = Literal["window", "profile", "stress", "workload"]
TargetKind = Literal["device", "domain"]
#: How a target's energy_joules was found: its hardware energy counter, its power integrated over the
#: samples, or (fewer than two samples) its one power reading times the recording's duration.
EnergySource = Literal["counter", "integrated", "power_times_duration"]


class Point(WireModel):
    """One sample of one device or domain, as the samplers read it."""

    model_config = ConfigDict(extra="forbid")

    t: float = Field(description="Seconds since the recording started (monotonic clock).")
    power_watts: float | None = Field(None, description="Most instantaneous power reading.")
    energy_joules: float | None = Field(
        None, description="Energy used since the recording started (from the monotonic total)."
    )
    temperature_celsius: float | None = Field(None, description="Hottest sensor of the device.")
    utilization_ratio: float | None = Field(None, description="Compute utilization (0-1).")
    clocks_hertz: dict[str, float] = Field({}, description="Clock frequencies by clock domain.")
    #: Activity ratios where exported (NVIDIA GPM: sm_active, sm_occupancy, dram_bandwidth, pipe_*).
    activity: dict[str, float] = Field(
        {},
        description="Activity ratios where the backend exports them (NVIDIA GPM: sm_active, pipe_tensor…).",
    )
    throttle_active: list[str] = Field([], description="Throttle reasons active at this sample.")
    attributed_energy_joules: float | None = Field(
        None,
        description="Workload recordings: the workload's share of this target's energy since it was "
        "first seen, up to this sample (cumulative, never decreasing); None in other recordings.",
    )


class TargetRecording(WireModel):
    """What one device (``nvidia:0``) or power domain (``rapl:package-0``) did during a recording."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="backend:index for devices, source:domain for power domains.")
    kind: TargetKind = Field(description="device, or domain (a power domain such as a CPU package).")
    device_kind: DeviceKind | None = Field(
        None, description="What a device is: accelerator, or cpu (the host CPU); None for domains."
    )
    backend: str = Field(description="The backend that samples it (nvidia, rapl, …).")
    model: str | None = Field(None, description="Device model, where known.")
    uuid: str | None = Field(None, description="Device UUID, where it has one.")
    samples: int = Field(0, description="Number of samples taken while recording.")
    up: bool = Field(True, description="False when the device was lost before the recording ended.")
    energy_joules: float | None = Field(
        None,
        description="Energy used: the counter delta where a counter exists, else integrated power; "
        "with fewer than two samples (windows, profiles), the power reading times the duration.",
    )
    energy_source: EnergySource | None = Field(
        None,
        description="Which energy_joules is: counter, integrated (power over the samples) or "
        "power_times_duration (one sample's power over the recording's span).",
    )
    energy_counter_joules: float | None = Field(None, description="Delta of the hardware energy counter.")
    energy_integrated_joules: float | None = Field(
        None, description="Trapezoidal integral of the power readings over the recording."
    )
    energy_disagreement_ratio: float | None = Field(
        None, description="|counter - integrated| / counter, where both exist."
    )
    power_mean_watts: float | None = Field(None, description="Mean of the power readings.")
    power_peak_watts: float | None = Field(None, description="Peak of the instantaneous readings.")
    temperature_peak_celsius: float | None = Field(None, description="Hottest reading of any sensor.")
    utilization_mean_ratio: float | None = Field(None, description="Mean compute utilization (0-1).")
    activity_mean: dict[str, float] = Field({}, description="Mean of each activity ratio.")
    throttle_seconds: dict[str, float] = Field(
        {}, description="Seconds throttled per reason (hardware counters where they exist, else sampled)."
    )
    carbon_grams: float | None = Field(None, description="gCO2e, with a carbon intensity set.")
    cost: float | None = Field(None, description="Energy cost, with an energy price set.")
    attributed_energy_joules: float | None = Field(
        None,
        description="Workload recordings: the part of this device's energy (or CPU package's) split to "
        "the workload while it ran; None in other recordings.",
    )
    points: list[Point] = Field(
        [], description="The samples; past 2048 every other one is dropped (summaries stay exact)."
    )


class DeviceEnergy(WireModel):
    """A workload's share of one device's energy."""

    device: str = Field(description="BACKEND:INDEX, e.g. nvidia:0")
    uuid: str = Field(description="The device's UUID, empty where it has none.")
    joules: float = Field(description="Energy of this device split to the workload while it ran there.")


class WorkloadView(WireModel):
    """One workload as the daemon knows it: live, or ended and kept for --workload-retention."""

    kind: WorkloadKind = Field(description="slurm_job, systemd_unit, container or user.")
    id: str = Field(description="Slurm job id, unit name, container id or user name.")
    user: str = Field(description="The login name (else uid) its processes run as.")
    steps: list[str] = Field(description="Slurm steps seen on a device (batch, extern, 0, ...).")
    started_at: float = Field(description="Unix time warptd first saw it.")
    ended_at: float | None = Field(
        description="Unix time of the first poll that found neither a process of it on a device nor its "
        "cgroup; null while it runs."
    )
    devices: list[DeviceEnergy] = Field(description="Each device it got energy on, by BACKEND:INDEX.")
    accelerator_joules: float = Field(description="Sum over its devices.")
    cpu_joules: float | None = Field(
        description="Its share of the CPU packages' energy (RAPL) by its cgroup's CPU time; null where "
        "its cgroup's CPU time or RAPL cannot be read."
    )
    total_joules: float = Field(description="accelerator_joules plus cpu_joules.")


class Recording(WireModel):
    """A recording: identity, time span, per-target summaries and time series, optional workload."""

    model_config = ConfigDict(extra="forbid")

    schema_version: SchemaVersion = Field(
        SCHEMA_VERSION,
        description="Bumped when a field changes meaning or takes a new value (2: energy_source "
        "power_times_duration; 3: kind workload); version 1 and 2 recordings still read.",
    )
    kind: RecordingKind = Field(
        description="window (POST /windows), profile (warptd profile), stress, or workload "
        "(GET /workloads/KIND/ID/recording)."
    )
    id: str = Field(description="Unique id; a window's is its /windows/ID.")
    name: str = Field(description="A window's name, a profile's command, a stress run's test.")
    labels: dict[str, str] = Field({}, description="The caller's labels (a profile: its command line).")
    status: Literal["open", "ended"] = Field("ended", description="open while it records.")
    end_reason: str | None = Field(
        None,
        description="Windows: requested (a client ended it), lease_expired (its client stopped renewing "
        "its lease), max_duration, shutdown; profiles: command_exited; stress runs: succeeded, failed, "
        "cancelled; workloads: workload_ended (neither a process on a device nor its cgroup left).",
    )
    error: str | None = Field(
        None,
        description="Stress runs that failed: why (the workload's error, or how its worker exited); "
        "None otherwise.",
    )
    started_at: float = Field(description="Unix time the recording started.")
    ended_at: float | None = Field(None, description="Unix time it ended; None while open.")
    duration_seconds: float = Field(description="From start to end (to now while open), monotonic clock.")
    interval_seconds: float | None = Field(None, description="Sampling interval while recording.")
    targets: list[TargetRecording] = Field([], description="Each device and power domain recorded.")
    energy_joules: float | None = Field(
        None,
        description="Sum over devices and top-level domains that do not nest in one another "
        "(CPU packages, not psys nor core).",
    )
    carbon_intensity_g_per_kwh: float | None = Field(None, description="--carbon-intensity, where set.")
    energy_price_per_kwh: float | None = Field(None, description="--energy-price, where set.")
    carbon_grams: float | None = Field(None, description="gCO2e of energy_joules.")
    cost: float | None = Field(None, description="Cost of energy_joules.")
    lease_seconds: float | None = Field(
        None,
        description="Windows: the lease its client renews (POST /windows/ID/renew) or it ends "
        "lease_expired; None without one.",
    )
    lease_expires_at: float | None = Field(
        None, description="Windows: Unix time an open window's lease lapses unless renewed; None once ended."
    )
    #: What the workload did beside its energy, e.g. a stress run's throughput.
    workload: dict[str, float | str | None] = Field(
        {}, description="What the workload did beside its energy (a stress run: throughput, unit, work)."
    )
    attribution: WorkloadView | None = Field(
        None,
        description="Workload recordings: the workload (kind, id, user, steps, start and end) and the "
        "energy split to it per device and CPU, as GET /workloads/KIND/ID answers; None otherwise.",
    )


#: Points written per pydantic call by :func:`recording_json`.
POINTS_PER_PIECE = 1024
_POINTS: TypeAdapter[list[Point]] = TypeAdapter(list[Point])


def recording_json(recording: Recording) -> bytes:
    """``recording.model_dump_json()``, written a target and ``POINTS_PER_PIECE`` points at a time.
    One pydantic call holds the GIL throughout, and megabytes of points took it for 20 ms on end:
    the event loop serving scrapes could not run meanwhile. The pieces are joined where the shell's
    empty list stands (a key with an empty list, which no string value can spell unescaped)."""
    targets = b",".join(_target_json(target) for target in recording.targets)
    shell = recording.model_copy(update={"targets": []}).model_dump_json().encode()
    return shell.replace(b'"targets":[]', b'"targets":[' + targets + b"]", 1)


def _target_json(target: TargetRecording) -> bytes:
    points = b",".join(
        _POINTS.dump_json(target.points[start : start + POINTS_PER_PIECE])[1:-1]
        for start in range(0, len(target.points), POINTS_PER_PIECE)
    )
    shell = target.model_copy(update={"points": []}).model_dump_json().encode()
    return shell.replace(b'"points":[]', b'"points":[' + points + b"]", 1)

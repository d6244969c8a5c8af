"""The versioned recording schema shared by stress results, energy windows and ``warptd profile``.

Absent figures are ``None`` (never 0): a device without a temperature sensor has no peak temperature.
Times in a recording's samples are seconds since the recording started; everything else is in base
units (W, J, s, °C, Hz, ratios 0..1).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: Bumped whenever a field changes meaning or goes away; adding optional fields keeps it.
SCHEMA_VERSION = 1

RecordingKind = Literal["window", "profile", "stress"]
TargetKind = Literal["device", "domain"]
EnergySource = Literal["counter", "integrated"]


class Point(BaseModel):
    """One sample of one device or domain, as the samplers read it."""

    model_config = ConfigDict(extra="forbid")

    t: float = Field(description="Seconds since the recording started (monotonic clock).")
    power_watts: float | None = Field(None, description="Most instantaneous power reading.")
    energy_joules: float | None = Field(
        None, description="Energy used since the recording started (from the monotonic total)."
    )
    temperature_celsius: float | None = Field(None, description="Hottest sensor of the device.")
    utilization_ratio: float | None = None
    clocks_hertz: dict[str, float] = {}
    #: Activity ratios where exported (NVIDIA GPM: sm_active, sm_occupancy, dram_bandwidth, pipe_*).
    activity: dict[str, float] = {}
    throttle_active: list[str] = Field([], description="Throttle reasons active at this sample.")


class TargetRecording(BaseModel):
    """What one device (``nvidia:0``) or power domain (``rapl:package-0``) did during a recording."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="backend:index for devices, source:domain for power domains.")
    kind: TargetKind
    backend: str
    model: str | None = None
    uuid: str | None = None
    samples: int = Field(0, description="Number of samples taken while recording.")
    up: bool = Field(True, description="False when the device was lost before the recording ended.")
    energy_joules: float | None = Field(
        None, description="Energy used: the counter delta where a counter exists, else integrated power."
    )
    energy_source: EnergySource | None = None
    energy_counter_joules: float | None = Field(None, description="Delta of the hardware energy counter.")
    energy_integrated_joules: float | None = Field(
        None, description="Trapezoidal integral of the power readings over the recording."
    )
    energy_disagreement_ratio: float | None = Field(
        None, description="|counter - integrated| / counter, where both exist."
    )
    power_mean_watts: float | None = None
    power_peak_watts: float | None = Field(None, description="Peak of the instantaneous readings.")
    temperature_peak_celsius: float | None = None
    utilization_mean_ratio: float | None = None
    activity_mean: dict[str, float] = {}
    throttle_seconds: dict[str, float] = {}
    carbon_grams: float | None = None
    cost: float | None = None
    points: list[Point] = []


class Recording(BaseModel):
    """A recording: identity, time span, per-target summaries and time series, optional workload."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    kind: RecordingKind
    id: str
    name: str
    labels: dict[str, str] = {}
    status: Literal["open", "ended"] = "ended"
    end_reason: str | None = Field(
        None, description="ended (asked), max_duration, command_exited, finished, failed, …"
    )
    started_at: float = Field(description="Unix time the recording started.")
    ended_at: float | None = Field(None, description="Unix time it ended; None while open.")
    duration_seconds: float
    interval_seconds: float | None = Field(None, description="Sampling interval while recording.")
    targets: list[TargetRecording] = []
    energy_joules: float | None = Field(
        None,
        description="Sum over devices and top-level domains that do not nest in one another "
        "(CPU packages, not psys nor core).",
    )
    carbon_intensity_g_per_kwh: float | None = None
    energy_price_per_kwh: float | None = None
    carbon_grams: float | None = None
    cost: float | None = None
    #: What the workload did beside its energy, e.g. a stress run's throughput.
    workload: dict[str, float | str | None] = {}

"""What the ordinary samplers recorded for a device during a stress run, summarised as it goes.

Only running aggregates are kept (count, sums, peaks, first and last totals), so an hour-long
run at a 1 s interval costs the same few hundred bytes as a short one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pydantic import BaseModel

from warptd.power.base import DomainPower
from warptd.sampling.snapshot import DeviceSample


class RunTelemetry(BaseModel):
    """The telemetry part of a stress result; absent figures are ``None``, never 0."""

    samples: int
    power_mean_watts: float | None = None
    power_peak_watts: float | None = None
    energy_joules: float | None = None
    energy_source: str | None = None  # "counter", "integrated" or a power source such as "rapl"
    temperature_peak_celsius: float | None = None
    utilization_mean_ratio: float | None = None
    throttle_seconds: dict[str, float] = {}


@dataclass
class _Series:
    """Mean and peak of a stream of values."""

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


@dataclass
class _Delta:
    """First and last of a monotonic total (energy, throttle seconds)."""

    first: float | None = None
    last: float | None = None
    readings: int = 0

    def add(self, value: float | None) -> None:
        if value is None:
            return
        if self.first is None:
            self.first = value
        self.last = value
        self.readings += 1

    @property
    def delta(self) -> float | None:
        return (
            self.last - self.first
            if self.readings >= 2 and self.last is not None and self.first is not None
            else None
        )


def _package_domains(domains: list[DomainPower]) -> list[DomainPower]:
    """Top-level CPU domains that do not overlap: packages (psys would double count them)."""
    return [d for d in domains if d.domain.startswith("package-")]


@dataclass
class TelemetryRecorder:
    """Aggregates device samples (and, for devices without their own power, the companion power
    backend's package domains) from the moment the timed part of a run starts until it ends."""

    recording: bool = False
    samples: int = 0
    power: _Series = field(default_factory=_Series)
    domain_power: _Series = field(default_factory=_Series)
    temperature: _Series = field(default_factory=_Series)
    utilization: _Series = field(default_factory=_Series)
    energy: _Delta = field(default_factory=_Delta)
    energy_from_counter: bool = False
    domain_energy: dict[str, _Delta] = field(default_factory=dict)
    domain_source: str | None = None
    throttle: dict[str, _Delta] = field(default_factory=dict)
    throttle_seen: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_device(self, sample: DeviceSample) -> None:
        reading = sample.reading
        with self._lock:
            if not self.recording or not reading.up:
                return
            self.samples += 1
            self.power.add(reading.power_watts)
            for celsius in reading.temperatures_celsius.values():
                self.temperature.add(celsius)
            self.utilization.add(reading.utilization.compute if reading.utilization else None)
            self.energy.add(sample.energy_joules)
            self.energy_from_counter = reading.energy_counter_joules is not None
            for reason, seconds in sample.throttle_seconds.items():
                self.throttle.setdefault(reason, _Delta()).add(seconds)
            self.throttle_seen.update(r for r, active in reading.throttle_active.items() if active)

    def add_domains(self, domains: list[DomainPower]) -> None:
        packages = _package_domains(domains)
        with self._lock:
            if not self.recording or not packages:
                return
            powers = [d.power_watts for d in packages if d.power_watts is not None]
            self.domain_power.add(sum(powers) if powers else None)
            for domain in packages:
                self.domain_energy.setdefault(domain.domain, _Delta()).add(domain.energy_joules)
            self.domain_source = str(packages[0].source)

    def summary(self) -> RunTelemetry:
        with self._lock:
            power = self.power if self.power.count else self.domain_power
            energy, source = self.energy.delta, None
            if energy is not None:
                source = "counter" if self.energy_from_counter else "integrated"
            else:
                deltas = [d.delta for d in self.domain_energy.values() if d.delta is not None]
                if deltas:
                    energy, source = sum(deltas), self.domain_source
            seconds = {r: round(d.delta, 3) for r, d in self.throttle.items() if d.delta}
            for reason in self.throttle_seen:
                seconds.setdefault(reason, 0.0)
            return RunTelemetry(
                samples=self.samples,
                power_mean_watts=power.mean,
                power_peak_watts=power.peak,
                energy_joules=energy,
                energy_source=source,
                temperature_peak_celsius=self.temperature.peak,
                utilization_mean_ratio=self.utilization.mean,
                throttle_seconds=dict(sorted(seconds.items())),
            )

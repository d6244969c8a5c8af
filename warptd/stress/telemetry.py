"""What the ordinary samplers recorded for a device during a stress run, summarised."""

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


def _package_domains(domains: list[DomainPower]) -> list[DomainPower]:
    """Top-level CPU domains that do not overlap: packages (psys would double count them)."""
    return [d for d in domains if d.domain.startswith("package-")]


@dataclass
class TelemetryRecorder:
    """Collects device samples (and, for devices without their own power, the companion power
    backend's domains) from the moment the workload's timed part starts until it ends."""

    device_samples: list[DeviceSample] = field(default_factory=list)
    domain_samples: list[list[DomainPower]] = field(default_factory=list)
    recording: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_device(self, sample: DeviceSample) -> None:
        with self._lock:
            if self.recording and sample.reading.up:
                self.device_samples.append(sample)

    def add_domains(self, domains: list[DomainPower]) -> None:
        with self._lock:
            if self.recording:
                self.domain_samples.append(_package_domains(domains))

    def summary(self) -> RunTelemetry:
        with self._lock:
            devices, domains = list(self.device_samples), [d for d in self.domain_samples if d]
        out = RunTelemetry(samples=len(devices))
        powers = [s.reading.power_watts for s in devices if s.reading.power_watts is not None]
        if not powers and domains:
            powers = [
                sum(d.power_watts for d in ds if d.power_watts is not None)
                for ds in domains
                if any(d.power_watts is not None for d in ds)
            ]
        if powers:
            out.power_mean_watts = sum(powers) / len(powers)
            out.power_peak_watts = max(powers)
        out.energy_joules, out.energy_source = _energy(devices, domains)
        temps = [t for s in devices for t in s.reading.temperatures_celsius.values()]
        out.temperature_peak_celsius = max(temps) if temps else None
        utils = [
            s.reading.utilization.compute
            for s in devices
            if s.reading.utilization is not None and s.reading.utilization.compute is not None
        ]
        out.utilization_mean_ratio = sum(utils) / len(utils) if utils else None
        out.throttle_seconds = _throttle(devices)
        return out


def _energy(devices: list[DeviceSample], domains: list[list[DomainPower]]) -> tuple[float | None, str | None]:
    energies = [s for s in devices if s.energy_joules is not None]
    if len(energies) >= 2:
        source = "counter" if energies[-1].reading.energy_counter_joules is not None else "integrated"
        return (energies[-1].energy_joules or 0.0) - (energies[0].energy_joules or 0.0), source
    if len(domains) >= 2:
        first = {d.domain: d.energy_joules for d in domains[0] if d.energy_joules is not None}
        last = {d.domain: d.energy_joules for d in domains[-1] if d.energy_joules is not None}
        common = first.keys() & last.keys()
        if common:
            return sum(last[k] - first[k] for k in common), str(domains[-1][0].source)  # type: ignore[operator]
    return None, None


def _throttle(devices: list[DeviceSample]) -> dict[str, float]:
    """Seconds per reason during the run (counter deltas), plus reasons seen active at all."""
    if not devices:
        return {}
    first, last = devices[0].throttle_seconds, devices[-1].throttle_seconds
    seconds = {
        r: round(last[r] - first.get(r, last[r]), 3) for r in last if last[r] - first.get(r, last[r]) > 0
    }
    for sample in devices:
        for reason, active in sample.reading.throttle_active.items():
            if active:
                seconds.setdefault(reason, 0.0)
    return dict(sorted(seconds.items()))

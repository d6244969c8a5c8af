"""A stress run's recording: the shared :class:`Recorder` over the job's device (and, for a device
without its own power, the companion power backend's package domains), summarised as the stress
API's ``telemetry`` always was."""

from __future__ import annotations

import time
from collections.abc import Iterable

from warptd.models import WireModel
from warptd.power.base import DomainPower
from warptd.recording.recorder import Recorder, Target, is_top_level_domain
from warptd.recording.schema import Recording, TargetRecording
from warptd.sampling.snapshot import DeviceSample


class RunTelemetry(WireModel):
    """The telemetry part of a stress result; absent figures are ``None``, never 0."""

    samples: int
    power_mean_watts: float | None = None
    power_peak_watts: float | None = None
    energy_joules: float | None = None
    energy_source: str | None = None  # "counter", "integrated" or a power source such as "rapl"
    temperature_peak_celsius: float | None = None
    utilization_mean_ratio: float | None = None
    throttle_seconds: dict[str, float] = {}


class TelemetryRecorder:
    """Records the device's samples and its companions' package domains between start and stop."""

    def __init__(self, recording: bool = False, device: Target | None = None, name: str = "stress") -> None:
        self.device = device or Target("device", "device", "0")
        self.recorder = Recorder([self.device], kind="stress", name=name)
        if recording:
            self.recorder.start()

    @property
    def recording(self) -> bool:
        return self.recorder.recording

    @recording.setter
    def recording(self, value: bool) -> None:
        if value:
            self.recorder.start()
        else:
            self.recorder.stop("finished")

    def finish(self, reason: str, error: str | None = None) -> Recording:
        """End the recording (started or not: a run that failed while it started is ended too) and
        hand it over with why it ended and, for a failure, its error."""
        self.recorder.stop(reason)
        return self.recording_view().model_copy(update={"error": error})

    def add_device(self, sample: DeviceSample, at: float | None = None) -> None:
        self.recorder.add_device(self.device, sample, time.monotonic() if at is None else at)

    def add_domains(
        self, domains: list[DomainPower], at: float | None = None, backend: str = "power"
    ) -> None:
        """The package domains of a power backend that measures the device (RAPL for the CPU)."""
        at = time.monotonic() if at is None else at
        for domain in domains:
            if is_top_level_domain(domain.domain):
                target = Target("domain", backend, domain.domain, source=str(domain.source))
                self.recorder.add_target(target)
                self.recorder.add_domain(target, domain, at)

    def recording_view(self) -> Recording:
        return self.recorder.recording_now()

    def summary(self) -> RunTelemetry:
        return summarize(self.recording_view())


def summarize(recording: Recording) -> RunTelemetry:
    """The stress API's telemetry from a recording: the device's figures, or its package domains'
    power and energy (summed) where the device reports none."""
    device = next(t for t in recording.targets if t.kind == "device")
    domains = [t for t in recording.targets if t.kind == "domain"]
    power_mean, power_peak = device.power_mean_watts, device.power_peak_watts
    if power_mean is None:
        power_mean, power_peak = (
            _sum(d.power_mean_watts for d in domains),
            _sum(d.power_peak_watts for d in domains),
        )
    energy, source = device.energy_joules, device.energy_source
    if energy is None:
        energy = _sum(d.energy_joules for d in domains)
        source = _source(domains) if energy is not None else None
    return RunTelemetry(
        samples=device.samples,
        power_mean_watts=power_mean,
        power_peak_watts=power_peak,
        energy_joules=energy,
        energy_source=source,
        temperature_peak_celsius=device.temperature_peak_celsius,
        utilization_mean_ratio=device.utilization_mean_ratio,
        throttle_seconds={r: round(s, 3) for r, s in device.throttle_seconds.items()},
    )


def _sum(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _source(domains: list[TargetRecording]) -> str | None:
    """The power source a domain id names (``rapl`` of ``rapl:package-0``)."""
    return domains[0].id.partition(":")[0] if domains else None

"""What a person reads first about a recording, per device: energy and where it came from, power,
time throttled. Plain figures and words (no plotly, no HTML), shared by the report and the comparison.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from warptd.recording.schema import Point, Recording, TargetRecording

#: How each energy method reads on a page (schema 2 added power_times_duration: one sample's power
#: over the span); a method this warptd does not know is shown as it is named.
ENERGY_SOURCES = {
    "counter": "energy counter",
    "integrated": "integrated power",
    "power_times_duration": "power \N{MULTIPLICATION SIGN} duration",
}
#: Why a recording ended, as words; ``ended`` alone is a window ended when asked (before ``requested``).
END_REASONS = {
    "ended": "",
    "requested": "requested by its client",
    "command_exited": "the command exited",
    "max_duration": "reached its maximum duration",
    "shutdown": "the daemon shut down",
    "workload_ended": "the workload ended",
}


def energy_source(target: TargetRecording) -> str | None:
    """Which method gave the target's energy, in words; None where nothing says."""
    method = target.energy_source
    if not method:
        return None
    return ENERGY_SOURCES.get(str(method), str(method).replace("_", " "))


def status_text(recording: Recording) -> str:
    """``open``, ``ended`` or ``ended: the command exited``: the end reason only where it adds something."""
    reason = recording.end_reason
    if recording.status != "ended" or not reason or reason == recording.status:
        return recording.status
    words = END_REASONS.get(reason, reason.replace("_", " "))
    return f"ended: {words}" if words else "ended"


def throttle_intervals(points: list[Point], reason: str | None, tail: float) -> list[tuple[float, float]]:
    """The (start, end) spans in which ``reason`` (any reason, for None) was active: a sample's state
    holds until the next sample, and the last one for ``tail`` seconds; touching spans merge."""
    spans: list[tuple[float, float]] = []
    for i, point in enumerate(points):
        active = bool(point.throttle_active) if reason is None else reason in point.throttle_active
        if not active:
            continue
        end = points[i + 1].t if i + 1 < len(points) else point.t + tail
        if spans and spans[-1][1] >= point.t:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((point.t, end))
    return spans


def recorded_seconds(recording: Recording, target: TargetRecording) -> float:
    """How long the target was recorded: the whole recording, or until its last sample if it was lost."""
    if target.up or not target.points:
        return recording.duration_seconds
    return max(p.t for p in target.points)


def sample_tail(recording: Recording, target: TargetRecording, points: list[Point]) -> float:
    """How long the last sample's state lasts: the interval, else the median spacing, but only up
    to the end of the target's recording, never beyond it."""
    if recording.interval_seconds:
        tail = recording.interval_seconds
    else:
        gaps = sorted(b.t - a.t for a, b in itertools.pairwise(points))
        tail = gaps[len(gaps) // 2] if gaps else 0.0
    return max(0.0, min(tail, recorded_seconds(recording, target) - points[-1].t)) if points else tail


def throttled_seconds(recording: Recording, target: TargetRecording) -> float:
    """Seconds any throttle reason was active. Reasons overlap, so from the samples where there are
    any (to their resolution); without samples, the longest single reason (a lower bound)."""
    points = sorted(target.points, key=lambda p: p.t)
    if not points:
        return max(target.throttle_seconds.values(), default=0.0)
    tail = sample_tail(recording, target, points)
    return sum(end - start for start, end in throttle_intervals(points, None, tail))


@dataclass(frozen=True, slots=True)
class DeviceGlance:
    """One device's or domain's headline figures."""

    id: str
    energy_joules: float | None
    energy_source: str | None
    power_mean_watts: float | None
    power_peak_watts: float | None
    throttled_seconds: float
    carbon_grams: float | None
    cost: float | None


def glance(recording: Recording) -> list[DeviceGlance]:
    """Each target's headline figures, in the recording's order."""
    return [
        DeviceGlance(
            id=t.id,
            energy_joules=t.energy_joules,
            energy_source=energy_source(t),
            power_mean_watts=t.power_mean_watts,
            power_peak_watts=t.power_peak_watts,
            throttled_seconds=throttled_seconds(recording, t),
            carbon_grams=t.carbon_grams,
            cost=t.cost,
        )
        for t in recording.targets
    ]


def energy_text(joules: float) -> str:
    """Joules as joules, grouped by thousands: ``812.4 J``, ``12,345 J`` (a tenth only below 1 kJ)."""
    return f"{joules:,.1f} J" if abs(joules) < 1000 else f"{joules:,.0f} J"


def energy_label(device: DeviceGlance) -> list[str]:
    """The lines an energy bar carries: joules, its source, and CO2e and cost where given."""
    if device.energy_joules is None:
        return []
    lines = [energy_text(device.energy_joules)]
    if device.energy_source:
        lines.append(device.energy_source)
    if device.carbon_grams is not None:
        lines.append(f"{device.carbon_grams:,.3g} g CO2e")
    if device.cost is not None:
        lines.append(f"cost {device.cost:,.4g}")
    return lines

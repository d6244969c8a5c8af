"""Two recordings side by side, as figures and ratios B/A: "did my change save energy?".

Devices and domains are matched by id (``nvidia:0`` with ``nvidia:0``); one that only one recording
has is kept, with the other side absent, and named in ``only_a``/``only_b``. Plain data, no plotly.
"""

from __future__ import annotations

from dataclasses import dataclass

from warptd.recording.glance import DeviceGlance, glance, recorded_seconds
from warptd.recording.schema import Recording


@dataclass(frozen=True, slots=True)
class Pair:
    """One figure in A and in B (None where that side has none), and B/A where both exist and A is not 0."""

    a: float | None
    b: float | None

    @property
    def ratio(self) -> float | None:
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a


@dataclass(frozen=True, slots=True)
class Measure:
    """A named figure compared: ``energy`` in ``J``."""

    name: str
    unit: str
    pair: Pair


@dataclass(frozen=True, slots=True)
class DeviceComparison:
    """One device or domain in both runs (or one): energy, time recorded, mean and peak power, throttled."""

    id: str
    measures: tuple[Measure, ...]

    def measure(self, name: str) -> Pair:
        return next(m.pair for m in self.measures if m.name == name)


@dataclass(frozen=True, slots=True)
class Comparison:
    """Run A and run B: their totals, their devices matched by id, and the ids only one of them has."""

    a: Recording
    b: Recording
    totals: tuple[Measure, ...]
    devices: tuple[DeviceComparison, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]


#: What each device is compared by, in the table's order: name, unit.
DEVICE_MEASURES = (
    ("energy", "J"),
    ("time", "s"),
    ("mean power", "W"),
    ("peak power", "W"),
    ("throttled", "s"),
)


def _figures(recording: Recording) -> dict[str, dict[str, float | None]]:
    """Each target's compared figures by id."""
    seconds = {t.id: recorded_seconds(recording, t) for t in recording.targets}

    def row(device: DeviceGlance) -> dict[str, float | None]:
        return {
            "energy": device.energy_joules,
            "time": seconds[device.id],
            "mean power": device.power_mean_watts,
            "peak power": device.power_peak_watts,
            "throttled": device.throttled_seconds,
        }

    return {device.id: row(device) for device in glance(recording)}


def compare(a: Recording, b: Recording) -> Comparison:
    """A and B side by side: devices in A's order, then those only B has."""
    figures_a, figures_b = _figures(a), _figures(b)
    ids = list(figures_a) + [i for i in figures_b if i not in figures_a]
    devices = tuple(
        DeviceComparison(
            target_id,
            tuple(
                Measure(
                    name,
                    unit,
                    Pair(figures_a.get(target_id, {}).get(name), figures_b.get(target_id, {}).get(name)),
                )
                for name, unit in DEVICE_MEASURES
            ),
        )
        for target_id in ids
    )
    totals = (
        Measure("duration", "s", Pair(a.duration_seconds, b.duration_seconds)),
        Measure("energy", "J", Pair(a.energy_joules, b.energy_joules)),
        Measure("carbon", "g CO2e", Pair(a.carbon_grams, b.carbon_grams)),
        Measure("cost", "", Pair(a.cost, b.cost)),
    )
    return Comparison(
        a=a,
        b=b,
        totals=totals,
        devices=devices,
        only_a=tuple(i for i in figures_a if i not in figures_b),
        only_b=tuple(i for i in figures_b if i not in figures_a),
    )

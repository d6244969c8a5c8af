"""Running aggregates of a stream of readings: exact for a whole recording however long it runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from warptd.recording.series import Layout


@dataclass(slots=True)
class Mean:
    """Mean and peak of a stream of values; None values are not counted."""

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


@dataclass(slots=True)
class Span:
    """First and last value of a monotonic total (energy, throttle seconds)."""

    first: float | None = None
    last: float | None = None

    def add(self, value: float | None) -> None:
        if value is not None:
            self.first = value if self.first is None else self.first
            self.last = value

    @property
    def delta(self) -> float | None:
        return None if self.first is None or self.last is None else self.last - self.first


@dataclass(slots=True)
class Trapezoid:
    """Integral of power over the sample times; a missing reading breaks it (nothing across gaps)."""

    joules: float | None = None
    last: tuple[float, float] | None = None

    def add(self, at: float, watts: float | None) -> None:
        if watts is None:
            self.last = None
            return
        if self.joules is None:
            self.joules = 0.0
        if self.last is not None and at > self.last[0]:
            self.joules += (self.last[1] + watts) / 2 * (at - self.last[0])
        self.last = (at, watts)


@dataclass(slots=True)
class ActivitySums:
    """Sums and counts of the activity ratios: while a device's keys stay the same (nearly always)
    a sample is added in one ``map`` over the run's totals; when they change, the run is folded."""

    layout: Layout | None = None
    totals: list[float] = field(default_factory=list)
    count: int = 0
    folded: dict[str, tuple[int, float]] = field(default_factory=dict)  # key -> (count, total)

    def add(self, layout: Layout, ratios: tuple[float, ...]) -> None:
        if layout is not self.layout:
            self.fold()
            self.layout, self.totals, self.count = layout, [0.0] * len(ratios), 0
        self.totals = list(map(float.__add__, self.totals, ratios))
        self.count += 1

    def fold(self) -> None:
        if self.layout is not None and self.count:
            for key, total in zip(self.layout.activity, self.totals, strict=True):
                count, before = self.folded.get(key, (0, 0.0))
                self.folded[key] = (count + self.count, before + total)
        self.layout, self.totals, self.count = None, [], 0

    def means(self) -> dict[str, float]:
        sums = dict(self.folded)
        if self.layout is not None and self.count:
            for key, total in zip(self.layout.activity, self.totals, strict=True):
                count, before = sums.get(key, (0, 0.0))
                sums[key] = (count + self.count, before + total)
        return {key: total / count for key, (count, total) in sorted(sums.items()) if count}

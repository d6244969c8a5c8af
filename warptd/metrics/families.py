"""One prometheus_client metric family per catalog entry, filled while a collector walks its state."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from warptd.metrics import catalog as m
from warptd.metrics.spec import DEVICE_LABELS

_FAMILIES = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily, "histogram": HistogramMetricFamily}


class Families:
    """One metric family per catalog entry, filled in while walking the state to export.

    ``device_extra`` label names follow the device labels of every device metric (--pod-labels).
    """

    def __init__(self, specs: tuple[m.MetricSpec, ...] = m.ALL, device_extra: tuple[str, ...] = ()) -> None:
        self.by_spec: dict[m.MetricSpec, GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily] = {}
        for spec in specs:
            cls = _FAMILIES[spec.type]
            labels = spec.labels
            if device_extra and labels[: len(DEVICE_LABELS)] == DEVICE_LABELS:
                labels = (*DEVICE_LABELS, *device_extra, *labels[len(DEVICE_LABELS) :])
            self.by_spec[spec] = cls(spec.family, spec.help, labels=labels)

    def add(self, spec: m.MetricSpec, labels: list[str], value: float | None) -> None:
        if value is not None:
            self.by_spec[spec].add_metric(labels, value)

    def add_histogram(self, spec: m.MetricSpec, labels: list[str], counts: list[int], total: float) -> None:
        """One histogram series: ``counts`` per bucket of ``spec.buckets`` plus +Inf (not cumulative)."""
        bounds = [*(floatToGoString(b) for b in spec.buckets), "+Inf"]
        cumulative, running = [], 0
        for bound, count in zip(bounds, counts, strict=True):
            running += count
            cumulative.append((bound, running))
        family = self.by_spec[spec]
        assert isinstance(family, HistogramMetricFamily)
        family.add_metric(labels, cumulative, total)

    def nonempty(self) -> Iterator[Metric]:
        return (family for family in self.by_spec.values() if family.samples)

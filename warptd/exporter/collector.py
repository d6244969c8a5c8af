"""A prometheus_client collector that renders the latest snapshot. It never calls a backend."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from warptd import __version__
from warptd.errors import ErrorKind
from warptd.metrics import catalog as m
from warptd.metrics.families import Families
from warptd.models import GPUInfo
from warptd.sampling.snapshot import BackendState, DeviceSample, Snapshot


class SeriesSink(Protocol):
    """Where :meth:`SnapshotCollector.device_values` puts each series: :class:`Families`, or a reader
    of single values (the dcgm-exporter compat collector)."""

    def add(self, spec: m.MetricSpec, labels: list[str], value: float | None) -> None: ...


#: A device's (namespace, pod, container) label values; empty strings where it is not allocated.
PodLabels = Callable[[GPUInfo], tuple[str, str, str]]
# Every kind but not_supported is pre-set to 0, so rate() and alerts work before the first error.
_COUNTED_KINDS = tuple(k for k in ErrorKind if k is not ErrorKind.NOT_SUPPORTED)


class SnapshotCollector(Collector):
    """Renders :class:`Snapshot` into the metric contract of :mod:`warptd.metrics.catalog`."""

    def __init__(self, snapshot: Snapshot, node: str = "", pod_labels: PodLabels | None = None) -> None:
        self.snapshot = snapshot
        self.node = node
        #: With --pod-labels: the namespace, pod and container values of a device's series.
        self.pod_labels = pod_labels

    def collect(self) -> Iterator[Metric]:
        families = Families(device_extra=m.POD_LABELS if self.pod_labels else ())
        now = time.time()
        families.add(m.BUILD_INFO, [__version__, platform.python_version()], 1)
        families.add(m.STATE_SAVE_ERRORS, [], self.snapshot.state_save_errors)
        for state in self.snapshot.states():
            fresh = self.snapshot.is_fresh(state, now)
            self._self_metrics(families, state, fresh)
            if not fresh:
                continue  # stale: drop its series rather than serve frozen values
            if state.has_devices:
                self._devices(families, state)
            else:
                self._domains(families, state)
        yield from families.nonempty()

    @staticmethod
    def _self_metrics(families: Families, state: BackendState, fresh: bool) -> None:
        name = state.name
        families.add(m.BACKEND_UP, [name, state.kind], 1 if fresh else 0)
        families.add(m.SAMPLE_DURATION, [name], state.last_duration)
        families.add(m.SAMPLES, [name], state.samples)
        families.add(m.LAST_SAMPLE, [name], state.last_success)
        for kind in _COUNTED_KINDS:
            families.add(m.SAMPLE_ERRORS, [name, str(kind), ""], state.errors.get(kind, 0))
        for (index, kind), count in sorted(state.device_errors.items()):
            families.add(m.SAMPLE_ERRORS, [name, str(kind), str(index)], count)
        families.add(m.ENERGY_DROPPED, [name], state.energy_dropped_joules)
        families.add(m.ENERGY_OVERCOUNT, [name], state.energy_overcount_joules)
        reads = [s.energy_read_at for s in state.devices if s.energy_read_at is not None]
        families.add(m.ENERGY_READ_OLDEST, [name], min(reads) if reads else None)
        for kind, cost in state.read_costs.items():
            families.add(m.READ_CPU, [name, kind], cost.cpu_seconds)
            families.add(m.READS, [name, kind], cost.reads)

    def _devices(self, families: Families, state: BackendState) -> None:
        infos = {info.index: info for info in state.devices_info}
        for sample in state.devices:
            reading = sample.reading
            ids = [state.name, str(reading.index), reading.uuid]
            info = infos.get(reading.index)
            if self.pod_labels is not None:
                ids += self.pod_labels(info) if info is not None else ("", "", "")
            if info is not None:
                identity = [
                    info.model,
                    info.driver_version,
                    info.compute_capability,
                    info.pci_bus_id,
                    self.node,
                    str(state.source or ""),
                ]
                families.add(m.DEVICE_INFO, ids + [v or "" for v in identity], 1)
            families.add(m.DEVICE_UP, ids, 1 if reading.up else 0)
            if reading.up:
                self.device_values(families, ids, sample)

    @staticmethod
    def device_values(families: SeriesSink, ids: list[str], sample: DeviceSample) -> None:
        """Every value series of one device that is up, labelled ``ids`` plus the metric's own labels."""
        reading = sample.reading
        if reading.memory is not None:
            families.add(m.MEMORY_TOTAL, ids, reading.memory.total)
            families.add(m.MEMORY_USED, ids, reading.memory.used)
            families.add(m.MEMORY_FREE, ids, reading.memory.free)
            families.add(m.MEMORY_RESERVED, ids, reading.memory.reserved)
        if reading.utilization is not None:
            families.add(m.UTILIZATION, ids, reading.utilization.compute)
            families.add(m.MEMORY_UTILIZATION, ids, reading.utilization.memory)
        families.add(m.POWER, ids, reading.power_watts)
        families.add(m.POWER_AVERAGE, ids, reading.power_average_watts)
        families.add(m.POWER_LIMIT, ids, reading.power_limit_watts)
        families.add(m.ENERGY, ids, sample.energy_joules)
        families.add(m.ENERGY_READ, ids, sample.energy_read_at)
        for sensor, celsius in reading.temperatures_celsius.items():
            families.add(m.TEMPERATURE, [*ids, sensor], celsius)
        for clock, hertz in reading.clocks_hertz.items():
            families.add(m.CLOCK, [*ids, clock], hertz)
        for reason, active in reading.throttle_active.items():
            families.add(m.THROTTLE_ACTIVE, [*ids, reason], 1 if active else 0)
        for reason, seconds in sample.throttle_seconds.items():
            families.add(m.THROTTLE_SECONDS, [*ids, reason], seconds)
        for reason, active in reading.clock_events_active.items():
            families.add(m.CLOCK_EVENT_ACTIVE, [*ids, reason], 1 if active else 0)
        for values_by_metric in (reading.gauges, sample.counters):
            for name, values in values_by_metric.items():
                spec = m.BY_NAME[name]
                for labels, value in values.items():
                    families.add(spec, [*ids, *labels], value)

    @staticmethod
    def _domains(families: Families, state: BackendState) -> None:
        for domain in state.domains:
            labels = [str(domain.source), domain.domain]
            families.add(m.DOMAIN_UP, labels, 1 if domain.readable else 0)
            families.add(m.DOMAIN_POWER, labels, domain.power_watts)
            families.add(m.DOMAIN_ENERGY, labels, domain.energy_joules)

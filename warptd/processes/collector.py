"""Per-process device memory and utilization, as the process monitor last saw them (no NVML call)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from warptd.metrics import catalog as m
from warptd.metrics.families import Families
from warptd.processes.nvml import ProcessMonitor


class ProcessesCollector(Collector):
    """Copies the monitor's last list of compute processes into their series."""

    def __init__(self, monitor: ProcessMonitor) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[Metric]:
        families = Families((m.PROCESS_MEMORY, m.PROCESS_UTILIZATION))
        backend = self.monitor.backend
        for p in self.monitor.processes():
            labels = [backend, str(p.index), p.uuid, str(p.pid), p.pod_uid, p.container_id]
            families.add(m.PROCESS_MEMORY, labels, p.memory_bytes)
            for engine, ratio in (p.utilization or {}).items():
                families.add(m.PROCESS_UTILIZATION, [*labels, engine], ratio)
        yield from families.nonempty()

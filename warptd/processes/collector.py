"""Per-process device memory and utilization, as the process monitor last saw them (no NVML call), and
the processes the device-file scanner could not read."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from warptd.metrics import catalog as m
from warptd.metrics.families import Families
from warptd.processes.device_files import DeviceFiles
from warptd.processes.source import ListsProcesses


class ProcessesCollector(Collector):
    """Copies the monitor's last list of compute processes into their series."""

    def __init__(self, monitor: ListsProcesses) -> None:
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


class DeviceFilesCollector(Collector):
    """How many processes the device-file scanner could not read (never scans at scrape time)."""

    def __init__(self, files: DeviceFiles) -> None:
        self.files = files

    def collect(self) -> Iterator[Metric]:
        families = Families((m.WORKLOAD_UNREADABLE_PROCESSES,))
        families.add(m.WORKLOAD_UNREADABLE_PROCESSES, [], self.files.unreadable)
        yield from families.nonempty()

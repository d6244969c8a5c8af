"""Per-process device memory and utilization, as the process monitor last saw them (no NVML call), and
the processes the device-file scanner could not read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from warptd.metrics import catalog as m
from warptd.metrics.families import Families
from warptd.processes.device_files import DeviceFiles

if TYPE_CHECKING:
    from warptd.processes.nvml import GpuProcess, SmUsage


@runtime_checkable
class ListsProcesses(Protocol):
    """A process source that lists each process with its memory and engine use: the series of
    ``--processes``, and each container's SM use for the pods sharing a GPU."""

    backend: str
    interval: float

    def processes(self) -> list[GpuProcess]:
        """Every process of the latest poll, as its series show it (capped per device)."""
        ...

    def sm_usage(self, uuid: str) -> SmUsage | None:
        """The SM use of each holder of device ``uuid`` at the latest poll, None where unknown."""
        ...


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

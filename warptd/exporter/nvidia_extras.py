"""NVIDIA extras: XID error counters and per-process memory and utilization, read from their monitors.

Both monitors run on threads of their own; collecting only copies what they last saw (no NVML call).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from warptd.events.xid import XidMonitor
from warptd.exporter import catalog as m
from warptd.exporter.collector import Families
from warptd.processes.nvml import ProcessMonitor


class NvidiaExtrasCollector(Collector):
    def __init__(self, xid: XidMonitor | None = None, processes: ProcessMonitor | None = None) -> None:
        self.xid = xid
        self.processes = processes

    def collect(self) -> Iterator[Metric]:
        families = Families((m.XID_ERRORS, m.LAST_XID, m.PROCESS_MEMORY, m.PROCESS_UTILIZATION))
        if self.xid is not None:
            for device in self.xid.devices():
                ids = [self.xid.backend, str(device.index), device.uuid]
                for xid, count in sorted(device.counts.items()):
                    families.add(m.XID_ERRORS, [*ids, str(xid)], count)
                families.add(m.LAST_XID, ids, device.last_event)
        if self.processes is not None:
            backend = self.processes.backend
            for p in self.processes.processes():
                labels = [backend, str(p.index), p.uuid, str(p.pid), p.pod_uid, p.container_id]
                families.add(m.PROCESS_MEMORY, labels, p.memory_bytes)
                for engine, ratio in (p.utilization or {}).items():
                    families.add(m.PROCESS_UTILIZATION, [*labels, engine], ratio)
        yield from families.nonempty()

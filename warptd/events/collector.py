"""XID error counters and each GPU's last XID, as the event monitor last saw them (no NVML call)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from warptd.events.xid import XidMonitor
from warptd.metrics import catalog as m
from warptd.metrics.families import Families


class XidCollector(Collector):
    """Copies the monitor's per-device counts into their series; the monitor runs on its own thread."""

    def __init__(self, monitor: XidMonitor) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[Metric]:
        families = Families((m.XID_ERRORS, m.LAST_XID))
        for device in self.monitor.devices():
            ids = [self.monitor.backend, str(device.index), device.uuid]
            for xid, count in sorted(device.counts.items()):
                families.add(m.XID_ERRORS, [*ids, str(xid)], count)
            families.add(m.LAST_XID, ids, device.last_event)
        yield from families.nonempty()

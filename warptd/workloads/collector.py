"""Workload energy series: each workload's joules by source, the unattributed rest, dropped workloads."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from warptd.metrics import catalog as m
from warptd.metrics.families import Families
from warptd.workloads.energy import ACCELERATOR, CPU, WorkloadEnergy


class WorkloadCollector(Collector):
    """Reads the tracker's totals (no /proc, cgroup or SDK read at scrape time)."""

    def __init__(self, energy: WorkloadEnergy) -> None:
        self.energy = energy

    def collect(self) -> Iterator[Metric]:
        families = Families(m.WORKLOADS)
        for key, user, accelerator, cpu in sorted(self.energy.totals(), key=lambda t: (t[0].kind, t[0].id)):
            labels = [key.kind, key.id, user]
            families.add(m.WORKLOAD_ENERGY, [*labels, ACCELERATOR], accelerator)
            families.add(m.WORKLOAD_ENERGY, [*labels, CPU], cpu)  # None (unreadable): no series
        for source, joules in sorted(self.energy.unattributed().items()):
            families.add(m.WORKLOAD_ENERGY_UNATTRIBUTED, [source], joules)
        families.add(m.WORKLOADS_DROPPED, [], self.energy.dropped)
        yield from families.nonempty()

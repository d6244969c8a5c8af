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
        for view in self.energy.views():
            labels = [view.kind, view.id, view.user]
            families.add(m.WORKLOAD_ENERGY, [*labels, ACCELERATOR], view.accelerator_joules)
            if view.cpu_joules is not None:
                families.add(m.WORKLOAD_ENERGY, [*labels, CPU], view.cpu_joules)
        for source, joules in sorted(self.energy.unattributed().items()):
            families.add(m.WORKLOAD_ENERGY_UNATTRIBUTED, [source], joules)
        families.add(m.WORKLOADS_DROPPED, [], self.energy.dropped)
        yield from families.nonempty()

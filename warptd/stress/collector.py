"""Stress job metrics: what runs now, how runs ended, and the last result per device and test."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from warptd.metrics import catalog as m
from warptd.metrics.families import Families
from warptd.stress.job import JobStatus
from warptd.stress.jobs import JobManager

_FINAL = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
_THROUGHPUT = {"FLOP/s": m.STRESS_LAST_FLOPS, "B/s": m.STRESS_LAST_BYTES}


class StressCollector(Collector):
    def __init__(self, manager: JobManager) -> None:
        self.manager = manager

    def collect(self) -> Iterator[Metric]:
        families = Families(m.STRESS)
        running, runs, last = self.manager.jobs.metrics_view()
        for device in self.manager.catalog.devices.values():
            for test in self.manager.catalog.tests_for(device):  # no series for what cannot run here
                labels = (device.backend, str(device.index), test)
                families.add(m.STRESS_RUNNING, list(labels), 1 if labels in running else 0)
        for test in self.manager.catalog.usable_tests():
            for status in _FINAL:
                families.add(m.STRESS_RUNS, [test, str(status)], runs.get((test, str(status)), 0))
        for labels, job in last:
            if job.workload is not None and job.workload.unit in _THROUGHPUT:
                families.add(_THROUGHPUT[job.workload.unit], list(labels), job.workload.throughput)
            if job.telemetry is not None:
                families.add(m.STRESS_LAST_ENERGY, list(labels), job.telemetry.energy_joules)
            if job.ended_at is not None:
                families.add(m.STRESS_LAST_END, list(labels), job.ended_at.timestamp())
        yield from families.nonempty()

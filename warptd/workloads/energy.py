"""Energy per workload: each device's energy split between the workloads whose processes hold it, and
the CPU packages' energy split by the workloads' cgroup CPU time.

A thread polls (never an SDK: the process sources' latest lists, ``/proc`` and the cgroup tree) and
keeps, per device, who held it and their SM use and memory; the sampler's listener applies each new
energy delta to them with the split pods use (:func:`warptd.processes.shares.split`). What no known
workload takes (idle devices, processes whose cgroup could not be read, workloads over the cap) is
unattributed, so the parts of a device's energy always sum to it. Who holds each device is
holders.py's; which workloads are kept, and for how long, tracked.py's; the CPU shares, cpu.py's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from warptd.config import SLURM_ROOTS
from warptd.config import WORKLOAD_KINDS as KINDS
from warptd.config import WorkloadKind as Kind
from warptd.processes.shares import FRESH_INTERVALS, split
from warptd.recording.schema import WorkloadView
from warptd.sampling.deltas import TotalDeltas
from warptd.sampling.poller import PollingThread
from warptd.workloads.cpu import cgroup_usage_us, node_cpu_us, share_cpu
from warptd.workloads.holders import Held, ProcessLists, ProcessSource, changed_holders
from warptd.workloads.placement import Placement, WorkloadKey, slurm_roots
from warptd.workloads.slurm_tree import job_uid, slurm_jobs
from warptd.workloads.tracked import WorkloadTable, WorkloadTotals
from warptd.workloads.views import WorkloadList

if TYPE_CHECKING:
    from warptd.power.base import DomainPower
    from warptd.sampling.snapshot import DeviceSample
    from warptd.workloads.history import WorkloadHistory

ACCELERATOR, CPU = "accelerator", "cpu"


class WorkloadEnergy:
    """Workloads found on the devices, and the energy each took; a sampler listener and a poller."""

    def __init__(
        self,
        sources: list[ProcessSource],
        procfs: Path,
        cgroupfs: Path,
        *,
        kinds: Collection[Kind] = KINDS,
        retention: float = 600.0,
        max_workloads: int = 1000,
        interval: Callable[[], float] = lambda: 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        listeners: Sequence[WorkloadHistory] = (),
        edge: Callable[[set[tuple[str, str]]], None] = lambda devices: None,
        slurm: Sequence[str] = SLURM_ROOTS,
    ) -> None:
        """``edge``: reads devices ((backend, uuid)) now with every counter exact, when a workload
        begins or ends on them (its recording's energy is then the counter's at those edges)."""
        self.sources = sources
        self._edge = edge
        self.lists = ProcessLists(sources, procfs, cgroupfs, slurm_roots(slurm))  # slurmd's roots
        self.listeners = list(listeners)  # told after each poll and each split (their recordings)
        self.procfs, self.cgroupfs = procfs, cgroupfs
        self.table = WorkloadTable(kinds, max_workloads, retention)
        self._workloads = self.table.workloads  # the split's, read at each sample
        self._interval, self._clock, self._wall = interval, clock, wall
        self._backends = {source.backend for source in sources}
        self._held: dict[tuple[str, str], Held] = {}  # (backend, uuid) -> latest holders
        self._deltas: TotalDeltas[tuple[str, str]] = TotalDeltas()  # (backend, uuid or domain)
        self._unattributed: dict[str, float] = {}
        self._node_cpu_us: float | None = None
        self._cpu_at: float | None = None
        self._lock = threading.Lock()
        #: Held while the listeners are told, taken before ``_lock`` and kept after it is let go: they
        #: hear the polls and splits in the order made, and a scrape (``_lock`` only) never waits on them.
        self._telling = threading.Lock()
        self._poller = PollingThread("warptd-workloads", self.poll, interval)

    @property
    def dropped(self) -> int:
        """Workloads refused over the cap (``--workload-max``), each counted once."""
        return self.table.dropped

    # -- the poll: who holds each device, each workload's CPU share -----------------------------
    def poll(self) -> None:
        """Place every listed process, note who holds each device, and take the CPU shares."""
        listed = self.lists.listed()
        node_cpu = node_cpu_us(self.procfs)
        now, wall = self._clock(), self._wall()
        jobs = self._slurm_jobs()
        table = self.table
        with self._lock:
            table.poll_begins()
            held = {}
            for item in listed:
                keys = {pid: table.track(placement, now, wall) for pid, placement in item.placements.items()}
                held[(item.backend, item.uuid)] = Held.of(item, keys, now)
            edges = changed_holders(self._held, held)
        if edges:  # a workload began or ended there: the energy up to now goes to the holders until now
            self._edge(edges)
        with self._lock:
            self._held = held
            for job in jobs:  # running, on a device or not: their CPU share is theirs
                table.track(job, now, wall)
            table.count_refused()
            cgroups = table.cpu_cgroups()
        usage = {key: cgroup_usage_us(self.cgroupfs, cgroup) for key, cgroup in cgroups.items()}
        with self._telling:
            with self._lock:
                elapsed = (
                    None if node_cpu is None or self._node_cpu_us is None else node_cpu - self._node_cpu_us
                )
                self._node_cpu_us = node_cpu
                share_cpu(self._workloads, usage, cgroups, elapsed)
                if elapsed:
                    self._cpu_at = now
                table.end_and_expire(usage, now, wall)
                told = self._totals_told()
            for listener in self.listeners:
                listener.after_poll(told)

    def _slurm_jobs(self) -> list[Placement]:
        """The Slurm jobs with a cgroup here; the uid of a new one on cgroup v2 from one of its pids."""
        if "slurm_job" not in self.table.kinds:
            return []
        jobs = slurm_jobs(self.cgroupfs, self.lists.slurm)
        with self._lock:
            new = [job for job in jobs if job.key not in self._workloads and job.uid is None and job.cpu]
        for job in new:
            uid = job_uid(self.cgroupfs, self.procfs, job.cpu)  # type: ignore[arg-type]
            jobs[jobs.index(job)] = replace(job, uid=uid)
        return jobs

    # -- the listener: apply each energy delta ----------------------------------------------------
    def on_sample(
        self,
        backend: str,
        devices: list[DeviceSample] | None,
        domains: list[DomainPower] | None,
        at: float | None = None,
    ) -> None:
        with self._telling:
            with self._lock:
                if devices is not None and backend in self._backends:
                    for sample in devices:
                        self._device_energy(backend, sample)
                if domains is not None:
                    self._cpu_energy(backend, domains)
                told = self._totals_told()
            for listener in self.listeners:
                listener.after_sample(backend, devices, domains, at, told)

    def _totals_told(self) -> Mapping[WorkloadKey, WorkloadTotals]:
        """A frozen copy of every workload's totals for the listeners (none without one)."""
        return self.table.frozen() if self.listeners else MappingProxyType({})

    def _fresh(self, at: float | None) -> bool:
        return at is not None and self._clock() - at <= FRESH_INTERVALS * self._interval()

    def _unattribute(self, source: str, joules: float) -> None:
        self._unattributed[source] = self._unattributed.get(source, 0.0) + joules

    def _device_energy(self, backend: str, sample: DeviceSample) -> None:
        reading = sample.reading
        key = (backend, reading.uuid or str(reading.index))  # a device without a uuid: its index
        delta = self._deltas.delta(key, sample.energy_joules)
        if delta <= 0:
            return
        held = self._held.get(key)
        if held is None or not held.holders or not self._fresh(held.at):
            self._unattribute(ACCELERATOR, delta)
            return
        fractions, _ = split(held.holders, held.sm, held.memory)
        device = f"{backend}:{reading.index}"
        for holder, fraction in fractions.items():
            workload = self._workloads.get(holder) if holder is not None else None
            if workload is None:
                self._unattribute(ACCELERATOR, delta * fraction)
            else:
                workload.add_device(device, reading.uuid, delta * fraction)

    def _cpu_energy(self, backend: str, domains: list[DomainPower]) -> None:
        """The CPU packages' joules (RAPL ``package-*``) by each workload's latest CPU share."""
        delta = sum(
            self._deltas.delta((backend, d.domain), d.energy_joules)
            for d in domains
            if d.source == "rapl" and d.domain.startswith("package")
        )
        if delta <= 0:
            return
        given, fresh = 0.0, self._fresh(self._cpu_at)
        for workload in self._workloads.values():
            if workload.cpu_usage_us is not None and workload.ended_at is None:
                share = workload.cpu_share if fresh else 0.0  # stale shares: none of it is known
                workload.add_cpu(delta * share)
                given += delta * share
        self._unattribute(CPU, delta - given)

    # -- what the collector and the endpoints read ------------------------------------------------
    def views(self, offset: int = 0, limit: int | None = None) -> list[WorkloadView]:
        """Every workload from ``offset``, at most ``limit`` (:meth:`WorkloadTable.views`)."""
        with self._lock:
            return self.table.views(offset, limit)

    def view(self, kind: str, workload_id: str) -> WorkloadView | None:
        with self._lock:
            workload = self._workloads.get(WorkloadKey(kind, workload_id))  # type: ignore[arg-type]
            return None if workload is None else workload.view()

    def listing(self, offset: int = 0, limit: int | None = None) -> WorkloadList:
        """One page of :meth:`views`, with how many there are in all and the unattributed energy."""
        views = self.views(offset, limit)
        with self._lock:
            return WorkloadList(
                workloads=views,
                total=len(self._workloads),
                unattributed_joules=dict(self._unattributed),
                dropped=self.dropped,
            )

    def totals(self) -> list[tuple[WorkloadKey, str, float, float | None]]:
        """Each workload's key, user, accelerator and CPU joules (for a scrape: no models built)."""
        with self._lock:
            return [(w.key, w.user, w.accelerator_joules, w.cpu_joules) for w in self._workloads.values()]

    def unattributed(self) -> dict[str, float]:
        with self._lock:
            return dict(self._unattributed)

    def start(self) -> None:
        self._poller.start()

    def stop(self) -> None:
        self._poller.stop()

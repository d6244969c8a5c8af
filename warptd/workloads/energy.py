"""Energy per workload: each device's energy split between the workloads whose processes hold it, and
the CPU packages' energy split by the workloads' cgroup CPU time.

A thread polls (never an SDK: the process sources' latest lists, ``/proc`` and the cgroup tree) and
keeps, per device, who held it and their SM use and memory; the sampler's listener applies each new
energy delta to them with the split pods use (:func:`warptd.processes.shares.split`). What no known
workload takes (idle devices, processes whose cgroup could not be read, workloads over the cap) is
unattributed, so the parts of a device's energy always sum to it. A workload that ends keeps its
totals for ``retention`` seconds, then goes; a pid reused by a new process is read again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from warptd.config import SLURM_ROOTS
from warptd.processes.cgroup import PidCache
from warptd.processes.shares import DeviceProcesses, split
from warptd.sampling.deltas import TotalDeltas
from warptd.sampling.poller import PollingThread
from warptd.workloads.cgroupns import namespace_root
from warptd.workloads.cpu import cgroup_usage_us, node_cpu_us
from warptd.workloads.placement import (
    KINDS,
    CpuCgroup,
    Kind,
    Placement,
    WorkloadKey,
    read_placement,
    slurm_roots,
    user_name,
)
from warptd.workloads.slurm_tree import job_uid, slurm_jobs
from warptd.workloads.tracked import Workload, WorkloadTotals
from warptd.workloads.views import WorkloadList, WorkloadView

if TYPE_CHECKING:
    from warptd.power.base import DomainPower
    from warptd.sampling.snapshot import DeviceSample
    from warptd.workloads.listener import WorkloadListener

#: A poll older than this many intervals tells nothing about the current sample.
_FRESH_INTERVALS = 3.0
ACCELERATOR, CPU = "accelerator", "cpu"
Holders = dict[WorkloadKey | None, float]


class ProcessSource(Protocol):
    """An SDK's process lists per device (:class:`warptd.processes.nvml.ProcessMonitor` for NVIDIA,
    :class:`warptd.processes.amd.AmdProcessMonitor` for AMD)."""

    backend: str
    interval: float

    def devices(self) -> Mapping[str, DeviceProcesses]: ...


@dataclass(frozen=True)
class _Held:
    """Who held one device at a poll, with their SM use and memory (None: no known workload)."""

    at: float
    holders: tuple[WorkloadKey, ...]
    sm: Holders | None
    memory: Holders | None


@dataclass(frozen=True)
class _Listed:
    backend: str
    uuid: str
    processes: DeviceProcesses
    placements: dict[int, Placement | None]


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
        listeners: Sequence[WorkloadListener] = (),
        edge: Callable[[set[tuple[str, str]]], None] = lambda devices: None,
        slurm: Sequence[str] = SLURM_ROOTS,
    ) -> None:
        """``edge``: reads devices ((backend, uuid)) now with every counter exact, when a workload
        begins or ends on them (its recording's energy is then the counter's at those edges)."""
        self.sources = sources
        self._edge = edge
        self.slurm = slurm_roots(slurm)  # where slurmd puts jobs
        self.listeners = list(listeners)  # told after each poll and each split (their recordings)
        self.procfs, self.cgroupfs = procfs, cgroupfs
        self.kinds = frozenset(kinds)
        self.retention = retention
        self.max_workloads = max_workloads
        self._interval, self._clock, self._wall = interval, clock, wall
        self._cgroup_root: str | None = None  # '/' unless warptd runs in a private cgroup namespace
        self._placements = PidCache(procfs, self._placement)
        self._backends = {source.backend for source in sources}
        self._workloads: dict[WorkloadKey, Workload] = {}
        self._held: dict[tuple[str, str], _Held] = {}  # (backend, uuid) -> latest holders
        self._deltas: TotalDeltas[tuple[str, str]] = TotalDeltas()  # (backend, uuid or domain)
        self._unattributed: dict[str, float] = {}
        self._over_cap: set[WorkloadKey] = set()
        self._running: set[WorkloadKey] = set()  # found on a device or in the cgroup tree this poll
        self.dropped = 0
        self._node_cpu_us: float | None = None
        self._cpu_at: float | None = None
        self._lock = threading.Lock()
        #: Held while the listeners are told, taken before ``_lock`` and kept after it is let go: they
        #: hear the polls and splits in the order made, and a scrape (``_lock`` only) never waits on them.
        self._telling = threading.Lock()
        self._poller = PollingThread("warptd-workloads", self.poll, interval)

    # -- the poll: who holds each device, each workload's CPU share -----------------------------
    def poll(self) -> None:
        """Place every listed process, note who holds each device, and take the CPU shares."""
        listed = self._list()
        node_cpu = node_cpu_us(self.procfs)
        now, wall = self._clock(), self._wall()
        jobs = self._slurm_jobs()
        with self._lock:
            held, over_cap = {}, set()
            self._running = set()
            for item in listed:
                held[(item.backend, item.uuid)] = self._holders(item, now, wall, over_cap)
            edges = _changed_holders(self._held, held)
        if edges:  # a workload began or ended there: the energy up to now goes to the holders until now
            self._edge(edges)
        with self._lock:
            self._held = held
            for job in jobs:  # running, on a device or not: their CPU share is theirs
                self._track(job, now, wall, over_cap)
            self.dropped += len(over_cap - self._over_cap)
            self._over_cap = over_cap
            cgroups = {w.key: w.cpu for w in self._workloads.values() if w.cpu is not None}
        usage = {key: cgroup_usage_us(self.cgroupfs, cgroup) for key, cgroup in cgroups.items()}
        with self._telling:
            with self._lock:
                self._cpu_shares(usage, cgroups, node_cpu, now)
                self._end_and_expire(usage, now, wall)
                told = self._totals_told()
            for listener in self.listeners:
                listener.after_poll(told)

    def _list(self) -> list[_Listed]:
        """Each source's fresh device lists, every pid placed (one /proc read per new process)."""
        listed, pids = [], set()
        for source in self.sources:
            for uuid, processes in source.devices().items():
                if time.monotonic() - processes.polled_at > _FRESH_INTERVALS * source.interval:
                    continue
                named = {*processes.memory_by_pid, *(processes.sm_by_pid or ())}
                placements = {pid: self._placements.get(pid) for pid in named}
                pids |= named
                listed.append(_Listed(source.backend, uuid, processes, placements))
        self._placements.retain(pids)
        return listed

    def _placement(self, procfs: Path, pid: int) -> Placement | None:
        """A pid's placement; the namespace root is searched at the first one, on the poll thread, so
        that a walk of the host's cgroup tree never delays the daemon's start."""
        if self._cgroup_root is None:
            self._cgroup_root = namespace_root(self.procfs, self.cgroupfs)
        return read_placement(procfs, pid, self._cgroup_root, self.slurm)

    def _slurm_jobs(self) -> list[Placement]:
        """The Slurm jobs with a cgroup here; the uid of a new one on cgroup v2 from one of its pids."""
        if "slurm_job" not in self.kinds:
            return []
        jobs = slurm_jobs(self.cgroupfs, self.slurm)
        with self._lock:
            new = [job for job in jobs if job.key not in self._workloads and job.uid is None and job.cpu]
        for job in new:
            uid = job_uid(self.cgroupfs, self.procfs, job.cpu)  # type: ignore[arg-type]
            jobs[jobs.index(job)] = replace(job, uid=uid)
        return jobs

    def _holders(self, item: _Listed, now: float, wall: float, over_cap: set[WorkloadKey]) -> _Held:
        keys = {
            pid: self._track(placement, now, wall, over_cap) for pid, placement in item.placements.items()
        }
        holders = tuple(sorted({k for k in keys.values() if k is not None}, key=lambda k: (k.kind, k.id)))
        sm = None if item.processes.sm_by_pid is None else _by_holder(keys, item.processes.sm_by_pid)
        memory = item.processes.memory_by_pid
        known = None if any(m is None for m in memory.values()) else _by_holder(keys, memory)  # type: ignore[arg-type]
        return _Held(now, holders, sm, known)

    def _track(
        self, placement: Placement | None, now: float, wall: float, over_cap: set[WorkloadKey]
    ) -> WorkloadKey | None:
        """The workload a process counts for (creating it), or None: unknown, or over the cap."""
        if placement is None:
            return None
        key, cpu = placement.key, placement.cpu
        if key.kind not in self.kinds:
            key, cpu = WorkloadKey("user", user_name(placement.uid)), None
            if "user" not in self.kinds:
                return None
        if not key.id:
            return None
        workload = self._workloads.get(key)
        if workload is None:
            if len(self._workloads) >= self.max_workloads:
                over_cap.add(key)
                return None
            workload = self._workloads[key] = Workload(key, user_name(placement.uid), wall, now, cpu)
        workload.seen, workload.ended_at = now, None
        self._running.add(key)
        if workload.cpu is None:  # first seen through a process whose cgroup keeps no CPU time
            workload.cpu = cpu
        if placement.step is not None and key.kind == "slurm_job":
            workload.steps.add(placement.step)
        return key

    def _cpu_shares(
        self,
        usage: dict[WorkloadKey, float | None],
        cgroups: dict[WorkloadKey, CpuCgroup],
        node: float | None,
        now: float,
    ) -> None:
        """Each workload's CPU time over the node's since the last poll; a cgroup nested in another
        tracked one (a user's service in the user's slice) is taken out of it."""
        spent: dict[WorkloadKey, float] = {}
        for key, used in usage.items():
            workload = self._workloads.get(key)
            if workload is None:
                continue
            if used is not None and workload.cpu_usage_us is not None and used >= workload.cpu_usage_us:
                spent[key] = used - workload.cpu_usage_us
            workload.cpu_usage_us = used
        own = dict(spent)
        by_cgroup = {cgroups[key]: key for key in spent}
        for key, used in spent.items():
            parent = _enclosing(cgroups[key], by_cgroup)
            if parent is not None:
                own[parent] -= used
        elapsed = None if node is None or self._node_cpu_us is None else node - self._node_cpu_us
        self._node_cpu_us = node
        shares = {k: max(0.0, used) / elapsed for k, used in own.items()} if elapsed and elapsed > 0 else {}
        total = sum(shares.values())
        for workload in self._workloads.values():
            share = shares.get(workload.key, 0.0)
            workload.cpu_share = share / total if total > 1 else share
        if elapsed:
            self._cpu_at = now

    def _end_and_expire(self, usage: dict[WorkloadKey, float | None], now: float, wall: float) -> None:
        """A workload runs while a device lists its processes or its cgroup is there; an ended one
        goes ``retention`` seconds after it was last seen."""
        for key, workload in list(self._workloads.items()):
            if key not in self._running and usage.get(key) is not None:
                workload.seen, workload.ended_at = now, None
            elif key not in self._running and workload.ended_at is None:
                workload.ended_at = wall
            if now - workload.seen > self.retention:
                del self._workloads[key]

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
        if not self.listeners:
            return MappingProxyType({})
        return MappingProxyType({key: workload.totals() for key, workload in self._workloads.items()})

    def _fresh(self, at: float | None) -> bool:
        return at is not None and self._clock() - at <= _FRESH_INTERVALS * self._interval()

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
        """Every workload (from ``offset``, at most ``limit``): running ones first, then ended ones,
        each newest first; only those shown are built."""
        with self._lock:
            workloads = sorted(
                self._workloads.values(), key=lambda w: (w.ended_at is not None, -w.started_at, w.key.id)
            )
            return [w.view() for w in workloads[offset : None if limit is None else offset + limit]]

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


def _changed_holders(
    before: Mapping[tuple[str, str], _Held], now: Mapping[tuple[str, str], _Held]
) -> set[tuple[str, str]]:
    """The devices whose workloads changed since the last poll: one began or ended on them."""
    return {
        device
        for device in before.keys() | now.keys()
        if (before[device].holders if device in before else ())
        != (now[device].holders if device in now else ())
    }


def _by_holder(keys: Mapping[int, WorkloadKey | None], weights: Mapping[int, float]) -> Holders:
    """Per-pid weights summed per workload (None: processes of no known workload)."""
    summed: Holders = {}
    for pid, weight in weights.items():
        holder = keys.get(pid)
        summed[holder] = summed.get(holder, 0.0) + weight
    return summed


def _enclosing(cgroup: CpuCgroup, tracked: Mapping[CpuCgroup, WorkloadKey]) -> WorkloadKey | None:
    """The tracked workload whose cgroup most closely encloses ``cgroup`` (same hierarchy), if any."""
    path = cgroup.path.rstrip("/")
    while "/" in path:
        path = path.rsplit("/", 1)[0]
        found = tracked.get(CpuCgroup(path or "/", cgroup.v1_controllers))
        if found is not None:
            return found
    return None

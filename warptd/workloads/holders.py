"""Who holds each device: the processes each source lists on it, each placed in its workload (one
``/proc`` read per new process), and who held it at a poll, with their SM use and memory."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from warptd.processes.cgroup import PidCache
from warptd.processes.shares import FRESH_INTERVALS, DeviceProcesses
from warptd.workloads.cgroupns import namespace_root
from warptd.workloads.placement import Placement, SlurmRoots, WorkloadKey, read_placement

Holders = dict[WorkloadKey | None, float]


class ProcessSource(Protocol):
    """An SDK's process lists per device (:class:`warptd.processes.nvml.ProcessMonitor` for NVIDIA,
    :class:`warptd.processes.amd.AmdProcessMonitor` for AMD)."""

    backend: str
    interval: float

    def devices(self) -> Mapping[str, DeviceProcesses]: ...


@dataclass(frozen=True)
class Listed:
    """One device's process list, from its source, each pid placed (None: placed nowhere known)."""

    backend: str
    uuid: str
    processes: DeviceProcesses
    placements: dict[int, Placement | None]


@dataclass(frozen=True)
class Held:
    """Who held one device at a poll, with their SM use and memory (None: no known workload)."""

    at: float
    holders: tuple[WorkloadKey, ...]
    sm: Holders | None
    memory: Holders | None

    @classmethod
    def of(cls, listed: Listed, keys: Mapping[int, WorkloadKey | None], at: float) -> Held:
        """The device's holders, from each pid's workload (``keys``), at the poll at ``at``."""
        holders = tuple(sorted({k for k in keys.values() if k is not None}, key=lambda k: (k.kind, k.id)))
        sm = None if listed.processes.sm_by_pid is None else _by_holder(keys, listed.processes.sm_by_pid)
        memory = listed.processes.memory_by_pid
        known = None if any(m is None for m in memory.values()) else _by_holder(keys, memory)  # type: ignore[arg-type]
        return cls(at, holders, sm, known)


class ProcessLists:
    """Each source's fresh device lists with every pid placed; a pid reused by a new process is read
    again. The namespace root is searched at the first pid, on the poll thread, so that a walk of the
    host's cgroup tree never delays the daemon's start."""

    def __init__(
        self, sources: Sequence[ProcessSource], procfs: Path, cgroupfs: Path, slurm: SlurmRoots
    ) -> None:
        self.sources, self.procfs, self.cgroupfs, self.slurm = sources, procfs, cgroupfs, slurm
        self._cgroup_root: str | None = None  # '/' unless warptd runs in a private cgroup namespace
        self._placements = PidCache(procfs, self._placement)

    def listed(self) -> list[Listed]:
        """Every device list polled lately, its pids placed (one /proc read per new process)."""
        listed, pids = [], set()
        for source in self.sources:
            for uuid, processes in source.devices().items():
                if time.monotonic() - processes.polled_at > FRESH_INTERVALS * source.interval:
                    continue
                named = {*processes.memory_by_pid, *(processes.sm_by_pid or ())}
                placements = {pid: self._placements.get(pid) for pid in named}
                pids |= named
                listed.append(Listed(source.backend, uuid, processes, placements))
        self._placements.retain(pids)
        return listed

    def _placement(self, procfs: Path, pid: int) -> Placement | None:
        if self._cgroup_root is None:
            self._cgroup_root = namespace_root(self.procfs, self.cgroupfs)
        return read_placement(procfs, pid, self._cgroup_root, self.slurm)


def changed_holders(
    before: Mapping[tuple[str, str], Held], now: Mapping[tuple[str, str], Held]
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

"""Compute processes per AMD GPU (for ``--workloads``), from amdsmi's process list over the shared
amdsmi session, polled on a thread of its own.

``amdsmi_get_gpu_process_list(handle)`` (the package of ROCm 6.1.2 and newer: one dict per process)
gives each pid's ``memory_usage.vram_mem`` (bytes), ``engine_usage.gfx`` (ns of GFX engine time
since the process opened the device, cumulative: amdgpu's fdinfo ``drm-engine-gfx``) and
``cu_occupancy`` (compute units its waves occupy now, from KFD). A pid's busy weight is its GFX time
over the wall time between two polls where some pid advanced it, else its CU occupancy where some
pid occupies CUs, else none (the split then goes by memory held). The partitions of one GPU are
listed apart, but only the first one reports the socket's energy: the processes of all its
partitions are published under its identity, a pid listed on several partitions once. See
docs/workloads.md for what was checked against what.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import structlog

from warptd.backends.amd import session as amd_session
from warptd.backends.amd.handle import AmdHandle, Call, identify
from warptd.backends.amd.values import integer
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.processes.cgroup import start_time
from warptd.processes.engine_time import EngineCount, EngineTime
from warptd.processes.shares import DeviceProcesses
from warptd.processes.source import DeviceCalls, ProcessPoller

if TYPE_CHECKING:
    from warptd.backends.base import AcceleratorBackend
    from warptd.config import Settings

log = structlog.get_logger("warptd.processes")

_LIST = "amdsmi_get_gpu_process_list"
#: The call a GPU may refuse for good, as the monitor remembers (and logs) it.
_PROCESSES = "processes"
#: The name the package gives an entry amdsmi left without one (its /proc entries could not be read).
_UNREAD = "N/A"


@dataclass
class _Listed:
    """What one poll read of one GPU (all its partitions): memory, GFX time and CU occupancy per pid."""

    memory: dict[int, int] = field(default_factory=dict)
    gfx: dict[int, EngineCount] = field(default_factory=dict)
    occupancy: dict[int, int] = field(default_factory=dict)

    def add(self, pid: int, entry: dict[str, Any], started: int | None) -> None:
        """One process as a partition lists it: a pid on several partitions of the GPU is listed by each
        with the same fdinfo numbers, so it counts once (the largest), its CU occupancies add up."""
        vram = integer(entry.get("memory_usage", {}).get("vram_mem")) or 0
        self.memory[pid] = max(vram, self.memory.get(pid, 0))
        # an entry without a name is one whose fdinfo amdsmi could not read: its 0 ns means unknown
        readable = entry.get("name") not in (None, "", _UNREAD)
        gfx = integer(entry.get("engine_usage", {}).get("gfx")) if readable else None
        known = self.gfx.get(pid)
        if gfx is not None and (known is None or gfx > known.busy["gfx"]):
            self.gfx[pid] = EngineCount({"gfx": gfx}, started)
        occupied = integer(entry.get("cu_occupancy"))
        if occupied is not None:
            self.occupancy[pid] = self.occupancy.get(pid, 0) + occupied


class _GpuHandle(AmdHandle):
    """One amdsmi handle, what it answered the monitor's calls and, where it reports its GPU's energy
    (the first partition), the GPU's GFX time counters as last polled."""

    def __init__(self, index: int, handle: Any, sdk: ModuleType, call: Call, backend: str) -> None:
        super().__init__(index, handle, sdk, call)
        self.calls = DeviceCalls(backend, index)
        self.engine: EngineTime[int] = EngineTime()

    def busy(self, listed: _Listed, at_ns: int) -> dict[int, float] | None:
        """Each pid's busy weight this poll: its share of GFX time, else its CU occupancy; None where
        neither tells (no pid advanced or occupies anything, or a pid has no GFX baseline yet)."""
        ratios = self.engine.update(at_ns, listed.gfx)
        if listed.gfx.keys() != listed.memory.keys():
            ratios = None  # some pid's GFX time is unknown: the others' would take its share
        if ratios and any(ratio > 0 for ratio in ratios.values()):
            return ratios
        if any(occupied > 0 for occupied in listed.occupancy.values()):
            return {pid: float(listed.occupancy.get(pid, 0)) for pid in listed.memory}
        return None


class AmdProcessMonitor(ProcessPoller):
    """Polls the compute processes of every AMD GPU on the shared amdsmi session."""

    def __init__(
        self,
        procfs: Path,
        backend: str = "amd",
        interval: float = 1.0,
        identity: Callable[[int], str | None] | None = None,
    ) -> None:
        """Acquire the amdsmi session; raises BackendUnavailableError where amdsmi is absent.
        ``identity(index)`` names a handle as the ``amd`` backend names its samples (its
        ``device_identity``: the one it kept at discovery); without it, :func:`identify` here."""
        self._lease = amd_session.lease()
        self._session = session = self._lease.session
        self._sdk = session.sdk
        self._procfs = procfs
        self._handles = [
            _GpuHandle(i, h, session.sdk, self._call, backend) for i, h in enumerate(session.handles)
        ]
        self._identity = identity or (lambda index: identify(self._handles, index))
        super().__init__(backend, interval, "warptd-amd-processes", self._lease.release)

    def _call(self, index: int, what: str, fn: Any, *args: object) -> Any:
        """An identity call (UUID, PCI address, partition id): None when it failed (asked again later)."""
        try:
            return fn(*args)
        except Exception as exc:
            kind = self._session.classify(exc)
            if kind is None:
                raise
            log.debug("amd_identity_failed", device=index, what=what, kind=str(kind), error=str(exc))
            return None

    def poll(self) -> None:
        """List every GPU's processes and publish them under the identity of the handle reporting the
        GPU's energy (the partitions' lists merged); a GPU with a list refused this poll is left out,
        so its energy is unattributed rather than split between the processes of its other lists."""
        now, now_ns, devices = time.monotonic(), time.monotonic_ns(), {}
        started: dict[int, int | None] = {}
        for identity, first, handles in self._gpu_handles():
            lists = [self._processes(handle) for handle in handles]
            if any(entries is None for entries in lists):
                continue
            listed = _Listed()
            for entries in lists:
                for entry in entries or ():
                    pid = int(entry["pid"])
                    if pid not in started:
                        started[pid] = start_time(self._procfs, pid)
                    listed.add(pid, entry, started[pid])
            busy = first.busy(listed, now_ns)
            devices[identity] = DeviceProcesses(now, first.index, listed.memory, busy)
        self.publish(devices)

    def _gpu_handles(self) -> list[tuple[str, _GpuHandle, list[_GpuHandle]]]:
        """The handles of each GPU whose process lists can be read, with the identity of the GPU's
        first handle (the one reporting its energy): a partition shares its GPU's PCI address."""
        identities: dict[_GpuHandle, str] = {}
        by_gpu: dict[str, list[_GpuHandle]] = {}
        for handle in self._handles:
            identify(self._handles, handle.index)  # its partition id: which handle reports the energy
            identity = self._identity(handle.index)
            if identity is None or not handle.calls.asks(_PROCESSES):
                continue
            identities[handle] = identity
            by_gpu.setdefault(handle.address() or identity, []).append(handle)
        gpus = []
        for handles in by_gpu.values():
            first = next((h for h in handles if h.primary), handles[0])
            gpus.append((identities[first], first, handles))
        return gpus

    def _processes(self, handle: _GpuHandle) -> list[dict[str, Any]] | None:
        """One handle's process list; None where it failed this poll or is not supported (asked once)."""
        try:
            entries = getattr(self._sdk, _LIST)(handle.handle)
        except Exception as exc:
            kind = self._session.classify(exc)
            if kind is None:
                raise
            handle.calls.failed(_PROCESSES, kind, exc)
            return None
        if any(not isinstance(entry, dict) for entry in entries):  # before ROCm 6.1.2: process handles
            handle.calls.failed(_PROCESSES, ErrorKind.NOT_SUPPORTED, TypeError("process handles"))
            return None
        handle.calls.answered(_PROCESSES)
        return entries


def open_processes(
    settings: Settings, backend: AcceleratorBackend, on_change: Callable[[], None] | None = None
) -> AmdProcessMonitor | None:
    """The ``amd`` vendor's process source (``start()`` it to poll on its own thread), its processes
    filed under the identities ``backend``'s samples carry, where ``--workloads`` reads it; None
    otherwise or where amdsmi is absent."""
    if not settings.workloads:
        return None
    try:
        return AmdProcessMonitor(settings.procfs, "amd", settings.interval, backend.device_identity)
    except BackendUnavailableError as exc:
        log.debug("processes_unavailable", backend="amd", reason=str(exc))
        return None

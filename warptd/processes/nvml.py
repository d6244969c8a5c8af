"""Compute processes per NVIDIA GPU (opt-in), with the pod and container each one's cgroup names.

A thread polls ``nvmlDeviceGetComputeRunningProcesses`` every interval over the shared NVML session,
and the per-process utilization samples at their own cadence (:mod:`warptd.processes.cadence`); a
scrape only reads the latest poll. Series exist for the processes of the latest poll only, at most
``max_per_device`` per GPU (the largest by memory), so ended processes leave no label churn behind.
The SM use per pid, pod and container of the latest read, of the processes listed now, is kept per
GPU for the split of pod and workload energy (:mod:`warptd.k8s.shares`, :mod:`warptd.workloads.energy`).
A poll that finds a GPU's list as it was and reads no utilization hands on what the last one made.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from warptd.backends.nvidia import session as nvml_session
from warptd.errors import BackendUnavailableError
from warptd.processes.buffered import BufferedCall
from warptd.processes.cadence import UtilizationCadence
from warptd.processes.cgroup import Attribution, CgroupResolver
from warptd.processes.shares import DeviceProcesses
from warptd.processes.source import DeviceCalls, ProcessPoller
from warptd.processes.utilization import ENGINES, ProcessSample, UtilizationReader

if TYPE_CHECKING:
    from warptd.backends.base import AcceleratorBackend
    from warptd.config import Settings

log = structlog.get_logger("warptd.processes")

#: The process list: (C function, its struct in nvidia-ml-py, the public wrapper calling it), the
#: version nvidia-ml-py's ``nvmlDeviceGetComputeRunningProcesses`` calls, then the one for drivers
#: without it (< 510).
_LISTS = (
    (
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "c_nvmlProcessInfo_v3_t",
        "nvmlDeviceGetComputeRunningProcesses",
    ),
    (
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "c_nvmlProcessInfo_v2_t",
        "nvmlDeviceGetComputeRunningProcesses_v2",
    ),
)
#: Processes a GPU's list holds at first (it grows where more run).
_FIRST_CAPACITY = 64
_UNKNOWN_MEMORY = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE, where nvidia-ml-py does not map it to None
#: The calls a GPU may refuse for good, as its monitor remembers (and logs) them.
_PROCESSES, _UTILIZATION = "processes", "process_utilization"


@dataclass(frozen=True)
class GpuProcess:
    """One compute process on one GPU; None where NVML cannot tell (no series)."""

    index: int
    uuid: str
    pid: int
    memory_bytes: int | None
    pod_uid: str = ""
    container_id: str = ""
    #: Engine (sm, memory, encoder, decoder) -> mean share over its samples in the latest read's span;
    #: 0 without one.
    utilization: dict[str, float] | None = None


@dataclass(frozen=True)
class SmUsage:
    """A GPU's SM use as the latest read of it tells: the sum of the SM ratios of the samples of the
    processes listed at the poll, per pod and container."""

    polled_at: float  # time.monotonic() of the poll
    by_attribution: dict[Attribution, float]


@dataclass(frozen=True)
class _Utilization:
    """What a GPU's latest read of per-process utilization told: each sampled pid's mean share per
    engine, and its SM weight (the sum of its SM ratios: busy in more of the driver's windows, more)."""

    shares: dict[int, dict[str, float]]
    sm: dict[int, float]

    @classmethod
    def of(cls, samples: list[ProcessSample]) -> _Utilization:
        return cls(_mean_ratios(samples), _sm_by_pid(samples))


#: No process listed: nobody to attribute a sample to, and nobody used the GPU.
_NOBODY = _Utilization({}, {})


@dataclass(frozen=True)
class _Listed:
    """What one poll read from one GPU: device memory per pid and, where it can tell, the latest
    utilization (a new read or the last one, which covered every pid listed now)."""

    index: int
    uuid: str
    memory: dict[int, int | None]
    utilization: _Utilization | None

    def same(self, other: _Listed) -> bool:
        """The same list of the same GPU, with the same utilization read (not read again since)."""
        return (
            self.utilization is other.utilization
            and self.memory == other.memory
            and (self.index, self.uuid) == (other.index, other.uuid)
        )


@dataclass(frozen=True)
class _Made:
    """What a poll made of one GPU's list, handed on by the next while the list and utilization stand."""

    listed: _Listed
    processes: list[GpuProcess]
    sm_usage: dict[Attribution, float] | None
    devices: DeviceProcesses


class _Gpu:
    """One GPU of the session as this monitor knows it: its UUID once read, what it answered, when
    its utilization was read and what that told, and what the last poll made of it."""

    def __init__(self, backend: str, index: int) -> None:
        self.index = index
        self.uuid: str | None = None
        self.calls = DeviceCalls(backend, index)
        self.listing: BufferedCall[tuple[int, int | None]] | None = None  # its process list call
        self.cadence = UtilizationCadence()
        self.utilization: _Utilization | None = None  # None: not read yet, or the last read failed
        self.made: _Made | None = None


class ProcessMonitor(ProcessPoller):
    """Polls the compute processes of every GPU on the shared NVML session."""

    def __init__(
        self,
        procfs: Path,
        backend: str = "nvidia",
        interval: float = 1.0,
        max_per_device: int = 64,
        on_change: Callable[[], None] | None = None,
        *,
        utilization_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Acquire the NVML session; raises BackendUnavailableError where NVML is absent."""
        self.max_per_device = max_per_device
        #: Seconds between two reads of a GPU's per-process utilization while its processes stay (see
        #: :mod:`warptd.processes.cadence`); may be changed while running, as ``interval``.
        self.utilization_interval = utilization_interval
        self._clock = clock
        self._on_change = on_change
        self._lease = nvml_session.lease()
        self._session = self._lease.session
        self._nvml = nvml = self._session.nvml
        self._list_version = 0  # in _LISTS
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)  # nvidia-ml-py >= 12.550
        self._version_errors: tuple[type[BaseException], ...] = (
            nvml.NVMLError_FunctionNotFound,
            *([mismatch] if mismatch else []),
        )
        self._resolver = CgroupResolver(procfs)
        self._utilization = UtilizationReader(nvml, self._version_errors)
        self._sm_usage: dict[str, SmUsage] = {}
        self._gpus: list[_Gpu] = []  # one per handle of the session, as its handles are numbered
        self._capped: dict[int, int] = {}  # device index -> processes left out at the last poll
        self._latest: list[GpuProcess] = []
        super().__init__(backend, interval, "warptd-processes", self._lease.release)

    def reconfigure(self, settings: Settings) -> None:
        """A reload: the new ``--interval`` and ``--process-utilization-interval``."""
        super().reconfigure(settings)
        self.utilization_interval = settings.process_utilization_interval

    # -- polling ------------------------------------------------------------------------------
    def poll(self) -> None:
        """List every GPU's processes, resolve their pods, and publish them for the next scrape."""
        now = self._clock()
        found: list[GpuProcess] = []
        sm_usage: dict[str, SmUsage] = {}
        devices: dict[str, DeviceProcesses] = {}
        where = _Resolved(self._resolver)  # one /proc read per pid and poll that makes anything new
        listed_pids: set[int] = set()
        for gpu, listed in self._list_all(now):
            made = gpu.made
            if made is None or not made.listed.same(listed):  # else its pids stay resolved as they were
                made = gpu.made = self._make(listed, now, where)
            listed_pids.update(listed.memory)
            found += made.processes
            if made.sm_usage is not None:
                sm_usage[listed.uuid] = SmUsage(now, made.sm_usage)
            devices[listed.uuid] = replace(made.devices, polled_at=now)
        self._resolver.retain(listed_pids)
        with self._lock:
            changed, self._latest = found != self._latest, found
            self._sm_usage = sm_usage
        self.publish(devices)
        if changed and self._on_change is not None:
            self._on_change()

    def _make(self, listed: _Listed, now: float, where: dict[int, Attribution]) -> _Made:
        """One GPU's processes, and its SM use per pod and container and per pid, from a new list or a
        new read of its utilization."""
        utilization = listed.utilization
        sm_by_pid = None
        if utilization is not None:  # the weights of the processes listed now: who left has none
            sm_by_pid = {pid: sm for pid, sm in utilization.sm.items() if pid in listed.memory}
        sm_usage = None if sm_by_pid is None else _sm_by_attribution(sm_by_pid, where)
        processes = self._device_processes(listed, where)
        return _Made(
            listed, processes, sm_usage, DeviceProcesses(now, listed.index, listed.memory, sm_by_pid)
        )

    def _device_processes(self, listed: _Listed, where: dict[int, Attribution]) -> list[GpuProcess]:
        """One GPU's processes, the largest by memory first, with their pods and utilization."""
        ranked = sorted(listed.memory.items(), key=lambda item: (-(item[1] or 0), item[0]))
        self._note_cap(listed.index, len(ranked) - self.max_per_device)
        shares = None if listed.utilization is None else listed.utilization.shares
        processes = []
        for pid, used in ranked[: self.max_per_device]:
            pod_uid, container_id = where[pid].pod_uid, where[pid].container_id
            utilization = None if shares is None else shares.get(pid) or dict(_IDLE)
            processes.append(
                GpuProcess(listed.index, listed.uuid, pid, used, pod_uid, container_id, utilization)
            )
        return processes

    def session_generation(self) -> int:
        return self._session.generation

    def forget(self) -> None:
        self._gpus = []
        self._utilization.forget()

    def _list_all(self, now: float) -> list[tuple[_Gpu, _Listed]]:
        nvml, listed = self._nvml, []
        with self._session.lock:
            self.reopened()  # NVML reopened: new handles
            handles = self._session.handles
            if len(self._gpus) != len(handles):
                self._gpus = [_Gpu(self.backend, index) for index in range(len(handles))]
            for gpu, handle in zip(self._gpus, handles, strict=True):
                if handle is None or not gpu.calls.asks(_PROCESSES):
                    continue
                try:
                    if gpu.uuid is None:
                        gpu.uuid = nvml_session.text(nvml.nvmlDeviceGetUUID(handle))
                    memory = _memory_by_pid(self._running(gpu, handle))
                    gpu.calls.answered(_PROCESSES)
                    utilization = self._read_utilization(gpu, handle, frozenset(memory), now)
                    listed.append((gpu, _Listed(gpu.index, gpu.uuid, memory, utilization)))
                except nvml.NVMLError as exc:  # lost or failing: its processes drop out this poll
                    gpu.calls.failed(_PROCESSES, self._session.classify(exc), exc)
        return listed

    def _read_utilization(
        self, gpu: _Gpu, handle: Any, pids: frozenset[int], now: float
    ) -> _Utilization | None:
        """The GPU's utilization as its latest read tells it, reading the samples since the last read
        where that is due; None where it cannot tell (unsupported, or this poll's read failed)."""
        if not gpu.calls.asks(_UTILIZATION):
            return None
        due = gpu.cadence.due(pids, now, self.utilization_interval, self.interval)
        if not pids:
            return _NOBODY
        if not due and gpu.utilization is not None:
            return gpu.utilization
        try:
            samples = self._utilization.read(gpu.index, handle)
        except self._nvml.NVMLError as exc:  # this poll only: the processes and their memory stay
            gpu.calls.failed(_UTILIZATION, self._session.classify(exc), exc)
            gpu.utilization = None
            return None
        gpu.calls.answered(_UTILIZATION)
        gpu.cadence.read(pids, now)
        gpu.utilization = _Utilization.of(samples)
        return gpu.utilization

    def _running(self, gpu: _Gpu, handle: Any) -> list[tuple[int, int | None]]:
        """The GPU's compute processes as (pid, used memory, None where unknown), one per context."""
        try:
            if gpu.listing is None:
                gpu.listing = _listing(self._nvml, handle, self._list_version)
            return gpu.listing()
        except self._version_errors:
            if self._list_version == len(_LISTS) - 1 or not hasattr(self._nvml, _LISTS[-1][2]):
                raise self._nvml.NVMLError(self._nvml.NVML_ERROR_NOT_SUPPORTED) from None
            self._list_version = len(_LISTS) - 1  # the driver lacks the newer version: for good
            for other in self._gpus:
                other.listing = None
            gpu.listing = _listing(self._nvml, handle, self._list_version)
            return gpu.listing()

    def _note_cap(self, index: int, dropped: int) -> None:
        """Log when the number of processes left out on a device changes (not at every poll)."""
        dropped = max(0, dropped)
        if self._capped.get(index, 0) != dropped:
            self._capped[index] = dropped
            if dropped:
                log.warning(
                    "processes_capped",
                    backend=self.backend,
                    device=index,
                    exported=self.max_per_device,
                    dropped=dropped,
                )

    # -- what the collectors read ----------------------------------------------------------------
    def processes(self) -> list[GpuProcess]:
        """The latest poll's processes (never calls NVML)."""
        with self._lock:
            return list(self._latest)

    def sm_usage(self, uuid: str) -> SmUsage | None:
        """The GPU's SM use per pod and container in the latest poll, or None where it cannot tell."""
        with self._lock:
            return self._sm_usage.get(uuid)


_IDLE = dict.fromkeys(ENGINES, 0.0)


def _listing(nvml: Any, handle: Any, version: int) -> BufferedCall[tuple[int, int | None]]:
    """A GPU's process list call, in one C call: ``(count, array)`` as nvidia-ml-py's wrapper fills them."""
    name, struct, public = _LISTS[version]
    count = ctypes.c_uint(0)

    def make(function: Any, buffer: Any, capacity: int, _: Any) -> tuple[int, int]:
        count.value = capacity
        return function(handle, ctypes.byref(count), buffer), count.value

    return BufferedCall(
        nvml,
        name,
        getattr(nvml, struct, None) or nvml.c_nvmlProcessInfo_v2_t,
        ("pid", "usedGpuMemory"),
        make=make,
        read=_process,
        public=lambda _: getattr(nvml, public)(handle),
        capacity=_FIRST_CAPACITY,
    )


def _process(values: tuple[Any, ...]) -> tuple[int, int | None]:
    pid, used = values
    return int(pid), None if used is None or used >= _UNKNOWN_MEMORY else int(used)


def _memory_by_pid(running: list[tuple[int, int | None]]) -> dict[int, int | None]:
    """Memory per pid, summed where a pid is listed per MIG instance or context; None if unknown."""
    memory: dict[int, int | None] = {}
    for pid, used in running:
        known = memory.get(pid)
        memory[pid] = used if known is None else known + (used or 0)
    return memory


class _Resolved(dict[int, Attribution]):
    """Attribution per pid, resolved on first use within one poll."""

    def __init__(self, resolver: CgroupResolver) -> None:
        super().__init__()
        self._resolver = resolver

    def __missing__(self, pid: int) -> Attribution:
        self[pid] = found = self._resolver.resolve(pid)
        return found


def _mean_ratios(samples: list[ProcessSample]) -> dict[int, dict[str, float]]:
    """Each pid's mean share per engine over its samples (the driver's windows it was active in)."""
    sums: dict[int, list[int]] = {}
    for sample in samples:
        summed = sums.setdefault(sample.pid, [0] * (len(ENGINES) + 1))  # per engine, then the count
        for position, percent in enumerate(sample.percents):
            summed[position] += percent
        summed[-1] += 1
    return {
        pid: {engine: total / (100.0 * summed[-1]) for engine, total in zip(ENGINES, summed, strict=False)}
        for pid, summed in sums.items()
    }


def _sm_by_attribution(
    sm_by_pid: dict[int, float], where: dict[int, Attribution]
) -> dict[Attribution, float]:
    """The pids' SM weights summed per pod and container."""
    used: dict[Attribution, float] = {}
    for pid, sm in sm_by_pid.items():
        used[where[pid]] = used.get(where[pid], 0.0) + sm
    return used


def _sm_by_pid(samples: list[ProcessSample]) -> dict[int, float]:
    """The samples' SM ratios summed per pid: a pid busy in more of the driver's windows weighs more."""
    used: dict[int, float] = {}
    for sample in samples:
        used[sample.pid] = used.get(sample.pid, 0.0) + sample.sm_ratio
    return used


def open_process_monitor(
    procfs: Path,
    backend: str = "nvidia",
    interval: float = 1.0,
    on_change: Callable[[], None] | None = None,
    max_per_device: int = 64,
    *,
    utilization_interval: float = 1.0,
) -> ProcessMonitor | None:
    """A monitor (``start()`` it to poll on its own thread), or None where NVML is absent."""
    try:
        monitor = ProcessMonitor(
            procfs, backend, interval, max_per_device, on_change, utilization_interval=utilization_interval
        )
    except BackendUnavailableError as exc:
        log.debug("processes_unavailable", backend=backend, reason=str(exc))
        return None
    return monitor


def open_processes(
    settings: Settings, backend: AcceleratorBackend, on_change: Callable[[], None] | None = None
) -> ProcessMonitor | None:
    """The ``nvidia`` vendor's process source for ``backend``'s GPUs, where ``--processes`` (their
    series) or ``--workloads`` (the lists) read it; None otherwise or where NVML is absent."""
    if not (settings.processes or settings.workloads):
        return None
    return open_process_monitor(
        settings.procfs,
        backend.name,
        settings.interval,
        on_change=on_change,
        utilization_interval=settings.process_utilization_interval,
    )

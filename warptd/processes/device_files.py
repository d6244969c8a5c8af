"""Who holds each accelerator that no SDK lists processes for, from the kernel: a process holds a
device while one of its ``/proc/PID/fd`` links names one of the device's nodes (tpu-info finds TPU
users this way, hl-smi Gaudi users); on a DRM GPU its fdinfo also tells each client's engine time and
memory (:mod:`warptd.processes.fdinfo`).

One thread scans for every backend at once, each ``interval``, within a bound: at most ``budget``
pids read afresh, the new ones, those first seen less than ``young`` seconds ago (a job opens its
device some time after it starts), then the others in turn, holders included, so a process that
opens a device (or, holding one, another device or DRM client) late is found within
``ceil(processes / budget)`` polls; between their turns the holders' known fds are checked each
poll. What a pid holds is cached by (pid, start time), so a reused pid is read afresh. Without
``CAP_SYS_PTRACE`` another user's fds are refused: such pids are skipped and counted
(:attr:`DeviceFiles.unreadable`), never guessed."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from warptd.files import read_text
from warptd.models import GPUInfo
from warptd.processes.cgroup import PidCache
from warptd.processes.device_nodes import device_key, device_nodes
from warptd.processes.engine_time import EngineTime
from warptd.processes.fdinfo import ClientKey, DrmClient, parse_fdinfo
from warptd.processes.shares import DeviceProcesses
from warptd.sampling.poller import PollingThread

if TYPE_CHECKING:
    from warptd.backends.vendor import NodeRule
    from warptd.config import Settings
    from warptd.registry import Loaded
    from warptd.sampling.snapshot import Snapshot

log = structlog.get_logger("warptd.processes")

#: How often the device nodes are read again from sysfs while the devices stay the same.
_REWATCH_S = 60.0


@dataclass(frozen=True)
class _Open:
    """A process's open files on the watched nodes (fd name -> node); ``readable`` False where its fd
    directory was refused (another user's process without CAP_SYS_PTRACE)."""

    files: Mapping[str, str]
    readable: bool = True


@dataclass(frozen=True)
class _Device:
    """One listed device and, on a DRM GPU, its clients' engine counters as last polled (kept while
    the device is listed alike)."""

    backend: str
    key: str
    index: int
    fdinfo: bool
    engine: EngineTime[ClientKey] = field(
        default_factory=lambda: EngineTime(per_client=True), compare=False, repr=False
    )


class DeviceFiles:
    """Polls ``<procfs>/*/fd`` for the nodes of every device of the backends ``rules`` names (each by
    the rule its vendor declares)."""

    def __init__(
        self,
        procfs: Path,
        sysfs: Path,
        infos: Callable[[str], list[GPUInfo]],
        rules: Mapping[str, NodeRule],
        *,
        interval: Callable[[], float] = lambda: 1.0,
        budget: int = 256,
        young: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.procfs, self.sysfs = procfs, sysfs
        self.rules = rules
        self.backends = sorted(rules)
        self.budget, self.young = budget, young
        #: Pids whose fd directory was refused when last looked at (skipped, never guessed).
        self.unreadable = 0
        self._infos, self._interval, self._clock = infos, interval, clock
        self._open: PidCache[_Open] = PidCache(procfs, self._read_open)
        self._listed: list[_Device] = []
        self._watched: dict[str, list[_Device]] = {}  # node -> the devices it opens
        self._identity: tuple[object, ...] = ()
        self._watched_at = -math.inf
        self._seen: set[int] = set()  # pids looked at since they appeared
        self._first_seen: dict[int, float] = {}  # pid -> when first looked at
        self._turn = 0  # where the next round of the other pids starts
        self._devices: dict[str, dict[str, DeviceProcesses]] = {}
        self._lock = threading.Lock()
        self._poller = PollingThread("warptd-device-files", self.poll, interval)

    @property
    def interval(self) -> float:
        return self._interval()

    def sources(self) -> list[DeviceFileSource]:
        """One process source per backend (what :class:`~warptd.workloads.energy.WorkloadEnergy` reads)."""
        return [DeviceFileSource(self, backend) for backend in self.backends]

    # -- the poll ---------------------------------------------------------------------------------
    def poll(self) -> None:
        """Find who holds each device's nodes, and each DRM client's busy share and memory."""
        now = self._clock()
        self._watch(now)
        alive = self._pids()
        held = self._scan(alive, now)
        devices: dict[str, dict[str, DeviceProcesses]] = {backend: {} for backend in self.backends}
        holders: dict[_Device, dict[int, list[str]]] = {}
        for pid, opened in held.items():
            for fd, node in opened.files.items():
                for device in self._watched.get(node, ()):
                    holders.setdefault(device, {}).setdefault(pid, []).append(fd)
        usage = self._drm_usage(holders, int(now * 1e9))
        for device in self._listed:
            by_pid = holders.get(device, {})
            memory, busy = usage.get(device, (dict.fromkeys(by_pid), None))  # None: memory not told
            devices[device.backend][device.key] = DeviceProcesses(now, device.index, memory, busy)
        with self._lock:
            self._devices = devices

    def _watch(self, now: float) -> None:
        """The nodes of every device the backends list now: read again when the devices change, and
        every ``_REWATCH_S`` (a driver bound later, a node renamed)."""
        infos = {backend: self._infos(backend) for backend in self.backends}
        identity = tuple(
            (b, i.index, i.uuid, i.pci_bus_id, tuple(sorted((i.extra_metrics or {}).items(), key=str)))
            for b, listed in infos.items()
            for i in listed
        )
        if identity == self._identity and now - self._watched_at < _REWATCH_S:
            return
        self._identity, self._watched_at = identity, now
        devices: list[_Device] = []
        watched: dict[str, list[_Device]] = {}
        known = {device: device for device in self._listed}  # their engine counters carry over
        for backend, listed in infos.items():
            rule = self.rules[backend]
            nodes = device_nodes(self.sysfs, rule, listed)
            for info in listed:
                device = _Device(backend, device_key(info), info.index, rule.fdinfo)
                device = known.get(device, device)
                devices.append(device)
                for node in nodes[device.key]:
                    watched.setdefault(node, []).append(device)
        self._listed = devices
        if watched.keys() != self._watched.keys():  # what each pid holds was filtered by the old nodes
            self._open.retain(set())
            self._seen.clear()
            self._first_seen.clear()
        self._watched = watched

    def _pids(self) -> set[int]:
        """Every process in ``procfs`` but this daemon."""
        try:
            names = os.listdir(self.procfs)
        except OSError:
            return set()
        pids = {int(name) for name in names if name.isdigit()}
        pids.discard(_own_pid(self.procfs))
        return pids

    def _scan(self, alive: set[int], now: float) -> dict[int, _Open]:
        """Within ``budget`` pids, read afresh the new ones, the young ones (a job opens its device
        after it starts), then the next of the others in turn, holders included (a job opens another
        device or DRM client later); check the other holders' known fds; the open files of every
        live pid as last read."""
        self._seen &= alive
        for pid in self._first_seen.keys() - alive:
            del self._first_seen[pid]
        seen = sorted(self._seen)  # holders too: one may open another device or DRM client later
        new = sorted(alive - self._seen)[: self.budget]
        young = sorted(
            (pid for pid in seen if now - self._first_seen.get(pid, now) < self.young),
            key=lambda pid: -self._first_seen[pid],
        )[: max(0, self.budget - len(new))]
        rest = sorted(self._seen - set(young))
        room = max(0, self.budget - len(new) - len(young))
        turn = rest[self._turn : self._turn + room]
        if len(turn) < room:
            turn += rest[: min(room - len(turn), self._turn)]
        self._turn = (self._turn + len(turn)) % len(rest) if rest else 0
        reread = {*young, *turn}
        holders = [
            pid for pid in seen if pid not in reread and (o := self._cached(pid)) is not None and o.files
        ]
        for pid in reread:
            self._open.forget(pid)
        for pid in holders:  # still the same process (start time), still the same files on the nodes
            opened = self._open.get(pid)
            if opened is not None and not self._unchanged(pid, opened):
                self._open.forget(pid)
                self._open.get(pid)
        for pid in (*new, *young, *turn):
            self._open.get(pid)
        for pid in new:
            self._first_seen[pid] = now
        self._seen |= {*new, *turn}
        self._open.retain(alive)
        opened = {pid: o for pid in alive if (o := self._cached(pid)) is not None}
        self._count_unreadable(sum(1 for o in opened.values() if not o.readable))
        return {pid: o for pid, o in opened.items() if o.files}

    def _cached(self, pid: int) -> _Open | None:
        return self._open.peek(pid)

    def _unchanged(self, pid: int, opened: _Open) -> bool:
        """The holder's fds still name the nodes they did (a cheap check: one readlink per fd)."""
        base = self.procfs / str(pid) / "fd"
        try:
            return all(os.readlink(base / fd) == node for fd, node in opened.files.items())
        except OSError:
            return False

    def _read_open(self, procfs: Path, pid: int) -> _Open | None:
        """The pid's fds on watched nodes; None where it is gone. One directory fd, then a readlink
        per entry relative to it (no path walk from the root per fd)."""
        try:
            directory = os.open(f"{procfs}/{pid}/fd", os.O_RDONLY | os.O_DIRECTORY)
        except PermissionError:
            return _Open({}, readable=False)
        except OSError:
            return None
        watched, files, readlink = self._watched, {}, os.readlink
        try:
            for fd in os.listdir(directory):
                try:
                    target = readlink(fd, dir_fd=directory)
                except PermissionError:  # ptrace_may_access refused: another user's process
                    return _Open({}, readable=False)
                except OSError:
                    continue  # closed since listed
                if target in watched:
                    files[fd] = target
        except PermissionError:
            return _Open({}, readable=False)
        except OSError:
            return None
        finally:
            os.close(directory)
        return _Open(files)

    def _count_unreadable(self, count: int) -> None:
        """Log when the number of refused pids changes (not at every poll)."""
        if count != self.unreadable:
            self.unreadable = count
            if count:
                log.warning(
                    "device_files_unreadable",
                    processes=count,
                    reason="their /proc/PID/fd is refused: grant CAP_SYS_PTRACE (see docs/workloads.md)",
                )

    def _drm_usage(
        self, holders: dict[_Device, dict[int, list[str]]], now_ns: int
    ) -> dict[_Device, tuple[dict[int, int | None], dict[int, float] | None]]:
        """Per DRM device: memory and busy share per pid from its clients' fdinfo, each client (a
        ``struct drm_file``, maybe dup'd or shared) counted once, for the lowest pid holding it; no
        busy shares where a client has no baseline yet or a holder's fdinfo was not read."""
        found: dict[_Device, tuple[dict[int, int | None], dict[int, float] | None]] = {}
        for device, by_pid in holders.items():
            if not device.fdinfo:
                continue
            clients: dict[ClientKey, tuple[int, DrmClient]] = {}
            told: set[int] = set()  # pids with at least one fdinfo read
            for pid in sorted(by_pid):
                for fd in by_pid[pid]:
                    client = self._fdinfo(pid, fd)
                    if client is not None:
                        told.add(pid)
                        key = (client.pdev, client.client_id or f"{pid}/{fd}")
                        clients.setdefault(key, (pid, client))
            # A pid whose every client another (lower) pid holds too holds no memory of its own.
            memory: dict[int, int | None] = {pid: 0 if pid in told else None for pid in by_pid}
            for pid, client in clients.values():
                held, more = memory[pid], client.memory_bytes
                memory[pid] = None if held is None or more is None else held + more
            ratios = device.engine.update(
                now_ns, {key: client.count() for key, (_, client) in clients.items()}
            )
            engines = any(client.engine_ns or client.cycles for _, client in clients.values())
            busy: dict[int, float] | None = None
            if engines and ratios is not None and told == by_pid.keys():
                busy = dict.fromkeys(by_pid, 0.0)
                for key, (pid, _) in clients.items():
                    busy[pid] += ratios[key]
            found[device] = (memory, busy)
        return found

    def _fdinfo(self, pid: int, fd: str) -> DrmClient | None:
        try:
            return parse_fdinfo(read_text(self.procfs / str(pid) / "fdinfo" / fd))
        except OSError:
            return None

    # -- what the workload tracker reads -----------------------------------------------------------
    def devices(self, backend: str) -> dict[str, DeviceProcesses]:
        """The backend's devices by key (uuid, else index) with their holders at the latest poll."""
        with self._lock:
            return dict(self._devices.get(backend, {}))

    def start(self) -> None:
        self._poller.start()

    def stop(self) -> None:
        self._poller.stop()


class DeviceFileSource:
    """One backend's view of :class:`DeviceFiles`: a :class:`~warptd.workloads.holders.ProcessSource`."""

    def __init__(self, files: DeviceFiles, backend: str) -> None:
        self.backend = backend
        self._files = files

    @property
    def interval(self) -> float:
        return self._files.interval

    def devices(self) -> dict[str, DeviceProcesses]:
        return self._files.devices(self.backend)


def _own_pid(procfs: Path) -> int:
    """This process's pid as ``procfs`` numbers it (its ``self`` link), else as this namespace does."""
    try:
        return int(os.readlink(procfs / "self"))
    except (OSError, ValueError):
        return os.getpid()


def open_device_files(
    settings: Settings, loaded: Loaded, snapshot: Snapshot, interval: Callable[[], float]
) -> DeviceFiles | None:
    """A scanner for the loaded backends that list no processes through an SDK (``start()`` it), or
    None where none is loaded; the devices are those the sampler last listed for each backend."""
    rules = loaded.node_rules()
    if not rules:
        return None

    def infos(backend: str) -> list[GPUInfo]:
        state = snapshot.get(backend)
        return list(state.devices_info) if state is not None else []

    return DeviceFiles(settings.procfs, settings.sysfs, infos, rules, interval=interval)

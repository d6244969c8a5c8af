"""The workloads warptd tracks: each one's energy per device and CPU and when it was seen, and the
table that bounds how many are kept, and for how long."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from warptd.config import WorkloadKind as Kind
from warptd.recording.schema import DeviceEnergy, WorkloadView
from warptd.workloads.placement import CpuCgroup, Placement, WorkloadKey, user_name


@dataclass(frozen=True, slots=True)
class WorkloadTotals:
    """A workload's totals as one split left them: what its listeners read, a copy, so that they run
    without the split's lock (a scrape never waits for them)."""

    ended_at: float | None
    devices: Mapping[str, tuple[str, float]]  # BACKEND:INDEX -> (uuid, joules)
    cpu_joules: float | None


@dataclass
class Workload:
    """A workload's totals and timing; owned and changed by :class:`~warptd.workloads.energy.WorkloadEnergy`
    under its lock only."""

    key: WorkloadKey
    user: str
    started_at: float  # Unix time first seen
    seen: float  # monotonic time of the last poll that found it running
    cpu: CpuCgroup | None = None
    steps: set[str] = field(default_factory=set)
    #: BACKEND:INDEX -> (uuid, joules)
    devices: dict[str, tuple[str, float]] = field(default_factory=dict)
    cpu_joules: float | None = None
    ended_at: float | None = None  # Unix time of the first poll that found it gone
    cpu_usage_us: float | None = None  # the cgroup's CPU time at the last poll
    cpu_share: float = 0.0  # of the node's CPU time over the last poll period

    def add_device(self, device: str, uuid: str, joules: float) -> None:
        known = self.devices.get(device, (uuid, 0.0))[1]
        self.devices[device] = (uuid, known + joules)

    def add_cpu(self, joules: float) -> None:
        self.cpu_joules = (self.cpu_joules or 0.0) + joules

    def totals(self) -> WorkloadTotals:
        return WorkloadTotals(self.ended_at, MappingProxyType(dict(self.devices)), self.cpu_joules)

    @property
    def accelerator_joules(self) -> float:
        return sum(joules for _, joules in self.devices.values())

    def view(self) -> WorkloadView:
        accelerator = self.accelerator_joules
        return WorkloadView(
            kind=self.key.kind,
            id=self.key.id,
            user=self.user,
            steps=sorted(self.steps),
            started_at=self.started_at,
            ended_at=self.ended_at,
            devices=[
                DeviceEnergy(device=device, uuid=uuid, joules=joules)
                for device, (uuid, joules) in sorted(self.devices.items())
            ],
            accelerator_joules=accelerator,
            cpu_joules=self.cpu_joules,
            total_joules=accelerator + (self.cpu_joules or 0.0),
        )


class WorkloadTable:
    """The workloads tracked, by key: those of ``kinds`` (a process of another kind counts for its
    user, where users are tracked), at most ``max_workloads`` (one beyond is refused, and counted once
    in ``dropped``), an ended one forgotten ``retention`` s after it was last seen. Not thread-safe:
    the split's lock guards it."""

    def __init__(self, kinds: Collection[Kind], max_workloads: int, retention: float) -> None:
        self.kinds = frozenset(kinds)
        self.max_workloads, self.retention = max_workloads, retention
        self.workloads: dict[WorkloadKey, Workload] = {}
        self.dropped = 0
        self._running: set[WorkloadKey] = set()  # found on a device or in the cgroup tree this poll
        self._refused: set[WorkloadKey] = set()  # over the cap this poll
        self._over_cap: set[WorkloadKey] = set()  # over the cap at the poll before

    def poll_begins(self) -> None:
        """A poll begins: no workload found running yet, none refused."""
        self._running, self._refused = set(), set()

    def track(self, placement: Placement | None, now: float, wall: float) -> WorkloadKey | None:
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
        workload = self.workloads.get(key)
        if workload is None:
            if len(self.workloads) >= self.max_workloads:
                self._refused.add(key)
                return None
            workload = self.workloads[key] = Workload(key, user_name(placement.uid), wall, now, cpu)
        workload.seen, workload.ended_at = now, None
        self._running.add(key)
        if workload.cpu is None:  # first seen through a process whose cgroup keeps no CPU time
            workload.cpu = cpu
        if placement.step is not None and key.kind == "slurm_job":
            workload.steps.add(placement.step)
        return key

    def count_refused(self) -> None:
        """Count the workloads this poll refused that the one before did not: each once, not per poll."""
        self.dropped += len(self._refused - self._over_cap)
        self._over_cap = self._refused

    def end_and_expire(self, usage: Mapping[WorkloadKey, float | None], now: float, wall: float) -> None:
        """A workload runs while a device lists its processes or its cgroup is there (``usage``); an
        ended one goes ``retention`` seconds after it was last seen."""
        for key, workload in list(self.workloads.items()):
            if key not in self._running and usage.get(key) is not None:
                workload.seen, workload.ended_at = now, None
            elif key not in self._running and workload.ended_at is None:
                workload.ended_at = wall
            if now - workload.seen > self.retention:
                del self.workloads[key]

    def cpu_cgroups(self) -> dict[WorkloadKey, CpuCgroup]:
        """The cgroup that keeps each workload's CPU time, where it has one."""
        return {w.key: w.cpu for w in self.workloads.values() if w.cpu is not None}

    def frozen(self) -> Mapping[WorkloadKey, WorkloadTotals]:
        """A frozen copy of every workload's totals."""
        return MappingProxyType({key: workload.totals() for key, workload in self.workloads.items()})

    def views(self, offset: int, limit: int | None) -> list[WorkloadView]:
        """The workloads from ``offset``, at most ``limit``: running ones first, then ended ones, each
        newest first; only those shown are built."""
        workloads = sorted(
            self.workloads.values(), key=lambda w: (w.ended_at is not None, -w.started_at, w.key.id)
        )
        return [w.view() for w in workloads[offset : None if limit is None else offset + limit]]

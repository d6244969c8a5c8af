"""One workload's state while warptd tracks it: its energy per device and CPU, when it was seen."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from warptd.workloads.placement import CpuCgroup, WorkloadKey
from warptd.workloads.views import DeviceEnergy, WorkloadView


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

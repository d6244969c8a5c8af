"""What ``GET /workloads`` and ``GET /workloads/KIND/ID`` answer: each workload's energy per device and
CPU, its devices, start and end. No command line, environment or pid is part of it."""

from __future__ import annotations

from pydantic import Field

from warptd.models import WireModel
from warptd.workloads.placement import Kind


class DeviceEnergy(WireModel):
    """A workload's share of one device's energy."""

    device: str = Field(description="BACKEND:INDEX, e.g. nvidia:0")
    uuid: str = Field(description="The device's UUID, empty where it has none.")
    joules: float = Field(description="Energy of this device split to the workload while it ran there.")


class WorkloadView(WireModel):
    """One workload as the daemon knows it: live, or ended and kept for --workload-retention."""

    kind: Kind
    id: str = Field(description="Slurm job id, unit name, container id or user name.")
    user: str = Field(description="The login name (else uid) its processes run as.")
    steps: list[str] = Field(description="Slurm steps seen on a device (batch, extern, 0, ...).")
    started_at: float = Field(description="Unix time warptd first saw it.")
    ended_at: float | None = Field(
        description="Unix time of the first poll that found neither a process of it on a device nor its "
        "cgroup; null while it runs."
    )
    devices: list[DeviceEnergy]
    accelerator_joules: float = Field(description="Sum over its devices.")
    cpu_joules: float | None = Field(
        description="Its share of the CPU packages' energy (RAPL) by its cgroup's CPU time; null where "
        "its cgroup's CPU time or RAPL cannot be read."
    )
    total_joules: float


class WorkloadList(WireModel):
    """Every workload, live first, then ended ones, each newest first; and the energy of no workload."""

    workloads: list[WorkloadView]
    unattributed_joules: dict[str, float] = Field(
        description="By source (accelerator, cpu): energy of no known workload, idle included."
    )
    dropped: int = Field(description="Workloads not tracked because --workload-max were.")

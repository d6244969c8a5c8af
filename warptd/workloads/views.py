"""What ``GET /workloads`` and ``GET /workloads/KIND/ID`` answer: each workload's energy per device and
CPU, its devices, start and end. No command line, environment or pid is part of it. One workload's
view is part of its recording too, so it lives with the recording schema."""

from __future__ import annotations

from pydantic import Field

from warptd.models import Page
from warptd.recording.schema import WorkloadView


class WorkloadList(Page):
    """Workloads, live first, then ended ones, each newest first (one page of them); and the energy
    of no workload."""

    workloads: list[WorkloadView]
    unattributed_joules: dict[str, float] = Field(
        description="By source (accelerator, cpu): energy of no known workload, idle included."
    )
    dropped: int = Field(description="Workloads not tracked because --workload-max were.")

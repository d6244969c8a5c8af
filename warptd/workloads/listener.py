"""What :class:`~warptd.workloads.energy.WorkloadEnergy` tells the parts that follow its workloads (their
recordings), under its lock, so they read each workload's totals as the split left them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from warptd.power.base import DomainPower
    from warptd.sampling.snapshot import DeviceSample
    from warptd.workloads.placement import WorkloadKey
    from warptd.workloads.tracked import Workload


class WorkloadListener(Protocol):
    """Called with the workloads as they stand (read them; never change or keep the mapping)."""

    def after_poll(self, workloads: Mapping[WorkloadKey, Workload]) -> None:
        """A poll found workloads, ended some and let others go past their retention."""

    def after_sample(
        self,
        backend: str,
        devices: list[DeviceSample] | None,
        domains: list[DomainPower] | None,
        at: float | None,
        workloads: Mapping[WorkloadKey, Workload],
    ) -> None:
        """A sample's energy was split: each workload's totals include it."""

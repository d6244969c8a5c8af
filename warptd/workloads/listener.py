"""What :class:`~warptd.workloads.energy.WorkloadEnergy` tells the parts that follow its workloads (their
recordings): a frozen copy of each workload's totals as the split left them, handed over after the
split let go of its lock (so a scrape never waits for a listener), in the order the split made them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from warptd.power.base import DomainPower
    from warptd.sampling.snapshot import DeviceSample
    from warptd.workloads.placement import WorkloadKey
    from warptd.workloads.tracked import WorkloadTotals


class WorkloadListener(Protocol):
    """Called with the workloads as they stood (a read-only copy; one call at a time)."""

    def after_poll(self, workloads: Mapping[WorkloadKey, WorkloadTotals]) -> None:
        """A poll found workloads, ended some and let others go past their retention."""

    def after_sample(
        self,
        backend: str,
        devices: list[DeviceSample] | None,
        domains: list[DomainPower] | None,
        at: float | None,
        workloads: Mapping[WorkloadKey, WorkloadTotals],
    ) -> None:
        """A sample's energy was split: each workload's totals include it."""

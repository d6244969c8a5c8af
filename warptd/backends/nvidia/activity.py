"""A GPU's activity from GPM (the whole GPU, MIG off or on: SM, tensor pipes, DRAM, PCIe and NVLink
throughput), sampled at most once a second outside windows; and the hardware it has (media engines,
NVLinks), so that what it lacks gets no series."""

from __future__ import annotations

from warptd.backends.costs import ReadCosts
from warptd.backends.nvidia.api import GpuHandle
from warptd.backends.nvidia.batch import FieldBatch
from warptd.backends.nvidia.engines import Presence, engine_counts
from warptd.backends.nvidia.gpm import GpmContext, GpmSource
from warptd.metrics import nvidia
from warptd.models import LabelledValues

#: Byte counters the driver may keep in fields, which GPM throughput otherwise stands in for.
_TRAFFIC = (nvidia.PCIE_BYTES.name, nvidia.NVLINK_LINK_BYTES.name)
_NONE: dict[str, LabelledValues] = {}


class GpuActivity:
    """One GPU's GPM source (opened once its NVLinks are known) and its presence."""

    __slots__ = ("_batch", "_costs", "_gpm", "_gpu", "_presence", "_supported", "source")

    def __init__(self, gpu: GpuHandle, batch: FieldBatch, gpm: GpmContext, costs: ReadCosts) -> None:
        self._gpu, self._batch, self._gpm, self._costs = gpu, batch, gpm, costs
        self._presence: Presence | None = None  # its engines and links, once known
        self._supported: bool | None = None  # nvmlGpmQueryDeviceSupport's answer, once it answered
        self.source: GpmSource | None = None

    def presence(self) -> Presence | None:
        """The media engines (asked once) and NVLinks (from the full batch's plan) the GPU has; None
        until the plan is known."""
        plan = self._batch.plan
        if plan is None:
            return None
        if self._presence is None:
            gpu = self._gpu
            counts = engine_counts(gpu.api.nvml, gpu.guard, gpu.handle)
            self._presence = Presence(counts, plan.links)
        return self._presence

    def sample(self, watched: bool) -> None:
        """One GPM sample of the whole GPU, on GPUs with GPM, when its period is due (``watched``: a
        window's). The throughputs of the series the driver counts in fields are not asked (its
        counters win)."""
        gpm, gpu = self._gpm, self._gpu
        if not gpm.table:  # no GPM family is exported
            return
        if self._supported is None:
            self._supported = gpm.supported(gpu.guard, gpu.handle)
        if not self._supported:
            return
        if self.source is None:
            presence = self.presence()
            if presence is None:
                return  # its NVLinks not known yet: opened once they are
            self.source = gpm.open(gpu.guard, "nvmlGpmSampleGet", (gpu.handle,), presence)
            if self.source is None:
                return
        if not self.source.sample(gpu.guard, "gpm_sample", watched, self._costs):
            return
        if not self.source.covered:
            counted = self._batch.counters()
            self.source.cover({(name, labels) for name in _TRAFFIC for labels in counted.get(name, ())})

    def gauges(self) -> dict[str, LabelledValues]:
        """The activity ratios over the last sample period."""
        return self.source.gauges if self.source is not None else _NONE

    def counters(self) -> dict[str, LabelledValues]:
        """PCIe and NVLink bytes integrated from throughput, for the series the driver keeps no counter of."""
        return self.source.counters() if self.source is not None else _NONE

    def close(self) -> None:
        """Free the GPM samples (before an NVML reopen, at shutdown)."""
        if self.source is not None:
            self.source.close()
            self.source = None

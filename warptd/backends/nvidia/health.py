"""One GPU's health values, read every ``--health-interval`` (:mod:`~warptd.backends.cadence`): the
health field batch (every field) decoded, with the calls that stand in for the health fields a GPU lacks (PCIe
replays, remapped rows, error counters of NVLinks 12-17); the enforced power limit, fans, the media
engines' utilization."""

from __future__ import annotations

from collections.abc import Callable

from warptd.backends.nvidia import fields
from warptd.backends.nvidia.api import GpuHandle
from warptd.backends.nvidia.batch import FieldBatch
from warptd.backends.nvidia.engines import Presence, averages
from warptd.backends.nvidia.fields import Decoded, FieldPlan
from warptd.metrics import nvidia
from warptd.models import LabelledValues

#: How a fan's speed is read: NVIDIA's table's row (percent by fan).
_FAN = nvidia.row_of(nvidia.FAN_SPEED)


class HealthValues:
    """The health values of one GPU as of their last read, asked through its guard."""

    __slots__ = ("_get", "_guard", "_reads", "fans", "gauges", "power_limit")

    def __init__(self, gpu: GpuHandle, reads: Callable[[str], bool] = lambda name: True) -> None:
        self._get, self._guard = gpu.get, gpu.guard
        self._reads = reads  # whether some output reads a family: fans and media engines only if so
        self.power_limit: float | None = None  # W, enforced
        #: nvidia-smi's gauges besides the performance state: fans, the media engines' utilization.
        self.gauges: dict[str, LabelledValues] = {}
        self.fans: int | None = None  # fans of the board, asked once

    def read(self, presence: Presence | None = None) -> bool:
        """Read the power limit, fans, the media engines' utilization (of the kinds the GPU has, by
        ``presence``: NVML answers 0 on a GPU without an encoder). False when one failed now (rather
        than being unsupported)."""
        unsupported = self._guard.unsupported
        milliwatts = self._get("power_limit", "nvmlDeviceGetEnforcedPowerLimit")
        self.power_limit = milliwatts / 1000 if milliwatts is not None else None
        answered = milliwatts is not None or "power_limit" in unsupported
        gauges: dict[str, LabelledValues] = {}
        fans = {}
        if self._reads(nvidia.FAN_SPEED.name):
            fans = {(str(fan),): _FAN.convert(percent) for fan, percent in self._fan_speeds().items()}
        if fans:
            gauges[nvidia.FAN_SPEED.name] = fans
        media, unanswered = averages(self._get, presence, self._reads)
        gauges.update(media)
        answered = answered and all(name in unsupported for name in unanswered)
        self.gauges = gauges
        return answered

    def _fan_speeds(self) -> dict[int, float]:
        """Percent by fan; a board without fans answers NOT_SUPPORTED once and is not asked again."""
        if self.fans is None:
            count = self._get("fans", "nvmlDeviceGetNumFans")
            if count is None:
                return {}
            self.fans = count
        speeds = {}
        for fan in range(self.fans):
            percent = self._get(f"fan_{fan}", _FAN.source.name, fan)
            if percent is not None:
                speeds[fan] = float(percent)
        return speeds

    def decode(self, batch: FieldBatch) -> Decoded:
        """Gauges and raw counters from this read's health batch, with the calls that stand in where the
        GPU lacks a field (PCIe replays, remapped rows, the NVLinks no per-link field id numbers)."""
        plan = batch.plan
        if plan is None:
            return {}, {}
        gauges, counters = batch.decode()
        if batch.lacks(fields.FI_PCIE_REPLAY_COUNTER):
            replays = self._get("pcie_replays", "nvmlDeviceGetPcieReplayCounter")
            if replays is not None:
                counters[nvidia.PCIE_REPLAYS.name] = {(): float(replays)}
        errors = self._nvlink_error_calls(plan)
        if errors:
            name = nvidia.NVLINK_LINK_ERRORS.name
            counters[name] = {**counters.get(name, {}), **errors}
        if all(batch.lacks(field_id) for field_id in fields.FI_REMAPPED_ROWS):
            rows = self._get("remapped_rows", "nvmlDeviceGetRemappedRows")
            if rows is not None:
                gauges[nvidia.REMAPPED_ROWS.name] = {("correctable",): rows[0], ("uncorrectable",): rows[1]}
                gauges[nvidia.ROW_REMAP_PENDING.name] = {(): float(bool(rows[2]))}
                gauges[nvidia.ROW_REMAP_FAILURE.name] = {(): float(bool(rows[3]))}
        return gauges, counters

    def _nvlink_error_calls(self, plan: FieldPlan) -> LabelledValues:
        """The error counters of the links no per-link field id numbers (12-17 of an H100/H200), by
        nvmlDeviceGetNvLinkErrorCounter as DCGM reads them. Each link's kind is its own call: one not
        supported (an inactive link) is not asked again, the others are; one failing otherwise (e.g.
        INVALID_ARGUMENT) is absent this read."""
        errors: dict[tuple[str, ...], float] = {}
        for link, kind, counter in plan.error_calls:
            what = f"nvlink_error_counter_{link}_{kind}"
            count = self._get(what, "nvmlDeviceGetNvLinkErrorCounter", link, counter)
            if count is not None:
                errors[str(link), kind] = float(count)
        return errors

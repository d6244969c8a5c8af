"""The counters a GPU's read plan reads at their own cadence and exactly at a window's edge: the energy
counter (field 83, 2.9 ms of CPU on an H200, refreshed every 100 ms: every ``--energy-interval``) and
the clock-event durations (with the health batch). A window, profile, stress job or workload recording
reads both at its edges, so what it measures is the driver's own counters."""

from __future__ import annotations

from warptd.backends.cadence import DeviceCadence
from warptd.backends.costs import ReadKind
from warptd.backends.nvidia import fields
from warptd.backends.nvidia.api import GpuHandle
from warptd.backends.nvidia.batch import FieldBatch


def read_kind(
    health: DeviceCadence,
    energy: DeviceCadence,
    edge: bool = False,
    pace: float | None = None,
    now: float | None = None,
) -> ReadKind:
    """The kind of a GPU's full read by the plan: ``health`` where the slow values are due (the energy
    counter and throttle times come with them), else ``edge`` at a window's edge, ``energy`` where the
    counter is due, else the cheap ``power``. A cadence found due counts as read from then on; a read
    of the counter (health, edge) counts for its cadence, which runs on from there."""
    counter = energy.due(now, pace)
    if health.due(now, pace):
        energy.read(now)
        return ReadKind.HEALTH
    if edge:
        energy.read(now)
        return ReadKind.EDGE
    return ReadKind.ENERGY if counter else ReadKind.POWER


class EdgeCounters:
    """What one read of a GPU asked beside the cheap sample, and the counters it read: the energy
    counter (from the field batch, or by call where the driver lacks the field) and the clock-event
    durations (fields, or the violation counters where the driver lacks one)."""

    __slots__ = ("_batch", "_energy_mj", "_gpu", "energy_read", "throttle_read")

    def __init__(self, gpu: GpuHandle, batch: FieldBatch) -> None:
        self._gpu, self._batch = gpu, batch
        self.energy_read = self.throttle_read = False
        self._energy_mj: float | None = None  # the counter read by call, where the GPU lacks the field

    def asked(self, kind: str) -> None:
        """This read is of ``kind`` (:func:`read_kind`): the energy counter is read unless it is the cheap
        ``power`` read, by call where the driver lacks its field; the durations at health reads and edges."""
        energy = kind != "power"
        self.energy_read, self.throttle_read, self._energy_mj = energy, kind in ("health", "edge"), None
        if energy and self._batch.lacks(fields.FI_TOTAL_ENERGY):
            self._energy_mj = self._gpu.get("energy", "nvmlDeviceGetTotalEnergyConsumption")

    def energy(self) -> float | None:
        """The energy counter where this read asked it, J (NVML: mJ): the field, or
        ``nvmlDeviceGetTotalEnergyConsumption`` where the driver lacks the field (a field failing this
        read is counted once, as the call's failure would be). None between two reads of it: the sampler
        then adds the energy the power drew (:class:`~warptd.sampling.power_integral.PowerIntegral`)."""
        if not self.energy_read:
            return None
        millijoules = self._batch.field(fields.FI_TOTAL_ENERGY)
        if millijoules is None:
            millijoules = self._energy_mj
        return millijoules / 1000 if millijoules is not None else None

    def throttle_seconds(self) -> dict[str, float]:
        """Seconds in each reason from the clock-event duration fields (ns), where this read asked them
        (health, edges); the violation counters stand in only where the driver lacks a field, and only
        for the reasons they really count. A reason the numbering gives two ids takes the one answering."""
        counters: dict[str, float] = {}
        if not self.throttle_read:
            return counters
        batch = self._batch
        values, policies = batch.values, self._gpu.api.policies
        for reason, key in batch.field_set.throttle:
            if reason in counters:
                continue
            nanoseconds = values.get(key)
            if nanoseconds is None and self._has_other_id(reason, key):
                continue
            if nanoseconds is None and reason in policies and batch.lacks(key[0]):
                status = self._gpu.get(
                    f"violation_{reason}", "nvmlDeviceGetViolationStatus", policies[reason]
                )
                nanoseconds = status.violationTime if status is not None else None
            if nanoseconds is not None:
                counters[reason] = nanoseconds / 1e9
        return counters

    def _has_other_id(self, reason: str, key: fields.FieldKey) -> bool:
        """Whether ``reason`` has another duration id this GPU does not lack (asked beside ``key``)."""
        return any(
            other != key and r == reason and other not in self._batch.unsupported
            for r, other in self._batch.field_set.throttle
        )

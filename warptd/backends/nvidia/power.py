"""A GPU's power as nvml.h defines it, not as the calls are named: ``nvmlDeviceGetPowerUsage`` is a 1 s
average on Ampere and newer, so the instant power is the instant field where the GPU has it; and the
power of the parts NVML measures apart (a Grace Hopper module, the memory)."""

from __future__ import annotations

from collections.abc import Callable

from warptd.backends.kept import Kept
from warptd.backends.nvidia import fields
from warptd.backends.nvidia.api import GpuHandle
from warptd.backends.nvidia.batch import FieldBatch

#: Compute capability from which nvmlDeviceGetPowerUsage is a 1 s average (Ampere and newer; GA100,
#: 8.0, still reads instantaneously).
AVERAGING_SINCE = (8, 6)
_NO_SCOPES: dict[str, float] = {}


def averages(compute_capability: str | None) -> bool:
    """Whether nvmlDeviceGetPowerUsage is a 1 s average on a GPU of this compute capability: on Ampere
    and newer but GA100 (an unknown GPU is not claimed instantaneous)."""
    if compute_capability is None:
        return True
    major, minor = (int(part) for part in compute_capability.split("."))
    return (major, minor) >= AVERAGING_SINCE


class GpuPower:
    """One GPU's power reads from its field batch, the call standing in where the driver lacks a field.
    ``capability()`` gives the GPU's compute capability as last listed."""

    __slots__ = ("_batch", "_capability", "_gpu", "_scopes")

    def __init__(self, gpu: GpuHandle, batch: FieldBatch, capability: Callable[[], str | None]) -> None:
        self._gpu, self._batch, self._capability = gpu, batch, capability
        self._scopes: Kept[dict[str, float]] = Kept()

    def _usage(self) -> float | None:
        return self._gpu.get("power", "nvmlDeviceGetPowerUsage")  # type: ignore[no-any-return]

    def instant(self) -> float | None:
        """W: the instantaneous field where the GPU has it; else nvmlDeviceGetPowerUsage where that is
        instantaneous: on a GPU that does not average (pre-Ampere, GA100). On one that averages, the
        call is never taken for the instant power, even where the field failed this once (absent then):
        a 1 s average is no instant reading, nor is it to be integrated as one."""
        milliwatts = self._batch.field(fields.FI_POWER_INSTANT)
        if milliwatts is None and not averages(self._capability()):
            milliwatts = self._usage()
        return milliwatts / 1000 if milliwatts is not None else None

    def average(self) -> float | None:
        """W: the average field; on a driver without it, nvmlDeviceGetPowerUsage where the GPU averages."""
        milliwatts = self._batch.field(fields.FI_POWER_AVERAGE)
        if milliwatts is None and averages(self._capability()):
            milliwatts = self._usage()
        return milliwatts / 1000 if milliwatts is not None else None

    def scopes(self) -> dict[str, float]:
        """W of the parts NVML measures apart (a Grace Hopper module, the memory): the scoped instant
        field, else the scoped average; none where the GPU answers neither (most GPUs)."""
        values, scopes = self._batch.values, {}
        for part, instant, average in self._batch.field_set.scopes:
            milliwatts = values.get(instant, values.get(average))
            if milliwatts is not None:
                scopes[part] = milliwatts / 1000
        return self._scopes.of(tuple(scopes.items()), dict) if scopes else _NO_SCOPES

    def parts(self) -> tuple[str, ...]:
        """The parts whose power this GPU measures apart, as far as it answered (those it lacks are
        not asked again)."""
        unsupported = self._batch.unsupported
        return tuple(
            part
            for part, instant, average in self._batch.field_set.scopes
            if instant not in unsupported or average not in unsupported
        )

"""GPU power and energy from NVML: the energy counter (mJ) where supported, else integrated power."""

from __future__ import annotations

from typing import ClassVar

from warptd.backends.nvidia.backend import NvidiaBackend
from warptd.power.base import PowerSource
from warptd.power.devices import DevicePowerBackend


class NvmlPowerBackend(DevicePowerBackend):
    """One domain per NVIDIA GPU (``gpu0`` …), sharing the process-wide NVML session and its handles.

    ``nvmlDeviceGetTotalEnergyConsumption`` (Volta and newer) backs the energy; on older GPUs the
    sampler integrates ``nvmlDeviceGetPowerUsage``.
    """

    name: ClassVar[str] = "nvml"
    companion: ClassVar[str | None] = "nvidia"
    source: ClassVar[PowerSource] = PowerSource.NVML
    accelerator_cls = NvidiaBackend

"""GPU power and energy from amdsmi: the energy accumulator (µJ ticks) where the GPU has one."""

from __future__ import annotations

from typing import ClassVar

from warptd.backends.amd.backend import AmdBackend
from warptd.power.base import PowerSource
from warptd.power.devices import DevicePowerBackend


class AmdsmiPowerBackend(DevicePowerBackend):
    """One domain per AMD GPU (``gpu0`` …), sharing the process-wide amdsmi session of ``amd``.

    ``amdsmi_get_energy_count`` backs the energy; where it is unsupported the sampler integrates
    the socket power of ``amdsmi_get_power_info``.
    """

    name: ClassVar[str] = "amdsmi"
    companion: ClassVar[str | None] = "amd"
    source: ClassVar[PowerSource] = PowerSource.AMDSMI
    accelerator_cls = AmdBackend

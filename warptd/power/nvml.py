"""The power NVML measures beyond each GPU's own: a Grace Hopper module's and the memory's."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from warptd.backends.nvidia.backend import NvidiaBackend
from warptd.errors import BackendUnavailableError
from warptd.power.base import DomainReading, PowerSource
from warptd.power.devices import DevicePowerBackend

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from warptd.config import Settings
    from warptd.models import DeviceReading


class NvmlPowerBackend(DevicePowerBackend):
    """Domains ``gpuN-module`` and ``gpuN-memory``: NVML's power fields with the module scope (a Grace
    Hopper module, its CPU included; NVIDIA CPUs only) and the memory scope, where a GPU answers them.

    A GPU's own power and energy are the ``nvidia`` backend's device series: a domain repeating them
    would add nothing, so where no GPU answers a scope this backend does not load, and says why
    (``warptd list --verbose``). The sampler integrates each domain's power into its energy.
    """

    name: ClassVar[str] = "nvml"
    source: ClassVar[PowerSource] = PowerSource.NVML
    accelerator_cls = NvidiaBackend

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        devices: NvidiaBackend = self.devices  # type: ignore[assignment]
        count = devices.get_device_count()  # a driver without power fields has no part to ask
        if not any(devices.power_parts(index) and devices.read_power_scopes(index) for index in range(count)):
            devices.shutdown()
            raise BackendUnavailableError(
                "no NVML power domain beyond the GPUs' own: no GPU answers the module or memory power "
                "scope (each GPU's power and energy are the nvidia backend's device series)"
            )

    def anchor(self) -> None:
        """Nothing to read exactly at an edge: the parts' power has no counter (the sampler integrates it)."""

    def read_domains(self) -> list[DomainReading]:
        devices: NvidiaBackend = self.devices  # type: ignore[assignment]
        domains = []
        for index in range(devices.get_device_count()):
            scopes = devices.read_power_scopes(index)
            domains += self._scoped(index, scopes, devices.device_identity(index))
        return domains

    def domains_from(self, readings: Sequence[DeviceReading]) -> list[DomainReading]:
        """The same domains from the companion ``nvidia`` backend's full read (its batch asks the
        scoped fields too)."""
        identity = self.devices.device_identity
        domains = []
        for reading in readings:
            scopes = reading.power_scopes_watts if reading.up else None
            domains += self._scoped(reading.index, scopes, identity(reading.index))
        return domains

    def _scoped(
        self, index: int, scopes: Mapping[str, float] | None, identity: str | None
    ) -> list[DomainReading]:
        """One domain per part GPU ``index`` measures (unreadable while the GPU is lost)."""
        if scopes is None:
            parts = self.devices.power_parts(index)  # type: ignore[attr-defined]
            return [DomainReading(domain=f"gpu{index}-{part}", readable=False) for part in parts]
        return [
            DomainReading(
                domain=f"gpu{index}-{part}", power_watts=watts, identity=f"{identity or index}/{part}"
            )
            for part, watts in scopes.items()
        ]

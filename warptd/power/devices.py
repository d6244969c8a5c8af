"""A power backend over an accelerator backend's own power and energy readings, one domain per device."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, ClassVar

from warptd.errors import ErrorKind
from warptd.power.base import DomainReading, GPUPowerInfo, PowerBackend

if TYPE_CHECKING:
    from collections.abc import Sequence

    from warptd.backends.base import AcceleratorBackend
    from warptd.config import Settings
    from warptd.models import DeviceReading


class DevicePowerBackend(PowerBackend):
    """Domains ``<prefix><index>`` from ``accelerator_cls``; subclasses name the class and the source.

    Devices without an energy counter report power only; the sampler integrates it into energy.
    """

    accelerator_cls: ClassVar[type[AcceleratorBackend]]
    domain_prefix: ClassVar[str] = "gpu"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.devices = self.accelerator_cls(settings)

    def classify_error(self, exc: BaseException) -> ErrorKind:
        return self.devices.classify_error(exc)

    def reconfigure(self, settings: Settings) -> None:
        super().reconfigure(settings)
        self.devices.reconfigure(settings)

    def take_errors(self) -> Counter[ErrorKind]:
        return super().take_errors() + self.devices.take_errors()

    def is_available(self) -> bool:
        return self.devices.is_available()

    def anchor(self) -> None:
        self.devices.anchor(range(self.devices.get_device_count()))

    def read_domains(self) -> list[DomainReading]:
        readings = []
        for index in range(self.devices.get_device_count()):
            power, energy = self.devices.read_power(index) or (None, None)
            readings.append(self._domain(index, power, energy, self.devices.device_identity(index)))
        return readings

    def domains_from(self, readings: Sequence[DeviceReading]) -> list[DomainReading]:
        """The same domains from the companion accelerator backend's full read (the same SDK calls:
        its power and energy counter), identified as :meth:`read_domains` identifies them."""
        identity = self.devices.device_identity
        return [
            self._domain(
                r.index, r.power_watts, r.energy_counter_joules, identity(r.index), r.power_limit_watts
            )
            if r.up
            else self._domain(r.index, None, None, identity(r.index))
            for r in readings
        ]

    def _domain(
        self,
        index: int,
        power: float | None,
        energy: float | None,
        identity: str | None,
        limit: float | None = None,
    ) -> DomainReading:
        return DomainReading(
            domain=f"{self.domain_prefix}{index}",
            power_watts=power,
            energy_counter_joules=energy,
            readable=power is not None or energy is not None,
            identity=identity,
            limit_watts=limit,
        )

    def get_gpu_power(self) -> list[GPUPowerInfo]:
        gpus = []
        for info in self.devices.list_devices():
            reading = self.devices.read_device(info.index)
            if not reading.up or reading.power_watts is None:
                continue
            util = reading.utilization
            gpus.append(
                GPUPowerInfo(
                    index=info.index,
                    name=info.model,
                    power_watts=reading.power_watts,
                    power_limit_watts=reading.power_limit_watts,
                    utilization_percent=100 * ((util.compute or 0.0) if util else 0.0),
                    memory_utilization_percent=100 * ((util.memory or 0.0) if util else 0.0),
                    temperature_celsius=next(iter(reading.temperatures_celsius.values()), None),
                    metadata={"uuid": info.uuid},
                )
            )
        return gpus

    def shutdown(self) -> None:
        self.devices.shutdown()

"""A power backend over an accelerator backend's own power and energy readings, one domain per device."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, ClassVar

from warptd.errors import ErrorKind
from warptd.power.base import DomainReading, PowerBackend

if TYPE_CHECKING:
    from collections.abc import Sequence

    from warptd.backends.base import AcceleratorBackend
    from warptd.config import Settings
    from warptd.models import DeviceReading


class DevicePowerBackend(PowerBackend):
    """Domains ``<prefix><index>`` from ``accelerator_cls``'s power-only reads; a vendor declares one
    by its name and companion (:func:`companion_power`), or subclasses it where it reads more.

    Devices without an energy counter report power only; the sampler integrates it into energy.
    """

    accelerator_cls: ClassVar[type[AcceleratorBackend]]
    domain_prefix: ClassVar[str] = "gpu"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.devices = self.accelerator_cls(settings)
        self.sdk = self.accelerator_cls.sdk  # type: ignore[misc]

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
            reading = self.devices.read_device(index, power_only=True)
            power, energy = (
                (reading.power_watts, reading.energy_counter_joules) if reading.up else (None, None)
            )
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

    def shutdown(self) -> None:
        self.devices.shutdown()


def companion_power(name: str, accelerator_cls: type[AcceleratorBackend]) -> type[DevicePowerBackend]:
    """The power backend ``name`` over ``accelerator_cls``'s devices, its ``source`` label its name (a
    vendor's :class:`~warptd.backends.vendor.Power` without a class of its own: ``amdsmi``, ``hlml``)."""
    attributes = {"name": name, "source": name, "accelerator_cls": accelerator_cls, "__module__": __name__}
    return type(f"{accelerator_cls.__name__}Power", (DevicePowerBackend,), attributes)

"""The PowerBackend ABC and the power data contracts of the design document."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

from warptd.backends.guard import GuardedSDK
from warptd.config import with_live_settings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from warptd.config import Settings
    from warptd.models import DeviceReading


class PowerSource(StrEnum):
    """Where a power or energy figure comes from; the ``source`` label of domain series (a power backend
    a vendor declares over its devices is labelled with its own name)."""

    NVML = "nvml"
    RAPL = "rapl"
    HWMON = "hwmon"


@dataclass(frozen=True, slots=True)
class DomainReading:
    """Raw reading of one power domain, as the hardware gives it (converted to W and J)."""

    domain: str
    power_watts: float | None = None
    #: Cumulative energy counter in J as read: it wraps at ``energy_range_joules`` or resets.
    energy_counter_joules: float | None = None
    energy_range_joules: float | None = None
    readable: bool = True
    #: What the energy total belongs to (a GPU's UUID); defaults to the domain name.
    identity: str | None = None
    #: The device's power limit in W where known: the most a reset counter may add per second.
    limit_watts: float | None = None


@dataclass(frozen=True, slots=True)
class DomainPower:
    """One domain after sampling: power (measured or derived from energy) and monotonic energy."""

    domain: str
    source: PowerSource
    power_watts: float | None
    energy_joules: float | None
    readable: bool = True


class PowerBackend(GuardedSDK, ABC):
    """A source of continuous power by domain. Constructors raise when the source is absent."""

    name: ClassVar[str]
    source: ClassVar[PowerSource | str]
    #: The distribution its SDK comes in, whose version ``warptd doctor`` reports (a companion: its devices').
    sdk: ClassVar[str | None] = None
    #: The accelerator backend this source measures, as its vendor declares it and the registry sets it
    #: (:class:`~warptd.backends.vendor.Power`): ``--backend nvidia`` also loads ``nvml``.
    companion: str | None = None
    #: The longest the sampler may wait between two reads (s), whatever ``--interval`` says: e.g.
    #: a counter that wraps must be read before it can wrap twice. None: no limit.
    max_interval: float | None = None

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings

    def reconfigure(self, settings: Settings) -> None:
        """A reload: take the settings read while sampling from ``settings``."""
        self.settings = with_live_settings(self.settings, settings)

    @abstractmethod
    def is_available(self) -> bool:
        """True when at least one domain exists."""

    @abstractmethod
    def read_domains(self) -> list[DomainReading]:
        """Read every domain now. Never raises; an unreadable domain has ``readable=False``."""

    def anchor(self) -> None:
        """Read every counter exactly at the next read (a window's edge): see
        :meth:`~warptd.backends.base.AcceleratorBackend.anchor`."""

    def domains_from(self, readings: Sequence[DeviceReading]) -> list[DomainReading] | None:
        """The domains that the companion backend's device readings already hold, so that one SDK
        read serves both; None when this source reads something else (its own counters)."""
        return None

    def shutdown(self) -> None:
        """Release the source."""

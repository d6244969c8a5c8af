"""Gaudi power and energy from HLML: the energy counter (mJ since driver load), else integrated power."""

from __future__ import annotations

from typing import ClassVar

from warptd.backends.gaudi import GaudiBackend
from warptd.power.base import PowerSource
from warptd.power.devices import DevicePowerBackend


class HlmlPowerBackend(DevicePowerBackend):
    """One domain per Gaudi device (``gpu0`` …), sharing the process-wide HLML session and its handles."""

    name: ClassVar[str] = "hlml"
    companion: ClassVar[str | None] = "gaudi"
    source: ClassVar[PowerSource] = PowerSource.HLML
    accelerator_cls = GaudiBackend

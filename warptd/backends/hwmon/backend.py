"""The ``hwmon`` backend: one :class:`~warptd.backends.hwmon.card.HwmonCard` per amdgpu, i915 or xe card
under ``--sysfs``/class/drm, a fallback an SDK backend replaces card by card."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from warptd.backends.base import AcceleratorBackend
from warptd.backends.cadence import DeviceCadence
from warptd.backends.hwmon.card import DRIVERS, DeviceGoneError, HwmonCard, Place
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.models import GPUInfo, pci_address
from warptd.sysfs import HwmonChip, read_text

if TYPE_CHECKING:
    from warptd.config import Settings

_CARD = re.compile(r"^card(\d+)$")


class HwmonBackend(AcceleratorBackend):
    """One device per amdgpu/i915/xe card under ``--sysfs``/class/drm."""

    name: ClassVar[str] = "hwmon"
    source: ClassVar[str] = "sysfs"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.devices: list[HwmonCard] = [
            HwmonCard(index, place, DeviceCadence(lambda: self.settings), self.call, self.read_costs)
            for index, place in enumerate(_discover(settings.sysfs))
        ]
        if not self.devices:
            raise BackendUnavailableError(f"no amdgpu, i915 or xe card under {settings.sysfs}/class/drm")

    def classify_error(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, DeviceGoneError):
            return ErrorKind.DEVICE_LOST
        if isinstance(exc, ValueError):
            return ErrorKind.SDK_ERROR  # a garbled attribute
        return super().classify_error(exc)

    def list_devices(self) -> list[GPUInfo]:
        devices = []
        for card in self.devices:
            place = card.place
            vendor, _ = DRIVERS[place.driver]
            device_id = _text(place.device / "device")
            total = card.read_file("vram_total", card.files.vram_total)
            devices.append(
                GPUInfo(
                    index=card.index,
                    model=f"{vendor} GPU {device_id or ''}".strip(),
                    uuid=_text(place.device / "unique_id"),
                    pci_bus_id=place.device.resolve().name,
                    driver_version=self.get_driver_version(),  # in-tree drivers carry the kernel's
                    extra_metrics={"driver": place.driver, "card": place.card},
                    **GPUInfo.memory_fields(int(total) if total is not None else None),
                )
            )
        return devices

    def release_devices(self, pci_bus_ids: set[str]) -> set[str]:
        """Stop serving the cards an SDK backend serves (a fallback: ``ReleasesDevices``)."""
        addresses = {card.place.card: pci_address(card.place.device.resolve().name) for card in self.devices}
        self.devices = [card for card in self.devices if addresses[card.place.card] not in pci_bus_ids]
        for index, card in enumerate(self.devices):
            card.index = index
        return {a for a in addresses.values() if a in pci_bus_ids}

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """ROCm torch calls amdgpu cards ``cuda``, Intel's ``xpu``, numbered among the cards of each."""
        place = self.devices[info.index].place
        return f"{DRIVERS[place.driver][1]}:{place.torch_index}", {}


def _text(path: Path) -> str | None:
    try:
        return read_text(path) or None
    except OSError:
        return None


def _discover(sysfs: Path) -> list[Place]:
    places = []
    per_runtime: dict[str, int] = {}
    drm = sysfs / "class" / "drm"
    for entry in sorted(
        drm.glob("card*"), key=lambda p: int(m.group(1)) if (m := _CARD.match(p.name)) else -1
    ):
        if not _CARD.match(entry.name):
            continue  # card0-DP-1 and the like are connectors, not devices
        device = entry / "device"
        try:
            driver = os.path.basename(os.readlink(device / "driver"))
        except OSError:
            continue
        if driver not in DRIVERS:
            continue
        chips = sorted((device / "hwmon").glob("hwmon*"))
        chip = HwmonChip(path=chips[0], name=_text(chips[0] / "name") or driver) if chips else None
        runtime = DRIVERS[driver][1]
        torch_index = per_runtime.get(runtime, 0)
        per_runtime[runtime] = torch_index + 1
        places.append(Place(entry.name, device, driver, chip, torch_index))
    return places

"""GPUs without an SDK, through the kernel's DRM and hwmon sysfs: amdgpu, Intel i915 and xe.

Units as the kernel gives them: power µW, energy µJ, temperature m°C, frequency Hz, VRAM bytes,
busy percent. i915/xe report energy only; the sampler derives their power from the counter.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from warptd.backends.base import AcceleratorBackend
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.models import GPUInfo, MemoryUsage, Utilization, pci_address
from warptd.sysfs import HwmonChip, read_int, read_text

if TYPE_CHECKING:
    from warptd.config import Settings

DRIVERS = {"amdgpu": ("AMD", "cuda"), "i915": ("Intel", "xpu"), "xe": ("Intel", "xpu")}
_CARD = re.compile(r"^card(\d+)$")


class DeviceGoneError(OSError):
    """The card's sysfs directory vanished (driver unbound, device removed)."""


@dataclass(slots=True)
class HwmonCard:
    """One DRM card: its PCI device directory and its hwmon chip."""

    card: str
    device: Path
    driver: str
    hwmon: HwmonChip | None
    torch_index: int
    temperatures: dict[str, Path] = field(default_factory=dict)


class HwmonBackend(AcceleratorBackend):
    """One device per amdgpu/i915/xe card under ``--sysfs``/class/drm."""

    name: ClassVar[str] = "hwmon"
    source: ClassVar[str] = "sysfs"
    fallback: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.cards = _discover(settings.sysfs)
        if not self.cards:
            raise BackendUnavailableError(f"no amdgpu, i915 or xe card under {settings.sysfs}/class/drm")

    def classify_error(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, DeviceGoneError):
            return ErrorKind.DEVICE_LOST
        if isinstance(exc, ValueError):
            return ErrorKind.SDK_ERROR  # a garbled attribute
        return super().classify_error(exc)

    def _read(self, index: int, what: str, path: Path | None, scale: float = 1.0) -> float | None:
        if path is None:
            return None
        return self.call(index, what, self._read_file, index, path, scale)

    def _read_file(self, index: int, path: Path, scale: float) -> float:
        try:
            return read_int(path) * scale
        except FileNotFoundError:
            if not self.cards[index].device.exists():
                raise DeviceGoneError(f"{self.cards[index].device} is gone") from None
            raise

    def _attr(self, index: int, name: str) -> Path:
        return self.cards[index].device / name

    def _hwmon(self, index: int, name: str) -> Path | None:
        chip = self.cards[index].hwmon
        return chip.path / name if chip is not None else None

    # -- discovery and identity -------------------------------------------------------------
    def is_available(self) -> bool:
        return bool(self.cards)

    def get_device_count(self) -> int:
        return len(self.cards)

    def get_driver_version(self) -> str | None:
        return None  # in-tree kernel drivers carry the kernel's version

    def list_devices(self) -> list[GPUInfo]:
        devices = []
        for index, card in enumerate(self.cards):
            vendor, _ = DRIVERS[card.driver]
            device_id = _text(card.device / "device")
            total = self._read(index, "vram_total", self._attr(index, "mem_info_vram_total"))
            devices.append(
                GPUInfo(
                    index=index,
                    model=f"{vendor} GPU {device_id or ''}".strip(),
                    uuid=_text(card.device / "unique_id"),
                    pci_bus_id=card.device.resolve().name,
                    driver_version=self.get_driver_version(),
                    extra_metrics={"driver": card.driver, "card": card.card},
                    **GPUInfo.memory_fields(int(total) if total is not None else None),
                )
            )
        return devices

    def release_devices(self, pci_bus_ids: set[str]) -> set[str]:
        addresses = {card.card: pci_address(card.device.resolve().name) for card in self.cards}
        self.cards = [card for card in self.cards if addresses[card.card] not in pci_bus_ids]
        return {a for a in addresses.values() if a in pci_bus_ids}

    def get_pytorch_device_string(self, device_id: int) -> str:
        card = self.cards[device_id]
        return f"{DRIVERS[card.driver][1]}:{card.torch_index}"

    # -- telemetry --------------------------------------------------------------------------
    def get_memory_usage(self, index: int) -> MemoryUsage | None:
        total = self._read(index, "vram_total", self._attr(index, "mem_info_vram_total"))
        used = self._read(index, "vram_used", self._attr(index, "mem_info_vram_used"))
        if total is None or used is None:
            return None
        return MemoryUsage(total=int(total), used=int(used), free=int(total - used))

    def get_utilization(self, index: int) -> Utilization | None:
        gpu = self._read(index, "gpu_busy", self._attr(index, "gpu_busy_percent"), 0.01)
        memory = self._read(index, "mem_busy", self._attr(index, "mem_busy_percent"), 0.01)
        return Utilization(compute=gpu, memory=memory) if gpu is not None or memory is not None else None

    def get_temperatures(self, index: int) -> dict[str, float]:
        temperatures = {}
        for sensor, path in self.cards[index].temperatures.items():
            celsius = self._read(index, f"temp_{sensor}", path, 0.001)
            if celsius is not None:
                temperatures[sensor] = celsius
        return temperatures

    def get_power_usage(self, index: int) -> float | None:
        # amdgpu has power1_average (older) or power1_input (newer); i915/xe neither.
        for name in ("power1_average", "power1_input"):
            path = self._hwmon(index, name)
            if path is not None and path.exists():
                return self._read(index, "power", path, 1e-6)
        return None

    def get_power_limit(self, index: int) -> float | None:
        path = self._hwmon(index, "power1_cap")
        return self._read(index, "power_cap", path, 1e-6) if path is not None and path.exists() else None

    def get_energy_counter(self, index: int) -> float | None:
        path = self._hwmon(index, "energy1_input")
        return self._read(index, "energy", path, 1e-6) if path is not None and path.exists() else None

    def get_clocks(self, index: int) -> dict[str, float]:
        clocks = {}
        for number, clock in ((1, "graphics"), (2, "memory")):  # amdgpu: sclk, mclk in Hz
            path = self._hwmon(index, f"freq{number}_input")
            if path is not None and path.exists():
                hertz = self._read(index, f"clock_{clock}", path)
                if hertz is not None:
                    clocks[clock] = hertz
        return clocks


def _text(path: Path) -> str | None:
    try:
        return read_text(path) or None
    except OSError:
        return None


def _gpu_sensor_names(inputs: dict[str, Path]) -> dict[str, Path]:
    """amdgpu labels its sensors (edge, junction, mem); an unlabeled first one is the GPU's."""
    return {("gpu" if name == "temp1" else name): path for name, path in inputs.items()}


def _discover(sysfs: Path) -> list[HwmonCard]:
    cards = []
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
        card = HwmonCard(entry.name, device, driver, chip, per_runtime.get(runtime, 0))
        per_runtime[runtime] = card.torch_index + 1
        card.temperatures = _gpu_sensor_names(chip.temperature_inputs()) if chip is not None else {}
        cards.append(card)
    return cards

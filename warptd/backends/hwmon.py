"""GPUs without an SDK, through the kernel's DRM and hwmon sysfs: amdgpu, Intel i915 and xe.

Units as the kernel gives them: power µW, energy µJ, temperature m°C, frequency Hz, VRAM bytes,
busy percent. i915/xe report energy only; the sampler derives their power from the counter.

Which files a card has is found once. A sample reads what changes: VRAM used (``memory``), busy %,
temperatures and clocks (``sensors``: on amdgpu each is the SMU metrics table, which the driver keeps
for 1 ms and otherwise asks the firmware for), power and energy (``power``; i915/xe wake a suspended
GPU to read the energy register). VRAM total and the power cap change on events, not between samples,
and are read at the health cadence (``slow``). The kinds are those charged to ``read_costs``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from warptd.backends.base import AcceleratorBackend
from warptd.backends.cadence import DeviceCadence
from warptd.backends.costs import ReadKind, thread_time
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.models import GPUInfo, MemoryUsage, Utilization, pci_address
from warptd.sysfs import HwmonChip, read_int, read_text

if TYPE_CHECKING:
    from warptd.config import Settings

DRIVERS = {"amdgpu": ("AMD", "cuda"), "i915": ("Intel", "xpu"), "xe": ("Intel", "xpu")}
_CARD = re.compile(r"^card(\d+)$")


class DeviceGoneError(OSError):
    """The card's sysfs directory vanished (driver unbound, device removed)."""


@dataclass(frozen=True, slots=True)
class CardFiles:
    """The attributes a card has, found once (None: the card has no such file)."""

    vram_total: Path | None = None
    vram_used: Path | None = None
    gpu_busy: Path | None = None
    mem_busy: Path | None = None
    #: ``power1_average`` (older amdgpu) or ``power1_input`` (newer); i915/xe have neither.
    power: Path | None = None
    power_cap: Path | None = None
    energy: Path | None = None
    #: ``freq1_input`` (sclk) and ``freq2_input`` (mclk) by clock, in Hz.
    clocks: dict[str, Path] = field(default_factory=dict)
    temperatures: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def of(cls, device: Path, chip: HwmonChip | None) -> CardFiles:
        def present(path: Path) -> Path | None:
            return path if path.exists() else None

        def hwmon(name: str) -> Path | None:
            return present(chip.path / name) if chip is not None else None

        return cls(
            vram_total=present(device / "mem_info_vram_total"),
            vram_used=present(device / "mem_info_vram_used"),
            gpu_busy=present(device / "gpu_busy_percent"),
            mem_busy=present(device / "mem_busy_percent"),
            power=hwmon("power1_average") or hwmon("power1_input"),
            power_cap=hwmon("power1_cap"),
            energy=hwmon("energy1_input"),
            clocks={
                clock: path
                for number, clock in ((1, "graphics"), (2, "memory"))
                if (path := hwmon(f"freq{number}_input")) is not None
            },
            temperatures=_gpu_sensor_names(chip.temperature_inputs()) if chip is not None else {},
        )


@dataclass(frozen=True, slots=True)
class SlowValues:
    """What a card changes on events only, as last read at the health cadence."""

    vram_total: float | None = None
    power_cap_watts: float | None = None


@dataclass(slots=True)
class HwmonCard:
    """One DRM card: its PCI device directory, its hwmon chip, its files and its slow values."""

    card: str
    device: Path
    driver: str
    hwmon: HwmonChip | None
    torch_index: int
    files: CardFiles
    cadence: DeviceCadence
    slow: SlowValues = field(default_factory=SlowValues)


class HwmonBackend(AcceleratorBackend):
    """One device per amdgpu/i915/xe card under ``--sysfs``/class/drm."""

    name: ClassVar[str] = "hwmon"
    source: ClassVar[str] = "sysfs"
    fallback: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.cards = _discover(settings.sysfs, lambda: self.settings)
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
            total = self._read(index, "vram_total", card.files.vram_total)
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
    def begin_read(self, index: int, power_only: bool) -> None:
        """VRAM total and the power cap, at the health cadence."""
        card = self.cards[index]
        files = card.files
        if power_only or (files.vram_total is None and files.power_cap is None) or not card.cadence.due():
            return
        started = thread_time()
        card.slow = SlowValues(
            vram_total=self._read(index, "vram_total", files.vram_total),
            power_cap_watts=self._read(index, "power_cap", files.power_cap, 1e-6),
        )
        self.read_costs.charge(ReadKind.SLOW, started)

    def get_memory_usage(self, index: int) -> MemoryUsage | None:
        card = self.cards[index]
        total = card.slow.vram_total
        if total is None or card.files.vram_used is None:
            return None
        started = thread_time()
        used = self._read(index, "vram_used", card.files.vram_used)
        self.read_costs.charge(ReadKind.MEMORY, started)
        if used is None:
            return None
        return MemoryUsage(total=int(total), used=int(used), free=int(total - used))

    def get_utilization(self, index: int) -> Utilization | None:
        files = self.cards[index].files
        if files.gpu_busy is None and files.mem_busy is None:
            return None
        started = thread_time()
        gpu = self._read(index, "gpu_busy", files.gpu_busy, 0.01)
        memory = self._read(index, "mem_busy", files.mem_busy, 0.01)
        self.read_costs.charge(ReadKind.SENSORS, started)
        return Utilization(compute=gpu, memory=memory) if gpu is not None or memory is not None else None

    def get_temperatures(self, index: int) -> dict[str, float]:
        return self._sensors(index, "temp", self.cards[index].files.temperatures, 0.001)

    def get_clocks(self, index: int) -> dict[str, float]:
        return self._sensors(index, "clock", self.cards[index].files.clocks, 1.0)

    def _sensors(self, index: int, what: str, files: dict[str, Path], scale: float) -> dict[str, float]:
        """Each sensor file's value by its name; an unreadable one is left out."""
        if not files:
            return {}
        values = {}
        started = thread_time()
        for name, path in files.items():
            reading = self._read(index, f"{what}_{name}", path, scale)
            if reading is not None:
                values[name] = reading
        self.read_costs.charge(ReadKind.SENSORS, started)
        return values

    def get_power_usage(self, index: int) -> float | None:
        return self._power(index, "power", self.cards[index].files.power)

    def get_energy_counter(self, index: int) -> float | None:
        return self._power(index, "energy", self.cards[index].files.energy)

    def _power(self, index: int, what: str, path: Path | None) -> float | None:
        """µW or µJ in W or J."""
        if path is None:
            return None
        started = thread_time()
        value = self._read(index, what, path, 1e-6)
        self.read_costs.charge(ReadKind.POWER, started)
        return value

    def get_power_limit(self, index: int) -> float | None:
        return self.cards[index].slow.power_cap_watts


def _text(path: Path) -> str | None:
    try:
        return read_text(path) or None
    except OSError:
        return None


def _gpu_sensor_names(inputs: dict[str, Path]) -> dict[str, Path]:
    """amdgpu labels its sensors (edge, junction, mem); an unlabeled first one is the GPU's."""
    return {("gpu" if name == "temp1" else name): path for name, path in inputs.items()}


def _discover(sysfs: Path, settings: Callable[[], Settings]) -> list[HwmonCard]:
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
        torch_index = per_runtime.get(runtime, 0)
        per_runtime[runtime] = torch_index + 1
        files = CardFiles.of(device, chip)
        cards.append(HwmonCard(entry.name, device, driver, chip, torch_index, files, DeviceCadence(settings)))
    return cards

"""One DRM card as a device object: the kernel's files, found once, read in base units.

Units as the kernel gives them: power µW, energy µJ, temperature m°C, frequency Hz, VRAM bytes,
busy percent. i915/xe report energy only; the sampler derives their power from the counter.

A read asks what changes: VRAM used (``memory``), busy %, temperatures and clocks (``sensors``: on
amdgpu each is the SMU metrics table, which the driver keeps for 1 ms and otherwise asks the firmware
for), power and energy (``power``; i915/xe wake a suspended GPU to read the energy register). VRAM total
and the power cap change on events, not between samples, and are read at the health cadence
(``slow``). The kinds are those charged to ``read_costs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from warptd.backends.cadence import DeviceCadence
from warptd.backends.costs import ReadCosts, ReadKind, thread_time
from warptd.backends.device import Call, ReadPlan, ValueDevice
from warptd.models import MemoryUsage, Utilization
from warptd.sysfs import HwmonChip, read_int

DRIVERS = {"amdgpu": ("AMD", "cuda"), "i915": ("Intel", "xpu"), "xe": ("Intel", "xpu")}


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
class Place:
    """Where a card is: its ``card<N>`` name, its PCI device directory, its driver, its hwmon chip and
    its index among the cards of its torch runtime."""

    card: str
    device: Path
    driver: str
    hwmon: HwmonChip | None
    torch_index: int


class HwmonCard(ValueDevice):
    """One card's values; VRAM total and the power cap as last read at the health cadence."""

    def __init__(
        self, index: int, place: Place, cadence: DeviceCadence, call: Call, costs: ReadCosts
    ) -> None:
        super().__init__(index)
        self.place, self.files = place, CardFiles.of(place.device, place.hwmon)
        self._cadence, self._call, self._costs = cadence, call, costs
        self.vram_total: float | None = None
        self.power_cap: float | None = None

    def read_file(self, what: str, path: Path | None, scale: float = 1.0) -> float | None:
        """One attribute times ``scale``, guarded; None where the card has no such file."""
        if path is None:
            return None
        return self._call(self.index, what, self._read, path, scale)

    def _read(self, path: Path, scale: float) -> float:
        try:
            return read_int(path) * scale
        except FileNotFoundError:
            if not self.place.device.exists():
                raise DeviceGoneError(f"{self.place.device} is gone") from None
            raise

    def begin(self, plan: ReadPlan) -> None:
        """VRAM total and the power cap, at the health cadence (not on a power-only read)."""
        files = self.files
        if (
            plan.power_only
            or (files.vram_total is None and files.power_cap is None)
            or not self._cadence.due()
        ):
            return
        started = thread_time()
        self.vram_total = self.read_file("vram_total", files.vram_total)
        self.power_cap = self.read_file("power_cap", files.power_cap, 1e-6)
        self._costs.charge(ReadKind.SLOW, started)

    def memory(self) -> MemoryUsage | None:
        """VRAM total (at the health cadence), used and free, bytes."""
        total = self.vram_total
        if total is None or self.files.vram_used is None:
            return None
        started = thread_time()
        used = self.read_file("vram_used", self.files.vram_used)
        self._costs.charge(ReadKind.MEMORY, started)
        if used is None:
            return None
        return MemoryUsage(total=int(total), used=int(used), free=int(total - used))

    def utilization(self) -> Utilization | None:
        """GPU and memory busy ratios, 0..1 (the kernel: percent)."""
        files = self.files
        if files.gpu_busy is None and files.mem_busy is None:
            return None
        started = thread_time()
        gpu = self.read_file("gpu_busy", files.gpu_busy, 0.01)
        memory = self.read_file("mem_busy", files.mem_busy, 0.01)
        self._costs.charge(ReadKind.SENSORS, started)
        return Utilization(compute=gpu, memory=memory) if gpu is not None or memory is not None else None

    def temperatures(self) -> dict[str, float]:
        """°C by sensor (``gpu``, amdgpu's ``edge``, ``junction``, ``mem``; the kernel: m°C)."""
        return self._sensors("temp", self.files.temperatures, 0.001)

    def clocks(self) -> dict[str, float]:
        """The graphics and memory clocks, Hz."""
        return self._sensors("clock", self.files.clocks, 1.0)

    def _sensors(self, what: str, files: dict[str, Path], scale: float) -> dict[str, float]:
        """Each sensor file's value by its name; an unreadable one is left out."""
        if not files:
            return {}
        values = {}
        started = thread_time()
        for name, path in files.items():
            reading = self.read_file(f"{what}_{name}", path, scale)
            if reading is not None:
                values[name] = reading
        self._costs.charge(ReadKind.SENSORS, started)
        return values

    def power(self) -> float | None:
        """Power draw, W (the kernel: µW; i915/xe have none)."""
        return self._power("power", self.files.power)

    def energy(self) -> float | None:
        """The energy counter, J (the kernel: µJ)."""
        return self._power("energy", self.files.energy)

    def _power(self, what: str, path: Path | None) -> float | None:
        if path is None:
            return None
        started = thread_time()
        value = self.read_file(what, path, 1e-6)
        self._costs.charge(ReadKind.POWER, started)
        return value

    def power_limit(self) -> float | None:
        """The power cap, W, as last read at the health cadence."""
        return self.power_cap


def _gpu_sensor_names(inputs: dict[str, Path]) -> dict[str, Path]:
    """amdgpu labels its sensors (edge, junction, mem); an unlabeled first one is the GPU's."""
    return {("gpu" if name == "temp1" else name): path for name, path in inputs.items()}

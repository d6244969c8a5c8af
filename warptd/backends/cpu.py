"""The host CPU through psutil, hwmon and cpufreq: works on every Linux box, accelerator or not.

What a sample reads, charged to ``read_costs`` by kind: ``times`` (``psutil.cpu_percent``, the first
line of ``/proc/stat``), ``memory`` (``psutil.virtual_memory``, ``/proc/meminfo``), ``temperatures``
(the package sensors' hwmon files) and ``clock`` (:mod:`~warptd.backends.cpu_clock`: sysfs each sample,
or ``/proc/cpuinfo`` at the health cadence).
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import psutil

from warptd.backends.base import AcceleratorBackend
from warptd.backends.costs import ReadKind, thread_time
from warptd.backends.cpu_clock import CpuClock
from warptd.errors import ErrorKind
from warptd.models import GPUInfo, MemoryUsage, Utilization
from warptd.sysfs import hwmon_chips, read_int

if TYPE_CHECKING:
    from warptd.config import Settings

# hwmon drivers that report the CPU package temperature.
_CPU_HWMON = frozenset({"coretemp", "k10temp", "zenpower", "cpu_thermal", "soc_thermal"})


class CpuBackend(AcceleratorBackend):
    """One device, the host CPU: utilization, host memory, package temperature, clock."""

    name: ClassVar[str] = "cpu"
    source: ClassVar[str] = "psutil"
    is_accelerator: ClassVar[bool] = False

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._temperature_files = self._find_temperature_files(settings.sysfs)
        self._utilization_primed = False
        self.clock = CpuClock(settings.sysfs, settings.procfs, lambda: self.settings)

    @staticmethod
    def _find_temperature_files(sysfs: Path) -> dict[str, Path]:
        files: dict[str, Path] = {}
        for chip_number, chip in enumerate(hwmon_chips(sysfs, _CPU_HWMON)):
            for label, path in chip.temperature_inputs().items():
                # coretemp lists one sensor per core; the package sensors are what dashboards want.
                if chip.name == "coretemp" and not label.startswith("package"):
                    continue
                sensor = "cpu" if label.startswith("temp") else label
                if sensor in files:  # a second socket's k10temp repeats tctl/tccd*: keep both
                    sensor = f"{sensor}_{chip_number}"
                files.setdefault(sensor, path)
        return files

    def classify_error(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, psutil.AccessDenied):
            return ErrorKind.PERMISSION
        if isinstance(exc, psutil.Error):
            return ErrorKind.SDK_ERROR
        return super().classify_error(exc)

    def is_available(self) -> bool:
        return True

    def get_device_count(self) -> int:
        return 1

    def get_driver_version(self) -> str | None:
        return platform.release() or None

    def list_devices(self) -> list[GPUInfo]:
        memory = self.get_memory_usage(0)
        return [
            GPUInfo(
                index=0,
                model=_cpu_model(self.settings.procfs),
                **GPUInfo.memory_fields(memory.total if memory else None),
                driver_version=self.get_driver_version(),
                extra_metrics={
                    "logical_cpus": psutil.cpu_count(logical=True),
                    "physical_cores": psutil.cpu_count(logical=False),
                    "architecture": platform.machine(),
                },
            )
        ]

    def get_pytorch_device_string(self, device_id: int) -> str:
        return "cpu"

    def get_memory_usage(self, index: int) -> MemoryUsage | None:
        started = thread_time()
        vm = self.call(index, "memory", psutil.virtual_memory)
        self.read_costs.charge(ReadKind.MEMORY, started)
        if vm is None:
            return None
        # "free" is what a new allocation can get (MemAvailable), not the kernel's idle pages.
        return MemoryUsage(total=vm.total, used=vm.total - vm.available, free=vm.available)

    def get_utilization(self, index: int) -> Utilization | None:
        started = thread_time()
        percent = self.call(index, "utilization", psutil.cpu_percent, None)
        self.read_costs.charge(ReadKind.TIMES, started)
        if not self._utilization_primed:
            # The first non-blocking call (psutil keeps its baseline per thread) has no interval
            # behind it and answers 0.0: absent, not a fake idle.
            self._utilization_primed = percent is not None
            return None
        return Utilization(compute=percent / 100) if percent is not None else None

    def get_temperatures(self, index: int) -> dict[str, float]:
        if not self._temperature_files:
            return {}
        temperatures = {}
        started = thread_time()
        for sensor, path in self._temperature_files.items():
            millidegrees = self.call(index, f"temp_{sensor}", read_int, path)
            if millidegrees is not None:
                temperatures[sensor] = millidegrees / 1000
        self.read_costs.charge(ReadKind.TEMPERATURES, started)
        return temperatures

    def get_power_usage(self, index: int) -> float | None:
        return None  # package power comes from the rapl power backend

    def get_clocks(self, index: int) -> dict[str, float]:
        clock = self.clock
        if clock.due():
            started = thread_time()
            clock.value = self.call(index, "clock", clock.read)
            self.read_costs.charge(ReadKind.CLOCK, started)
        return {"cpu": clock.value} if clock.value else {}


def _cpu_model(procfs: Path) -> str:
    try:
        for line in (procfs / "cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Hardware", "Model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"

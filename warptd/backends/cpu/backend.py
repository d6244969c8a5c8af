"""The ``cpu`` backend: one device, the host CPU (utilization, host memory, package temperatures, clock).

What a read asks, charged to ``read_costs`` by kind: ``times`` (``psutil.cpu_percent``, the first line
of ``/proc/stat``), ``memory`` (``psutil.virtual_memory``, ``/proc/meminfo``), ``temperatures`` (the
package sensors' hwmon files) and ``clock`` (:mod:`~warptd.backends.cpu.clock`: sysfs each sample, or
``/proc/cpuinfo`` at the health cadence). Its power is the ``rapl`` power backend's.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import psutil

from warptd.backends.base import AcceleratorBackend
from warptd.backends.costs import ReadCosts, ReadKind, thread_time
from warptd.backends.cpu.clock import CpuClock
from warptd.backends.device import Call, ValueDevice
from warptd.errors import ErrorKind
from warptd.models import GPUInfo, MemoryUsage, Utilization
from warptd.sysfs import hwmon_chips, read_int

if TYPE_CHECKING:
    from warptd.config import Settings

# hwmon drivers that report the CPU package temperature.
_CPU_HWMON = frozenset({"coretemp", "k10temp", "zenpower", "cpu_thermal", "soc_thermal"})


class CpuDevice(ValueDevice):
    """The host CPU, read through the backend's guarded ``call`` and charged to its ``costs``."""

    def __init__(self, call: Call, costs: ReadCosts, clock: CpuClock, sysfs: Path) -> None:
        super().__init__(0)
        self._call, self._costs, self.clock = call, costs, clock
        self._temperature_files = temperature_files(sysfs)
        self._utilization_primed = False

    def memory(self) -> MemoryUsage | None:
        """Host memory, bytes: ``free`` is what a new allocation can get (MemAvailable), not idle pages."""
        started = thread_time()
        vm = self._call(0, "memory", psutil.virtual_memory)
        self._costs.charge(ReadKind.MEMORY, started)
        if vm is None:
            return None
        return MemoryUsage(total=vm.total, used=vm.total - vm.available, free=vm.available)

    def utilization(self) -> Utilization | None:
        """Busy ratio of every CPU since the last read, 0..1; None at the first read, which has no
        interval behind it (psutil keeps its baseline per thread and answers 0.0: absent, not idle)."""
        started = thread_time()
        percent = self._call(0, "utilization", psutil.cpu_percent, None)
        self._costs.charge(ReadKind.TIMES, started)
        if not self._utilization_primed:
            self._utilization_primed = percent is not None
            return None
        return Utilization(compute=percent / 100) if percent is not None else None

    def temperatures(self) -> dict[str, float]:
        """The package sensors, °C (``cpu``, ``package-0``, ``tctl`` …)."""
        if not self._temperature_files:
            return {}
        temperatures = {}
        started = thread_time()
        for sensor, path in self._temperature_files.items():
            millidegrees = self._call(0, f"temp_{sensor}", read_int, path)
            if millidegrees is not None:
                temperatures[sensor] = millidegrees / 1000
        self._costs.charge(ReadKind.TEMPERATURES, started)
        return temperatures

    def clocks(self) -> dict[str, float]:
        """The CPU clock, Hz (cpufreq's, or ``/proc/cpuinfo``'s at the health cadence)."""
        clock = self.clock
        if clock.due():
            started = thread_time()
            clock.value = self._call(0, "clock", clock.read)
            self._costs.charge(ReadKind.CLOCK, started)
        return {"cpu": clock.value} if clock.value else {}


def temperature_files(sysfs: Path) -> dict[str, Path]:
    """The package temperature sensors' hwmon files by sensor name."""
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


class CpuBackend(AcceleratorBackend):
    """The host CPU: its model and size once, its values by :class:`CpuDevice`."""

    name: ClassVar[str] = "cpu"
    source: ClassVar[str] = "psutil"
    sdk: ClassVar[str | None] = "psutil"
    is_accelerator: ClassVar[bool] = False

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        clock = CpuClock(settings.sysfs, settings.procfs, lambda: self.settings)
        self.cpu = CpuDevice(self.call, self.read_costs, clock, settings.sysfs)
        self.devices = (self.cpu,)

    def classify_error(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, psutil.AccessDenied):
            return ErrorKind.PERMISSION
        if isinstance(exc, psutil.Error):
            return ErrorKind.SDK_ERROR
        return super().classify_error(exc)

    def get_driver_version(self) -> str | None:
        return platform.release() or None

    def list_devices(self) -> list[GPUInfo]:
        memory = self.cpu.memory()
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

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """Stress workloads run on torch's ``cpu`` device."""
        return "cpu", {}


def _cpu_model(procfs: Path) -> str:
    try:
        for line in (procfs / "cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Hardware", "Model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"

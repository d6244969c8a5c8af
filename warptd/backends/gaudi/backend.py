"""The ``gaudi`` backend: Intel Gaudi AIPs over the shared HLML session, one device object per handle.
HLML reports mW, mJ, MHz and percent; the device objects convert."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, ClassVar

from warptd.backends.base import AcceleratorBackend
from warptd.backends.device import Call, ValueDevice, throttle_states
from warptd.backends.gaudi import session
from warptd.backends.gaudi.session import text
from warptd.errors import ErrorKind
from warptd.models import GPUInfo, MemoryUsage, Utilization, pci_address

if TYPE_CHECKING:
    from warptd.config import Settings

# HLML_TEMP_SENS sensors by the names warptd exports; the first is the primary one.
SENSORS: dict[str, str] = {"aip": "HLML_TEMPERATURE_ON_AIP", "board": "HLML_TEMPERATURE_ON_BOARD"}
# HLML_DEFINE throttle bits. The firmware lowers the clock to stay inside its power and thermal
# envelopes (habanalabs driver: "Clock throttling due to power consumption / overheating"), which is
# what sw_power_cap and sw_thermal_slowdown mean; HLML has no hardware-slowdown bit.
THROTTLE_BITS: dict[str, str] = {
    "sw_power_cap": "HLML_CLOCKS_THROTTLE_REASON_POWER",
    "sw_thermal_slowdown": "HLML_CLOCKS_THROTTLE_REASON_THERMAL",
}


class GaudiDevice(ValueDevice):
    """One AIP: its HLML handle (None where HLML had none at start: it reads as down) and its UUID,
    once it answered. ``call`` is the backend's guarded call; ``types`` pyhlml's ``hlml_types``."""

    def __init__(self, index: int, handle: ctypes.c_void_p | None, hlml: Any, types: Any, call: Call) -> None:
        super().__init__(index)
        self.handle, self.uuid = handle, None
        self._hlml, self._call = hlml, call
        self._sensors = {name: getattr(types.HLML_TEMP_SENS, const) for name, const in SENSORS.items()}
        self._throttle_bits = {r: getattr(types.HLML_DEFINE, const) for r, const in THROTTLE_BITS.items()}
        self._soc_clock = types.HLML_CLOCK_TYPE.HLML_CLOCK_SOC  # IC/MME/TPC clocks are Goya-only

    def get(self, what: str, fn_name: str, *args: object) -> Any:
        """One guarded ``pyhlml.<fn_name>(handle, *args)``; None where it failed."""
        return self._call(self.index, what, getattr(self._hlml, fn_name), self.handle, *args)

    def identity(self) -> str | None:
        """The UUID, asked until it answers."""
        if self.uuid is None and self.handle is not None:
            self.uuid = text(self.get("uuid", "hlmlDeviceGetUUID"))
        return self.uuid

    def memory(self) -> MemoryUsage | None:
        """HBM total, used and free, bytes."""
        info = self.get("memory", "hlmlDeviceGetMemoryInfo")
        return MemoryUsage(total=info.total, used=info.used, free=info.free) if info is not None else None

    def utilization(self) -> Utilization | None:
        """The AIP's busy ratio, 0..1 (HLML: an int percent)."""
        percent = self.get("utilization", "hlmlDeviceGetUtilizationRates")
        return Utilization(compute=percent / 100) if percent is not None else None

    def temperatures(self) -> dict[str, float]:
        """The AIP's and the board's sensors, °C."""
        temperatures = {}
        for sensor, kind in self._sensors.items():
            celsius = self.get(f"temperature_{sensor}", "hlmlDeviceGetTemperature", kind)
            if celsius is not None:
                temperatures[sensor] = float(celsius)
        return temperatures

    def power(self) -> float | None:
        """Power draw, W (HLML: mW)."""
        milliwatts = self.get("power", "hlmlDeviceGetPowerUsage")
        return milliwatts / 1000 if milliwatts is not None else None

    def energy(self) -> float | None:
        """J since the driver was last loaded (HLML: mJ): a reload restarts it, which the sampler handles."""
        millijoules = self.get("energy", "hlmlDeviceGetTotalEnergyConsumption")
        return millijoules / 1000 if millijoules is not None else None

    def clocks(self) -> dict[str, float]:
        """The SoC clock, Hz (HLML: MHz)."""
        mhz = self.get("clock_soc", "hlmlDeviceGetClockInfo", self._soc_clock)
        return {"soc": mhz * 1e6} if mhz is not None else {}

    def throttle(self) -> dict[str, bool]:
        """HLML has no "supported reasons" call: every bit it defines, once the current mask reads."""
        mask = self.get("throttle", "hlmlDeviceGetCurrentClocksThrottleReasons")
        active = None if mask is None else [r for r, bit in self._throttle_bits.items() if mask & bit]
        return throttle_states(list(self._throttle_bits), active)


MODEL = "Intel Gaudi"


class GaudiBackend(AcceleratorBackend):
    """Gaudi devices (AIPs); handles come from the shared HLML session, cached once."""

    name: ClassVar[str] = "gaudi"
    source: ClassVar[str] = "hlml"
    sdk: ClassVar[str | None] = "pyhlml"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._lease = session.lease()
        self._session = hlml = self._lease.session
        self._hlml = hlml.hlml
        self.devices: tuple[GaudiDevice, ...] = tuple(
            GaudiDevice(index, handle, hlml.hlml, hlml.types, self.call)
            for index, handle in enumerate(hlml.handles)
        )
        codes = hlml.types.HLML_RETURN
        self._kinds = {
            codes.HLML_ERROR_NOT_SUPPORTED: ErrorKind.NOT_SUPPORTED,
            codes.HLML_ERROR_TIMEOUT: ErrorKind.TIMEOUT,
            codes.HLML_ERROR_AIP_IS_LOST: ErrorKind.DEVICE_LOST,
            codes.HLML_ERROR_DRIVER_NOT_LOADED: ErrorKind.DEVICE_LOST,  # unloaded under us: unreadable
        }

    def classify_error(self, exc: BaseException) -> ErrorKind:
        if not isinstance(exc, self._session.error):
            return ErrorKind.UNEXPECTED
        return self._kinds.get(getattr(exc, "value", None), ErrorKind.SDK_ERROR)

    def device_present(self, index: int) -> bool:
        return self.devices[index].handle is not None  # None: HLML had no handle for it at start

    # -- discovery and identity -------------------------------------------------------------
    def get_driver_version(self) -> str | None:
        return text(self.guarded("driver", self._hlml.hlmlGetDriverVersion))

    def device_identity(self, index: int) -> str | None:
        return self.devices[index].identity()

    def list_devices(self) -> list[GPUInfo]:
        driver = self.get_driver_version()
        return [self._describe(device, driver) for device in self.devices]

    def _describe(self, device: GaudiDevice, driver: str | None) -> GPUInfo:
        if device.handle is None:
            return GPUInfo(index=device.index, model=MODEL, driver_version=driver)
        pci = device.get("pci", "hlmlDeviceGetPCIInfo")
        memory = device.memory()
        default_limit_mw = device.get("power_default_limit", "hlmlDeviceGetPowerManagementDefaultLimit")
        extras = {
            "serial": text(device.get("serial", "hlmlDeviceGetSerial")),
            "module_id": device.get("module_id", "hlmlDeviceGetModuleID"),
            # The default limit, not the enforced one (hl-smi -p changes that), so not power_limit_watts.
            "power_default_limit_watts": default_limit_mw / 1000 if default_limit_mw is not None else None,
        }
        return GPUInfo(
            index=device.index,
            model=text(device.get("name", "hlmlDeviceGetName")) or MODEL,
            **GPUInfo.memory_fields(memory.total if memory else None),
            uuid=device.identity(),
            pci_bus_id=pci_address(text(pci.bus_id)) if pci is not None else None,
            driver_version=driver,
            extra_metrics={k: v for k, v in extras.items() if v is not None} or None,
        )

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """An unpinned Habana process takes the first idle device, not HLML's index: pin the worker to
        this device's module id, which it then sees as its only HPU."""
        module_id = (info.extra_metrics or {}).get("module_id")
        if module_id is None:
            return f"hpu:{info.index}", {}
        return "hpu:0", {"HABANA_VISIBLE_MODULES": str(module_id)}

    def shutdown(self) -> None:
        self._lease.release()

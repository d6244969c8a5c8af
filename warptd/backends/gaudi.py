"""Intel Gaudi (Habana) accelerators through HLML (pyhlml), which reports mW, mJ, MHz and percent."""

from __future__ import annotations

import contextlib
import ctypes
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from warptd.backends.base import AcceleratorBackend
from warptd.backends.shared_session import SharedSession
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.install import install_command
from warptd.models import GPUInfo, MemoryUsage, Utilization, pci_address

if TYPE_CHECKING:
    from warptd.config import Settings

MODEL = "Intel Gaudi"
# HLML_TEMP_SENS sensors by the names warptd exports; the first is the primary one.
_SENSORS: dict[str, str] = {"aip": "HLML_TEMPERATURE_ON_AIP", "board": "HLML_TEMPERATURE_ON_BOARD"}
# HLML_DEFINE throttle bits. The firmware lowers the clock to stay inside its power and thermal
# envelopes (habanalabs driver: "Clock throttling due to power consumption / overheating"), which is
# what sw_power_cap and sw_thermal_slowdown mean; HLML has no hardware-slowdown bit.
_THROTTLE_BITS: dict[str, str] = {
    "sw_power_cap": "HLML_CLOCKS_THROTTLE_REASON_POWER",
    "sw_thermal_slowdown": "HLML_CLOCKS_THROTTLE_REASON_THERMAL",
}


def _text(value: bytes | None) -> str | None:
    """HLML strings are NUL-trimmed ``bytes``; an empty one is no answer."""
    if value is None:
        return None
    return value.decode(errors="replace").strip() or None


class HlmlSession:
    """An initialised HLML with its device handles, looked up once.

    ``hlmlInit`` is not reference-counted (a second call replaces the library object, one
    ``hlmlShutdown`` ends it), so ``gaudi`` and ``hlml`` share this one through :data:`_shared`.
    """

    def __init__(self) -> None:
        try:
            import pyhlml
            from pyhlml import hlml_error, hlml_types
        except ImportError as exc:
            raise BackendUnavailableError(f"pyhlml is not installed: {install_command('gaudi')}") from exc
        self.hlml: Any = pyhlml
        self.types: Any = hlml_types
        self.error: type[Exception] = hlml_error.HLMLError
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # pyhlml prints "Failed to load libhlml"
                pyhlml.hlmlInit()
        except self.error as exc:
            code = getattr(exc, "value", None)
            if code == hlml_types.HLML_RETURN.HLML_ERROR_UNINITIALIZED:  # pyhlml's answer to a failed dlopen
                raise BackendUnavailableError("libhlml.so not found: no Habana driver") from exc
            if code == hlml_types.HLML_RETURN.HLML_ERROR_DRIVER_NOT_LOADED:
                raise BackendUnavailableError("habanalabs kernel driver not loaded") from exc
            raise BackendUnavailableError(f"hlmlInit failed: {exc}") from exc
        try:
            count = pyhlml.hlmlDeviceGetCount()
        except self.error as exc:
            self.close()
            raise BackendUnavailableError(f"HLML device enumeration failed: {exc}") from exc
        #: None for a device HLML could not hand a handle for (lost at start): it stays visible as down.
        self.handles: list[ctypes.c_void_p | None] = [self._handle(i) for i in range(count)]

    def _handle(self, index: int) -> ctypes.c_void_p | None:
        """pyhlml returns one shared ``c_void_p`` that the next lookup overwrites: keep a copy."""
        try:
            return ctypes.c_void_p(self.hlml.hlmlDeviceGetHandleByIndex(index).value)
        except self.error:
            return None

    def close(self) -> None:
        with contextlib.suppress(self.error):
            self.hlml.hlmlShutdown()


_shared: SharedSession[HlmlSession] = SharedSession(HlmlSession, HlmlSession.close)


@dataclass(slots=True)
class GaudiDevice:
    """One AIP: its HLML handle (None where HLML had none at start) and its UUID, once it answered."""

    handle: ctypes.c_void_p | None
    uuid: str | None = None


class GaudiBackend(AcceleratorBackend):
    """Gaudi devices (AIPs); handles come from the shared HLML session, cached once."""

    name: ClassVar[str] = "gaudi"
    source: ClassVar[str] = "hlml"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._lease = _shared.lease()
        self._session = self._lease.session
        self._hlml = self._session.hlml
        self._devices = [GaudiDevice(handle) for handle in self._session.handles]
        types = self._session.types
        codes = types.HLML_RETURN
        self._kinds = {
            codes.HLML_ERROR_NOT_SUPPORTED: ErrorKind.NOT_SUPPORTED,
            codes.HLML_ERROR_TIMEOUT: ErrorKind.TIMEOUT,
            codes.HLML_ERROR_AIP_IS_LOST: ErrorKind.DEVICE_LOST,
            codes.HLML_ERROR_DRIVER_NOT_LOADED: ErrorKind.DEVICE_LOST,  # unloaded under us: unreadable
        }
        self._sensors = {name: getattr(types.HLML_TEMP_SENS, const) for name, const in _SENSORS.items()}
        self._throttle_bits = {r: getattr(types.HLML_DEFINE, const) for r, const in _THROTTLE_BITS.items()}
        self._soc_clock = types.HLML_CLOCK_TYPE.HLML_CLOCK_SOC  # IC/MME/TPC clocks are Goya-only

    def classify_error(self, exc: BaseException) -> ErrorKind:
        if not isinstance(exc, self._session.error):
            return ErrorKind.UNEXPECTED
        return self._kinds.get(getattr(exc, "value", None), ErrorKind.SDK_ERROR)

    def _get(self, index: int, what: str, fn_name: str, *args: object) -> Any:
        return self.call(index, what, getattr(self._hlml, fn_name), self._devices[index].handle, *args)

    def device_present(self, index: int) -> bool:
        return self._devices[index].handle is not None  # None: HLML had no handle for it at start

    # -- discovery and identity -------------------------------------------------------------
    def is_available(self) -> bool:
        return self.get_device_count() > 0

    def get_device_count(self) -> int:
        return len(self._devices)

    def get_driver_version(self) -> str | None:
        return _text(self.guarded("driver", self._hlml.hlmlGetDriverVersion))

    def device_identity(self, index: int) -> str | None:
        device = self._devices[index]
        if device.uuid is None and device.handle is not None:
            device.uuid = _text(self._get(index, "uuid", "hlmlDeviceGetUUID"))
        return device.uuid

    def list_devices(self) -> list[GPUInfo]:
        driver = self.get_driver_version()
        return [self._describe(index, driver) for index in range(len(self._devices))]

    def _describe(self, index: int, driver: str | None) -> GPUInfo:
        if self._devices[index].handle is None:
            return GPUInfo(index=index, model=MODEL, driver_version=driver)
        pci = self._get(index, "pci", "hlmlDeviceGetPCIInfo")
        memory = self.get_memory_usage(index)
        default_limit_mw = self._get(index, "power_default_limit", "hlmlDeviceGetPowerManagementDefaultLimit")
        extras = {
            "serial": _text(self._get(index, "serial", "hlmlDeviceGetSerial")),
            "module_id": self._get(index, "module_id", "hlmlDeviceGetModuleID"),
            # The default limit, not the enforced one (hl-smi -p changes that), so not power_limit_watts.
            "power_default_limit_watts": default_limit_mw / 1000 if default_limit_mw is not None else None,
        }
        return GPUInfo(
            index=index,
            model=_text(self._get(index, "name", "hlmlDeviceGetName")) or MODEL,
            **GPUInfo.memory_fields(memory.total if memory else None),
            uuid=self.device_identity(index),
            pci_bus_id=pci_address(_text(pci.bus_id)) if pci is not None else None,
            driver_version=driver,
            extra_metrics={k: v for k, v in extras.items() if v is not None} or None,
        )

    def get_pytorch_device_string(self, device_id: int) -> str:
        return f"hpu:{device_id}"

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """An unpinned Habana process takes the first idle device, not HLML's index: pin the worker to
        this device's module id, which it then sees as its only HPU."""
        module_id = (info.extra_metrics or {}).get("module_id")
        if module_id is None:
            return self.get_pytorch_device_string(info.index), {}
        return "hpu:0", {"HABANA_VISIBLE_MODULES": str(module_id)}

    # -- telemetry --------------------------------------------------------------------------
    def get_memory_usage(self, index: int) -> MemoryUsage | None:
        info = self._get(index, "memory", "hlmlDeviceGetMemoryInfo")
        return MemoryUsage(total=info.total, used=info.used, free=info.free) if info is not None else None

    def get_utilization(self, index: int) -> Utilization | None:
        percent = self._get(index, "utilization", "hlmlDeviceGetUtilizationRates")  # an int: AIP busy %
        return Utilization(compute=percent / 100) if percent is not None else None

    def get_temperatures(self, index: int) -> dict[str, float]:
        temperatures = {}
        for sensor, kind in self._sensors.items():
            celsius = self._get(index, f"temperature_{sensor}", "hlmlDeviceGetTemperature", kind)
            if celsius is not None:
                temperatures[sensor] = float(celsius)
        return temperatures

    def get_power_usage(self, index: int) -> float | None:
        milliwatts = self._get(index, "power", "hlmlDeviceGetPowerUsage")
        return milliwatts / 1000 if milliwatts is not None else None

    def get_energy_counter(self, index: int) -> float | None:
        """mJ since the driver was last loaded: it restarts at a reload, which the sampler handles."""
        millijoules = self._get(index, "energy", "hlmlDeviceGetTotalEnergyConsumption")
        return millijoules / 1000 if millijoules is not None else None

    def get_clocks(self, index: int) -> dict[str, float]:
        mhz = self._get(index, "clock_soc", "hlmlDeviceGetClockInfo", self._soc_clock)
        return {"soc": mhz * 1e6} if mhz is not None else {}

    def get_supported_throttle_reasons(self, index: int) -> list[str]:
        """HLML has no "supported reasons" call: every bit it defines, once the current mask reads."""
        return list(self._throttle_bits)

    def get_throttle_reasons(self, index: int) -> list[str] | None:
        mask = self._get(index, "throttle", "hlmlDeviceGetCurrentClocksThrottleReasons")
        if mask is None:
            return None
        return [reason for reason, bit in self._throttle_bits.items() if mask & bit]

    def shutdown(self) -> None:
        self._lease.release()

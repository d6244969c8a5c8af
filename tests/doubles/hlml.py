"""A faithful HLML double, at the SDK boundary of the ``gaudi`` and ``hlml`` backends.

Each pyhlml function that warptd may call is replaced (through :func:`tests.doubles.sdk.patched_sdk`)
by ``create_autospec`` of the *real* pyhlml 1.9 function, so a wrong arity fails. Answers come from
:class:`FakeAip` state in HLML's own units (bytes, %, °C, mW, mJ, MHz), as the package returns them:
its ctypes structures (``c_hlml_memory``, ``c_hlml_pci_info``), ``bytes`` strings, integers passed
through the C type of the real out-parameter, its constants, and the ``HLMLError`` subclasses its
``check_return`` raises. Like the real package, ``hlmlDeviceGetHandleByIndex`` returns the one shared
``HLML_DEVICE.TYPE`` object, overwritten by the next lookup, and a missing ``libhlml.so`` prints to
stdout before ``hlmlInit`` raises ``HLMLError_Uninitialized``. Every other ``hlml*`` function raises
``AssertionError``. No Habana hardware or driver is involved.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pyhlml
from pyhlml import hlml_error
from pyhlml import hlml_types as hlml_t

from tests.doubles.sdk import is_api_function, patched_sdk

GIB = 2**30
RC = hlml_t.HLML_RETURN
AIP = hlml_t.HLML_TEMP_SENS.HLML_TEMPERATURE_ON_AIP
BOARD = hlml_t.HLML_TEMP_SENS.HLML_TEMPERATURE_ON_BOARD
SOC = hlml_t.HLML_CLOCK_TYPE.HLML_CLOCK_SOC
THROTTLE_POWER = hlml_t.HLML_DEFINE.HLML_CLOCKS_THROTTLE_REASON_POWER
THROTTLE_THERMAL = hlml_t.HLML_DEFINE.HLML_CLOCKS_THROTTLE_REASON_THERMAL

# The real hlmlInit defines the HLMLError_* subclasses (ErrorsAsClass) on its first call; so does this.
hlml_error.ErrorsAsClass()


def hlml_err(code: int) -> hlml_error.HLMLError:
    """The exception pyhlml's ``check_return`` raises for a return code (e.g. ``HLMLError_AipIsLost``)."""
    return hlml_error.HLMLError(code)


def _uint(value: int) -> int:
    return ctypes.c_uint(value).value  # the real out-parameter's type: -1 reads as 4294967295


def _ulonglong(value: int) -> int:
    return ctypes.c_ulonglong(value).value


_addresses = itertools.count(0x7F3A_0000_1000, 0x1000)


@dataclass
class FakeAip:
    """State of one simulated Gaudi device, in HLML's own units (bytes, %, °C, mW, mJ, MHz)."""

    index: int = 0
    name: str = "HL-225"
    uuid: str = ""
    serial: str = ""
    module_id: int = -1
    bus_id: str = ""
    memory_total: int = 96 * GIB
    memory_used: int = 3 * GIB
    util_aip: int = 45
    temperatures: dict[int, int] = field(default_factory=lambda: {AIP: 38, BOARD: 30})
    power_mw: int = 180_000
    power_default_limit_mw: int = 600_000
    energy_mj: int | None = 9_000_000
    clocks_mhz: dict[int, int] = field(default_factory=lambda: {SOC: 1650})
    throttle_reasons: int = 0
    #: Function names answering HLML_ERROR_NOT_SUPPORTED on this device.
    unsupported: set[str] = field(default_factory=set)
    #: Function name -> exception to raise.
    raises: dict[str, BaseException] = field(default_factory=dict)
    lost: bool = False
    #: The opaque device pointer HLML hands out for this device.
    address: int = field(default_factory=lambda: next(_addresses))

    def __post_init__(self) -> None:
        self.uuid = self.uuid or f"01P0-HL2080A0-15-TNB{self.index:04d}-03-07-05"
        self.serial = self.serial or f"AM{4400 + self.index:08d}"
        self.module_id = self.module_id if self.module_id >= 0 else (7 - self.index) % 8
        self.bus_id = self.bus_id or f"0000:{0x19 + 0x10 * self.index:02x}:00.0"


class FakeHlml:
    """The simulated driver: a list of devices plus init state and recorded calls."""

    def __init__(self, aips: list[FakeAip] | int = 2, driver_version: str = "1.19.0-fw-57.1.0") -> None:
        if isinstance(aips, int):
            aips = [FakeAip(index=i, power_mw=180_000 + 10_000 * i) for i in range(aips)]
        self.aips = aips
        self.driver_version = driver_version
        self.initialised = False
        self.library_missing = False
        self.mocks: dict[str, mock.Mock] = {}

    # -- the implementations --------------------------------------------------------------
    def _aip(self, handle: ctypes.c_void_p, fn: str) -> FakeAip:
        if not self.initialised:
            raise hlml_err(RC.HLML_ERROR_UNINITIALIZED)
        aip = next((a for a in self.aips if a.address == handle.value), None)
        if aip is None or aip.lost:  # off the bus: its handle answers AIP_IS_LOST
            raise hlml_err(RC.HLML_ERROR_AIP_IS_LOST)
        if fn in aip.raises:
            raise aip.raises[fn]
        if fn in aip.unsupported:
            raise hlml_err(RC.HLML_ERROR_NOT_SUPPORTED)
        return aip

    def _impls(self) -> dict[str, Callable[..., Any]]:
        def device(fn: str, answer: Callable[..., Any]) -> Callable[..., Any]:
            def impl(handle: ctypes.c_void_p, *args: Any) -> Any:
                return answer(self._aip(handle, fn), *args)

            return impl

        def init() -> None:
            if self.library_missing:  # what LibHLML() does when the dlopen fails
                print("Failed to load libhlml")
                raise hlml_err(RC.HLML_ERROR_UNINITIALIZED)
            self.initialised = True

        def shutdown() -> None:
            if not self.initialised:
                raise hlml_err(RC.HLML_ERROR_UNINITIALIZED)
            self.initialised = False

        def count() -> int:
            if not self.initialised:
                raise hlml_err(RC.HLML_ERROR_UNINITIALIZED)
            return len(self.aips)

        def handle_by_index(index: int) -> ctypes.c_void_p:
            if not 0 <= index < count():
                raise hlml_err(RC.HLML_ERROR_INVALID_ARGUMENT)
            if self.aips[index].lost:
                raise hlml_err(RC.HLML_ERROR_AIP_IS_LOST)
            shared = hlml_t.HLML_DEVICE.TYPE  # the real wrapper's one module-level c_void_p
            shared.value = self.aips[index].address
            return shared

        def driver_version() -> bytes:
            count()
            return self.driver_version.encode()

        def pci(a: FakeAip) -> hlml_t.c_hlml_pci_info:
            info = hlml_t.c_hlml_pci_info()
            info.bus_id = a.bus_id.encode()
            return info

        def memory(a: FakeAip) -> hlml_t.c_hlml_memory:
            return hlml_t.c_hlml_memory(
                free=a.memory_total - a.memory_used, total=a.memory_total, used=a.memory_used
            )

        def temperature(a: FakeAip, sensor: int) -> int:
            if sensor not in a.temperatures:
                raise hlml_err(RC.HLML_ERROR_NOT_SUPPORTED)
            return _uint(a.temperatures[sensor])

        def energy(a: FakeAip) -> int:
            if a.energy_mj is None:
                raise hlml_err(RC.HLML_ERROR_NOT_SUPPORTED)
            return _ulonglong(a.energy_mj)

        def clock(a: FakeAip, clock_type: int = 0) -> int:
            if clock_type not in a.clocks_mhz:
                raise hlml_err(RC.HLML_ERROR_NOT_SUPPORTED)
            return _uint(a.clocks_mhz[clock_type])

        return {
            "hlmlInit": init,
            "hlmlShutdown": shutdown,
            "hlmlDeviceGetCount": count,
            "hlmlDeviceGetHandleByIndex": handle_by_index,
            "hlmlGetDriverVersion": driver_version,
            "hlmlDeviceGetName": device("hlmlDeviceGetName", lambda a: a.name.encode()),
            "hlmlDeviceGetUUID": device("hlmlDeviceGetUUID", lambda a: a.uuid.encode()),
            "hlmlDeviceGetSerial": device("hlmlDeviceGetSerial", lambda a: a.serial.encode()),
            "hlmlDeviceGetModuleID": device("hlmlDeviceGetModuleID", lambda a: _uint(a.module_id)),
            "hlmlDeviceGetPCIInfo": device("hlmlDeviceGetPCIInfo", pci),
            "hlmlDeviceGetMemoryInfo": device("hlmlDeviceGetMemoryInfo", memory),
            "hlmlDeviceGetUtilizationRates": device(
                "hlmlDeviceGetUtilizationRates", lambda a: _uint(a.util_aip)
            ),
            "hlmlDeviceGetTemperature": device("hlmlDeviceGetTemperature", temperature),
            "hlmlDeviceGetPowerUsage": device("hlmlDeviceGetPowerUsage", lambda a: _uint(a.power_mw)),
            "hlmlDeviceGetPowerManagementDefaultLimit": device(
                "hlmlDeviceGetPowerManagementDefaultLimit", lambda a: _uint(a.power_default_limit_mw)
            ),
            "hlmlDeviceGetTotalEnergyConsumption": device("hlmlDeviceGetTotalEnergyConsumption", energy),
            "hlmlDeviceGetClockInfo": device("hlmlDeviceGetClockInfo", clock),
            "hlmlDeviceGetCurrentClocksThrottleReasons": device(
                "hlmlDeviceGetCurrentClocksThrottleReasons", lambda a: _ulonglong(a.throttle_reasons)
            ),
        }

    # -- installing -------------------------------------------------------------------------
    @contextlib.contextmanager
    def installed(self) -> Iterator[FakeHlml]:
        """Patch the real pyhlml package namespace (where warptd calls it) for the block."""
        with patched_sdk(pyhlml, self._impls(), is_api_function(pyhlml, "hlml"), self.mocks):
            yield self

    def calls(self, name: str) -> int:
        return self.mocks[name].call_count

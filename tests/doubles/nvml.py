"""A faithful NVML double, at the SDK boundary of the ``nvidia`` and ``nvml`` backends.

Each pynvml function that warptd may call is replaced by ``create_autospec`` of the *real*
pynvml function (a wrong arity or misspelt keyword fails), answering from :class:`FakeGpu`
state with the real ctypes result structures, constants and ``NVMLError`` subclasses. Every
other ``nvml*`` function raises ``AssertionError`` so an unexpected call is loud.
No NVIDIA hardware or driver is involved.

Device handles and event sets are real ctypes pointers (``c_nvmlDevice_t``, ``c_nvmlEventSet_t``),
one stable address per GPU, so an event's ``c_nvmlEventData_t.device`` points where the handle
``nvmlDeviceGetHandleByIndex`` gave does, as in the driver.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pynvml

from tests.doubles.sdk import is_api_function, patched_sdk

GIB = 2**30
ALL_REASONS = (
    pynvml.nvmlClocksEventReasonGpuIdle
    | pynvml.nvmlClocksEventReasonApplicationsClocksSetting
    | pynvml.nvmlClocksEventReasonSwPowerCap
    | pynvml.nvmlClocksEventReasonHwSlowdown
    | pynvml.nvmlClocksEventReasonSyncBoost
    | pynvml.nvmlClocksEventReasonSwThermalSlowdown
    | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    | pynvml.nvmlClocksEventReasonDisplayClockSetting
)
#: What a data-centre GPU answers to nvmlDeviceGetSupportedEventTypes.
SUPPORTED_EVENTS = (
    pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypePState
    | pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeClock
)
#: gpuInstanceId / computeInstanceId of an event or process not attributable to a MIG instance.
NO_INSTANCE = 0xFFFFFFFF
# pynvml's own helper (captured before patching, which replaces every ``nvml*`` callable).
_friendly_object = pynvml.nvmlStructToFriendlyObject


def nvml_error(code: int) -> pynvml.NVMLError:
    """The exception pynvml itself raises for a return code (e.g. NVMLError_NotSupported)."""
    return pynvml.NVMLError(code)


@dataclass
class FakeGpu:
    """State of one simulated GPU, in NVML's own units (bytes, %, °C, mW, mJ, MHz, ns)."""

    index: int = 0
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = ""
    memory_total: int = 80 * GIB
    memory_used: int = 1 * GIB
    util_gpu: int = 35
    util_memory: int = 12
    temperature: int = 41
    power_mw: int = 120_000
    power_limit_mw: int = 700_000
    energy_mj: int | None = 5_000_000
    clocks_mhz: dict[int, int] = field(
        default_factory=lambda: {
            pynvml.NVML_CLOCK_GRAPHICS: 1980,
            pynvml.NVML_CLOCK_SM: 1980,
            pynvml.NVML_CLOCK_MEM: 2619,
            pynvml.NVML_CLOCK_VIDEO: 1755,
        }
    )
    supported_reasons: int = ALL_REASONS
    current_reasons: int = pynvml.nvmlClocksEventReasonGpuIdle
    violation_ns: dict[int, int] = field(
        default_factory=lambda: {pynvml.NVML_PERF_POLICY_POWER: 0, pynvml.NVML_PERF_POLICY_THERMAL: 0}
    )
    compute_capability: tuple[int, int] = (9, 0)
    pcie_gen: int = 5
    #: Event types this GPU can deliver (nvmlDeviceGetSupportedEventTypes).
    supported_events: int = SUPPORTED_EVENTS
    #: Events the driver raises, oldest first, as (nvmlEventType…, eventData: the XID of an XID
    #: event). A wait on a set this GPU registered for that type takes them; other types are dropped.
    events: list[tuple[int, int]] = field(default_factory=list)
    #: Running compute processes as (pid, usedGpuMemory bytes, or None where NVML cannot tell).
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    #: Function names answering NVML_ERROR_NOT_SUPPORTED on this GPU.
    unsupported: set[str] = field(default_factory=set)
    #: Function name -> exception to raise.
    raises: dict[str, BaseException] = field(default_factory=dict)
    lost: bool = False
    #: While set, every call on this GPU blocks until ``release`` is set (a hung driver).
    hang: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    #: When True, the energy counter advances with wall time at the current power (for live daemons).
    live: bool = False
    _t0: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.uuid = self.uuid or f"GPU-{self.index:08x}-1111-2222-3333-{self.index:012x}"

    def energy_now(self) -> int | None:
        if self.energy_mj is None:
            return None
        if self.live:
            return self.energy_mj + int((time.monotonic() - self._t0) * self.power_mw)
        return self.energy_mj


# One opaque device structure per UUID: every handle of a GPU points at it, as NVML's handles do.
_DEVICES: dict[str, Any] = {}


def _address(pointer: Any) -> int | None:
    return ctypes.cast(pointer, ctypes.c_void_p).value


class FakeHandle(pynvml.c_nvmlDevice_t):
    """Bound to one physical GPU (by UUID), as an NVML handle is: it does not follow re-ordering.

    A real ``c_nvmlDevice_t`` (it fits ``c_nvmlEventData_t.device``) whose address is the GPU's.
    """

    _type_ = pynvml.struct_c_nvmlDevice_t

    def __init__(self, uuid: str) -> None:
        super().__init__(_DEVICES.setdefault(uuid, pynvml.struct_c_nvmlDevice_t()))
        self.uuid = uuid

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeHandle) and other.uuid == self.uuid

    def __hash__(self) -> int:
        return hash(self.uuid)

    def __repr__(self) -> str:
        return f"FakeHandle({self.uuid!r})"


def handle_uuid(handle: Any) -> str | None:
    """The GPU a handle points at: a FakeHandle, or a plain ``c_nvmlDevice_t`` read from an event."""
    uuid = getattr(handle, "uuid", None)
    if uuid is None:
        address = _address(handle)
        uuid = next((u for u, struct in _DEVICES.items() if ctypes.addressof(struct) == address), None)
    return uuid


class FakeNvml:
    """The simulated driver: a list of GPUs plus init state and call counts."""

    def __init__(
        self, gpus: list[FakeGpu] | int = 2, driver_version: str = "570.86.15", record_calls: bool = True
    ) -> None:
        if isinstance(gpus, int):
            gpus = [FakeGpu(index=i) for i in range(gpus)]
        self.gpus = gpus
        self.driver_version = driver_version
        self.initialised = 0
        self.library_missing = False
        #: True: ``create_autospec`` mocks that record every call (tests). False: the same signature
        #: check through ``inspect.signature(real).bind`` with only a call count, so a long benchmark
        #: or soak neither pays mock's bookkeeping nor grows its call list without bound.
        self.record_calls = record_calls
        self.mocks: dict[str, mock.Mock] = {}
        self.counts: Counter[str] = Counter()
        #: Live event sets by address: {uuid: registered event mask}.
        self.event_sets: dict[int, dict[str, int]] = {}
        self._event_structs: dict[int, Any] = {}

    # -- the implementations --------------------------------------------------------------
    def _gpu(self, handle: FakeHandle, fn: str) -> FakeGpu:
        if not self.initialised:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
        uuid = handle_uuid(handle)
        gpu = next((g for g in self.gpus if g.uuid == uuid), None)
        if gpu is None:  # the GPU left the bus: its old handle answers GPU_IS_LOST
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if gpu.hang.is_set():
            gpu.release.wait(timeout=30)
        if gpu.lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if fn in gpu.raises:
            raise gpu.raises[fn]
        if fn in gpu.unsupported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _event_set(self, event_set: Any) -> dict[str, int]:
        if not self.initialised:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
        registered = self.event_sets.get(_address(event_set) or 0)
        if registered is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return registered

    def _event_impls(self) -> dict[str, Callable[..., Any]]:
        """Event sets: create, register per GPU, wait (bounded by its timeout), free."""

        def create() -> Any:
            if not self.initialised:
                raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
            struct = pynvml.struct_c_nvmlEventSet_t()
            self._event_structs[ctypes.addressof(struct)] = struct
            self.event_sets[ctypes.addressof(struct)] = {}
            return pynvml.c_nvmlEventSet_t(struct)

        def register(handle: Any, event_types: int, event_set: Any) -> None:
            gpu = self._gpu(handle, "nvmlDeviceRegisterEvents")
            registered = self._event_set(event_set)
            if event_types & ~gpu.supported_events:
                raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            registered[gpu.uuid] = registered.get(gpu.uuid, 0) | event_types

        def next_event(registered: dict[str, int]) -> Any:
            for gpu in self.gpus:
                mask = registered.get(gpu.uuid, 0)
                while mask and gpu.events:
                    kind, data = gpu.events.pop(0)
                    if kind & mask:
                        return pynvml.c_nvmlEventData_t(
                            device=FakeHandle(gpu.uuid),
                            eventType=kind,
                            eventData=data,
                            gpuInstanceId=NO_INSTANCE,
                            computeInstanceId=NO_INSTANCE,
                        )
            return None

        def wait(event_set: Any, timeout_ms: int) -> Any:
            deadline = time.monotonic() + timeout_ms / 1000
            while True:
                registered = self._event_set(event_set)
                event = next_event(registered)
                if event is not None:
                    return event
                if any(g.lost for g in self.gpus if g.uuid in registered):
                    raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
                # The driver blocks in the kernel. Tests poll the event lists every 50 ms; the light
                # mode of benchmarks and soaks looks once per timeout, so the double's own CPU stays
                # out of the daemon's figures.
                time.sleep(min(0.05 if self.record_calls else left, left))

        def free(event_set: Any) -> None:
            self._event_set(event_set)
            address = _address(event_set) or 0
            del self.event_sets[address], self._event_structs[address]

        return {
            "nvmlEventSetCreate": create,
            "nvmlDeviceRegisterEvents": register,
            "nvmlEventSetWait_v2": wait,
            "nvmlEventSetFree": free,
        }

    def _impls(self) -> dict[str, Callable[..., Any]]:
        def device(fn: str, answer: Callable[[FakeGpu], Any]) -> Callable[..., Any]:
            def impl(handle: FakeHandle, *args: Any) -> Any:
                return answer(self._gpu(handle, fn), *args)

            return impl

        def init() -> None:
            if self.library_missing:
                raise nvml_error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
            self.initialised += 1

        def shutdown() -> None:
            if not self.initialised:
                raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
            self.initialised -= 1

        def count() -> int:
            if not self.initialised:
                raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
            return len(self.gpus)

        def handle_by_index(index: int) -> FakeHandle:
            if not 0 <= index < count():
                raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if self.gpus[index].lost:  # NVML cannot hand out a handle for a GPU off the bus
                raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
            return FakeHandle(self.gpus[index].uuid)

        def driver_version() -> str:
            count()
            return self.driver_version

        def pci(g: FakeGpu) -> Any:
            info = pynvml.nvmlPciInfo_t()
            info.busId = f"00000000:{0x18 + self.gpus.index(g):02X}:00.0".encode()
            return info

        def memory(g: FakeGpu, version: Any = None) -> Any:
            return pynvml.c_nvmlMemory_t(
                total=g.memory_total, free=g.memory_total - g.memory_used, used=g.memory_used
            )

        def energy(g: FakeGpu) -> int:
            value = g.energy_now()
            if value is None:
                raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return value

        def clock(g: FakeGpu, kind: int) -> int:
            if kind not in g.clocks_mhz:
                raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return g.clocks_mhz[kind]

        def processes(g: FakeGpu) -> list[Any]:
            """As pynvml builds them: friendly objects of c_nvmlProcessInfo_t, NOT_AVAILABLE -> None."""
            unknown = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
            found = []
            for pid, used in g.processes:
                info = pynvml.c_nvmlProcessInfo_t(
                    pid=pid,
                    usedGpuMemory=unknown if used is None else used,
                    gpuInstanceId=NO_INSTANCE,
                    computeInstanceId=NO_INSTANCE,
                )
                process = _friendly_object(info)
                if process.usedGpuMemory == unknown:
                    process.usedGpuMemory = None
                found.append(process)
            return found

        def violation(g: FakeGpu, policy: int) -> Any:
            if policy not in g.violation_ns:
                raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return pynvml.c_nvmlViolationTime_t(
                referenceTime=time.monotonic_ns(), violationTime=g.violation_ns[policy]
            )

        return {
            "nvmlInit": init,
            "nvmlShutdown": shutdown,
            "nvmlDeviceGetCount": count,
            "nvmlDeviceGetHandleByIndex": handle_by_index,
            "nvmlSystemGetDriverVersion": driver_version,
            "nvmlDeviceGetName": device("nvmlDeviceGetName", lambda g: g.name),
            "nvmlDeviceGetUUID": device("nvmlDeviceGetUUID", lambda g: g.uuid),
            "nvmlDeviceGetCudaComputeCapability": device(
                "nvmlDeviceGetCudaComputeCapability", lambda g: g.compute_capability
            ),
            "nvmlDeviceGetPciInfo": device("nvmlDeviceGetPciInfo", pci),
            "nvmlDeviceGetMaxPcieLinkGeneration": device(
                "nvmlDeviceGetMaxPcieLinkGeneration", lambda g: g.pcie_gen
            ),
            "nvmlDeviceGetMemoryInfo": device("nvmlDeviceGetMemoryInfo", memory),
            "nvmlDeviceGetUtilizationRates": device(
                "nvmlDeviceGetUtilizationRates",
                lambda g: pynvml.c_nvmlUtilization_t(gpu=g.util_gpu, memory=g.util_memory),
            ),
            "nvmlDeviceGetTemperature": device("nvmlDeviceGetTemperature", lambda g, sensor: g.temperature),
            "nvmlDeviceGetPowerUsage": device("nvmlDeviceGetPowerUsage", lambda g: g.power_mw),
            "nvmlDeviceGetEnforcedPowerLimit": device(
                "nvmlDeviceGetEnforcedPowerLimit", lambda g: g.power_limit_mw
            ),
            "nvmlDeviceGetTotalEnergyConsumption": device("nvmlDeviceGetTotalEnergyConsumption", energy),
            "nvmlDeviceGetClockInfo": device("nvmlDeviceGetClockInfo", clock),
            "nvmlDeviceGetSupportedClocksEventReasons": device(
                "nvmlDeviceGetSupportedClocksEventReasons", lambda g: g.supported_reasons
            ),
            "nvmlDeviceGetCurrentClocksEventReasons": device(
                "nvmlDeviceGetCurrentClocksEventReasons", lambda g: g.current_reasons
            ),
            "nvmlDeviceGetViolationStatus": device("nvmlDeviceGetViolationStatus", violation),
            "nvmlDeviceGetSupportedEventTypes": device(
                "nvmlDeviceGetSupportedEventTypes", lambda g: g.supported_events
            ),
            "nvmlDeviceGetComputeRunningProcesses": device("nvmlDeviceGetComputeRunningProcesses", processes),
            "nvmlDeviceGetComputeRunningProcesses_v2": device(
                "nvmlDeviceGetComputeRunningProcesses_v2", processes
            ),
            **self._event_impls(),
        }

    # -- installing -------------------------------------------------------------------------
    @contextlib.contextmanager
    def installed(self) -> Iterator[FakeNvml]:
        """Patch the real pynvml module for the duration of the block."""
        counts = None if self.record_calls else self.counts
        with patched_sdk(pynvml, self._impls(), is_api_function(pynvml, "nvml"), self.mocks, counts):
            yield self

    def calls(self, name: str) -> int:
        return self.mocks[name].call_count if self.record_calls else self.counts[name]

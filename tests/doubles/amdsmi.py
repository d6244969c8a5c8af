"""An amdsmi double: a stand-in for ``libamd_smi.so`` under the *real* amdsmi 7.x Python package.

The real package cannot be imported here (no ROCm: ``KeyError: 'libamd_smi.so'``), so it is imported
once with ``ctypes.CDLL`` answering a stand-in library for that one path. The package's own Python
code then runs unchanged on top of :class:`FakeAmdsmi`, which implements the C functions
(``amdsmi_wrapper.amdsmi_*``, checked against the argtypes the wrapper declares) by filling the
real ctypes structures from :class:`FakeGpu` state in the C library's units and returning its status
codes. So the dicts, the ``"N/A"`` conversions, the ``processor_handle`` type and the
``AmdSmiLibraryException`` the backend sees are the package's own. On top, ``patched_sdk`` installs
autospecs of the package's ``amdsmi_*`` functions: the ones warptd calls go through to the real
code (and are counted), every other one raises ``AssertionError``.

The imported modules live in ``sys.modules`` only while :meth:`FakeAmdsmi.installed` is active, so
any other code in the process still meets the real, failing import. Written from documentation,
not the package: which status a GPU that fell off the bus answers (``NOT_FOUND`` is assumed).

Costs and timing as the C library has them (``amd_smi.cc``): ``amdsmi_get_violation_status`` reads the
GPU metrics table, sleeps 100 ms (``kFASTEST_POLL_TIME_MS``), reads it again and answers integer
percentages of those 100 ms. ``amdsmi_get_gpu_activity``, ``amdsmi_get_power_info``,
``amdsmi_get_energy_count`` (rocm_smi's ``rsmi_dev_energy_count_get``) and ``amdsmi_get_clock_info``
each read the whole metrics table too and answer from it, so the double answers them from the same
table and counts every read (:attr:`FakeGpu.table_reads`). A read's price is not documented (on MI300
the driver sends the SMU firmware a message at every read of ``gpu_metrics``); it is
:attr:`FakeAmdsmi.table_read_cpu_s` of CPU burned in the caller's thread, 0 unless a test or a bench
sets one. The firmware's accumulators (the cycle counter and its throttle
residencies, the energy accumulator in 2^-16 J, ``system_clock_counter`` in ns) advance with
:class:`FirmwareClock`, a virtual clock that only the double's own sleeps (which also take real
time) and :meth:`FakeAmdsmi.advance` move, so the values are exact. MI300X partitions
(:meth:`FakeAmdsmi.partitioned`): several handles share one serial, BDF and (older amdsmi) UUID, tell
themselves apart by ``amdsmi_get_gpu_kfd_info``'s ``current_partition_id``, and only the primary
partition (0) reports socket power and energy.

Process lists (:class:`FakeProcess`, ``amdsmi_get_gpu_process_list``) follow amd_smi.cc, fdinfo.cc and
amd_smi_gpu_device.cc (read, not run): VRAM in bytes, GFX engine time in cumulative ns advancing on the
firmware clock, CU occupancy or all ones, the ``NO_PERM`` and ``OUT_OF_RESOURCES`` answers, a process
on several partitions listed by each. The library's own cost (a walk of /proc/PID/fdinfo) is not
modelled: it depends on the host's processes and was not measured.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from unittest import mock

from tests.doubles.sdk import burn_cpu, is_api_function, patched_sdk

_SDK_PREFIX = "amdsmi"


class _CFunction:
    """One symbol of the stand-in library: the wrapper sets restype/argtypes; calling it is a bug."""

    def __init__(self, name: str) -> None:
        self.name, self.restype, self.argtypes = name, None, None

    def __call__(self, *args: Any) -> int:
        raise AssertionError(f"amdsmi called {self.name}, which the libamd_smi.so double does not implement")


class _StandInLibrary:
    """What ``ctypes.CDLL('libamd_smi.so')`` returns while the double imports the package."""

    def __getattr__(self, name: str) -> _CFunction:
        if name.startswith("__"):
            raise AttributeError(name)
        symbol = _CFunction(name)
        setattr(self, name, symbol)
        return symbol


def _is_amdsmi(name: str) -> bool:
    return name == _SDK_PREFIX or name.startswith(_SDK_PREFIX + ".")


def _import_over_stand_in() -> tuple[ModuleType, dict[str, ModuleType], _StandInLibrary]:
    """Import the real package against the stand-in library, then take it out of ``sys.modules``."""
    before = {name: module for name, module in sys.modules.items() if _is_amdsmi(name)}
    library, real_cdll = _StandInLibrary(), ctypes.CDLL

    def cdll(name: object, *args: Any, **kwargs: Any) -> Any:
        return library if "libamd_smi" in str(name) else real_cdll(name, *args, **kwargs)

    for name in before:
        del sys.modules[name]
    try:
        with mock.patch.object(ctypes, "CDLL", cdll):
            import amdsmi as package
        loaded = {name: module for name, module in sys.modules.items() if _is_amdsmi(name)}
    finally:
        for name in [n for n in sys.modules if _is_amdsmi(n)]:
            del sys.modules[name]
        sys.modules.update(before)
    return package, loaded, library


amdsmi, _MODULES, _LIBRARY = _import_over_stand_in()
wrapper = amdsmi.amdsmi_wrapper
TT, CLK = amdsmi.AmdSmiTemperatureType, amdsmi.AmdSmiClkType
SUCCESS = wrapper.AMDSMI_STATUS_SUCCESS
U16, U32, U64 = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
#: The package functions warptd may call; they run the package's real code over the stand-in library.
API = (
    "amdsmi_init",
    "amdsmi_shut_down",
    "amdsmi_get_processor_handles",
    "amdsmi_get_gpu_asic_info",
    "amdsmi_get_gpu_device_uuid",
    "amdsmi_get_gpu_device_bdf",
    "amdsmi_get_gpu_driver_info",
    "amdsmi_get_gpu_enumeration_info",
    "amdsmi_get_gpu_vram_usage",
    "amdsmi_get_gpu_activity",
    "amdsmi_get_power_info",
    "amdsmi_get_power_cap_info",
    "amdsmi_get_energy_count",
    "amdsmi_get_temp_metric",
    "amdsmi_get_clock_info",
    "amdsmi_get_violation_status",
    "amdsmi_get_gpu_metrics_info",
    "amdsmi_get_gpu_total_ecc_count",
    "amdsmi_get_gpu_pci_replay_counter",
    "amdsmi_get_gpu_fan_speed",
    "amdsmi_get_gpu_fan_speed_max",
    "amdsmi_get_gpu_bad_page_info",
    "amdsmi_get_gpu_kfd_info",
    "amdsmi_get_gpu_process_list",
)
_REAL = {name: getattr(amdsmi, name) for name in API}
_handle_values = itertools.count(0x7F00_0000_1000, 0x1000)
#: The metrics table's throttle residency accumulators (MI300 and newer), counted in firmware cycles.
RESIDENCIES = (
    "prochot_residency_acc",
    "ppt_residency_acc",
    "socket_thm_residency_acc",
    "vr_thm_residency_acc",
    "hbm_thm_residency_acc",
)
#: The violation status percentage (and ``active_*``/``acc_*``) computed from each accumulator.
_VIOLATION_OF = {
    "prochot_residency_acc": "prochot_thrm",
    "ppt_residency_acc": "ppt_pwr",
    "socket_thm_residency_acc": "socket_thrm",
    "vr_thm_residency_acc": "vr_thrm",
    "hbm_thm_residency_acc": "hbm_thrm",
}
#: ``kFASTEST_POLL_TIME_MS`` of amd_smi.cc: the sleep between the two table reads of a violation status.
VIOLATION_SLEEP_S = 0.1
#: The energy accumulator's unit (kgd_pp_interface.h: "15.259uJ (2^-16) units").
ENERGY_TICK_J = 2.0**-16
#: What amdsmi reports as the accumulator's resolution (rocm_smi.cc ``kEnergyCounterResolution``, µJ).
REPORTED_RESOLUTION_UJ = 15.3
#: Firmware cycles per second of the double's accumulation counter (the real period is not documented).
FIRMWARE_HZ = 1000
#: The metrics-table field of each clock amdsmi_get_clock_info answers from (MHz).
_TABLE_CLOCKS = {CLK.GFX: "current_gfxclk", CLK.MEM: "current_uclk"}
#: ``MAX_NUM_PROCESSES`` of the package: the room its ``amdsmi_get_gpu_process_list`` makes for processes.
MAX_PROCESSES = 1024


@dataclass(eq=False)
class FakeProcess:
    """A compute process as ``amdsmi_get_gpu_process_list`` reports it (``amdsmi_proc_info_t``): KFD lists
    its pid and VRAM; its fdinfo (``/proc/PID/fdinfo``) gives ``engine_usage.gfx``, the ns its DRM
    clients kept the GFX engine busy since they opened the device, cumulative. That counter advances
    at ``gfx_busy`` (0..1 of the time) as the firmware clock moves. A process on several partitions of
    one GPU is the same object in each partition's list: its fdinfo names the GPU's one PCI address,
    so every partition reports it with the same numbers.

    ``readable`` False: another user's process, and the caller not root: its fdinfo cannot be opened,
    so amdsmi fills in only the pid and KFD's VRAM, with no name and no GFX time, and answers the
    whole list ``AMDSMI_STATUS_NO_PERM`` (amd_smi.cc at its head), which the package raises; or, as
    ROCm 6.2.0's CHANGELOG tells it (:attr:`FakeAmdsmi.unreadable_listed`), lists it with the name
    "N/A" and 0 ns."""

    pid: int
    vram_bytes: int = 2**30
    gfx_busy: float = 0.0
    gfx_ns: int = 0
    #: CUs its waves occupy now (KFD ``cu_occupancy``); None: "N/A" (all ones).
    cu_occupancy: int | None = None
    name: str = "/usr/bin/python3.11"
    readable: bool = True
    #: The firmware time (s) the GFX counter was last brought up to.
    seen_at: float | None = None

    def run(self, now: float) -> None:
        """Bring the GFX counter up to firmware time ``now`` (once, however many lists name it)."""
        if self.seen_at is not None and now > self.seen_at:
            self.gfx_ns += round(self.gfx_busy * (now - self.seen_at) * 1e9)
        self.seen_at = now if self.seen_at is None else max(now, self.seen_at)


class FirmwareClock:
    """The GPUs' firmware time (s): moved by the double's sleeps (which also take that real time) and
    by :meth:`advance`, never by itself, so the accumulators read in a test are exact."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        """A sleep inside the C library: the caller's thread waits, and the firmware counts on."""
        time.sleep(seconds)
        self.advance(seconds)


class Status(Exception):
    """A non-success status code of a stand-in C function (the package raises for it)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def library_error(code: int) -> Exception:
    """The exception the package raises for a status code (its own ``_check_res``)."""
    return amdsmi.AmdSmiLibraryException(code)


@dataclass
class FakeGpu:
    """One simulated GPU (an MI300X by default), in the C library's units: MB, %, W, µW, ticks, °C, MHz."""

    index: int = 0
    market_name: str = "AMD Instinct MI300X"
    uuid: str = ""
    bdf: tuple[int, int, int, int] = (0, 0, 0, 0)  # domain, bus, device, function; bus from index
    driver_version: str = "6.10.5"
    vram_total_mb: int = 196_592
    vram_used_mb: int = 2_048
    gfx_activity: int = 35
    umc_activity: int = 12
    current_socket_power: int = 480
    average_socket_power: int = U16  # MI300 fills the current value only
    power_cap_uw: int = 750_000_000
    #: Ticks of 2^-16 J (5000 J here); it counts on at the socket power as the firmware clock moves.
    energy_accumulator: int = 5_000 * 2**16
    #: What amdsmi_get_energy_count reports as the tick (µJ): 15.3, rounded from 15.2587890625.
    counter_resolution: float = REPORTED_RESOLUTION_UJ
    temperatures: dict[int, int] = field(default_factory=lambda: {TT.EDGE: 40, TT.HOTSPOT: 48, TT.VRAM: 41})
    clocks_mhz: dict[int, int] = field(default_factory=lambda: {CLK.GFX: 2100, CLK.MEM: 1300})
    #: Throttle controllers active now, by their metrics-table residency accumulator (``RESIDENCIES``).
    throttling: set[str] = field(default_factory=set)
    #: Whether the firmware keeps the cycle counter and the residency accumulators (MI300 and newer).
    has_residency: bool = True
    accumulation_counter: int = 4_000_000
    residency: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESIDENCIES, 1_000))
    #: ``amdsmi_get_gpu_kfd_info``'s ``current_partition_id``: 0 unpartitioned or the primary partition.
    partition_id: int = 0
    hip_id: int | None = None
    #: GPU metrics table fields (``amdsmi_gpu_metrics_t``) by name, in its units (%, KB, counts): a
    #: list fills an array from its start; every field not named reads as all ones ("N/A").
    metrics: dict[str, int | list[int]] = field(
        default_factory=lambda: {
            "vcn_activity": [20, 0, 7, 0],
            "jpeg_activity": [3, 0, 0, 0],
            "xgmi_read_data_acc": [1_000, 2_000, 0, 0, 0, 0, 0],  # MI300X: 7 XGMI links
            "xgmi_write_data_acc": [4_000, 8_000, 0, 0, 0, 0, 0],
        }
    )
    #: ``amdsmi_get_gpu_total_ecc_count``: counts summed over the RAS blocks, since the driver loaded.
    ecc_correctable: int = 5
    ecc_uncorrectable: int = 0
    ecc_deferred: int = 1
    pcie_replays: int = 2
    #: Fan sensor 0 on the PWM scale; None: no fan (MI300X is passively cooled), NOT_SUPPORTED.
    fan_speed: int | None = None
    fan_speed_max: int = 255
    #: ``amdsmi_get_gpu_bad_page_info``: the status of each retired page (``AMDSMI_MEM_PAGE_STATUS_*``).
    bad_pages: list[int] = field(default_factory=list)
    #: The compute processes KFD lists on this GPU (a partition: on this partition).
    processes: list[FakeProcess] = field(default_factory=list)
    #: C function names answering AMDSMI_STATUS_NOT_SUPPORTED on this GPU.
    unsupported: set[str] = field(default_factory=set)
    #: C function name -> a status code to answer, or an exception to raise.
    raises: dict[str, int | BaseException] = field(default_factory=dict)
    lost: bool = False
    handle_value: int = field(default_factory=lambda: next(_handle_values))
    #: The socket (physical GPU) index: partitions of one GPU share it, and with it serial, BDF and UUID.
    socket: int | None = None
    #: The firmware time (ms) the accumulators were last brought up to; None before the first call.
    firmware_ms: int | None = None
    #: Reads of this GPU's metrics table, by whichever amdsmi function made them.
    table_reads: int = 0
    _energy_rest: int = 0

    def __post_init__(self) -> None:
        socket = self.index if self.socket is None else self.socket
        self.socket = socket
        serial = 0xE05C945BB3B2 + socket
        self.uuid = self.uuid or f"{0x74A1 + socket:08x}-0000-1000-80ea-{serial:012x}"
        if self.bdf == (0, 0, 0, 0):
            self.bdf = (0, 0x03 + 0x20 * socket, 0, 0)
        if self.hip_id is None:
            self.hip_id = self.index

    @property
    def primary(self) -> bool:
        """The partition that reports the socket's power and energy (every unpartitioned GPU)."""
        return self.partition_id == 0

    @property
    def socket_power(self) -> int:
        """Watts the socket draws (what its energy accumulator counts)."""
        current = self.current_socket_power
        return current if current not in (U16, U32) else self.average_socket_power

    def run_firmware(self, now: float) -> None:
        """Bring the accumulators up to firmware time ``now`` (s): one cycle a millisecond, a residency
        cycle for each active throttle controller, the socket's energy in 2^-16 J ticks."""
        ms = int(now * FIRMWARE_HZ)
        if self.firmware_ms is not None and ms > self.firmware_ms:
            cycles = ms - self.firmware_ms
            self.accumulation_counter += cycles
            for name in self.throttling:
                self.residency[name] += cycles
            if self.socket_power not in (U16, U32):
                tick_ms = self.socket_power * 2**16 * cycles + self._energy_rest
                self.energy_accumulator += tick_ms // FIRMWARE_HZ
                self._energy_rest = tick_ms % FIRMWARE_HZ
        self.firmware_ms = ms if self.firmware_ms is None else max(ms, self.firmware_ms)

    @property
    def pci_bus_id(self) -> str:
        domain, bus, device, function = self.bdf
        return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


class FakeAmdsmi:
    """The simulated library: GPUs, init state, and the autospec mocks of the package functions."""

    def __init__(self, gpus: list[FakeGpu] | int = 2, clock: FirmwareClock | None = None) -> None:
        self.gpus = [FakeGpu(index=i) for i in range(gpus)] if isinstance(gpus, int) else gpus
        self.clock = clock or FirmwareClock()
        self.initialised = 0
        #: Status code amdsmi_init answers (e.g. AMDSMI_STATUS_DRIVER_NOT_LOADED on a host without amdgpu).
        self.init_status = SUCCESS
        #: An unreadable process is listed (no name, 0 ns) instead of the list answering NO_PERM.
        self.unreadable_listed = False
        #: CPU (s) one read of a GPU metrics table burns in the calling thread (not documented: 0).
        self.table_read_cpu_s = 0.0
        self.mocks: dict[str, mock.Mock] = {}

    @classmethod
    def partitioned(cls, sockets: int, partitions: int, **kwargs: Any) -> FakeAmdsmi:
        """``sockets`` MI300X in a compute partition mode of ``partitions`` each (CPX: 8): one handle a
        partition, numbered socket by socket, as amdsmi enumerates them."""
        gpus = []
        for socket in range(sockets):
            for partition in range(partitions):
                index = socket * partitions + partition
                gpu = FakeGpu(index=index, socket=socket, partition_id=partition, **kwargs)
                gpu.vram_total_mb //= partitions
                gpus.append(gpu)
        return cls(gpus)

    def advance(self, seconds: float) -> None:
        """Let the firmware of every GPU run for ``seconds`` as it is now (throttling, power, the
        processes' GFX use), so a change made afterwards counts from then on."""
        for gpu in self.gpus:
            gpu.run_firmware(self.clock.now)
            for process in gpu.processes:
                process.run(self.clock.now)
        self.clock.advance(seconds)
        for gpu in self.gpus:
            gpu.run_firmware(self.clock.now)
            for process in gpu.processes:
                process.run(self.clock.now)

    # -- the C functions --------------------------------------------------------------------
    def _gpu(self, handle: Any, fn: str) -> FakeGpu:
        if not self.initialised:
            raise Status(wrapper.AMDSMI_STATUS_NOT_INIT)
        gpu = next((g for g in self.gpus if g.handle_value == handle.value), None)
        if gpu is None or gpu.lost:
            raise Status(wrapper.AMDSMI_STATUS_NOT_FOUND)
        if fn in gpu.raises:
            error = gpu.raises[fn]
            raise error if isinstance(error, BaseException) else Status(error)
        if fn in gpu.unsupported:
            raise Status(wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
        gpu.run_firmware(self.clock.now)
        return gpu

    def _c_functions(self) -> dict[str, Callable[..., None]]:
        """C name -> fill(gpu or None, *args); raising :class:`Status` answers that status."""

        def init(_: None, flags: int) -> None:
            if self.init_status != SUCCESS:
                raise Status(self.init_status)
            self.initialised += 1

        def shut_down(_: None) -> None:
            if not self.initialised:
                raise Status(wrapper.AMDSMI_STATUS_NOT_INIT)
            self.initialised -= 1

        def fill_handles(count: Any, out: Any, values: list[int]) -> None:
            if isinstance(out, ctypes.Array):
                for i, value in enumerate(values[: len(out)]):
                    out[i] = value
            count._obj.value = len(values)

        def socket_value(gpu: FakeGpu) -> int:
            """A socket handle: the primary partition's handle + 1 (every partition of a GPU shares it)."""
            primary = next(g for g in self.gpus if g.socket == gpu.socket)
            return primary.handle_value + 1

        def socket_handles(_: None, count: Any, out: Any) -> None:
            if not self.initialised:
                raise Status(wrapper.AMDSMI_STATUS_NOT_INIT)
            fill_handles(count, out, list(dict.fromkeys(socket_value(g) for g in self.gpus)))

        def processor_handles(_: None, socket: Any, count: Any, out: Any) -> None:
            gpus = [g for g in self.gpus if socket_value(g) == socket.value]
            fill_handles(count, out, [g.handle_value for g in gpus])

        def asic(g: FakeGpu, out: Any) -> None:
            info = out._obj
            info.market_name = g.market_name.encode()
            info.vendor_id, info.subvendor_id, info.device_id = 0x1002, 0x1002, 0x74A1
            info.vendor_name = b"Advanced Micro Devices Inc. [AMD/ATI]"
            info.asic_serial = f"{0xA1B2C3D4E5F60718 + (g.socket or 0):016X}".encode()
            info.oam_id, info.num_of_compute_units, info.target_graphics_version = g.index, 304, 0x942
            info.subsystem_id = 0x74A1

        def uuid(g: FakeGpu, length: Any, out: Any) -> None:
            out.value = g.uuid.encode()[: length._obj.value - 1]

        def bdf(g: FakeGpu, out: Any) -> None:
            fields = out._obj.struct_amdsmi_bdf_t
            fields.domain_number, fields.bus_number, fields.device_number, fields.function_number = g.bdf

        def driver(g: FakeGpu, out: Any) -> None:
            out._obj.driver_name, out._obj.driver_version = b"amdgpu", g.driver_version.encode()
            out._obj.driver_date = b"2015/01/01 00:00"

        def enumeration(g: FakeGpu, out: Any) -> None:
            info = out._obj
            info.drm_card, info.drm_render, info.hsa_id = g.index, 128 + g.index, g.index + 1
            info.hip_id = U32 if g.hip_id is None else g.hip_id
            info.hip_uuid = f"GPU-{0xA1B2C3D4E5F60718 + g.index:016x}".encode()

        def vram(g: FakeGpu, out: Any) -> None:
            out._obj.vram_total, out._obj.vram_used = g.vram_total_mb, g.vram_used_mb

        def table_values(g: FakeGpu) -> dict[str, int]:
            """One read of the GPU metrics table: its fields the double fills (every other is all ones),
            counted and priced. The socket's power and energy are the primary partition's only, and a
            GPU whose energy count is unsupported has none in its table (amdsmi reads the one from the
            other)."""
            g.table_reads += 1
            burn_cpu(self.table_read_cpu_s)
            values: dict[str, int] = {
                "system_clock_counter": int(self.clock.now * 1e9),
                "average_gfx_activity": g.gfx_activity,
                "average_umc_activity": g.umc_activity,
                **{
                    field: g.clocks_mhz[kind] for kind, field in _TABLE_CLOCKS.items() if kind in g.clocks_mhz
                },
            }
            if g.has_residency:
                values |= {"accumulation_counter": g.accumulation_counter, **g.residency}
            if g.primary:
                values["current_socket_power"] = g.current_socket_power
                values["average_socket_power"] = g.average_socket_power
                if "amdsmi_get_energy_count" not in g.unsupported:
                    values["energy_accumulator"] = g.energy_accumulator
            return values

        def activity(g: FakeGpu, out: Any) -> None:
            """amd_smi.cc: the table's ``average_*_activity``."""
            table, usage = table_values(g), out._obj
            usage.gfx_activity, usage.umc_activity = (
                table["average_gfx_activity"],
                table["average_umc_activity"],
            )
            usage.mm_activity = U16

        def power(g: FakeGpu, out: Any) -> None:
            """amd_smi.cc: the table's socket power (all ones on a secondary partition), the hwmon cap."""
            table, info = table_values(g), out._obj
            current, average = table.get("current_socket_power", U16), table.get("average_socket_power", U16)
            info.current_socket_power, info.average_socket_power = current, average
            info.socket_power = current if current != U16 else average
            info.gfx_voltage, info.soc_voltage, info.mem_voltage = U16, U16, U16
            info.power_limit = g.power_cap_uw // 1_000_000

        def power_cap(g: FakeGpu, sensor: Any, out: Any) -> None:
            info = out._obj
            info.power_cap = info.default_power_cap = info.max_power_cap = g.power_cap_uw
            info.min_power_cap, info.dpm_cap = 0, 2100

        def energy(g: FakeGpu, accumulator: Any, resolution: Any, timestamp: Any) -> None:
            """rocm_smi: the table's accumulator and clock, its resolution a constant (15.3)."""
            table = table_values(g)
            if "energy_accumulator" not in table:
                raise Status(wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
            accumulator._obj.value, resolution._obj.value = table["energy_accumulator"], g.counter_resolution
            timestamp._obj.value = table["system_clock_counter"]

        def temperature(g: FakeGpu, sensor: int, metric: int, out: Any) -> None:
            if sensor not in g.temperatures or metric != amdsmi.AmdSmiTemperatureMetric.CURRENT:
                raise Status(wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
            out._obj.value = g.temperatures[sensor]

        def clock(g: FakeGpu, kind: int, out: Any) -> None:
            """amd_smi.cc: the table's current clock; its range from pp_dpm_* files."""
            if kind not in g.clocks_mhz:
                raise Status(wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
            out._obj.clk, out._obj.min_clk, out._obj.max_clk = table_values(g)[_TABLE_CLOCKS[kind]], 500, 2100
            out._obj.clk_locked, out._obj.clk_deep_sleep = 0, 0

        def violation(g: FakeGpu, out: Any) -> None:
            """amd_smi.cc: all ones, table A, unsupported without accumulators, 100 ms, table B, then
            integer percentages of the residency deltas over the cycle counter's."""
            status = out._obj
            for name, kind in status._fields_:
                if name.startswith(("per_", "acc_", "active_")) and not hasattr(kind, "_length_"):
                    setattr(status, name, U64 if not name.startswith("active_") else 0xFF)
            if not g.has_residency:
                raise Status(wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
            table_values(g)
            before = g.accumulation_counter, dict(g.residency)
            self.clock.sleep(VIOLATION_SLEEP_S)
            g.run_firmware(self.clock.now)
            table_values(g)
            cycles = g.accumulation_counter - before[0]
            status.violation_timestamp = int(self.clock.now * 1e8)  # firmware_timestamp, 10 ns
            status.acc_counter = g.accumulation_counter
            for residency, reason in _VIOLATION_OF.items():
                setattr(status, f"acc_{reason}", g.residency[residency])
                if cycles > 0:
                    percent = (g.residency[residency] - before[1][residency]) * 100 // cycles
                    setattr(status, f"per_{reason}", percent)
                    setattr(status, f"active_{reason}", int(percent > 0))

        # --- amd-alerts: metrics table, ECC, PCIe replays, fan ---
        def metrics(g: FakeGpu, out: Any) -> None:
            table, firmware = out._obj, table_values(g)
            for name, kind in table._fields_:
                if name.startswith("PADDING"):
                    continue
                if _is_int(kind):
                    setattr(table, name, g.metrics.get(name, firmware.get(name, _all_ones(kind))))
                elif hasattr(kind, "_length_") and _is_int(kind._type_):  # an array of numbers
                    values = list(g.metrics.get(name, []))  # type: ignore[call-overload]
                    padding = [_all_ones(kind._type_)] * (kind._length_ - len(values))
                    setattr(table, name, kind(*values, *padding))

        def total_ecc(g: FakeGpu, out: Any) -> None:
            counts = out._obj
            counts.correctable_count, counts.uncorrectable_count = g.ecc_correctable, g.ecc_uncorrectable
            counts.deferred_count = g.ecc_deferred

        def replays(g: FakeGpu, out: Any) -> None:
            out._obj.value = g.pcie_replays

        def fan(g: FakeGpu, sensor: int, out: Any) -> None:
            if g.fan_speed is None or sensor != 0:
                raise Status(wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
            out._obj.value = g.fan_speed

        def fan_max(g: FakeGpu, sensor: int, out: Any) -> None:
            if g.fan_speed is None or sensor != 0:
                raise Status(wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
            out._obj.value = g.fan_speed_max

        def bad_pages(g: FakeGpu, count: Any, records: Any) -> None:
            if records:  # the second call, with room for count._obj.value records
                for record, status in zip(records, g.bad_pages, strict=False):
                    record.page_address, record.page_size, record.status = 0x1000 * status, 4096, status
            count._obj.value = len(g.bad_pages)

        def kfd(g: FakeGpu, out: Any) -> None:
            info = out._obj
            info.kfd_id, info.node_id = 0x1000 + g.index, g.index + 1
            info.current_partition_id = g.partition_id

        # --- end amd-alerts ---
        def process_list(g: FakeGpu, max_processes: Any, out: Any) -> None:
            """amd_smi.cc: the count only when asked for 0 or none run; else up to ``*max_processes``
            entries, ``*max_processes`` set to how many run: OUT_OF_RESOURCES when they did not fit,
            NO_PERM when a process's info could not be read (its entry has no name)."""
            room = max_processes._obj.value
            for process in g.processes:
                process.run(self.clock.now)
            max_processes._obj.value = len(g.processes)
            if room == 0 or not g.processes:
                return
            for entry, process in zip(out, g.processes[:room], strict=False):
                ctypes.memset(ctypes.addressof(entry), 0, ctypes.sizeof(entry))
                entry.pid = process.pid
                entry.memory_usage.vram_mem = process.vram_bytes
                entry.cu_occupancy = U32 if process.cu_occupancy is None else process.cu_occupancy
                if process.readable:
                    entry.name = process.name.encode()
                    entry.mem = process.vram_bytes
                    entry.engine_usage.gfx = process.gfx_ns
            if room < len(g.processes):
                raise Status(wrapper.AMDSMI_STATUS_OUT_OF_RESOURCES)
            if not self.unreadable_listed and not all(process.readable for process in g.processes):
                raise Status(wrapper.AMDSMI_STATUS_NO_PERM)

        per_gpu = {
            "amdsmi_get_gpu_asic_info": asic,
            "amdsmi_get_gpu_device_uuid": uuid,
            "amdsmi_get_gpu_device_bdf": bdf,
            "amdsmi_get_gpu_driver_info": driver,
            "amdsmi_get_gpu_enumeration_info": enumeration,
            "amdsmi_get_gpu_vram_usage": vram,
            "amdsmi_get_gpu_activity": activity,
            "amdsmi_get_power_info": power,
            "amdsmi_get_power_cap_info": power_cap,
            "amdsmi_get_energy_count": energy,
            "amdsmi_get_temp_metric": temperature,
            "amdsmi_get_clock_info": clock,
            "amdsmi_get_violation_status": violation,
            "amdsmi_get_gpu_metrics_info": metrics,
            "amdsmi_get_gpu_total_ecc_count": total_ecc,
            "amdsmi_get_gpu_pci_replay_counter": replays,
            "amdsmi_get_gpu_fan_speed": fan,
            "amdsmi_get_gpu_fan_speed_max": fan_max,
            "amdsmi_get_gpu_bad_page_info": bad_pages,
            "amdsmi_get_gpu_kfd_info": kfd,
            "amdsmi_get_gpu_process_list": process_list,
        }
        system = {
            "amdsmi_init": init,
            "amdsmi_shut_down": shut_down,
            "amdsmi_get_socket_handles": socket_handles,
            "amdsmi_get_processor_handles": processor_handles,
        }
        return {
            **{name: self._system(name, fn) for name, fn in system.items()},
            **{name: self._per_gpu(name, fn) for name, fn in per_gpu.items()},
        }

    def _system(self, name: str, fill: Callable[..., None]) -> Callable[..., int]:
        def c_function(*args: Any) -> int:
            _check_arity(name, args)
            try:
                fill(None, *args)
            except Status as status:
                return status.code
            return SUCCESS

        return c_function

    def _per_gpu(self, name: str, fill: Callable[..., None]) -> Callable[..., int]:
        def c_function(handle: Any, *args: Any) -> int:
            _check_arity(name, (handle, *args))
            try:
                fill(self._gpu(handle, name), *args)
            except Status as status:
                return status.code
            return SUCCESS

        return c_function

    # -- installing -------------------------------------------------------------------------
    @contextlib.contextmanager
    def installed(self) -> Iterator[FakeAmdsmi]:
        """Make ``import amdsmi`` give the package over this double, for the block."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(_in_sys_modules())
            for name, c_function in self._c_functions().items():
                stack.enter_context(mock.patch.object(wrapper, name, c_function))
            stack.enter_context(patched_sdk(amdsmi, _REAL, is_api_function(amdsmi, "amdsmi_"), self.mocks))
            yield self

    def calls(self, name: str) -> int:
        return self.mocks[name].call_count


def _is_int(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, ctypes._SimpleCData) and kind._type_ in "BHILQbhilq"


def _all_ones(kind: Any) -> int:
    """The "not reported" value of an unsigned field: every bit set."""
    return (1 << (8 * ctypes.sizeof(kind))) - 1


def _check_arity(name: str, args: tuple[Any, ...]) -> None:
    """The C signature as the package's wrapper declared it to ctypes."""
    argtypes = getattr(_LIBRARY, name).argtypes
    if argtypes is not None and len(args) != len(argtypes):
        raise TypeError(f"{name} takes {len(argtypes)} arguments, got {len(args)}")


@contextlib.contextmanager
def _in_sys_modules() -> Iterator[None]:
    saved = {name: sys.modules.pop(name) for name in [n for n in sys.modules if _is_amdsmi(n)]}
    sys.modules.update(_MODULES)
    try:
        yield
    finally:
        for name in [n for n in sys.modules if _is_amdsmi(n)]:
            del sys.modules[name]
        sys.modules.update(saved)

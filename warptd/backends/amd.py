"""AMD GPUs through amdsmi (ROCm's amd-smi-lib). amdsmi reports MB, %, W, µW (power cap), µJ ticks,
°C and MHz, with ``"N/A"`` or all-ones sentinels for values a GPU lacks; we convert to base units."""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from warptd.backends.base import AcceleratorBackend
from warptd.backends.cadence import SlowReads
from warptd.backends.shared_session import SharedSession
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.install import install_command
from warptd.models import GPUInfo, LabelledValues, MemoryUsage, Utilization, pci_address
from warptd.sampling.counters import ResidencySeconds

if TYPE_CHECKING:
    from warptd.config import Settings

#: Status codes (``amdsmi_wrapper.AMDSMI_STATUS_*``) by the error kind they mean; the rest are SDK errors.
_STATUS_KINDS: dict[str, ErrorKind] = {
    "AMDSMI_STATUS_NOT_SUPPORTED": ErrorKind.NOT_SUPPORTED,
    "AMDSMI_STATUS_NOT_YET_IMPLEMENTED": ErrorKind.NOT_SUPPORTED,
    "AMDSMI_STATUS_NO_PERM": ErrorKind.PERMISSION,
    "AMDSMI_STATUS_TIMEOUT": ErrorKind.TIMEOUT,
    "AMDSMI_STATUS_NOT_FOUND": ErrorKind.DEVICE_LOST,
    "AMDSMI_STATUS_DRIVER_NOT_LOADED": ErrorKind.DEVICE_LOST,
    "AMDSMI_STATUS_AMDGPU_RESTART_ERR": ErrorKind.DEVICE_LOST,
}
#: Sensors (``AmdSmiTemperatureType`` members) by the names warptd exports.
_TEMPERATURES = {"edge": "EDGE", "junction": "HOTSPOT", "memory": "VRAM"}
_CLOCKS = {"graphics": "GFX", "memory": "MEM"}
#: GPU metrics table throttle residency accumulators (MI300 and newer) by throttle reason, counted in
#: the firmware cycles of its ``accumulation_counter``: PPT is the power cap, socket thermal the
#: firmware's thermal limit, PROCHOT the hardware one. ``amdsmi_get_violation_status`` makes its
#: ``per_*`` percentages from the same fields, but sleeps 100 ms between two table reads to do so.
_RESIDENCIES = {
    "sw_power_cap": "ppt_residency_acc",
    "sw_thermal_slowdown": "socket_thm_residency_acc",
    "hw_thermal_slowdown": "prochot_residency_acc",
    "vr_thermal": "vr_thm_residency_acc",
    "hbm_thermal": "hbm_thm_residency_acc",
}
#: What amdsmi reports as the energy accumulator's resolution (µJ): rocm_smi's ``kEnergyCounterResolution``
#: (15.3F), rounded from the accumulator's real unit, 2^-16 J (kgd_pp_interface.h), which reads 0.27 % high.
_ROUNDED_RESOLUTION_UJ = 15.3
_ENERGY_TICK_UJ = 1e6 / 2**16
#: All-ones values of uint16/32/64 fields that amdsmi passes through for "not reported".
_SENTINELS = frozenset({0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})
#: ``power_cap`` is µW on Linux bare metal but W from the virtualisation-host build (amdsmi.h):
#: no GPU is capped below this many µW (0.1 W), so a smaller number is watts.
_POWER_CAP_MICROWATTS_MIN = 100_000
#: Media-engine activity arrays of the GPU metrics table (% per instance) by the engine label exported.
_ENGINES = {"vcn": "vcn_activity", "jpeg": "jpeg_activity"}
#: ``amdsmi_get_gpu_total_ecc_count`` keys by the ``kind`` exported (deferred errors are not: hardware.md).
_ECC_KINDS = {"corrected": "correctable_count", "uncorrected": "uncorrectable_count"}
#: XGMI per-link accumulators of the GPU metrics table (KB) by direction, from this GPU's side.
_XGMI = {"rx": "xgmi_read_data_acc", "tx": "xgmi_write_data_acc"}
#: amdsmi's KB, like its MB, is binary (the kernel header says "KiloBytes").
_KB = 1024
#: The fan sensor read: amdsmi has no fan count, and boards with fans report them as sensor 0.
_FAN_SENSOR = 0


@dataclass(slots=True)
class AmdDevice:
    """One logical GPU amdsmi has a handle for (a whole GPU, or a partition of one) and what the backend
    keeps about it between samples."""

    handle: Any
    #: The stable identity: the UUID, and for a partition of a GPU ``<uuid>/<partition id>``.
    identity: str | None = None
    #: ``amdsmi_get_gpu_kfd_info``'s ``current_partition_id`` where the GPU is partitioned, else None.
    partition: int | None = None
    hip_id: int | None = None
    fan_max: float | None = None
    #: Throttle seconds by reason, from the metrics table's residency accumulators.
    residency: dict[str, ResidencySeconds] = field(default_factory=dict)
    #: This read's GPU metrics table (``amdsmi_get_gpu_metrics_info``), fetched once in begin_read.
    table: dict[str, Any] = field(default_factory=dict)
    #: ECC and replay counters and the pending-retirement gauge, as last read at the health cadence.
    health: dict[str, LabelledValues] = field(default_factory=dict)
    retirement_pending: float | None = None

    @property
    def primary(self) -> bool:
        """Whether this device reports its GPU's socket-wide values (every unpartitioned GPU, and the
        first partition of a partitioned one): XGMI traffic, ECC, replays, bad pages."""
        return not self.partition


@dataclass
class AmdsmiSession:
    """An initialised amdsmi: the module, the GPU handles, and the error kind of each status code."""

    sdk: ModuleType
    handles: list[Any]
    kinds: dict[int, ErrorKind] = field(default_factory=dict)


def _import_amdsmi() -> ModuleType:
    """amdsmi prints to stdout and raises ``KeyError('libamd_smi.so')`` when the library is missing."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import amdsmi
    except ModuleNotFoundError as exc:
        if exc.name != "amdsmi":
            raise BackendUnavailableError(f"amdsmi import failed: {exc}") from exc
        raise BackendUnavailableError(f"amdsmi is not installed: {install_command('amd')}") from exc
    except Exception as exc:
        raise BackendUnavailableError("libamd_smi.so not found (install ROCm's amd-smi-lib)") from exc
    return amdsmi


def _open() -> AmdsmiSession:
    sdk = _import_amdsmi()
    try:
        sdk.amdsmi_init(sdk.AmdSmiInitFlags.INIT_AMD_GPUS)
    except Exception as exc:
        raise BackendUnavailableError(f"amdsmi_init failed: {_one_line(exc)}") from exc
    try:
        handles = list(sdk.amdsmi_get_processor_handles())
    except Exception as exc:
        _close_sdk(sdk)
        raise BackendUnavailableError(f"amdsmi GPU enumeration failed: {_one_line(exc)}") from exc
    wrapper = sdk.amdsmi_wrapper
    kinds = {getattr(wrapper, n): kind for n, kind in _STATUS_KINDS.items() if hasattr(wrapper, n)}
    return AmdsmiSession(sdk, handles, kinds)


def _close_sdk(sdk: ModuleType) -> None:
    with contextlib.suppress(Exception):
        sdk.amdsmi_shut_down()


#: amdsmi_init/amdsmi_shut_down are process-wide: one session for ``amd`` and its ``amdsmi`` power backend.
_shared: SharedSession[AmdsmiSession] = SharedSession(_open, lambda s: _close_sdk(s.sdk))


def _one_line(exc: BaseException) -> str:
    """AmdSmiLibraryException's text spans lines ("Error code:\\n\\t34 | …")."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _number(value: object) -> float | None:
    """A reported number, or None for amdsmi's ``"N/A"`` and all-ones sentinels."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value in _SENTINELS:
        return None
    return float(value)


def _int(value: object) -> int | None:
    number = _number(value)
    return int(number) if number is not None else None


def _per_instance(values: object, scale: float = 1.0) -> dict[str, float]:
    """A metrics-table array by instance number (``"0"``…), leaving out the "N/A" entries."""
    numbers = [_number(v) for v in values] if isinstance(values, list) else []
    return {str(i): n * scale for i, n in enumerate(numbers) if n is not None}


def _one(value: float | None, *labels: str) -> LabelledValues:
    """One series with these label values, or none for an absent value."""
    return {labels: value} if value is not None else {}


def _reported(metrics: dict[str, LabelledValues]) -> dict[str, LabelledValues]:
    """The metrics that have at least one series: a metric the GPU lacks is absent."""
    return {name: values for name, values in metrics.items() if values}


def _text(value: object) -> str | None:
    """A reported string, or None for amdsmi's ``"N/A"`` and empty strings."""
    if not isinstance(value, str) or value.strip() in ("", "N/A"):
        return None
    return value.strip()


class AmdBackend(AcceleratorBackend):
    """AMD Instinct and Radeon GPUs; handles come from the shared amdsmi session, looked up once."""

    name: ClassVar[str] = "amd"
    source: ClassVar[str] = "amdsmi"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._lease = _shared.lease()
        self._session = self._lease.session
        sdk = self._sdk = self._session.sdk
        self._handles = self._session.handles
        try:
            types, current = sdk.AmdSmiTemperatureType, sdk.AmdSmiTemperatureMetric.CURRENT
            self._temperatures = {sensor: (types[t], current) for sensor, t in _TEMPERATURES.items()}
            self._clocks = {clock: sdk.AmdSmiClkType[kind] for clock, kind in _CLOCKS.items()}
        except (AttributeError, KeyError) as exc:
            self.shutdown()
            raise BackendUnavailableError(f"amdsmi too old: {exc}") from exc
        self._devices = [AmdDevice(handle) for handle in self._handles]
        #: Each handle's PCI address, read once: partitions of one GPU share theirs.
        self._addresses: list[str | None] | None = None
        self._slow_reads = SlowReads(lambda: self.settings)

    def classify_error(self, exc: BaseException) -> ErrorKind:
        sdk = self._sdk
        if isinstance(exc, sdk.AmdSmiLibraryException):
            return self._session.kinds.get(exc.err_code, ErrorKind.SDK_ERROR)
        if isinstance(exc, sdk.AmdSmiParameterException):
            return ErrorKind.UNEXPECTED  # a wrong argument type: our bug, not the GPU's
        if isinstance(exc, sdk.AmdSmiException):
            return ErrorKind.SDK_ERROR
        return super().classify_error(exc)

    def _get(self, index: int, what: str, fn_name: str, *args: object) -> Any:
        fn = getattr(self._sdk, fn_name, None)
        if fn is None:  # an older amdsmi without this function (enumeration info is recent)
            return None
        return self.call(index, what, fn, self._devices[index].handle, *args)

    # -- discovery and identity -------------------------------------------------------------
    def is_available(self) -> bool:
        return self.get_device_count() > 0

    def get_device_count(self) -> int:
        return len(self._handles)

    def get_driver_version(self) -> str | None:
        info = self._get(0, "driver", "amdsmi_get_gpu_driver_info") if self._handles else None
        return _text(info.get("driver_version")) if info else None

    def list_devices(self) -> list[GPUInfo]:
        driver = self.get_driver_version()
        return [self._identify(index, driver) for index in range(len(self._handles))]

    def _identify(self, index: int, driver: str | None) -> GPUInfo:
        device = self._devices[index]
        asic = self._get(index, "asic", "amdsmi_get_gpu_asic_info") or {}
        enumeration = self._get(index, "enumeration", "amdsmi_get_gpu_enumeration_info") or {}
        if (hip_id := _int(enumeration.get("hip_id"))) is not None:
            device.hip_id = hip_id
        gfx = _text(asic.get("target_graphics_version"))
        gfx = gfx if gfx and "ffffffff" not in gfx else None  # "gfx" + hex(UINT64_MAX): unsupported
        uuid = self.device_identity(index)
        extras = {
            "device_id": _text(asic.get("device_id")),
            "serial": _text(asic.get("asic_serial")),
            "compute_units": _int(asic.get("num_compute_units")),
            "hip_id": device.hip_id,
            "partition_id": device.partition,  # the serial and PCI address name the whole GPU
        }
        memory = self.get_memory_usage(index)
        model = _text(asic.get("market_name"))
        return GPUInfo(
            index=index,
            model=f"AMD GPU {model}" if model and model.startswith("0x") else model or "AMD GPU",
            **GPUInfo.memory_fields(memory.total if memory else None),
            uuid=uuid,
            compute_capability=gfx,
            pci_bus_id=self._pci_addresses()[index],
            driver_version=driver,
            extra_metrics={k: v for k, v in extras.items() if v is not None} or None,
        )

    def device_identity(self, index: int) -> str | None:
        """The UUID; for a partition ``<uuid>/<partition id>``: older amdsmi gives every partition of a
        GPU its UUID, and all share its serial and PCI address."""
        device = self._devices[index]
        if device.identity is None:
            uuid = _text(self._get(index, "uuid", "amdsmi_get_gpu_device_uuid"))
            if uuid is None:
                return None
            device.partition = self._partition(index)
            device.identity = uuid if device.partition is None else f"{uuid}/{device.partition}"
        return device.identity

    def _partition(self, index: int) -> int | None:
        """The partition id of a device that shares its PCI address with others, else None."""
        addresses = self._pci_addresses()
        if addresses[index] is None or addresses.count(addresses[index]) < 2:
            return None
        kfd = self._get(index, "kfd", "amdsmi_get_gpu_kfd_info") or {}
        partition = _int(kfd.get("current_partition_id"))
        if partition is not None:
            return partition
        # an amdsmi without the partition id: the order among the handles at that address
        return sum(1 for address in addresses[:index] if address == addresses[index])

    def _pci_addresses(self) -> list[str | None]:
        """Each handle's PCI address, read once all answered (for identity, and ``pci_bus_id``)."""
        if self._addresses is not None:
            return self._addresses
        count = len(self._devices)
        bdfs = [_text(self._get(i, "bdf", "amdsmi_get_gpu_device_bdf")) for i in range(count)]
        addresses = [pci_address(bdf) or bdf if bdf else None for bdf in bdfs]
        if None not in addresses:  # one that failed is asked again next time
            self._addresses = addresses
        return addresses

    def get_pytorch_device_string(self, device_id: int) -> str:
        """ROCm builds of torch call AMD GPUs ``cuda``, numbered in HIP's order."""
        hip_id = self._hip_id(device_id)
        return f"cuda:{device_id if hip_id is None else hip_id}"

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """HIP may number GPUs differently from amdsmi: pin the worker to this GPU's HIP id."""
        hip_id = self._hip_id(info.index)
        if hip_id is None:
            return self.get_pytorch_device_string(info.index), {}
        return "cuda:0", {"HIP_VISIBLE_DEVICES": str(hip_id)}

    def _hip_id(self, index: int) -> int | None:
        """Device ``index``'s HIP id, None where amdsmi did not say (or there is no such device)."""
        return self._devices[index].hip_id if 0 <= index < len(self._devices) else None

    # -- telemetry --------------------------------------------------------------------------
    def get_memory_usage(self, index: int) -> MemoryUsage | None:
        vram = self._get(index, "memory", "amdsmi_get_gpu_vram_usage")
        if vram is None:
            return None
        total, used = _number(vram.get("vram_total")), _number(vram.get("vram_used"))
        if total is None or used is None:
            return None
        total_bytes, used_bytes = int(total) * 2**20, int(used) * 2**20  # MB (MiB) → bytes
        return MemoryUsage(total=total_bytes, used=used_bytes, free=total_bytes - used_bytes)

    def get_utilization(self, index: int) -> Utilization | None:
        activity = self._get(index, "utilization", "amdsmi_get_gpu_activity")
        if activity is None:
            return None
        gfx, umc = _number(activity.get("gfx_activity")), _number(activity.get("umc_activity"))
        if gfx is None and umc is None:
            return None
        return Utilization(
            compute=gfx / 100 if gfx is not None else None, memory=umc / 100 if umc is not None else None
        )

    def get_temperatures(self, index: int) -> dict[str, float]:
        temperatures = {}
        for sensor, (kind, metric) in self._temperatures.items():
            # °C, although amdsmi.h calls the value millidegrees.
            celsius = _number(self._get(index, f"temp_{sensor}", "amdsmi_get_temp_metric", kind, metric))
            if celsius is not None:
                temperatures[sensor] = celsius
        return temperatures

    def get_power_usage(self, index: int) -> float | None:
        """Watts: ``current_socket_power`` on MI300 and newer, ``average_socket_power`` before; the
        field a GPU does not fill is "N/A", all ones or 0."""
        info = self._get(index, "power", "amdsmi_get_power_info")
        if info is None:
            return None
        fields = ("current_socket_power", "average_socket_power")
        return next((w for key in fields if (w := _number(info.get(key)))), None)

    def get_power_limit(self, index: int) -> float | None:
        cap = self._get(index, "power_cap", "amdsmi_get_power_cap_info")
        value = _number(cap.get("power_cap")) if cap else None
        if not value:
            return None
        return value / 1e6 if value >= _POWER_CAP_MICROWATTS_MIN else value

    def get_energy_counter(self, index: int) -> float | None:
        """The raw 64-bit accumulator times its resolution, in J; the sampler handles resets. amdsmi's
        resolution of 15.3 µJ is rounded: the accumulator counts 2^-16 J."""
        count = self._get(index, "energy", "amdsmi_get_energy_count")
        if count is None:
            return None
        ticks = _number(count.get("energy_accumulator", count.get("power")))  # "power" before ROCm 6.1
        resolution = _number(count.get("counter_resolution"))
        if ticks is None or not resolution:
            return None
        if abs(resolution - _ROUNDED_RESOLUTION_UJ) < 1e-3:  # a float32 15.3
            resolution = _ENERGY_TICK_UJ
        return ticks * resolution / 1e6

    def get_clocks(self, index: int) -> dict[str, float]:
        clocks = {}
        for clock, kind in self._clocks.items():
            info = self._get(index, f"clock_{clock}", "amdsmi_get_clock_info", kind)
            mhz = _number(info.get("clk")) if info else None
            if mhz is not None:
                clocks[clock] = mhz * 1e6
        return clocks

    def get_supported_throttle_reasons(self, index: int) -> list[str]:
        return list(self._devices[index].residency)

    def get_throttle_reasons(self, index: int) -> list[str] | None:
        device = self._devices[index]
        if not device.residency or not device.table:  # no table this read: unknown, not "none active"
            return None
        return [reason for reason, counted in device.residency.items() if counted.active]

    def get_throttle_counters(self, index: int) -> dict[str, float]:
        device = self._devices[index]
        if not device.table:
            return {}  # the sampler holds the totals until the table is read again
        return {reason: counted.seconds for reason, counted in device.residency.items()}

    def _count_residency(self, device: AmdDevice) -> None:
        """Throttle seconds from this read's table: the residency accumulators over the cycle counter,
        timed by the table's ``system_clock_counter`` (ns). No table, or none of them: nothing counted."""
        table = device.table
        cycles = _int(table.get("accumulation_counter"))
        if cycles is None:
            return
        stamp = _number(table.get("system_clock_counter"))
        clock = stamp / 1e9 if stamp is not None else time.monotonic()
        for reason, key in _RESIDENCIES.items():
            residency = _int(table.get(key))
            if residency is not None:
                device.residency.setdefault(reason, ResidencySeconds()).update(residency, cycles, clock)

    # -- health, activity and traffic -------------------------------------------------------
    def begin_read(self, index: int, power_only: bool) -> None:
        """One GPU metrics table per full read: throttle residency, engine activities and XGMI counters
        share it. ECC, replays and bad pages are read at the health cadence, by the primary partition."""
        device = self._devices[index]
        if power_only:
            return
        device.table = self._get(index, "metrics_table", "amdsmi_get_gpu_metrics_info") or {}
        self._count_residency(device)
        if device.primary and self._slow_reads.due(index):
            self._read_health(index, device)

    def _read_health(self, index: int, device: AmdDevice) -> None:
        ecc = self._get(index, "ecc", "amdsmi_get_gpu_total_ecc_count") or {}
        errors: LabelledValues = {}
        for kind, key in _ECC_KINDS.items():
            errors |= _one(_number(ecc.get(key)), kind)
        replays = _number(self._get(index, "pcie_replays", "amdsmi_get_gpu_pci_replay_counter"))
        device.health = {
            "warptd_device_ecc_errors_total": errors,
            "warptd_device_pcie_replays_total": _one(replays),
        }
        device.retirement_pending = self._retirement_pending(index)

    def get_gauges(self, index: int) -> dict[str, LabelledValues]:
        device = self._devices[index]
        engines = {
            (engine, instance): percent / 100
            for engine, key in _ENGINES.items()
            for instance, percent in _per_instance(device.table.get(key)).items()
        }
        return _reported(
            {
                "warptd_device_engine_active_ratio": engines,
                "warptd_device_fan_speed_ratio": _one(self._fan_speed(index), str(_FAN_SENSOR)),
                "warptd_device_retired_pages_pending": _one(device.retirement_pending),
            }
        )

    def _fan_speed(self, index: int) -> float | None:
        """Fan speed over its maximum, both on the PWM scale (0..255); the maximum is read once."""
        device = self._devices[index]
        if device.fan_max is None:
            top = _number(self._get(index, "fan_speed_max", "amdsmi_get_gpu_fan_speed_max", _FAN_SENSOR))
            if not top:
                return None  # no fan (NOT_SUPPORTED, remembered by call) or failing now: asked again
            device.fan_max = top
        speed = _number(self._get(index, "fan_speed", "amdsmi_get_gpu_fan_speed", _FAN_SENSOR))
        return speed / device.fan_max if speed is not None else None

    def _retirement_pending(self, index: int) -> float | None:
        """1 while a bad page waits for retirement (it is reserved at the next driver load), else 0."""
        pages = self._get(index, "bad_pages", "amdsmi_get_gpu_bad_page_info")
        if pages is None:
            return None
        if not isinstance(pages, list):  # some releases answer "No bad pages found." instead of []
            return 0.0
        # amdsmi_memory_page_status_t: RESERVED 0, PENDING 1, UNRESERVABLE 2 (amdsmi.h)
        pending = getattr(self._sdk.amdsmi_wrapper, "AMDSMI_MEM_PAGE_STATUS_PENDING", 1)
        return float(any(isinstance(page, dict) and page.get("status") == pending for page in pages))

    def get_counters(self, index: int) -> dict[str, LabelledValues]:
        device = self._devices[index]
        if not device.primary:
            return {}  # socket-wide counters: the primary partition reports them, once
        xgmi = {
            (link, direction): count
            for direction, key in _XGMI.items()
            for link, count in _per_instance(device.table.get(key), _KB).items()
        }
        return _reported({**device.health, "warptd_device_nvlink_bytes_total": xgmi})

    def shutdown(self) -> None:
        self._lease.release()

"""AMD GPUs through amdsmi (ROCm's amd-smi-lib). amdsmi reports MB, %, W, µW (power cap), µJ ticks,
°C and MHz, with ``"N/A"`` or all-ones sentinels for values a GPU lacks; we convert to base units."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from warptd.backends.base import AcceleratorBackend
from warptd.backends.shared_session import SharedSession
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.install import install_command
from warptd.models import GPUInfo, LabelledValues, MemoryUsage, Utilization

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
#: ``amdsmi_get_violation_status`` residency percentages (> 0 means active) by throttle reason:
#: PPT is the power cap, socket thermal the firmware's thermal limit, PROCHOT the hardware one.
_VIOLATIONS = {
    "sw_power_cap": "per_ppt_pwr",
    "sw_thermal_slowdown": "per_socket_thrm",
    "hw_thermal_slowdown": "per_prochot_thrm",
    "vr_thermal": "per_vr_thrm",
    "hbm_thermal": "per_hbm_thrm",
}
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
        self._uuids: dict[int, str] = {}
        self._hip_ids: dict[int, int] = {}
        self._throttle_supported: dict[int, list[str]] = {}
        self._fan_max: dict[int, float] = {}
        #: This read's GPU metrics table (``amdsmi_get_gpu_metrics_info``), fetched once in begin_read.
        self._table: dict[str, Any] = {}

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
        return self.call(index, what, fn, self._handles[index], *args)

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
        asic = self._get(index, "asic", "amdsmi_get_gpu_asic_info") or {}
        enumeration = self._get(index, "enumeration", "amdsmi_get_gpu_enumeration_info") or {}
        if (hip_id := _int(enumeration.get("hip_id"))) is not None:
            self._hip_ids[index] = hip_id
        gfx = _text(asic.get("target_graphics_version"))
        gfx = gfx if gfx and "ffffffff" not in gfx else None  # "gfx" + hex(UINT64_MAX): unsupported
        extras = {
            "device_id": _text(asic.get("device_id")),
            "serial": _text(asic.get("asic_serial")),
            "compute_units": _int(asic.get("num_compute_units")),
            "hip_id": self._hip_ids.get(index),
        }
        memory = self.get_memory_usage(index)
        model = _text(asic.get("market_name"))
        return GPUInfo(
            index=index,
            model=f"AMD GPU {model}" if model and model.startswith("0x") else model or "AMD GPU",
            **GPUInfo.memory_fields(memory.total if memory else None),
            uuid=self.device_identity(index),
            compute_capability=gfx,
            pci_bus_id=_text(self._get(index, "bdf", "amdsmi_get_gpu_device_bdf")),
            driver_version=driver,
            extra_metrics={k: v for k, v in extras.items() if v is not None} or None,
        )

    def device_identity(self, index: int) -> str | None:
        if index not in self._uuids:
            uuid = _text(self._get(index, "uuid", "amdsmi_get_gpu_device_uuid"))
            if uuid is None:
                return None
            self._uuids[index] = uuid
        return self._uuids[index]

    def get_pytorch_device_string(self, device_id: int) -> str:
        """ROCm builds of torch call AMD GPUs ``cuda``, numbered in HIP's order."""
        return f"cuda:{self._hip_ids.get(device_id, device_id)}"

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """HIP may number GPUs differently from amdsmi: pin the worker to this GPU's HIP id."""
        hip_id = self._hip_ids.get(info.index)
        if hip_id is None:
            return self.get_pytorch_device_string(info.index), {}
        return "cuda:0", {"HIP_VISIBLE_DEVICES": str(hip_id)}

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
        """The raw 64-bit accumulator times its resolution (µJ), in J; the sampler handles resets."""
        count = self._get(index, "energy", "amdsmi_get_energy_count")
        if count is None:
            return None
        ticks = _number(count.get("energy_accumulator", count.get("power")))  # "power" before ROCm 6.1
        resolution = _number(count.get("counter_resolution"))
        if ticks is None or not resolution:
            return None
        return ticks * resolution / 1e6

    def get_clocks(self, index: int) -> dict[str, float]:
        clocks = {}
        for clock, kind in self._clocks.items():
            info = self._get(index, f"clock_{clock}", "amdsmi_get_clock_info", kind)
            mhz = _number(info.get("clk")) if info else None
            if mhz is not None:
                clocks[clock] = mhz * 1e6
        return clocks

    def _violations(self, index: int) -> dict[str, float] | None:
        """Violation residency % by reason, for the reasons this GPU reports (MI300 and newer)."""
        status = self._get(index, "violation", "amdsmi_get_violation_status")
        if status is None:
            return None
        percents = {reason: _number(status.get(key)) for reason, key in _VIOLATIONS.items()}
        return {reason: pct for reason, pct in percents.items() if pct is not None}

    def get_supported_throttle_reasons(self, index: int) -> list[str]:
        if index not in self._throttle_supported:
            percents = self._violations(index)
            if percents is None:
                return []  # unsupported (remembered by call) or failing now: asked again next sample
            self._throttle_supported[index] = list(percents)
        return self._throttle_supported[index]

    def get_throttle_reasons(self, index: int) -> list[str] | None:
        percents = self._violations(index)
        if percents is None:
            return None
        return [reason for reason, pct in percents.items() if pct > 0]

    # -- health, activity and traffic -------------------------------------------------------
    def begin_read(self, index: int, power_only: bool) -> None:
        """One GPU metrics table per full read: the engine activities and XGMI counters share it."""
        table = None if power_only else self._get(index, "metrics_table", "amdsmi_get_gpu_metrics_info")
        self._table = table or {}

    def get_gauges(self, index: int) -> dict[str, LabelledValues]:
        engines = {
            (engine, instance): percent / 100
            for engine, key in _ENGINES.items()
            for instance, percent in _per_instance(self._table.get(key)).items()
        }
        return _reported(
            {
                "warptd_device_engine_active_ratio": engines,
                "warptd_device_fan_speed_ratio": _one(self._fan_speed(index), str(_FAN_SENSOR)),
                "warptd_device_retired_pages_pending": _one(self._retirement_pending(index)),
            }
        )

    def _fan_speed(self, index: int) -> float | None:
        """Fan speed over its maximum, both on the PWM scale (0..255); the maximum is read once."""
        if index not in self._fan_max:
            top = _number(self._get(index, "fan_speed_max", "amdsmi_get_gpu_fan_speed_max", _FAN_SENSOR))
            if not top:
                return None  # no fan (NOT_SUPPORTED, remembered by call) or failing now: asked again
            self._fan_max[index] = top
        speed = _number(self._get(index, "fan_speed", "amdsmi_get_gpu_fan_speed", _FAN_SENSOR))
        return speed / self._fan_max[index] if speed is not None else None

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
        ecc = self._get(index, "ecc", "amdsmi_get_gpu_total_ecc_count") or {}
        errors: LabelledValues = {}
        for kind, key in _ECC_KINDS.items():
            errors |= _one(_number(ecc.get(key)), kind)
        replays = _number(self._get(index, "pcie_replays", "amdsmi_get_gpu_pci_replay_counter"))
        xgmi = {
            (link, direction): count
            for direction, key in _XGMI.items()
            for link, count in _per_instance(self._table.get(key), _KB).items()
        }
        return _reported(
            {
                "warptd_device_ecc_errors_total": errors,
                "warptd_device_pcie_replays_total": _one(replays),
                "warptd_device_nvlink_bytes_total": xgmi,
            }
        )

    def shutdown(self) -> None:
        self._lease.release()

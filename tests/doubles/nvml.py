"""The NVML double: a stand-in ``libnvidia-ml.so.1`` (``nvml_double.c``) under the real pynvml.

The tests compile the C library once (gcc, cached under the temp directory by source hash) and hand
it to the real, unmodified nvidia-ml-py as its loaded library (``pynvml.nvmlLib``), so pynvml's own
ctypes structs, versioned names (``nvmlDeviceGetCount_v2``, ``…MemoryInfo_v2``, ``…Processes_v3``)
and error classes run. A daemon in another process uses the same library through
``LD_LIBRARY_PATH`` (:meth:`FakeNvml.environment`): benchmarks then measure warptd, not a double.

The simulated driver's state is a file mapped by both sides (:class:`State`, mirroring
``struct state``). :class:`FakeGpu` reads and writes one GPU of it in NVML's units (bytes, %, °C,
mW, mJ, MHz, ns); a change is seen by the library at once, in any process.

Function names in :attr:`FakeGpu.unsupported`, :attr:`FakeGpu.raises` and :meth:`FakeNvml.calls`
are the library's C symbols (``nvmlInitWithFlags``, ``nvmlDeviceGetHandleByIndex_v2`` …), since
that is the boundary the double sits at.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import mmap
import os
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, MutableMapping
from pathlib import Path
from typing import Any, NamedTuple

import pynvml

GIB = 2**30
SOURCE = Path(__file__).with_name("nvml_double.c")
#: Library builds: today's driver, and an R470-era one without the functions added since.
VARIANTS = {"current": [], "r470": ["-DOLD_DRIVER"]}
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
#: A violation or clock-event counter the GPU does not keep (the library answers NOT_SUPPORTED).
NOT_COUNTED = 2**64 - 1
_UNKNOWN_MEMORY = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
#: The clock-event reason durations the driver keeps, by the state array position they live at: fields
#: 251-253 on an R575/R580 driver, 269-271 from R590, none before (75 aliases the SW thermal one).
CLOCK_EVENT_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
#: The times of the last field batches the double keeps (BATCH_TIMES).
BATCH_TIMES = 64
#: STATE_VERSION of nvml_double.c: the library refuses a state file of another layout.
STATE_VERSION = 8
# The array sizes of nvml_double.c.
MAX_GPUS, MAX_MIG, MAX_EVENTS, MAX_PROCS, MAX_FIELD = 64, 7, 64, 80, 320
POWER_HISTORY, MAX_FN, MAX_SETS = 32, 64, 64
#: The driver refreshes the energy counter and the instant power every 100 ms (REFRESHES_NS: the default).
REFRESH_NS = 100_000_000
ENERGY_ANSWERS = 32  # the energy counter's answers the double keeps for tests
MAX_UTIL_SAMPLES = 128  # nv-processes
MAX_LINKS, MAX_FANS = 18, 4  # nv-health
_U32, _U64, _I32 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
#: Media engines by kind, in the double's order; an H100 or H200 has 7 NVDEC, 7 NVJPG, 1 OFA, no NVENC.
MEDIA_ENGINES = ("nvdec", "nvjpg", "ofa", "nvenc")
H100_MEDIA_ENGINES = {"nvdec": 7, "nvjpg": 7, "ofa": 1, "nvenc": 0}
# --- nv-gpm: GPM counters (struct gpm_counters) ---
GPM_ACTIVE, GPM_LINKS, GPM_METRIC_IDS, GPM_ANSWERS = 31, 18, 480, 8
#: GPM metric id -> its activity counter in struct gpm_counters (gpm_slot() in nvml_double.c).
_GPM_RANGES = (
    (2, 2, 0), (4, 2, 2), (10, 4, 4), (30, 8, 8), (40, 8, 16), (50, 2, 24), (166, 4, 26), (1, 1, 30),
)  # fmt: skip
GPM_SLOTS: dict[int, int] = {
    metric: first_slot + offset
    for first_id, count, first_slot in _GPM_RANGES
    for offset, metric in enumerate(range(first_id, first_id + count))
}
# --- end nv-gpm ---
# --- nv-replay: prices and refresh periods (the GPU's state), and a capture's answers ---
#: CPU µs a call burns, as a real H200 charged it (driver 580.159.04, GSP firmware, nvidia-ml-py 13.615.71;
#: shared/notes/real-h200.md: process CPU time, median of 100 calls from Python); a device call not
#: listed costs DEFAULT_PRICE_US (memory v2, utilization, clocks, temperature, event reasons, P-state,
#: enforced limit, ECC totals: 2-9 µs on the H200). Per-process utilization: 2.1 ms (p90 2.3 ms) for
#: nvmlDeviceGetProcessUtilization answering NOT_FOUND, each call charged, the size query too (the
#: driver's round trip to count the samples); nvmlDeviceGetProcessesUtilizationInfo (R550+), not timed
#: alone there, at the same (warptd with --processes cost about 3 ms a second more per GPU at 1 Hz).
PRICES_US = {
    "nvmlDeviceGetTotalEnergyConsumption": 2900,
    "nvmlDeviceGetViolationStatus": 650,
    "nvmlDeviceGetPcieReplayCounter": 150,
    "nvmlDeviceGetPowerUsage": 2,
    "nvmlGpmSampleGet": 36,
    "nvmlGpmMigSampleGet": 36,
    "nvmlDeviceGetComputeRunningProcesses_v2": 10,
    "nvmlDeviceGetComputeRunningProcesses_v3": 10,
    "nvmlDeviceGetProcessUtilization": 2100,
    "nvmlDeviceGetProcessesUtilizationInfo": 2100,
}
DEFAULT_PRICE_US = 5
#: A field batch costs each firmware query it makes once (the H200 charged per query, not per value),
#: by the double's queries in order (``Q_*`` of nvml_double.c): the energy counter (83, 191), the
#: perf-policy times (74-76 together 0.58 ms), the HW thermal and power-brake durations, ECC (1-6;
#: 1-2 measured, 0.13 ms), PCIe replays (94), field 169, PCIe bytes (197-198 together 0.27 ms), power
#: (185-186 together 7 µs); any other field costs FIELD_PRICE_US (a cached reading).
QUERY_PRICES_US = (2900, 580, 580, 580, 130, 150, 150, 270, 7)
FIELD_QUERIES = ("energy", "perf_policy", "hw_thermal", "power_brake", "ecc", "pcie_replay", "field_169",
                 "pcie_bytes", "power")  # fmt: skip
FIELD_PRICE_US = 2
#: nvmlGpmMetricsGet: about 1.8 ms a sample-and-metrics pair for the ~67 metrics warptd asked then (a CPU
#: profile, not a per-call measurement): a base and a price per metric asked.
GPM_METRICS_BASE_US, GPM_METRIC_PRICE_US = 20, 26
#: How often the driver refreshes (ns): the energy counter, the instant power (186), the 1 s average
#: (185), nvmlDeviceGetPowerUsage (the same average), the GPM counters (nvml.h: at most every 100 ms).
REFRESH_VALUES = ("energy", "power_instant", "power_average", "power_usage", "gpm")
REFRESHES_NS = (100_000_000, 100_000_000, 100_000_000, 50_000_000, 100_000_000)
MAX_REPLAY_FIELDS = 384
# --- end nv-replay ---


def nvml_error(code: int) -> pynvml.NVMLError:
    """The exception pynvml raises for a return code (e.g. NVMLError_NotSupported)."""
    return pynvml.NVMLError(code)


class _PowerPoint(ctypes.Structure):
    _fields_ = [("t_ns", _U64), ("mw", _U32), ("pad", _U32)]


class _Event(ctypes.Structure):
    _fields_ = [("type", _U64), ("data", _U64)]


class _Process(ctypes.Structure):
    _fields_ = [("pid", _U32), ("sm", _U32), ("used", _U64)]


# --- nv-processes: per-process utilization samples ---
class _UtilSample(ctypes.Structure):
    _fields_ = [
        ("t_us", _U64),
        ("pid", _U32),
        ("sm", _U32),
        ("mem", _U32),
        ("enc", _U32),
        ("dec", _U32),
        ("pad", _U32),
    ]


class ProcessSample(NamedTuple):
    """One per-process utilization sample as the driver keeps it: CPU time in µs, percents."""

    t_us: int
    pid: int
    sm: int
    mem: int = 0
    enc: int = 0
    dec: int = 0


# --- end nv-processes ---


class GpmCounters(ctypes.Structure):
    """``struct gpm_counters``: cumulative cycles and bytes; the driver's metrics are differences."""

    _fields_ = [
        ("elapsed", _U64),
        ("active", _U64 * GPM_ACTIVE),
        ("pcie", _U64 * 2),  # tx, rx
        ("nvlink", (_U64 * 2) * GPM_LINKS),  # per link: rx, tx
    ]


class _GpmAnswer(ctypes.Structure):
    """``struct gpm_answer``: a metric the driver answers with this value (and SUCCESS)."""

    _fields_ = [("metric_id", _U32), ("pad", _U32), ("value", ctypes.c_double)]


class ReplayField(ctypes.Structure):
    """``struct replay_field`` (nv-replay): a field answered as captured, its counter at ``rate``/s."""

    _fields_ = [
        ("id", _U32),
        ("scope", _U32),
        ("ret", _I32),
        ("type", _U32),
        ("value", _U64),
        ("rate", ctypes.c_double),
    ]


class _EnergyAnswer(ctypes.Structure):
    _fields_ = [("t_ns", _U64), ("mj", _U64)]


class GpuState(ctypes.Structure):
    """``struct gpu`` of nvml_double.c, field for field."""

    _fields_ = [
        ("name", ctypes.c_char * 96),
        ("uuid", ctypes.c_char * 96),
        ("bus_id", ctypes.c_char * 32),
        ("memory_total", _U64),
        ("memory_used", _U64),
        ("memory_reserved", _U64),
        ("util_gpu", _U32),
        ("util_memory", _U32),
        ("temperature", _U32),
        ("memory_temperature", _U32),
        ("power_limit_mw", _U32),
        ("pcie_gen", _U32),
        ("cc_major", _I32),
        ("cc_minor", _I32),
        ("energy_mj", _U64),
        ("power_count", _U32),
        ("power_head", _U32),
        ("power", _PowerPoint * POWER_HISTORY),
        ("clocks_mhz", _U32 * 4),
        ("supported_reasons", _U64),
        ("current_reasons", _U64),
        ("violation_ns", _U64 * 3),
        ("clock_event_ns", _U64 * 3),
        ("supported_events", _U64),
        ("event_head", _U32),
        ("event_tail", _U32),
        ("events", _Event * MAX_EVENTS),
        ("process_count", _U32),
        ("pad0", _U32),
        ("processes", _Process * MAX_PROCS),
        ("mig_mode", _U32),
        ("mig_count", _U32),
        ("mig_uuid", (ctypes.c_char * 96) * MAX_MIG),
        ("handle_error", _I32),
        ("lost", _I32),
        ("hang", _I32),
        ("release", _I32),
        ("live", _I32),
        ("field_latency_us", _I32),
        ("live_since_ns", _U64),
        ("fn_error", _I32 * MAX_FN),
        ("field_unsupported", ctypes.c_uint8 * MAX_FIELD),
        # --- nv-processes ---
        ("util_sample_count", _U32),
        ("util_window_us", _U32),
        ("util_samples", _UtilSample * MAX_UTIL_SAMPLES),
        # --- nv-gpm: GPM and MIG instances ---
        ("gpm_supported", _U32),
        ("pad_gpm", _U32),
        ("gpm", GpmCounters),
        ("mig_gpm", GpmCounters * MAX_MIG),
        ("mig_gi", _U32 * MAX_MIG),
        ("mig_ci", _U32 * MAX_MIG),
        ("mig_memory_total", _U64 * MAX_MIG),
        ("mig_memory_used", _U64 * MAX_MIG),
        ("mig_name", (ctypes.c_char * 96) * MAX_MIG),
        ("gpm_unsupported", ctypes.c_uint8 * GPM_METRIC_IDS),
        ("gpm_metric_max", _U32),  # the driver header's NVML_GPM_METRIC_MAX; 0 = every id known
        ("gpm_refreshed_ns", _U64),  # the driver's last refresh of the counters (CLOCK_MONOTONIC)
        ("gpm_refresh", _U64),
        ("gpm_seen", GpmCounters),
        ("mig_gpm_seen", GpmCounters * MAX_MIG),
        ("gpm_pcie_rate", ctypes.c_double * 2),  # bytes/s: tx, rx
        ("gpm_nvlink_rate", (ctypes.c_double * 2) * GPM_LINKS),  # per link: rx, tx
        ("gpm_rate_since_ns", _U64),  # traffic runs from here (CLOCK_MONOTONIC ns) ...
        ("gpm_rate_until_ns", _U64),  # ... to here (0: on)
        ("gpm_close_pairs", _U64),  # nvmlGpmMetricsGet calls on samples under 100 ms apart
        ("gpm_answer_count", _U32),
        ("pad_gpm_answer", _U32),
        ("gpm_answers", _GpmAnswer * GPM_ANSWERS),
        # --- nv-health: health, traffic and the rest of nvidia-smi ---
        ("ecc_volatile", _U64 * 2),
        ("ecc_aggregate", _U64 * 2),
        ("pcie_bytes", _U64 * 2),
        ("nvlink_errors", (_U64 * 4) * MAX_LINKS),
        ("nvlink_kib", (_U64 * 2) * MAX_LINKS),
        ("retires_pages", _U32),
        ("remapped", _U32 * 4),
        ("retired", _U32 * 3),
        ("pcie_replays", _U32),
        ("recovery_action", _U32),
        ("nvlink_count", _U32),
        ("fan_count", _U32),
        ("fan_percent", _U32 * MAX_FANS),
        ("encoder_util", _U32),
        ("decoder_util", _U32),
        ("pstate", _U32),
        ("nv_health_pad", _U32),
        ("nvlink_error_code", _I32 * MAX_LINKS),  # per link: nvmlDeviceGetNvLinkErrorCounter's answer
        # --- end nv-health ---
        ("power_smoothing", _U32),  # the power-smoothing fields answer; 0: NOT_SUPPORTED (an H200)
        ("energy_call_offset_mj", _I32),  # the call answers this beyond field 83; 0: the same counter
        ("media_engines", _U32 * 4),  # NVDEC, NVJPG, OFA, NVENC the GPU has (its whole-GPU profile's)
        ("energy_answer_head", _U32),  # the energy counter's answers, newest at head - 1
        ("pad_answers", _U32),
        ("energy_answers", _EnergyAnswer * ENERGY_ANSWERS),
        ("module_power_mw", _U32),  # fields 185/186 at scopeId 1 (a Grace Hopper module); 0: NOT_SUPPORTED
        ("memory_power_mw", _U32),  # at scopeId 2 (the memory); 0: NOT_SUPPORTED
        ("average_lag_ms", _U32),  # the 1 s average ends this many ms before its refresh
        ("pad_lag", _U32),
        ("driver_loaded_ns", _U64),  # CLOCK_BOOTTIME of the driver's last initialisation of the GPU
        ("jpeg_util", _U32),  # nvmlDeviceGetJpgUtilization: percent, every NVJPG averaged
        ("ofa_util", _U32),  # nvmlDeviceGetOfaUtilization: percent, every OFA averaged
        ("batch_head", _U32),  # the times of the last field batches, newest at head - 1
        ("pad_batches", _U32),
        ("batch_ns", _U64 * BATCH_TIMES),
        # --- nv-replay: prices, refresh periods, a capture's answers (nvml_double.c says each) ---
        ("price_us", _U32 * MAX_FN),
        ("query_price_us", _U32 * 16),
        ("field_price_us", _U32 * MAX_FIELD),
        ("gpm_metrics_base_us", _U32),
        ("gpm_metric_price_us", _U32),
        ("refresh_ns", _U64 * len(REFRESHES_NS)),
        ("latency_of_us", _I32 * MAX_FIELD),
        ("energy_rate_mw", _U32),
        ("average_mw", _U32),
        ("power_usage_mw", _U32),
        ("pci_device_id", _U32),
        ("pci_subsystem_id", _U32),
        ("replay_field_count", _U32),
        ("replay_since_ns", _U64),
        ("replay_field_first", ctypes.c_uint16 * MAX_FIELD),
        ("replay_fields", ReplayField * MAX_REPLAY_FIELDS),
        ("gpm_replay_ret", (ctypes.c_int16 * GPM_METRIC_IDS) * (1 + MAX_MIG)),
        ("gpm_replay_value", (ctypes.c_double * GPM_METRIC_IDS) * (1 + MAX_MIG)),
        ("field_asked", ctypes.c_uint8 * MAX_FIELD),
        # --- end nv-replay ---
        ("field_answer", _U64 * MAX_FIELD),  # nv-answers: FIELD_ANSWERS
        ("field_answer_type", ctypes.c_uint8 * MAX_FIELD),
    ]


class State(ctypes.Structure):
    """``struct state`` of nvml_double.c."""

    _fields_ = [
        ("magic", _U32),
        ("version", _U32),
        ("gpu_count", _U32),
        ("library_missing", _U32),
        ("init_error", _I32),
        ("pad", _I32),
        ("driver_version", ctypes.c_char * 80),
        ("order", _I32 * MAX_GPUS),
        ("calls", _U64 * MAX_FN),
        ("use_after_free", _U64),
        ("initialised", ctypes.c_int64),
        ("gpus", GpuState * MAX_GPUS),
        # --- nv-replay: the library's own versions ---
        ("nvml_version", ctypes.c_char * 80),
        ("cuda_driver_version", _I32),
        ("pad_replay", _I32),
        # --- end nv-replay ---
    ]


# -- building and loading the library ---------------------------------------------------------------
def library_path(variant: str = "current") -> Path:
    """Compile the stand-in library once per source version and variant; return its path."""
    digest = hashlib.sha256(SOURCE.read_bytes() + repr(VARIANTS[variant]).encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"warptd-nvml-double-{digest}" / variant / "libnvidia-ml.so.1"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{os.getpid()}.so")
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", *VARIANTS[variant],
             "-Wl,-soname,libnvidia-ml.so.1", "-Wl,-Bsymbolic", "-o", str(partial), str(SOURCE)],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        os.replace(partial, path)
    return path


# --- nv-replay: a driver whose library lacks some functions ---
def without(symbols: Iterable[str]) -> str:
    """The variant of the library that does not export ``symbols`` (a driver without them: nvidia-ml-py
    then answers NVML_ERROR_FUNCTION_NOT_FOUND, as it does for the OLD_DRIVER build's), hidden by a
    linker version script; "current" where there are none."""
    names = sorted(set(symbols))
    if not names:
        return "current"
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:12]
    variant = f"without-{digest}"
    if variant not in VARIANTS:
        script = Path(tempfile.gettempdir()) / f"warptd-nvml-double-hidden-{digest}.map"
        if not script.exists():
            partial = script.with_name(f".{os.getpid()}.{script.name}")
            partial.write_text("{\n  global: *;\n  local: " + "; ".join(names) + ";\n};\n")
            os.replace(partial, script)
        VARIANTS[variant] = [f"-Wl,--version-script={script}"]
    return variant


# --- end nv-replay ---
_LIBRARIES: dict[str, ctypes.CDLL] = {}


def load(variant: str = "current") -> ctypes.CDLL:
    """The library, loaded once per process and variant, with its control functions typed."""
    if variant not in _LIBRARIES:
        library = ctypes.CDLL(str(library_path(variant)))
        library.double_attach.argtypes = [ctypes.c_char_p]
        library.double_state_size.restype = ctypes.c_size_t
        library.double_function_name.restype = ctypes.c_char_p
        library.double_event_set.restype = ctypes.c_void_p
        library.double_event_mask.restype = ctypes.c_uint64
        library.double_gpm_live.restype = ctypes.c_int  # nv-gpm
        if library.double_state_size() != ctypes.sizeof(State):
            raise AssertionError("tests/doubles/nvml.py State does not match struct state in nvml_double.c")
        _LIBRARIES[variant] = library
    return _LIBRARIES[variant]


def _function_ids() -> dict[str, int]:
    library = load()
    return {library.double_function_name(i).decode(): i for i in range(library.double_function_count())}


def environment(state_path: str, driver: str = "current") -> dict[str, str]:
    """Environment for a daemon in another process: its pynvml loads the library, which maps the
    simulated driver's state at ``state_path`` (one written earlier: the same driver, loaded on)."""
    directory = str(library_path(driver).parent)
    paths = [directory, *filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":"))]
    return {"LD_LIBRARY_PATH": ":".join(paths), "WARPTD_NVML_DOUBLE_STATE": state_path}


def reload_driver(path: str) -> None:
    """A driver reload on the driver that daemons in other processes load (``path``: the state file
    of bench/double_daemon.py's ``NVML_DOUBLE_DRIVER``): every GPU's counters restart, as
    :meth:`FakeGpu.reload_driver` does to one."""
    with open(path, "r+b") as handle, mmap.mmap(handle.fileno(), ctypes.sizeof(State)) as mapped:
        state = State.from_buffer(mapped)
        for position in range(state.gpu_count):
            gpu = object.__new__(FakeGpu)
            object.__setattr__(gpu, "state", state.gpus[state.order[position]])
            gpu.reload_driver()
            del gpu
        del state  # no view of the map may outlive it


# -- one GPU ---------------------------------------------------------------------------------------
class _Flag:
    """A 0/1 field of the shared state with a ``threading.Event``-like face (``hang``, ``release``)."""

    def __init__(self, gpu: FakeGpu, name: str) -> None:
        self._gpu, self._name = gpu, name

    def set(self) -> None:
        setattr(self._gpu.state, self._name, 1)

    def clear(self) -> None:
        setattr(self._gpu.state, self._name, 0)

    def is_set(self) -> bool:
        return bool(getattr(self._gpu.state, self._name))


class _ReturnCodes(MutableMapping[str, Any]):
    """Function name -> the return code it answers on this GPU (an int or an ``NVMLError``)."""

    def __init__(self, gpu: FakeGpu, only: int | None = None) -> None:
        self._gpu, self._only = gpu, only

    def _id(self, name: str) -> int:
        ids = _function_ids()
        if name not in ids:
            raise KeyError(f"libnvidia-ml double has no function {name}: use the C symbol ({sorted(ids)})")
        return ids[name]

    def _codes(self) -> dict[str, int]:
        codes = self._gpu.state.fn_error
        wanted = (lambda code: code != 0) if self._only is None else (lambda code: code == self._only)
        return {name: codes[i] for name, i in _function_ids().items() if wanted(codes[i])}

    def __getitem__(self, name: str) -> int:
        return self._codes()[name]

    def __setitem__(self, name: str, code: int | pynvml.NVMLError) -> None:
        self._gpu.state.fn_error[self._id(name)] = code.value if isinstance(code, pynvml.NVMLError) else code

    def __delitem__(self, name: str) -> None:
        self._gpu.state.fn_error[self._id(name)] = 0

    def __iter__(self) -> Iterator[str]:
        return iter(self._codes())

    def __len__(self) -> int:
        return len(self._codes())

    def add(self, name: str) -> None:  # the set face of ``unsupported``
        self[name] = self._only or pynvml.NVML_ERROR_NOT_SUPPORTED

    def discard(self, name: str) -> None:
        if name in self:
            del self[name]


class _ArrayMap(MutableMapping[Any, int]):
    """A fixed C array seen as a mapping; ``absent`` marks a key the GPU does not have."""

    def __init__(self, array: Any, keys: dict[Any, int], absent: int) -> None:
        self._array, self._keys, self._absent = array, keys, absent

    def __getitem__(self, key: Any) -> int:
        if key not in self._keys or self._array[self._keys[key]] == self._absent:
            raise KeyError(key)
        return self._array[self._keys[key]]

    def __setitem__(self, key: Any, value: int) -> None:
        self._array[self._keys[key]] = value

    def __delitem__(self, key: Any) -> None:
        self._array[self._keys[key]] = self._absent

    def __iter__(self) -> Iterator[Any]:
        return (k for k, i in self._keys.items() if self._array[i] != self._absent)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _EventQueue:
    """The driver's event queue of one GPU: ``append((nvmlEventType…, data))`` raises an event."""

    def __init__(self, gpu: FakeGpu) -> None:
        self._gpu = gpu

    def append(self, event: tuple[int, int]) -> None:
        state = self._gpu.state
        if state.event_tail - state.event_head >= MAX_EVENTS:
            raise AssertionError("the double's event queue is full")
        slot = state.events[state.event_tail % MAX_EVENTS]
        slot.type, slot.data = event
        state.event_tail += 1  # published last: the library reads tail, then the entry

    def extend(self, events: Iterable[tuple[int, int]]) -> None:
        for event in events:
            self.append(event)

    def __iadd__(self, events: Iterable[tuple[int, int]]) -> _EventQueue:
        self.extend(events)
        return self

    def __len__(self) -> int:
        return self._gpu.state.event_tail - self._gpu.state.event_head


_SCALARS = (
    "memory_total", "memory_used", "memory_reserved", "util_gpu", "util_memory", "temperature",
    "memory_temperature", "power_limit_mw", "pcie_gen", "supported_reasons", "current_reasons",
    "supported_events", "handle_error", "mig_mode", "field_latency_us",
    # nv-health
    "retires_pages", "pcie_replays", "recovery_action", "nvlink_count", "encoder_util", "decoder_util",
    "pstate", "power_smoothing", "module_power_mw", "memory_power_mw", "average_lag_ms", "jpeg_util",
    "ofa_util",
)  # fmt: skip
#: nv-health: the health and traffic arrays of ``struct gpu``, read and written in place
#: (``gpu.ecc_volatile[1] = 2``): ECC SBE/DBE, remapped rows (cor, unc, pending, failure), retired pages
#: (SBE, DBE, pending), PCIe bytes (tx, rx), NVLink errors [link][crc_flit, crc_data, replay, recovery],
#: NVLink KiB [link][tx, rx], fan percent, and per link the return code nvmlDeviceGetNvLinkErrorCounter
#: answers instead of its count (``gpu.nvlink_error_code[14] = NVML_ERROR_NOT_SUPPORTED``; 0: the count).
_ARRAYS = (
    "ecc_volatile", "ecc_aggregate", "remapped", "retired", "pcie_bytes", "nvlink_errors", "nvlink_kib",
    "fan_percent", "nvlink_error_code", "field_answer",
)  # fmt: skip
#: nv-answers: the fields the double answers as given, by id (at scope 0), where it models no state of
#: their own: (nvmlValueType_t, the value each GPU starts at). ``gpu.field_answer[id] = n`` changes one
#: GPU's answer; ``gpu.unsupported_fields`` and an older driver's NVML_FI_MAX still apply.
FIELD_ANSWERS: dict[int, tuple[int, int]] = {
    pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS: (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 12),
}


class FakeGpu:
    """One simulated GPU (an H100 SXM by default). Attributes read and write the shared state."""

    def __init__(  # noqa: PLR0917 - one keyword per simulated property, as the old double took
        self,
        index: int = 0,
        name: str = "NVIDIA H100 80GB HBM3",
        uuid: str = "",
        memory_total: int = 80 * GIB,
        memory_used: int = 1 * GIB,
        memory_reserved: int = 534 * 2**20,
        util_gpu: int = 35,
        util_memory: int = 12,
        temperature: int = 41,
        memory_temperature: int = 38,
        power_mw: int = 120_000,
        power_limit_mw: int = 700_000,
        energy_mj: int | None = 5_000_000,
        clocks_mhz: dict[int, int] | None = None,
        supported_reasons: int = ALL_REASONS,
        current_reasons: int = pynvml.nvmlClocksEventReasonGpuIdle,
        violation_ns: dict[int, int] | None = None,
        clock_event_ns: dict[str, int] | None = None,
        compute_capability: tuple[int, int] = (9, 0),
        pcie_gen: int = 5,
        supported_events: int = SUPPORTED_EVENTS,
        processes: list[tuple[int, int | None]] | None = None,
        unsupported: set[str] | None = None,
        unsupported_fields: set[int] | None = None,
        mig_uuids: list[str] | None = None,
        live: bool = False,
    ) -> None:
        self.index = index
        self.state = GpuState()  # private until a FakeNvml places it in the shared file
        self.name = name
        self.uuid = uuid or f"GPU-{index:08x}-1111-2222-3333-{index:012x}"
        self.memory_total, self.memory_used, self.memory_reserved = memory_total, memory_used, memory_reserved
        self.util_gpu, self.util_memory = util_gpu, util_memory
        self.temperature, self.memory_temperature = temperature, memory_temperature
        self.power_limit_mw = power_limit_mw
        self.power_mw = power_mw
        self.energy_mj = energy_mj
        self.clocks_mhz.update(
            clocks_mhz
            if clocks_mhz is not None
            else {
                pynvml.NVML_CLOCK_GRAPHICS: 1980,
                pynvml.NVML_CLOCK_SM: 1980,
                pynvml.NVML_CLOCK_MEM: 2619,
                pynvml.NVML_CLOCK_VIDEO: 1755,
            }
        )
        self.supported_reasons, self.current_reasons = supported_reasons, current_reasons
        for position in range(3):
            self.state.violation_ns[position] = self.state.clock_event_ns[position] = NOT_COUNTED
        self.violation_ns.update(
            violation_ns
            if violation_ns is not None
            else {pynvml.NVML_PERF_POLICY_POWER: 0, pynvml.NVML_PERF_POLICY_THERMAL: 0}
        )
        if clock_event_ns is None:
            clock_event_ns = dict.fromkeys(CLOCK_EVENT_REASONS, 0)
        self.clock_event_ns.update(clock_event_ns)
        self.compute_capability = compute_capability
        self.pcie_gen = pcie_gen
        self.supported_events = supported_events
        self.processes = processes or []
        self.unsupported = unsupported or set()
        self.unsupported_fields = unsupported_fields or set()
        self.mig_uuids = mig_uuids or []
        self.live = live
        self.pci_bus_id = f"00000000:{0x18 + index:02X}:00.0"
        self.gpm_supported = compute_capability >= (9, 0)  # nv-gpm: GPM from Hopper on
        self.nvlink_count = MAX_LINKS  # nv-health: an H100 SXM, without fans, remapping rows
        self.pstate = 0
        self.media_engines = H100_MEDIA_ENGINES
        self.state.driver_loaded_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME)  # loaded now
        self.prices_us = PRICES_US  # nv-replay: the H200's prices and refresh periods
        self.refresh_ns = dict(zip(REFRESH_VALUES, REFRESHES_NS, strict=True))
        for field_id, (value_type, value) in FIELD_ANSWERS.items():
            self.answer_field(field_id, value, value_type)

    def answer_field(
        self, field_id: int, value: int, value_type: int = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    ) -> None:
        """Answer field ``field_id`` (scope 0) with ``value`` of ``value_type`` (nv-answers)."""
        self.state.field_answer[field_id] = value
        self.state.field_answer_type[field_id] = value_type + 1

    @classmethod
    def h200(cls, index: int = 0, **properties: Any) -> FakeGpu:
        """An H200 as the real one answered (``shared/notes/real-h200.md``; with driver 580.159.04): no
        NVLink (field 91 and every link's state NOT_SUPPORTED, GPM still answering 0 for 18 links), 7
        NVDEC, 7 NVJPG, 1 OFA and no NVENC (GPM answering 0 for the ones it lacks), no power smoothing."""
        gpu = cls(
            index,
            name="NVIDIA H200",
            memory_total=143_771 * 2**20,
            memory_reserved=645 * 2**20,
            power_limit_mw=700_000,
            **properties,
        )
        gpu.nvlink_count = 0
        return gpu

    def energy_answers(self) -> list[tuple[float, float]]:
        """The energy counter's last answers to reads (field 83 or the call), oldest first, as
        (monotonic seconds, joules): what a daemon read at a window's edges, say."""
        state = self.state
        head = state.energy_answer_head
        kept = [
            state.energy_answers[slot % ENERGY_ANSWERS] for slot in range(max(0, head - ENERGY_ANSWERS), head)
        ]
        return [(answer.t_ns / 1e9, answer.mj / 1000) for answer in kept]

    def batch_times(self) -> list[float]:
        """When the last field batches were read (monotonic seconds), oldest first: what a reader's
        published values were as of."""
        state = self.state
        head = state.batch_head
        return [state.batch_ns[slot % BATCH_TIMES] / 1e9 for slot in range(max(0, head - BATCH_TIMES), head)]

    def counter_answers(self, since: float, until: float) -> set[float]:
        """What the energy counter answered reads made between two monotonic times (J); with the last
        answer before ``since`` too (a read begun earlier may be the one that answered then)."""
        answers = self.energy_answers()
        before = [joules for at, joules in answers if at < since][-1:]
        return {*before, *(joules for at, joules in answers if since <= at <= until)}

    def counter_deltas(self, start: tuple[float, float], end: tuple[float, float]) -> list[float]:
        """The counter's deltas (J) a measurement may have read at its edges: between any answer while
        it started (monotonic ``start``: asked, answered) and any while it ended (``end``)."""
        return sorted(e - s for s in self.counter_answers(*start) for e in self.counter_answers(*end))

    @property
    def media_engines(self) -> dict[str, int]:
        """The media engines the GPU has, by kind (``nvdec``, ``nvjpg``, ``ofa``, ``nvenc``)."""
        return dict(zip(MEDIA_ENGINES, self.state.media_engines, strict=True))

    @media_engines.setter
    def media_engines(self, counts: dict[str, int]) -> None:
        for position, engine in enumerate(MEDIA_ENGINES):
            self.state.media_engines[position] = counts.get(engine, 0)

    # --- nv-replay: prices and refresh periods -------------------------------------------------------
    @property
    def prices_us(self) -> dict[str, int]:
        """CPU µs each C function burns per call (nvmlDeviceGetFieldValues apart: :attr:`field_prices_us`)."""
        return {name: self.state.price_us[i] for name, i in _function_ids().items()}

    @prices_us.setter
    def prices_us(self, prices: dict[str, int]) -> None:
        """Each function's price: those given, the others DEFAULT_PRICE_US; the field batch's and GPM's
        (by query, field and metric) reset to the H200's."""
        for name, i in _function_ids().items():
            self.state.price_us[i] = prices.get(name, DEFAULT_PRICE_US)
        self.state.price_us[_function_ids()["nvmlDeviceGetFieldValues"]] = 0  # priced by its fields
        self.query_prices_us = dict(zip(FIELD_QUERIES, QUERY_PRICES_US, strict=True))
        for field_id in range(MAX_FIELD):
            self.state.field_price_us[field_id] = FIELD_PRICE_US
            self.state.latency_of_us[field_id] = -1  # the model's latencyUsec
        self.state.gpm_metrics_base_us = GPM_METRICS_BASE_US
        self.state.gpm_metric_price_us = GPM_METRIC_PRICE_US

    @property
    def fields_asked(self) -> set[int]:
        """The field ids some batch asked of this GPU, in any process."""
        return {field_id for field_id, asked in enumerate(self.state.field_asked) if asked}

    @property
    def query_prices_us(self) -> dict[str, int]:
        """A field batch's price per firmware query it makes (:data:`FIELD_QUERIES`), once a batch."""
        return dict(zip(FIELD_QUERIES, self.state.query_price_us, strict=False))

    @query_prices_us.setter
    def query_prices_us(self, prices: dict[str, int]) -> None:
        for position, query in enumerate(FIELD_QUERIES):
            self.state.query_price_us[position] = prices.get(query, self.state.query_price_us[position])

    @property
    def refresh_ns(self) -> dict[str, int]:
        """How often the driver refreshes each of :data:`REFRESH_VALUES`, in ns."""
        return dict(zip(REFRESH_VALUES, self.state.refresh_ns, strict=True))

    @refresh_ns.setter
    def refresh_ns(self, periods: dict[str, int]) -> None:
        for position, value in enumerate(REFRESH_VALUES):
            self.state.refresh_ns[position] = periods.get(value, self.state.refresh_ns[position])

    # --- end nv-replay ---

    # -- nv-health ----------------------------------------------------------------------------
    @property
    def fans(self) -> list[int]:
        """Fan speeds in percent; an empty list is a board without fans (NOT_SUPPORTED)."""
        return list(self.state.fan_percent[: self.state.fan_count])

    @fans.setter
    def fans(self, percents: list[int]) -> None:
        for fan, percent in enumerate(percents[:MAX_FANS]):
            self.state.fan_percent[fan] = percent
        self.state.fan_count = min(len(percents), MAX_FANS)

    def reload_driver(self) -> None:
        """What a driver reload does to this GPU's counters: the energy counter (mJ since the driver
        was loaded) and the volatile ECC, PCIe and NVLink counts restart from 0; the aggregate
        (lifetime) ECC counts and the remapped rows stay. The only reset a daemon's restart sees."""
        state = self.state
        state.energy_mj, state.live_since_ns = 0, time.monotonic_ns()
        state.driver_loaded_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        ctypes.memset(ctypes.addressof(state.ecc_volatile), 0, ctypes.sizeof(state.ecc_volatile))
        ctypes.memset(ctypes.addressof(state.pcie_bytes), 0, ctypes.sizeof(state.pcie_bytes))
        ctypes.memset(ctypes.addressof(state.nvlink_errors), 0, ctypes.sizeof(state.nvlink_errors))
        ctypes.memset(ctypes.addressof(state.nvlink_kib), 0, ctypes.sizeof(state.nvlink_kib))
        state.pcie_replays = 0

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SCALARS:
            setattr(self.state, name, value)
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:  # only for names not set on the object itself
        if name in _SCALARS or name in _ARRAYS:
            return getattr(self.state, name)
        raise AttributeError(name)

    def place(self, state: GpuState) -> None:
        """Move this GPU into a slot of the shared state (copying what was set so far)."""
        ctypes.memmove(ctypes.addressof(state), ctypes.addressof(self.state), ctypes.sizeof(GpuState))
        object.__setattr__(self, "state", state)

    # -- identity -------------------------------------------------------------------------------
    name = property(lambda s: s.state.name.decode(), lambda s, v: setattr(s.state, "name", v.encode()))
    uuid = property(lambda s: s.state.uuid.decode(), lambda s, v: setattr(s.state, "uuid", v.encode()))
    pci_bus_id = property(
        lambda s: s.state.bus_id.decode(), lambda s, v: setattr(s.state, "bus_id", v.encode())
    )

    @property
    def compute_capability(self) -> tuple[int, int]:
        return self.state.cc_major, self.state.cc_minor

    @compute_capability.setter
    def compute_capability(self, value: tuple[int, int]) -> None:
        self.state.cc_major, self.state.cc_minor = value

    # -- power and energy -----------------------------------------------------------------------
    @property
    def power_mw(self) -> int:
        """The instantaneous draw (NVML_FI_DEV_POWER_INSTANT); nvmlDeviceGetPowerUsage averages it
        over the last second."""
        state = self.state
        return state.power[(state.power_head - 1) % POWER_HISTORY].mw if state.power_count else 0

    @power_mw.setter
    def power_mw(self, milliwatts: int) -> None:
        state, now = self.state, time.monotonic_ns()
        if state.live and state.power_count:  # bank the energy drawn at the old power
            state.energy_mj += int((now - state.live_since_ns) / 1e9 * self.power_mw)
            state.live_since_ns = now
        point = state.power[state.power_head % POWER_HISTORY]
        point.t_ns, point.mw = now, milliwatts
        state.power_head = (state.power_head + 1) % POWER_HISTORY
        state.power_count = min(state.power_count + 1, POWER_HISTORY)

    @property
    def energy_mj(self) -> int | None:
        if self.state.fn_error[_function_ids()["nvmlDeviceGetTotalEnergyConsumption"]]:
            return None
        return self.state.energy_mj

    @energy_mj.setter
    def energy_mj(self, millijoules: int | None) -> None:
        name = "nvmlDeviceGetTotalEnergyConsumption"
        if millijoules is None:
            self.raises[name] = pynvml.NVML_ERROR_NOT_SUPPORTED
        else:
            self.raises.pop(name, None)
            self.state.energy_mj = millijoules
            self.state.live_since_ns = time.monotonic_ns()

    @property
    def energy_call_offset_mj(self) -> int:
        """mJ that ``nvmlDeviceGetTotalEnergyConsumption`` answers beyond field 83, which reads the same
        counter (0, as on a real driver): a driver whose two paths disagree."""
        return self.state.energy_call_offset_mj

    @energy_call_offset_mj.setter
    def energy_call_offset_mj(self, millijoules: int) -> None:
        self.state.energy_call_offset_mj = millijoules

    @property
    def live(self) -> bool:
        """When True, the energy counter advances with wall time at the instantaneous power."""
        return bool(self.state.live)

    @live.setter
    def live(self, value: bool) -> None:
        self.state.live_since_ns, self.state.live = time.monotonic_ns(), int(value)

    # -- mappings and lists over the C arrays -----------------------------------------------------
    @property
    def clocks_mhz(self) -> _ArrayMap:
        return _ArrayMap(self.state.clocks_mhz, {k: k for k in range(4)}, absent=0)

    @property
    def violation_ns(self) -> _ArrayMap:
        """NVML_PERF_POLICY_* -> ns below application clocks (nvmlDeviceGetViolationStatus)."""
        return _ArrayMap(self.state.violation_ns, {k: k for k in range(3)}, absent=NOT_COUNTED)

    @property
    def clock_event_ns(self) -> _ArrayMap:
        """Clock-event reason durations by reason (:data:`CLOCK_EVENT_REASONS`), ns: the fields the
        driver branch numbers them at (251-253 in R575/R580, 269-271 from R590); field 75 is the SW
        thermal one on every branch."""
        positions = {reason: i for i, reason in enumerate(CLOCK_EVENT_REASONS)}
        return _ArrayMap(self.state.clock_event_ns, positions, absent=NOT_COUNTED)

    @property
    def events(self) -> _EventQueue:
        """Events the driver raises, oldest first, as (nvmlEventType…, eventData: the XID)."""
        return _EventQueue(self)

    @events.setter
    def events(self, queue: _EventQueue) -> None:  # ``gpu.events += [...]`` assigns the queue back
        if not isinstance(queue, _EventQueue):
            raise TypeError("append or += events; the queue cannot be replaced")

    @property
    def processes(self) -> list[tuple[int, int | None]]:
        """Running compute processes as (pid, usedGpuMemory bytes, or None where NVML cannot tell)."""
        listed = self.state.processes[: self.state.process_count]
        return [(p.pid, None if p.used == _UNKNOWN_MEMORY else p.used) for p in listed]

    @processes.setter
    def processes(self, processes: list[tuple[int, int | None] | tuple[int, int | None, int]]) -> None:
        """(pid, memory) or (pid, memory, SM percent it keeps busy: its live samples, see
        :attr:`process_window_us`)."""
        if len(processes) > MAX_PROCS:
            raise AssertionError(f"the double holds at most {MAX_PROCS} processes per GPU")
        for slot, (pid, used, *sm) in zip(self.state.processes, processes, strict=False):
            slot.pid, slot.used = pid, _UNKNOWN_MEMORY if used is None else used
            slot.sm = sm[0] if sm else 0
        self.state.process_count = len(processes)

    @property
    def process_window_us(self) -> int:
        """0: the driver answers :attr:`process_samples`. Else it samples live: every this many µs of
        CLOCK_REALTIME it closes a window with one sample per listed process given an SM percent,
        and keeps its last 100 windows."""
        return self.state.util_window_us

    @process_window_us.setter
    def process_window_us(self, window_us: int) -> None:
        self.state.util_window_us = window_us

    # --- nv-processes: what nvmlDeviceGetProcess(es)Utilization(Info) answer ---
    @property
    def process_samples(self) -> list[ProcessSample]:
        """The driver's per-process utilization samples; a read returns those newer than its timestamp."""
        kept = self.state.util_samples[: self.state.util_sample_count]
        return [ProcessSample(s.t_us, s.pid, s.sm, s.mem, s.enc, s.dec) for s in kept]

    @process_samples.setter
    def process_samples(self, samples: Iterable[ProcessSample | tuple[int, ...]]) -> None:
        listed = [ProcessSample(*sample) for sample in samples]
        if len(listed) > MAX_UTIL_SAMPLES:
            raise AssertionError(f"the double holds at most {MAX_UTIL_SAMPLES} utilization samples per GPU")
        for slot, sample in zip(self.state.util_samples, listed, strict=False):
            slot.t_us, slot.pid, slot.sm, slot.mem, slot.enc, slot.dec = sample
        self.state.util_sample_count = len(listed)

    # --- end nv-processes ---

    @property
    def raises(self) -> _ReturnCodes:
        """C function name -> the NVML return code (or NVMLError) it answers on this GPU."""
        return _ReturnCodes(self)

    @property
    def unsupported(self) -> _ReturnCodes:
        """C function names answering NVML_ERROR_NOT_SUPPORTED on this GPU."""
        return _ReturnCodes(self, pynvml.NVML_ERROR_NOT_SUPPORTED)

    @unsupported.setter
    def unsupported(self, names: Iterable[str]) -> None:
        codes = self.unsupported
        for name in list(codes):
            del codes[name]
        for name in names:
            codes.add(name)

    @property
    def unsupported_fields(self) -> set[int]:
        """Field ids whose value carries nvmlReturn NOT_SUPPORTED (e.g. 186 before Ampere)."""
        return {i for i, flag in enumerate(self.state.field_unsupported) if flag}

    @unsupported_fields.setter
    def unsupported_fields(self, fields: Iterable[int]) -> None:
        wanted = set(fields)
        for field_id in range(MAX_FIELD):
            self.state.field_unsupported[field_id] = field_id in wanted

    @property
    def mig_uuids(self) -> list[str]:
        """The ``MIG-…`` UUIDs of this GPU's MIG devices; setting some turns MIG mode on."""
        return [self.state.mig_uuid[i].value.decode() for i in range(self.state.mig_count)]

    @mig_uuids.setter
    def mig_uuids(self, uuids: list[str]) -> None:
        for i, uuid in enumerate(uuids[:MAX_MIG]):
            self.state.mig_uuid[i].value = uuid.encode()
        self.state.mig_count = min(len(uuids), MAX_MIG)
        self.state.mig_mode = int(bool(uuids))

    # --- nv-gpm: GPM and MIG instances ------------------------------------------------------------
    @property
    def gpm_supported(self) -> bool:
        """``nvmlGpmQueryDeviceSupport``'s answer; without it GPM samples answer NOT_SUPPORTED."""
        return bool(self.state.gpm_supported)

    @gpm_supported.setter
    def gpm_supported(self, value: bool) -> None:
        self.state.gpm_supported = int(value)

    @property
    def gpm_metric_max(self) -> int:
        """NVML_GPM_METRIC_MAX of the driver's header (an R525 driver: 98): a request holding a larger
        id fails as a whole with INVALID_ARGUMENT. 0: every id is known."""
        return self.state.gpm_metric_max

    @gpm_metric_max.setter
    def gpm_metric_max(self, value: int) -> None:
        self.state.gpm_metric_max = value

    @property
    def gpm_unsupported(self) -> set[int]:
        """GPM metric ids whose nvmlReturn is NOT_SUPPORTED on this GPU (e.g. links it lacks)."""
        return {i for i, flag in enumerate(self.state.gpm_unsupported) if flag}

    @gpm_unsupported.setter
    def gpm_unsupported(self, metrics: Iterable[int]) -> None:
        wanted = set(metrics)
        for metric in range(GPM_METRIC_IDS):
            self.state.gpm_unsupported[metric] = metric in wanted

    def fail_gpm_metric(self, metric: int, code: int | None) -> None:
        """Metric ``metric`` answers nvmlReturn ``code`` (2-255, e.g. NVML_ERROR_TIMEOUT) in its slot of
        nvmlGpmMetricsGet until called again with None."""
        assert code is None or 1 < code < 256, "the double keeps a metric's return code in one byte"
        self.state.gpm_unsupported[metric] = code or 0

    def answer_gpm_metric(self, metric: int, value: float | None) -> None:
        """Metric ``metric`` answers ``value`` (NaN, negative: a driver answering garbage) with
        NVML_SUCCESS in nvmlGpmMetricsGet until called again with None."""
        state = self.state
        answers = [(a.metric_id, a.value) for a in state.gpm_answers[: state.gpm_answer_count]]
        answers = [(m, v) for m, v in answers if m != metric] + (
            [(metric, value)] if value is not None else []
        )
        assert len(answers) <= GPM_ANSWERS, "the double keeps a few scripted answers per GPU"
        for slot, (metric_id, answer) in enumerate(answers):
            state.gpm_answers[slot].metric_id, state.gpm_answers[slot].value = metric_id, answer
        state.gpm_answer_count = len(answers)

    def gpm_traffic(
        self,
        pcie: tuple[float, float] = (0.0, 0.0),
        nvlink: dict[int, tuple[float, float]] | None = None,
        after: float = 0.0,
        seconds: float | None = None,
    ) -> None:
        """The GPU moves ``pcie`` (tx, rx) and ``nvlink`` {link: (rx, tx)} bytes per second from
        ``after`` seconds from now, for ``seconds`` (None: until called again), in the real time
        (CLOCK_MONOTONIC) the driver's samples are taken at. What ran at the old rates is added to
        the counters. Set it while nothing samples the GPU (the double's writes are not atomic)."""
        state, now = self.state, time.monotonic_ns()
        if state.gpm_rate_since_ns:
            ran = max(0, min(now, state.gpm_rate_until_ns or now) - state.gpm_rate_since_ns) / 1e9
            for direction in range(2):
                state.gpm.pcie[direction] += int(state.gpm_pcie_rate[direction] * ran)
            for link in range(GPM_LINKS):
                for direction in range(2):
                    state.gpm.nvlink[link][direction] += int(state.gpm_nvlink_rate[link][direction] * ran)
        state.gpm_pcie_rate[0], state.gpm_pcie_rate[1] = pcie
        for link in range(GPM_LINKS):
            state.gpm_nvlink_rate[link][0], state.gpm_nvlink_rate[link][1] = (nvlink or {}).get(link, (0, 0))
        start = now + round(after * 1e9)
        state.gpm_rate_since_ns = start
        state.gpm_rate_until_ns = start + round(seconds * 1e9) if seconds is not None else 0

    @property
    def gpm_close_pairs(self) -> int:
        """nvmlGpmMetricsGet calls on two of this GPU's samples under 100 ms apart (nvml.h: the driver
        refreshes its counters at that rate, so such a pair is no valid period)."""
        return self.state.gpm_close_pairs

    def gpm_counters(self, mig: int | None = None) -> GpmCounters:
        """The live GPM counters of the GPU, or of its ``mig``-th MIG device's GPU instance."""
        return self.state.gpm if mig is None else self.state.mig_gpm[mig]

    def advance_gpm(
        self,
        cycles: int = 1_000_000,
        activity: dict[int, float] | None = None,
        pcie: tuple[int, int] = (0, 0),
        nvlink: dict[int, tuple[int, int]] | None = None,
        mig: int | None = None,
    ) -> None:
        """Run the counters on by ``cycles``: each GPM metric id in ``activity`` active for that
        fraction of them; ``pcie`` (tx, rx) and ``nvlink`` {link: (rx, tx)} bytes moved."""
        counters = self.gpm_counters(mig)
        counters.elapsed += cycles
        for metric, fraction in (activity or {}).items():
            counters.active[GPM_SLOTS[metric]] += round(fraction * cycles)
        counters.pcie[0] += pcie[0]
        counters.pcie[1] += pcie[1]
        for link, (rx, tx) in (nvlink or {}).items():
            counters.nvlink[link][0] += rx
            counters.nvlink[link][1] += tx

    def busy_engines(self, busy: dict[str, int], cycles: int = 1_000_000) -> None:
        """The first ``busy[kind]`` media engines of each kind (``nvdec``, ``nvjpg``, ``ofa``, ``nvenc``)
        run flat out for ``cycles`` of the GPM counters, the others idle; and the driver's utilization
        of each kind is what it then reports, the busy ones over every engine of the kind the GPU has,
        in whole percent (2 of 7 NVDECs: 29), as a real GH200's and TU106's were seen to."""
        first = {
            "nvdec": pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL,
            "nvjpg": pynvml.NVML_GPM_METRIC_NVJPG_0_UTIL,
            "ofa": pynvml.NVML_GPM_METRIC_NVOFA_0_UTIL,
            "nvenc": pynvml.NVML_GPM_METRIC_NVENC_0_UTIL,
        }
        engines = self.media_engines
        activity = {first[kind] + i: 1.0 for kind, n in busy.items() for i in range(n)}
        self.advance_gpm(cycles, activity)
        for kind, attribute in (
            ("nvdec", "decoder_util"), ("nvjpg", "jpeg_util"), ("ofa", "ofa_util"), ("nvenc", "encoder_util")
        ):  # fmt: skip
            count = engines[kind]
            setattr(self, attribute, round(100 * busy.get(kind, 0) / count) if count else 0)

    @property
    def mig_devices(self) -> list[FakeMig]:
        """This GPU's MIG devices with their instance ids, profile name and memory."""
        state = self.state
        return [
            FakeMig(
                uuid=uuid,
                gpu_instance=state.mig_gi[i],
                compute_instance=state.mig_ci[i],
                name=state.mig_name[i].value.decode(),
                memory_total=state.mig_memory_total[i],
                memory_used=state.mig_memory_used[i],
            )
            for i, uuid in enumerate(self.mig_uuids)
        ]

    @mig_devices.setter
    def mig_devices(self, devices: list[FakeMig]) -> None:
        state = self.state
        for i, device in enumerate(devices[:MAX_MIG]):
            state.mig_gi[i], state.mig_ci[i] = device.gpu_instance, device.compute_instance
            state.mig_name[i].value = (device.name or f"{self.name} MIG 1g.10gb").encode()
            state.mig_memory_total[i], state.mig_memory_used[i] = device.memory_total, device.memory_used
        self.mig_uuids = [device.uuid for device in devices]

    # -- failure modes --------------------------------------------------------------------------
    @property
    def lost(self) -> bool:
        """Off the bus: every call answers GPU_IS_LOST, and so does nvmlDeviceGetHandleByIndex_v2."""
        return bool(self.state.lost)

    @lost.setter
    def lost(self, value: bool) -> None:
        self.state.lost = int(value)

    @property
    def hang(self) -> _Flag:
        """While set (and ``release`` is not), every call on this GPU blocks, up to 30 s."""
        return _Flag(self, "hang")

    @property
    def release(self) -> _Flag:
        return _Flag(self, "release")


@dataclasses.dataclass
class FakeMig:
    """One MIG device (a compute instance of a GPU instance), as NVML describes it."""

    uuid: str
    gpu_instance: int
    compute_instance: int = 0
    name: str = ""  # what nvmlDeviceGetName answers on its handle; "" = "<GPU name> MIG 1g.10gb"
    memory_total: int = 10 * GIB
    memory_used: int = 0


class _GpuList(list):
    """``FakeNvml.gpus``: reordering, removing or adding GPUs changes what the driver enumerates."""

    def __init__(self, fake: FakeNvml, gpus: Iterable[FakeGpu]) -> None:
        super().__init__(gpus)
        self._fake = fake

    def _changed(self) -> None:
        self._fake.sync()


def _publishing(method: Any) -> Any:
    def mutator(self: _GpuList, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        self._changed()
        return result

    return mutator


for _name in ("append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear",
              "__setitem__", "__delitem__", "__iadd__"):  # fmt: skip
    setattr(_GpuList, _name, _publishing(getattr(list, _name)))


class FakeNvml:
    """The simulated driver: GPUs and driver-wide state in a file shared with the library."""

    def __init__(
        self,
        gpus: list[FakeGpu] | int = 2,
        driver_version: str = "580.65.06",
        driver: str = "current",
        keep: bool = False,
    ) -> None:
        """``driver_version`` picks the branch whose nvml.h numbers the field ids (R580 by default, what
        nvidia-smi 580.65 runs on; see ``numberings`` in nvml_double.c). ``keep``: leave the state file
        when this process ends (a daemon exec'd from it reads it)."""
        self.driver = driver
        self._file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the double
            prefix="warptd-nvml-state-", suffix=".bin", delete=not keep
        )
        self._file.truncate(ctypes.sizeof(State))
        self._map = mmap.mmap(self._file.fileno(), ctypes.sizeof(State))
        self.state = State.from_buffer(self._map)
        self.state.magic, self.state.version = 0x4E564D4C, STATE_VERSION
        self.driver_version = driver_version
        # nv-replay: NVML's and the CUDA driver's versions, as an R580 library answers them
        self.nvml_version = f"13.{driver_version}"
        self.cuda_driver_version = 13000
        self._slots: dict[int, int] = {}  # id(FakeGpu) -> slot
        self._gpus = _GpuList(self, [])
        self.gpus = [FakeGpu(index=i) for i in range(gpus)] if isinstance(gpus, int) else gpus

    @property
    def path(self) -> str:
        return self._file.name

    @property
    def gpus(self) -> _GpuList:
        return self._gpus

    @gpus.setter
    def gpus(self, gpus: Iterable[FakeGpu]) -> None:
        self._gpus = _GpuList(self, gpus)
        self.sync()

    def sync(self) -> None:
        """Publish the GPU list: a new GPU gets a free slot; the order is NVML's enumeration order."""
        used = set(self._slots.values())
        for gpu in self._gpus:
            if id(gpu) not in self._slots:
                slot = next(s for s in range(MAX_GPUS) if s not in used)
                used.add(slot)
                self._slots[id(gpu)] = slot
                gpu.place(self.state.gpus[slot])
        for position, gpu in enumerate(self._gpus):
            self.state.order[position] = self._slots[id(gpu)]
        self.state.gpu_count = len(self._gpus)

    driver_version = property(
        lambda s: s.state.driver_version.decode(),
        lambda s, v: setattr(s.state, "driver_version", v.encode()),
    )
    # --- nv-replay: what nvmlSystemGetNVMLVersion and nvmlSystemGetCudaDriverVersion_v2 answer
    # ("" / 0: NOT_SUPPORTED) ---
    nvml_version = property(
        lambda s: s.state.nvml_version.decode(),
        lambda s, v: setattr(s.state, "nvml_version", v.encode()),
    )
    cuda_driver_version = property(
        lambda s: s.state.cuda_driver_version,
        lambda s, v: setattr(s.state, "cuda_driver_version", v),
    )

    @property
    def library_missing(self) -> bool:
        """nvmlInit answers LIBRARY_NOT_FOUND, as pynvml does when no libnvidia-ml.so.1 loads."""
        return bool(self.state.library_missing)

    @library_missing.setter
    def library_missing(self, value: bool) -> None:
        self.state.library_missing = int(value)

    @property
    def initialised(self) -> int:
        """nvmlInit calls not yet matched by nvmlShutdown."""
        return self.state.initialised

    @property
    def use_after_free(self) -> int:
        """Waits on an event set that the last nvmlShutdown had freed (a crash on a real driver)."""
        return self.state.use_after_free

    @property
    def event_sets(self) -> dict[int, dict[str, int]]:
        """This process's live event sets by address: {GPU uuid: registered event mask}."""
        library, found = load(self.driver), {}
        for i in range(MAX_SETS):
            address = library.double_event_set(i)
            if address:
                masks = {gpu.uuid: library.double_event_mask(i, self._slots[id(gpu)]) for gpu in self._gpus}
                found[address] = {uuid: mask for uuid, mask in masks.items() if mask}
        return found

    @property
    def gpm_samples_live(self) -> int:
        """GPM samples this process allocated and has not freed (nv-gpm)."""
        return load(self.driver).double_gpm_live()

    @staticmethod
    def next_refresh() -> None:
        """Wait for the driver's next refresh of power and energy (every 100 ms of CLOCK_MONOTONIC, as
        a real H200's): what was set before shows in the readings after it."""
        period = REFRESH_NS
        time.sleep((period - time.monotonic_ns() % period) / 1e9 + 0.002)

    def calls(self, name: str) -> int:
        """How often the library's C function ``name`` was called, in every process."""
        return self.state.calls[_function_ids()[name]]

    def total_calls(self) -> int:
        return sum(self.state.calls)

    # -- installing ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def installed(self) -> Iterator[FakeNvml]:
        """Hand the library to the real pynvml as the one it loaded, for the block."""
        library = load(self.driver)
        if library.double_attach(self.path.encode()) != 0:
            raise AssertionError(f"the NVML double could not map {self.path}")
        saved = pynvml.nvmlLib
        pynvml.nvmlLib = library
        pynvml._nvmlGetFunctionPointer_cache.clear()
        try:
            yield self
        finally:
            pynvml.nvmlLib = saved
            pynvml._nvmlGetFunctionPointer_cache.clear()

    def environment(self) -> dict[str, str]:
        """Environment for a daemon in another process: its pynvml loads this library."""
        return environment(self.path, self.driver)

    def close(self) -> None:
        """Remove the state file; the mapping stays valid for a library still attached to it."""
        self._file.close()


@contextlib.contextmanager
def drawing(watts: dict[int, float]) -> Iterator[FakeNvml]:
    """GPUs (by index) drawing these watts, their energy advancing with time (``live``), installed for
    the block and closed after it."""
    fake = FakeNvml([FakeGpu(index=i, power_mw=int(w * 1000), live=True) for i, w in watts.items()])
    with fake.installed():
        yield fake
    fake.close()

"""Real ``nvidia-smi`` output as a capture: ``python -m tests.doubles.from_nvidia_smi FILE -o CAPTURE``.

What nvidia-smi states (:mod:`tests.doubles.nvidia_smi`) becomes the NVML answers it was printed from,
with nvml.h's return codes, units and value types: memory (v2, and v1 whose "used" holds the reserved
memory), power draw and limits (``power.draw`` is ``nvmlDeviceGetPowerUsage``, nvidia-smi's help says,
a 1 s average from Ampere on), clocks, temperatures, the clock-event reasons (the CSV's masks) and their
counters (µs, at the field ids the driver's branch numbers them), ECC, retired pages and remapped rows,
the MIG layout (each device's instances, profile, memory), NVLink presence, the P-state, fans, the media
engines' utilization; "N/A" as NOT_SUPPORTED, "deprecated" as DEPRECATED. A function the driver's
library does not export (its symbol list, recorded with the file or with another of the same driver)
is listed in ``node.absent``: pynvml then answers FUNCTION_NOT_FOUND, as over the real library.

What nvidia-smi does not show is left unknown (``ret: unknown``), never invented: the energy counter,
GPM, the PCIe and NVLink byte counters, per-link errors, event types, the sampling periods. A replay
answers an unknown with the double's model (the H200 of ``shared/notes/real-h200.md``), and the golden
file marks every series resting on one unverified (``warptd/capture/schema.py``). Prices and refresh
periods are the H200's measured ones (:mod:`tests.doubles.real_h200`), named as such in the header.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.doubles import nvidia_smi, real_h200
from tests.doubles.nvidia_smi import Failure, SmiCapture, SmiGpu, Stated
from warptd.backends.nvidia import fields as nvidia_fields
from warptd.capture import schema
from warptd.capture.schema import Call, FieldValue, GpuState
from warptd.metrics import nvidia

TOOL = "tests.doubles.from_nvidia_smi"
SMI = "nvidia-smi"
SYMBOLS = "nvml-symbols"
HEADER = "nvml-h"
#: What each state of the source is called in a capture.
STATES = {"idle": schema.IDLE, "load": schema.LOADED}
#: The C functions warptd's reads, doctor and discovery call (the NVML double's): any of them the
#: driver's library does not export is absent.
CALLED = (
    "nvmlDeviceGetGpuUptime_v1", "nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetJpgUtilization",
    "nvmlDeviceGetOfaUtilization", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetSupportedClocksEventReasons", "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetSupportedClocksThrottleReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetViolationStatus", "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleGet", "nvmlGpmMigSampleGet",
    "nvmlGpmMetricsGet", "nvmlDeviceGetFanSpeed_v2", "nvmlDeviceGetNumFans",
    "nvmlDeviceGetNvLinkErrorCounter", "nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetNVMLVersion",
)  # fmt: skip
# nvml.h values.
_CLOCKS = {"graphics": 0, "sm": 1, "memory": 2, "video": 3}  # nvmlClockType_t
_ULL, _UINT = "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", "NVML_VALUE_TYPE_UNSIGNED_INT"
#: A call's value type as ``warptd capture`` records it: the ctypes type of each output, by ","
#: (``c_ulong`` is ctypes' name of an unsigned long long on Linux).
UINT, ULL, PAIR = "c_uint", "c_ulong", "c_uint,c_uint"
#: nvmlMemory_v2_t's version member (nvml.h: NVML_STRUCT_VERSION(Memory, 2)).
MEMORY_V2 = 0x02000028
#: gpuInstanceId / computeInstanceId of a process on no MIG instance.
NO_INSTANCE = 0xFFFFFFFF
#: Clock-event reason -> its duration field, by the first driver numbering it there (nvml.h): 251-253
#: in R575 and R580 up to 580.65, 269-271 from 580.82 (CUDA 13.0 Update 1); power smoothing at the
#: other range, which a GPU without it (nvidia-smi: "Power Smoothing: N/A") answers NOT_SUPPORTED.
_DURATIONS = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
_SMOOTHING_COUNT = 18
#: NVML_FI_DEV_PERF_POLICY_POWER and _SYNC_BOOST (ns): nvidia-smi's SW power cap and sync boost counters.
_PERF_POLICY = {"sw_power_cap": 74, "sync_boost": 76}
_RECOVERY_ACTIONS = {"None": 0, "Reset": 1, "Reboot": 2, "Drain P2P": 3, "Drain and Reset": 4}
#: GPM arrived with Hopper: nvml.h documents nvmlGpmQueryDeviceSupport's metrics "for Hopper or newer
#: fully supported devices"; an older architecture nvidia-smi names answers isSupportedDevice 0.
_BEFORE_GPM = ("Kepler", "Maxwell", "Pascal", "Volta", "Turing", "Ampere", "Ada Lovelace")


class ConvertError(Exception):
    """A file this converter cannot translate; the message is one line."""


# -- answers ------------------------------------------------------------------------------------------
def _ret(value: Stated[Any]) -> str:
    return value.name if isinstance(value, Failure) else schema.SUCCESS


def call(function: str, value: Stated[Any], kind: str, *args: Any, device: str = schema.GPU) -> Call:
    """``function(args)`` answering what nvidia-smi stated (a failure: its return code, no value)."""
    if isinstance(value, Failure):
        return Call(function=function, device=device, args=args, ret=value.name)
    return Call(function=function, device=device, args=args, ret=schema.SUCCESS, value=value, type=kind)


def unknown(function: str, *args: Any, device: str = schema.GPU) -> Call:
    return Call(function=function, device=device, args=args, ret=schema.UNKNOWN)


def field(
    field_id: int, value: Stated[float], kind: str = _UINT, scope: int = 0, source: str | None = None
) -> FieldValue:
    """Field ``field_id`` answering ``value`` (a failure: its nvmlReturn)."""
    if isinstance(value, Failure):
        return FieldValue(id=field_id, scope=scope, ret=value.name, source=source)
    return FieldValue(id=field_id, scope=scope, ret=schema.SUCCESS, value=value, type=kind, source=source)


def _scaled(value: Stated[float], scale: float) -> Stated[int]:
    """NVML's integer unit of a value nvidia-smi printed in a larger one (W -> mW, µs -> ns)."""
    return value if isinstance(value, Failure) else round(value * scale)


def _all_of(*values: Stated[Any]) -> Stated[list[Any]]:
    """Several outputs of one call: the first failure, else the list."""
    failed = next((v for v in values if isinstance(v, Failure)), None)
    return failed if failed is not None else list(values)


# -- one GPU in one state -----------------------------------------------------------------------------
def _memory(gpu: SmiGpu | nvidia_smi.MigDevice, device: str) -> list[Call]:
    """v2 as stated; v1's "used" holds the reserved memory (the real H200: v1 used 645 MB where v2 said
    used 0, reserved 645 MB), so it is used plus reserved."""
    memory = gpu.memory
    v2 = {
        "version": MEMORY_V2,
        "total": memory.total,
        "reserved": memory.reserved,
        "free": memory.free,
        "used": memory.used,
    }
    calls = [call("nvmlDeviceGetMemoryInfo_v2", _members(v2), "c_nvmlMemory_v2_t", device=device)]
    if isinstance(memory.used, int) and isinstance(memory.reserved, int):
        v1 = {"total": memory.total, "free": memory.free, "used": memory.used + memory.reserved}
        calls.append(call("nvmlDeviceGetMemoryInfo", _members(v1), "c_nvmlMemory_t", device=device))
    return calls


def _members(members: Mapping[str, Stated[Any]]) -> Stated[dict[str, Any]]:
    """A struct's members, or the failure of one the struct could not be filled without."""
    failed = next((v for v in members.values() if isinstance(v, Failure)), None)
    return failed if failed is not None else dict(members)


def _identity_calls(gpu: SmiGpu, uuid: str) -> list[Call]:
    bus_id = gpu.bus_id
    domain, bus, rest = bus_id.split(":")
    device = rest.split(".")[0]
    pci = {
        "busIdLegacy": f"{domain[-4:]}:{bus}:{rest}",
        "domain": int(domain, 16),
        "bus": int(bus, 16),
        "device": int(device, 16),
        "pciDeviceId": _hex(gpu.pci_device_id),
        "pciSubSystemId": _hex(gpu.pci_subsystem_id),
        "busId": bus_id,
    }
    capability = gpu.compute_capability
    major_minor = capability if isinstance(capability, Failure) else [int(p) for p in capability.split(".")]
    return [
        call("nvmlDeviceGetName", gpu.name, "char[]"),
        call("nvmlDeviceGetUUID", uuid, "char[]"),
        call("nvmlDeviceGetPciInfo_v3", _members(pci), "nvmlPciInfo_t"),
        call("nvmlDeviceGetCudaComputeCapability", major_minor, "c_int,c_int"),
        call("nvmlDeviceGetMaxPcieLinkGeneration", gpu.pcie.gen_max, UINT),
    ]


def _hex(text: Stated[str]) -> Stated[int]:
    return text if isinstance(text, Failure) else int(text, 16)


def _sample_calls(gpu: SmiGpu, row_power: Stated[float]) -> list[Call]:
    """What every sample reads: utilization, temperature, power, clocks, reasons, P-state."""
    utilization = {"gpu": gpu.utilization.get("gpu", nvidia_smi.NOT_SUPPORTED)}
    utilization["memory"] = gpu.utilization.get("memory", nvidia_smi.NOT_SUPPORTED)
    events = gpu.clock_events
    calls = [
        call("nvmlDeviceGetUtilizationRates", _members(utilization), "c_nvmlUtilization_t"),
        call(
            "nvmlDeviceGetTemperature",
            gpu.temperatures.get("gpu", nvidia_smi.NOT_SUPPORTED),
            UINT,
            0,
        ),
        call("nvmlDeviceGetPowerUsage", _scaled(row_power, 1000), UINT),
        call("nvmlDeviceGetEnforcedPowerLimit", _scaled(gpu.power.enforced, 1000), UINT),
        *(
            call("nvmlDeviceGetClockInfo", getattr(gpu.clocks, clock), UINT, kind)
            for clock, kind in _CLOCKS.items()
        ),
        call("nvmlDeviceGetPerformanceState", gpu.pstate, UINT),
        call("nvmlDeviceGetSupportedClocksEventReasons", events.supported, ULL),
        call("nvmlDeviceGetCurrentClocksEventReasons", events.active, ULL),
    ]
    return calls


#: NVML_GPU_INSTANCE_PROFILE_1_SLICE (0) to _1_SLICE_REV1 (7): the instance profiles every MIG driver numbers.
_PROFILES = 8
#: nvmlComputeMode_t by nvidia-smi's name of it.
_COMPUTE_MODES = {"Default": 0, "Exclusive_Thread": 1, "Prohibited": 2, "Exclusive_Process": 3}


def _mode_calls(gpu: SmiGpu) -> list[Call]:
    """The modes and limits nvidia-smi shows beside the readings: persistence and compute mode, ECC
    mode, the power limits, the maximum clocks."""
    compute = gpu.compute_mode
    power = gpu.power
    return [
        call("nvmlDeviceGetPersistenceMode", _flag(gpu.persistence_mode), UINT),
        call(
            "nvmlDeviceGetComputeMode",
            compute if isinstance(compute, Failure) else _COMPUTE_MODES[compute],
            UINT,
        ),
        call("nvmlDeviceGetEccMode", _all_of(_flag(gpu.ecc.current), _flag(gpu.ecc.pending)), PAIR),
        call("nvmlDeviceGetPowerManagementLimit", _scaled(power.limit, 1000), UINT),
        call("nvmlDeviceGetPowerManagementDefaultLimit", _scaled(power.default, 1000), UINT),
        call(
            "nvmlDeviceGetPowerManagementLimitConstraints",
            _all_of(_scaled(power.minimum, 1000), _scaled(power.maximum, 1000)),
            PAIR,
        ),
        *(
            call("nvmlDeviceGetMaxClockInfo", getattr(gpu.max_clocks, clock), UINT, kind)
            for clock, kind in _CLOCKS.items()
        ),
    ]


def _slow_calls(gpu: SmiGpu) -> list[Call]:
    """The slow values: MIG mode, fans, the media engines' averages, PCIe replays, remapped rows."""
    mig = _all_of(_flag(gpu.mig_current), _flag(gpu.mig_pending))
    calls = [call("nvmlDeviceGetMigMode", mig, PAIR)]
    fans = gpu.fans_percent
    if isinstance(fans, Failure):  # the first fan's speed failed: whether the board has fans is not said
        calls += [unknown("nvmlDeviceGetNumFans"), call("nvmlDeviceGetFanSpeed_v2", fans, UINT, 0)]
    else:
        calls += [call("nvmlDeviceGetFanSpeed_v2", percent, UINT, fan) for fan, percent in enumerate(fans)]
        calls.append(unknown("nvmlDeviceGetNumFans"))  # -q shows one speed, whatever the board has
    for kind, function in (
        ("encoder", "nvmlDeviceGetEncoderUtilization"),
        ("decoder", "nvmlDeviceGetDecoderUtilization"),
        ("jpeg", "nvmlDeviceGetJpgUtilization"),
        ("ofa", "nvmlDeviceGetOfaUtilization"),
    ):
        percent = gpu.utilization.get(kind, nvidia_smi.NOT_SUPPORTED)
        # [utilization, samplingPeriodUs]: the period is not shown.
        calls.append(
            call(
                function,
                percent if isinstance(percent, Failure) else [percent, None],
                PAIR,
            )
        )
    calls.append(call("nvmlDeviceGetPcieReplayCounter", gpu.pcie.replays, UINT))
    rows = gpu.remapped_rows
    remapped: Stated[list[Any]] = (
        rows
        if isinstance(rows, Failure)
        else _all_of(rows.correctable, rows.uncorrectable, _as_int(rows.pending), _as_int(rows.failure))
    )
    calls.append(call("nvmlDeviceGetRemappedRows", remapped, ",".join([UINT] * 4)))
    return calls


def _flag(value: Stated[bool]) -> Stated[int]:
    return value if isinstance(value, Failure) else int(value)


_as_int = _flag


def _fields(gpu: SmiGpu, branch: tuple[int, int], links: Stated[int] | None) -> list[FieldValue]:
    """The field values nvidia-smi states, at the ids the driver's branch numbers them."""
    ecc, rows = gpu.ecc, gpu.remapped_rows
    found = [
        field(1, _flag(ecc.current)),  # NVML_FI_DEV_ECC_CURRENT
        field(2, _flag(ecc.pending)),
        field(3, ecc.totals["corrected_volatile"], _ULL),  # ECC SBE/DBE, volatile and aggregate totals
        field(4, ecc.totals["uncorrected_volatile"], _ULL),
        field(5, ecc.totals["corrected_aggregate"], _ULL),
        field(6, ecc.totals["uncorrected_aggregate"], _ULL),
        field(29, gpu.retired_pages["single_bit_ecc"]),
        field(30, gpu.retired_pages["double_bit_ecc"]),
        field(31, gpu.retired_pages["pending"]),
        field(82, gpu.temperatures.get("memory", nvidia_smi.NOT_SUPPORTED)),  # NVML_FI_DEV_MEMORY_TEMP
        field(94, gpu.pcie.replays),  # NVML_FI_DEV_PCIE_REPLAY_COUNTER
    ]
    if isinstance(rows, Failure):
        found += [field(field_id, rows) for field_id in (142, 143, 144, 145)]
    else:
        found += [
            field(142, rows.correctable),
            field(143, rows.uncorrectable),
            field(144, _as_int(rows.pending)),
            field(145, _as_int(rows.failure)),
        ]
    # Power (mW): the GPU (scope 0), a Grace Hopper module (1), the memory (2); 185 average, 186 instant.
    for scope, power in ((0, gpu.power), (1, gpu.module_power), (2, gpu.memory_power)):
        found.append(field(185, _scaled(power.average, 1000), scope=scope))
        found.append(field(186, _scaled(power.instant, 1000), scope=scope))
    counters = gpu.clock_events.counters_us
    for reason, field_id in _PERF_POLICY.items():
        found.append(field(field_id, _scaled(counters.get(reason, nvidia_smi.NOT_SUPPORTED), 1000), _ULL))
    durations, smoothing = (251, 256) if branch < (580, 82) else (269, 251)
    if branch >= (575, 0):
        for offset, reason in enumerate(_DURATIONS):
            counted = _scaled(counters.get(reason, nvidia_smi.NOT_SUPPORTED), 1000)
            found.append(field(durations + offset, counted, _ULL))
        if gpu.power_smoothing is nvidia_smi.NOT_SUPPORTED:
            found += [field(smoothing + i, nvidia_smi.NOT_SUPPORTED) for i in range(_SMOOTHING_COUNT)]
    action = gpu.recovery_action
    if branch >= (570, 0):
        found.append(field(230, action if isinstance(action, Failure) else _RECOVERY_ACTIONS[action]))
    if links is not None:
        found.append(field(91, links))  # NVML_FI_DEV_NVLINK_LINK_COUNT
    return found


def _nvlink(smi: SmiCapture, index: int, gpu: SmiGpu) -> tuple[list[Call], Stated[int] | None]:
    """Each link's state where ``nvlink -s`` listed links, NOT_SUPPORTED where it said the GPU has
    none; under MIG, and where all were inactive, what NVML answered is not said (unknown)."""
    state = smi.nvlink[index] if index < len(smi.nvlink) else None
    if state is None or gpu.mig_current is True:
        return [], None
    if isinstance(state.links, Failure):
        if "does not have or support" in state.message:
            return [call("nvmlDeviceGetNvLinkState", state.links, UINT, 0)], None
        return [], None
    calls = [
        call("nvmlDeviceGetNvLinkState", int(speed is not None), UINT, link)
        for link, speed in enumerate(state.links)
    ]
    return calls, len(state.links)


def _mig_calls(gpu: SmiGpu, uuids: Mapping[str, str]) -> list[Call]:
    """Each MIG device as NVML lists it: its handle by index, name ("<GPU> MIG <profile>"), UUID,
    GPU and compute instance, memory."""
    calls = []
    for mig in gpu.mig_devices:
        device = f"mig:{mig.index}"
        calls.append(call("nvmlDeviceGetMigDeviceHandleByIndex", None, "LP_struct_c_nvmlDevice_t", mig.index))
        if mig.profile is not None:
            calls.append(call("nvmlDeviceGetName", f"{gpu.name} MIG {mig.profile}", "char[]", device=device))
        if mig.uuid is not None:
            calls.append(call("nvmlDeviceGetUUID", uuids[mig.uuid], "char[]", device=device))
        calls += [
            call("nvmlDeviceIsMigDeviceHandle", 1, UINT, device=device),
            call("nvmlDeviceGetGpuInstanceId", mig.gpu_instance, UINT, device=device),
            call("nvmlDeviceGetComputeInstanceId", mig.compute_instance, UINT, device=device),
            *_memory(mig, device),
        ]
    return calls


def _processes(gpu: SmiGpu, device_of: Mapping[tuple[int, int], str]) -> tuple[schema.Process, ...]:
    """The compute processes (type C or C+G), each on the MIG device of its instances where it runs
    on one; names as nvidia-smi showed them (the source masked what it masked)."""
    found = []
    for process in _compute(gpu):
        instances = (process.gpu_instance, process.compute_instance)
        memory = process.used_memory
        found.append(
            schema.Process(
                pid=process.pid,
                device=device_of.get(instances, schema.GPU),  # type: ignore[arg-type]
                used_memory=None if isinstance(memory, Failure) else memory,
                name=process.name,
            )
        )
    return tuple(found)


def _compute(gpu: SmiGpu) -> list[nvidia_smi.Process]:
    return [process for process in gpu.processes if "C" in process.kind]


def _process_calls(gpu: SmiGpu) -> list[Call]:
    """``nvmlDeviceGetComputeRunningProcesses_v3`` on the GPU: each compute process, with its MIG
    instances (NO_INSTANCE where it runs on none)."""
    rows = [
        {
            "pid": process.pid,
            "usedGpuMemory": None if isinstance(process.used_memory, Failure) else process.used_memory,
            "gpuInstanceId": _instance(process.gpu_instance),
            "computeInstanceId": _instance(process.compute_instance),
        }
        for process in _compute(gpu)
    ]
    found = [call("nvmlDeviceGetComputeRunningProcesses_v3", rows, "c_nvmlProcessInfo_v2_t[]")]
    if gpu.mig_current is not True:  # nvml.h: the profiles answer NOT_SUPPORTED where MIG mode is off
        found += [
            Call(
                function="nvmlDeviceGetGpuInstanceProfileInfoV",
                args=(profile,),
                ret=schema.NOT_SUPPORTED,
                source=HEADER,
            )
            for profile in range(_PROFILES)
        ]
    if gpu.mig_current is True:  # nvml.h: "On MIG-enabled GPUs, querying process utilization is not
        # currently supported" (both calls)
        found += [
            Call(function=function, args=args, ret=schema.NOT_SUPPORTED, source=HEADER)
            for function, args in (
                ("nvmlDeviceGetProcessesUtilizationInfo", ()),
                ("nvmlDeviceGetProcessUtilization", (0,)),
            )
        ]
    return found


def _instance(value: Stated[int]) -> int:
    return NO_INSTANCE if isinstance(value, Failure) else value


def _unknowns(gpu: SmiGpu) -> list[Call]:
    """What warptd reads that nvidia-smi never shows."""
    calls = [
        unknown("nvmlDeviceGetTotalEnergyConsumption"),
        unknown("nvmlDeviceGetSupportedEventTypes"),
        unknown("nvmlDeviceGetMaxMigDeviceCount"),
        *(unknown("nvmlDeviceGetViolationStatus", policy) for policy in (0, 1, 2)),
    ]
    if gpu.architecture in _BEFORE_GPM:
        calls.append(
            Call(
                function="nvmlGpmQueryDeviceSupport",
                ret=schema.SUCCESS,
                value={"version": 1, "isSupportedDevice": 0},  # NVML_GPM_SUPPORT_VERSION
                type="c_nvmlGpmSupport_t",
                source=HEADER,
            )
        )
    else:
        calls.append(unknown("nvmlGpmQueryDeviceSupport"))
    return calls


def _unknown_fields(branch: tuple[int, int], links: Stated[int] | None) -> list[FieldValue]:
    """Fields warptd asks that nvidia-smi never shows: the energy counter, PCIe bytes, and on a GPU with
    NVLinks each link's error and byte counters (the fields warptd's plan asks of that many links)."""
    unknowns = [(83, 0), (197, 0), (198, 0)]
    if branch < (575, 0):
        unknowns.append((75, 0))
    if isinstance(links, int):
        unknowns += [row.source.key for row in nvidia_fields.nvlink(links)]
    return [FieldValue(id=field_id, scope=scope, ret=schema.UNKNOWN) for field_id, scope in unknowns]


def _unknown_link_calls(links: Stated[int] | None) -> list[Call]:
    """The error counters warptd reads by call, of the links the per-link field ids do not number."""
    if not isinstance(links, int):
        return []
    return [
        unknown("nvmlDeviceGetNvLinkErrorCounter", link, counter)
        for link in range(nvidia.NVLINK_ERROR_LINKS, links)
        for counter in sorted(nvidia.NVLINK_ERROR_COUNTERS.values())
    ]


def _state(smi: SmiCapture, index: int, state: nvidia_smi.SmiState, uuids: Mapping[str, str]) -> GpuState:
    gpu = state.gpus[index]
    branch = _branch(smi.driver_version)
    link_calls, links = _nvlink(smi, index, gpu)
    device_of = {(m.gpu_instance, m.compute_instance): f"mig:{m.index}" for m in gpu.mig_devices}
    return GpuState(
        seconds=0.0,
        load=smi.header.get("load") if state.name == "load" else None,
        calls=(
            *_identity_calls(gpu, uuids[gpu.uuid]),
            *_memory(gpu, schema.GPU),
            *_sample_calls(gpu, gpu.power.usage),
            *_slow_calls(gpu),
            *_mode_calls(gpu),
            *link_calls,
            *_mig_calls(gpu, uuids),
            *_process_calls(gpu),
            *_unknown_link_calls(links),
            *_unknowns(gpu),
        ),
        fields=(*_fields(gpu, branch, links), *_unknown_fields(branch, links)),
        processes=_processes(gpu, device_of),
    )


def _branch(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise ConvertError(f"the driver version {version!r} does not parse") from None


# -- the capture ---------------------------------------------------------------------------------------
def _masked_uuids(smi: SmiCapture) -> dict[str, str]:
    """Each GPU and MIG UUID -> the same masked one wherever it appears, keeping its shape (the source
    masked most; one of its MIG UUIDs came through as it was)."""
    found: dict[str, str] = {}
    for state in smi.states.values():
        for gpu in state.gpus:
            found.setdefault(gpu.uuid, real_h200.masked_uuid("GPU", gpu.index))
            for mig in gpu.mig_devices:
                if mig.uuid is not None:
                    found.setdefault(mig.uuid, real_h200.masked_uuid("MIG", mig.index))
    return found


def _symbols(smi: SmiCapture, siblings: Iterable[Path]) -> tuple[frozenset[str] | None, str]:
    """The symbols of the file's driver: its own, else those recorded with another file of the same
    driver version (the same library); and which file they came from."""
    if smi.symbols is not None:
        return smi.symbols, smi.path.name
    for path in sorted(siblings):
        if path == smi.path or f"__{smi.driver_version}." not in path.name:
            continue
        other = nvidia_smi.parse(path)
        if other.symbols is not None and other.driver_version == smi.driver_version:
            return other.symbols, path.name
    return None, ""


def convert(smi: SmiCapture, siblings: Iterable[Path] = ()) -> schema.Capture:
    """The capture of one nvidia-smi file (``siblings``: other files whose symbol list may be this
    driver's)."""
    if smi.system != "linux":
        raise ConvertError(
            f"{smi.path.name}: only Linux captures translate (a {smi.system} driver answers for its own)"
        )
    if "idle" not in smi.states:
        raise ConvertError(f"{smi.path.name}: no idle state")
    symbols, symbols_file = _symbols(smi, siblings)
    uuids = _masked_uuids(smi)
    gpus = []
    for index, gpu in enumerate(smi.states["idle"].gpus):
        states = {STATES[name]: _state(smi, index, state, uuids) for name, state in smi.states.items()}
        gpus.append(
            schema.Gpu(
                index=index,
                identity=schema.Identity(name=gpu.name, uuid=uuids[gpu.uuid], pci_bus_id=gpu.bus_id),
                states=states,
                prices=real_h200.PRICES,
                refresh=real_h200.REFRESH,
            )
        )
    sources = [
        schema.Source(id=SMI, kind="nvidia-smi", detail=_detail(smi)),
        real_h200.NOTES,
        schema.Source(
            id=HEADER,
            kind="notes",
            detail="NVIDIA's nvml.h (CUDA 13.0 to 13.5): GPM is for Hopper and newer devices (applied where "
            "nvidia-smi names an older architecture); process utilization is not supported on MIG-enabled "
            "GPUs, nor GPU instance profiles where MIG mode is off",
        ),
    ]
    notes = [
        f"Translated from {smi.path.name} ({_detail(smi)}).",
        "Unknown (not shown by nvidia-smi): the energy counter, GPM, PCIe and NVLink byte counters, "
        "per-link NVLink errors, event types, violation reference times, the media engines' sampling "
        "periods, how many fans the board has. A replay answers them with the double's H200 model.",
        "Prices and refresh periods: none measured; the H200's (source h200-notes) stand in.",
        "nvmlDeviceGetPowerUsage is the CSV's power.draw; v1 memory 'used' is v2 used + reserved; "
        "clock-event "
        "counters (µs) are the duration fields (ns) at the ids this driver's nvml.h gives them.",
    ]
    if symbols is None:
        notes.append("Which functions the driver's library exports is not recorded for this driver.")
    else:
        sources.append(
            schema.Source(
                id=SYMBOLS,
                kind="nvidia-smi",
                detail=f"the symbols libnvidia-ml.so.1 of {smi.driver_version} exports, recorded with "
                f"{symbols_file}",
            )
        )
    return schema.Capture(
        header=schema.Header(
            format=schema.FORMAT,
            version=schema.VERSION,
            created=smi.header.get("collected_at", ""),
            tool=TOOL,
            source=SMI,
            sources=tuple(sources),
            masked=("gpu_uuid", "mig_uuid", "serial", "hostname"),
            notes=tuple(notes),
        ),
        node=schema.Node(
            os=smi.header.get("os"),
            driver_version=smi.driver_version,
            cuda_driver_version=smi.cuda_version or None,
            absent=tuple(sorted(f for f in CALLED if symbols is not None and f not in symbols)),
            calls={STATES[name]: _node_calls(smi, len(state.gpus)) for name, state in smi.states.items()},
        ),
        gpus=tuple(gpus),
    )


def _node_calls(smi: SmiCapture, gpus: int) -> tuple[Call, ...]:
    """The driver's version and GPU count; the CUDA driver version as nvmlSystemGetCudaDriverVersion_v2
    answers it (13.1: 13010). nvidia-smi's "NVML version" (590.48) is not the library's own answer
    (the real H200's: 13.580.159.04): unknown."""
    major, _, minor = smi.cuda_version.partition(".")
    cuda: Stated[int] = (
        int(major) * 1000 + int(minor or 0) * 10 if major.isdigit() else nvidia_smi.NOT_SUPPORTED
    )
    return (
        call("nvmlSystemGetDriverVersion", smi.driver_version, "char[]"),
        call("nvmlDeviceGetCount_v2", gpus, UINT),
        call("nvmlSystemGetCudaDriverVersion_v2", cuda, "c_int")
        if major.isdigit()
        else unknown("nvmlSystemGetCudaDriverVersion_v2"),
        unknown("nvmlSystemGetNVMLVersion"),
    )


def _detail(smi: SmiCapture) -> str:
    return (
        f"nvidia-smi {smi.driver_version} on {smi.header.get('os', smi.system)}, "
        f"collected {smi.header.get('collected_at', '?')}, load: {smi.header.get('load', '?')}; "
        "utkuozdemir/nvidia_gpu_exporter internal/captures (MIT), tests/captures/nvidia-smi/"
    )


#: The corpus: its nvidia-smi sources and the captures made of them (``--corpus``).
SOURCES = Path(__file__).parents[1] / "captures" / "nvidia-smi"
CORPUS = SOURCES.parent
#: The H200 of shared/notes/real-h200.md, built from the notes alone.
NOTES_CAPTURE = f"h200-{real_h200.DRIVER}-notes.json"


def corpus_name(smi: SmiCapture) -> str:
    """The corpus's file name of a source's capture: ``h100-mig-590.48.01.json``."""
    model = smi.model.removeprefix("nvidia-").replace("geforce-", "")
    return f"{model}-{smi.driver_version}.json"


def corpus() -> dict[Path, schema.Capture]:
    """Every capture of the corpus built from its sources (the nvidia-smi files, the notes), by path."""
    sources = sorted(SOURCES.glob("*.txt"))
    found = {CORPUS / NOTES_CAPTURE: real_h200.capture()}
    for path in sources:
        smi = nvidia_smi.parse(path)
        found[CORPUS / corpus_name(smi)] = convert(smi, sources)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {TOOL}", description=__doc__.splitlines()[0])
    parser.add_argument(
        "file", type=Path, nargs="?", help="an nvidia-smi capture (tests/captures/nvidia-smi/*.txt)"
    )
    parser.add_argument("-o", "--output", type=Path, help="the capture to write (JSON)")
    parser.add_argument(
        "--corpus",
        action="store_true",
        help=f"translate every source in {SOURCES.relative_to(CORPUS.parents[1])} into the corpus",
    )
    args = parser.parse_args(argv)
    if args.corpus == (args.file is not None) or (args.file is not None) != (args.output is not None):
        parser.error("give FILE -o CAPTURE, or --corpus")
    try:
        if args.corpus:
            written = corpus()
        else:
            smi = nvidia_smi.parse(args.file)
            written = {args.output: convert(smi, args.file.parent.glob("*.txt"))}
    except (ConvertError, OSError, ValueError) as exc:
        print(f"from_nvidia_smi: {exc}", file=sys.stderr)
        return 2
    for path, capture in written.items():
        capture.write(path)
        print(
            f"wrote {path}: {len(capture.gpus)} GPU(s), states {', '.join(capture.states)}; "
            f"{len(capture.unknowns())} unknown answers"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

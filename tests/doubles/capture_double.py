"""A capture (``warptd/capture/schema.py``) as the NVML double's state: the double answers from it.

Each GPU starts as the double's H200 (its model: what the real one answered on driver 580.159.04), and
each answer the capture holds replaces the model's: identity, memory, clocks, temperatures, power, the
clock-event masks, fans, media engines, MIG devices, processes, the NVLinks, ECC and the rest read by
call; every field value by id and scope with its nvmlReturn, valueType and latencyUsec; every GPM metric
per GPU instance with its nvmlReturn. Counters move at the captured rates from the replay's start
(the energy counter at its rate in mJ/s, which is mW; PCIe and NVLink bytes, and any field whose
answers moved); power is the captured instant power, its averages as captured. Each call costs its
captured price and each value refreshes at its captured period; a function the driver's library did
not export is left out of the library build (nvidia-ml-py answers FUNCTION_NOT_FOUND).

An answer the capture marks unknown, or does not hold, is the model's: :class:`Replayed` lists them
(and what the capture holds that the double cannot answer exactly), so a golden file can mark what
rests on them as unverified.
"""

from __future__ import annotations

import ctypes
import math
import struct
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pynvml

from tests.doubles.nvml import (
    GIB,
    MAX_FIELD,
    MAX_LINKS,
    MAX_MIG,
    MAX_REPLAY_FIELDS,
    FakeGpu,
    FakeMig,
    FakeNvml,
    _function_ids,
    without,
)
from warptd.capture import schema

#: The double's media engine kinds by the members of nvmlGpuInstanceProfileInfo_v2_t counting them.
_ENGINE_MEMBERS = {"nvdec": "decoderCount", "nvjpg": "jpegCount", "ofa": "ofaCount", "nvenc": "encoderCount"}
#: The whole-GPU instance profile (NVML_GPU_INSTANCE_PROFILE_7_SLICE), which counts every engine.
_WHOLE_GPU_PROFILE = 4
#: Fields the double's model answers with motion of its own, replayed through it where they succeed:
#: the energy counter (83; its call reads the same counter), the instant power and 1 s average.
_MODELLED_FIELDS = {(83, 0), (185, 0), (186, 0)}
_MEDIA = {
    "nvmlDeviceGetEncoderUtilization": "encoder_util",
    "nvmlDeviceGetDecoderUtilization": "decoder_util",
    "nvmlDeviceGetJpgUtilization": "jpeg_util",
    "nvmlDeviceGetOfaUtilization": "ofa_util",
}
#: nvmlNvLinkErrorCounter_t -> the double's per-link kinds (crc_flit, crc_data, replay, recovery).
_NVLINK_KINDS = {0: 2, 1: 3, 2: 0, 3: 1}
#: The sampling period the double gives live per-process utilization samples (µs).
_PROCESS_WINDOW_US = 166_667
#: What every call this module maps answers on the double; a capture's call of another function is
#: one the double cannot answer as captured (:attr:`Replayed.not_reproduced`).
MAPPED = frozenset(
    {
        "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetName", "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperature", "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetSupportedClocksEventReasons", "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetSupportedClocksThrottleReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetViolationStatus", "nvmlDeviceGetPerformanceState", "nvmlDeviceGetNumFans",
        "nvmlDeviceGetFanSpeed_v2", *_MEDIA, "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkErrorCounter",
        "nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetGpuUptime_v1",
        "nvmlDeviceGetSupportedEventTypes", "nvmlDeviceRegisterEvents",
        "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetProcessUtilization",
        "nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceIsMigDeviceHandle",
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId", "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleGet",
        "nvmlGpmMigSampleGet",
    }
)  # fmt: skip


@dataclass
class Replayed:
    """What a replay answers from the double's model rather than the capture: ``unknown``, the answers
    the capture marks unknown; ``not_reproduced``, captured answers the double cannot give as they
    were (a function it does not have, a code it cannot answer there)."""

    unknown: list[str] = field(default_factory=list)
    not_reproduced: list[str] = field(default_factory=list)


def driver_of(capture: schema.Capture) -> str:
    """The driver version the double reports: the captured one, else the model's."""
    return capture.node.driver_version or "580.159.04"


def fake_nvml(
    capture: schema.Capture, state: str = schema.IDLE, keep: bool = False
) -> tuple[FakeNvml, Replayed]:
    """The double answering ``capture``'s ``state``; ``keep``: its state file outlives this process."""
    if state not in capture.states:
        raise ValueError(
            f"the capture has no {state!r} state on every GPU (it has {', '.join(capture.states)})"
        )
    replayed = Replayed(unknown=capture.unknowns(state))
    gpus = [_gpu(capture, gpu, state, replayed) for gpu in capture.gpus]
    fake = FakeNvml(gpus, driver_of(capture), driver=without(capture.node.absent), keep=keep)
    node = capture.node
    if node.nvml_version is not None or "nvmlSystemGetNVMLVersion" in node.absent:
        fake.nvml_version = node.nvml_version or ""
    if node.cuda_driver_version is not None:
        major, _, minor = node.cuda_driver_version.partition(".")
        fake.cuda_driver_version = int(major) * 1000 + int(minor or 0) * 10
    for gpu in fake.gpus:  # their counters run from now
        gpu.state.replay_since_ns = time.monotonic_ns()
        gpu.live = True
    return fake, replayed


def _gpu(capture: schema.Capture, captured: schema.Gpu, state: str, replayed: Replayed) -> FakeGpu:
    answers = captured.states[state]
    gpu = FakeGpu.h200(captured.index)
    where = f"GPU {captured.index}"
    _Calls(gpu, answers, where, replayed).apply()
    _fields(gpu, answers, where, replayed)
    _gpm(gpu, answers, where, replayed)
    _prices(gpu, captured, driver_of(capture))
    for refresh in captured.refresh:
        if refresh.seconds is not None and refresh.seconds > 0:
            gpu.refresh_ns = {refresh.value: round(refresh.seconds * 1000) * 1_000_000 or 1_000_000}
    return gpu


class _Calls:
    """One GPU's captured calls onto its state, function by function."""

    def __init__(self, gpu: FakeGpu, answers: schema.GpuState, where: str, replayed: Replayed) -> None:
        self.gpu, self.answers, self.where, self.replayed = gpu, answers, where, replayed
        self.by_function: dict[str, list[schema.Call]] = defaultdict(list)
        for call in answers.calls:
            if call.known:
                self.by_function[call.function].append(call)

    def one(self, function: str, *args: Any, device: str = schema.GPU) -> schema.Call | None:
        """The known answer of ``function(args)`` on ``device``; None where not captured."""
        for call in self.by_function.get(function, ()):
            if call.args == args and call.device == device:
                return call
        return None

    def value(self, function: str, *args: Any, device: str = schema.GPU) -> Any:
        call = self.one(function, *args, device=device)
        return call.value if call is not None and call.ok else None

    def lost(self, what: str) -> None:
        self.replayed.not_reproduced.append(f"{self.where}: {what}")

    def apply(self) -> None:
        self._identity()
        self._power_and_readings()
        self._health()
        self._links()
        self._engines()
        self._mig()
        self._processes()
        self._codes()

    def _identity(self) -> None:
        gpu = self.gpu
        if (name := self.value("nvmlDeviceGetName")) is not None:
            gpu.name = name
        if (uuid := self.value("nvmlDeviceGetUUID")) is not None:
            gpu.uuid = uuid
        pci = self.value("nvmlDeviceGetPciInfo_v3")
        if isinstance(pci, dict):
            gpu.pci_bus_id = pci.get("busId") or gpu.pci_bus_id
            gpu.state.pci_device_id = pci.get("pciDeviceId") or 0
            gpu.state.pci_subsystem_id = pci.get("pciSubSystemId") or 0
        if (capability := self.value("nvmlDeviceGetCudaComputeCapability")) is not None:
            gpu.compute_capability = tuple(capability)
        if (generation := self.value("nvmlDeviceGetMaxPcieLinkGeneration")) is not None:
            gpu.pcie_gen = generation
        memory = self.value("nvmlDeviceGetMemoryInfo_v2")
        if isinstance(memory, dict):
            gpu.memory_total, gpu.memory_used = memory["total"], memory["used"]
            gpu.memory_reserved = memory["reserved"]
        elif isinstance(memory := self.value("nvmlDeviceGetMemoryInfo"), dict):
            gpu.memory_total, gpu.memory_used, gpu.memory_reserved = memory["total"], memory["used"], 0
        if (uptime := self.value("nvmlDeviceGetGpuUptime_v1")) is not None:
            seconds = uptime["uptime"] if isinstance(uptime, dict) else uptime
            gpu.state.driver_loaded_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - int(seconds * 1e9)

    def _power_and_readings(self) -> None:
        gpu = self.gpu
        self._power()
        self._clocks()
        if (rates := self.value("nvmlDeviceGetUtilizationRates")) is not None:
            gpu.util_gpu, gpu.util_memory = rates["gpu"], rates["memory"]
        if (temperature := self.value("nvmlDeviceGetTemperature", 0)) is not None:
            gpu.temperature = temperature
        if (pstate := self.value("nvmlDeviceGetPerformanceState")) is not None:
            gpu.pstate = pstate
        if (events := self.value("nvmlDeviceGetSupportedEventTypes")) is not None:
            gpu.supported_events = events

    def _power(self) -> None:
        """Power as captured; the energy counter from its last answer, at its rate (field 83's, else
        the call's)."""
        gpu, answers = self.gpu, self.answers
        if (limit := self.value("nvmlDeviceGetEnforcedPowerLimit")) is not None:
            gpu.power_limit_mw = limit
        if (usage := self.value("nvmlDeviceGetPowerUsage")) is not None:
            gpu.state.power_usage_mw = max(1, usage)
        instant, average, energy = (answers.field(i) for i in (186, 185, 83))
        power = instant.value if instant is not None and instant.ok else usage
        if isinstance(power, int):
            gpu.state.power_count = gpu.state.power_head = 0  # the captured power, since ever
            gpu.power_mw = power
        if average is not None and average.ok and isinstance(average.value, int):
            gpu.state.average_mw = max(1, average.value)
        call = self.one("nvmlDeviceGetTotalEnergyConsumption")
        counter = next((c for c in (energy, call) if c is not None and c.ok), None)
        if counter is not None and isinstance(counter.value, int):
            gpu.energy_mj = counter.value
            rate = counter.rate
            if rate is None and call is not None and call is not counter:
                rate = call.rate
            if rate is not None and rate > 0:
                gpu.state.energy_rate_mw = round(rate)  # mJ/s
        elif call is not None and not call.ok:
            gpu.raises["nvmlDeviceGetTotalEnergyConsumption"] = _code(call.ret)

    def _clocks(self) -> None:
        """Clocks, clock-event masks and violation times; a clock or policy that failed is absent."""
        gpu = self.gpu
        for kind in range(4):
            call = self.one("nvmlDeviceGetClockInfo", kind)
            if call is not None:
                gpu.clocks_mhz[kind] = call.value if call.ok and call.value else 0
        for which in ("Supported", "Current"):
            mask = self.value(f"nvmlDeviceGet{which}ClocksEventReasons")
            if mask is None:
                mask = self.value(f"nvmlDeviceGet{which}ClocksThrottleReasons")
            if mask is not None:
                setattr(gpu, f"{which.lower()}_reasons", mask)
        for policy in range(3):
            call = self.one("nvmlDeviceGetViolationStatus", policy)
            if call is not None:
                if call.ok and isinstance(call.value, dict):
                    gpu.violation_ns[policy] = call.value["violationTime"]
                else:
                    del gpu.violation_ns[policy]

    def _health(self) -> None:
        gpu = self.gpu
        fans = self.one("nvmlDeviceGetNumFans")
        if fans is not None:
            count = fans.value if fans.ok and isinstance(fans.value, int) else 0
            gpu.fans = [self.value("nvmlDeviceGetFanSpeed_v2", fan) or 0 for fan in range(count)]
        for function, attribute in _MEDIA.items():
            call = self.one(function)
            if call is not None and call.ok:
                setattr(gpu, attribute, call.value[0])
        if (replays := self.value("nvmlDeviceGetPcieReplayCounter")) is not None:
            gpu.pcie_replays = replays
        rows = self.one("nvmlDeviceGetRemappedRows")
        if rows is not None:
            gpu.retires_pages = int(not rows.ok)
            for position, count in enumerate(rows.value if rows.ok else ()):
                gpu.remapped[position] = count

    def _links(self) -> None:
        gpu = self.gpu
        states = {call.args[0]: call for call in self.by_function.get("nvmlDeviceGetNvLinkState", ())}
        link_count = self.answers.field(91)
        if link_count is not None and link_count.ok and isinstance(link_count.value, int):
            gpu.nvlink_count = link_count.value
        elif states:
            answering = [link for link, call in states.items() if call.ok]
            gpu.nvlink_count = 1 + max(answering) if answering else 0
        for link, call in states.items():
            if isinstance(link, int) and link < MAX_LINKS and call.ok and not call.value:
                gpu.nvlink_error_code[link] = pynvml.NVML_ERROR_NOT_SUPPORTED  # inactive
        for call in self.by_function.get("nvmlDeviceGetNvLinkErrorCounter", ()):
            link, counter = call.args
            if not (isinstance(link, int) and link < MAX_LINKS and counter in _NVLINK_KINDS):
                continue
            if call.ok:
                gpu.nvlink_errors[link][_NVLINK_KINDS[counter]] = call.value
            else:
                gpu.nvlink_error_code[link] = _code(call.ret)

    def _engines(self) -> None:
        profile = self.value("nvmlDeviceGetGpuInstanceProfileInfoV", _WHOLE_GPU_PROFILE)
        if isinstance(profile, dict):
            self.gpu.media_engines = {
                kind: profile.get(member, 0) for kind, member in _ENGINE_MEMBERS.items()
            }

    def _mig(self) -> None:
        gpu = self.gpu
        mode = self.value("nvmlDeviceGetMigMode")
        if not mode or not mode[0]:
            return
        devices, slots = (
            [],
            sorted(
                call.args[0]
                for call in self.by_function.get("nvmlDeviceGetMigDeviceHandleByIndex", ())
                if call.ok
            ),
        )
        if slots != list(range(len(slots))):
            self.lost(f"MIG devices at slots {slots}: the double numbers them 0 to n-1")
        for slot in slots[:MAX_MIG]:
            device = f"mig:{slot}"
            memory = self.value("nvmlDeviceGetMemoryInfo_v2", device=device) or self.value(
                "nvmlDeviceGetMemoryInfo", device=device
            )
            devices.append(
                FakeMig(
                    uuid=self.value("nvmlDeviceGetUUID", device=device)
                    or f"MIG-{slot:08x}-0000-0000-0000-000000000000",
                    gpu_instance=self.value("nvmlDeviceGetGpuInstanceId", device=device) or 0,
                    compute_instance=self.value("nvmlDeviceGetComputeInstanceId", device=device) or 0,
                    name=self.value("nvmlDeviceGetName", device=device) or "",
                    memory_total=memory["total"] if isinstance(memory, dict) else 10 * GIB,
                    memory_used=memory["used"] if isinstance(memory, dict) else 0,
                )
            )
        gpu.mig_devices = devices
        gpu.mig_mode = 1  # on, with or without instances yet

    def _processes(self) -> None:
        gpu = self.gpu
        listed = self.value("nvmlDeviceGetComputeRunningProcesses_v3")
        if listed is None:
            listed = self.value("nvmlDeviceGetComputeRunningProcesses_v2")
        if listed is None:
            return
        busy: dict[int, int] = {}
        info = self.value("nvmlDeviceGetProcessesUtilizationInfo")
        samples = info.get("procUtilArray", []) if isinstance(info, dict) else []
        samples = samples or self.value("nvmlDeviceGetProcessUtilization") or []
        for sample in samples:
            busy[sample["pid"]] = max(busy.get(sample["pid"], 0), sample.get("smUtil", 0))
        unknown = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
        rows = [
            (
                row["pid"],
                None if row["usedGpuMemory"] >= unknown else row["usedGpuMemory"],
                busy.get(row["pid"], 0),
            )
            for row in listed
        ]
        gpu.processes = rows
        if any(sm for *_, sm in rows):
            gpu.process_window_us = _PROCESS_WINDOW_US

    def _codes(self) -> None:
        """Functions not mapped, and return codes only a whole function can answer on the double."""
        gpu, modelled = self.gpu, _PER_ARGUMENT
        for function, calls in self.by_function.items():
            if function not in MAPPED:
                self.lost(f"{function}: the double has no such function")
                continue
            failed = {call.ret for call in calls if not call.ok and call.device == schema.GPU}
            if not failed or function in modelled:
                continue
            if len(failed) == 1 and all(not call.ok for call in calls if call.device == schema.GPU):
                gpu.raises[function] = _code(failed.pop())
            else:
                self.lost(f"{function}: answers {sorted(failed)} for some inputs only")


#: Calls the capture answers without holding them: the library's own bookkeeping (initialisation, the
#: GPU count and handles, versions, GPM samples, event sets and their waits), which its node and GPUs say.
_HELD_BY_THE_NODE = frozenset(
    {
        "nvmlInitWithFlags", "nvmlInit_v2", "nvmlShutdown", "nvmlErrorString", "nvmlSystemGetDriverVersion",
        "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree",
        "nvmlEventSetCreate", "nvmlEventSetFree", "nvmlEventSetWait_v2",
    }
)  # fmt: skip
#: Functions whose failures by input the model answers itself (a clock, a link, a fan, a profile, a
#: MIG slot, the process calls' NOT_FOUND): not forced on the whole function.
_PER_ARGUMENT = frozenset(
    {
        "nvmlDeviceGetClockInfo", "nvmlDeviceGetViolationStatus", "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetNvLinkErrorCounter", "nvmlDeviceGetFanSpeed_v2", "nvmlDeviceGetGpuInstanceProfileInfoV",
        "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetProcessUtilization",
        "nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetTemperature",
        "nvmlDeviceGetTotalEnergyConsumption",
        *_MEDIA,
    }
)  # fmt: skip


def _code(name: str) -> int:
    """An nvmlReturn by its nvml.h name (``NVML_ERROR_NOT_SUPPORTED``, or ``NVML_ERROR_<n>``)."""
    value = getattr(pynvml, name, None)
    if isinstance(value, int):
        return value
    return int(name.rsplit("_", 1)[-1])


def _raw(value: int | float | None, value_type: int) -> int:
    """A field's value as the 8 bytes of its nvmlValue_t union."""
    if value is None:
        return 0
    if value_type == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return struct.unpack("<Q", struct.pack("<d", float(value)))[0]
    return int(value) & (2**64 - 1)


def _fields(gpu: FakeGpu, answers: schema.GpuState, where: str, replayed: Replayed) -> None:
    """Every known field answer into the replay table (sorted by id, scope), but those the model moves
    itself where they succeed; each id's latencyUsec as captured."""
    entries = []
    for value in answers.fields:
        if not value.known or value.device != schema.GPU:
            if value.known:
                replayed.not_reproduced.append(f"{where}: field {value.id} on {value.device}")
            continue
        if value.id >= MAX_FIELD:
            replayed.not_reproduced.append(
                f"{where}: field {value.id} (the double knows ids below {MAX_FIELD})"
            )
            continue
        if value.latency_us is not None and gpu.state.latency_of_us[value.id] < 0:
            gpu.state.latency_of_us[value.id] = value.latency_us
        if (value.id, value.scope) in _MODELLED_FIELDS and value.ok:
            continue
        kind = _value_type(value.type)
        rate = value.rate if value.rate is not None and value.rate > 0 and math.isfinite(value.rate) else 0.0
        entries.append((value.id, value.scope, _code(value.ret), kind, _raw(value.value, kind), rate))
    entries.sort()
    if len(entries) > MAX_REPLAY_FIELDS:
        replayed.not_reproduced.append(
            f"{where}: {len(entries) - MAX_REPLAY_FIELDS} field answers past the table"
        )
        entries = entries[:MAX_REPLAY_FIELDS]
    state = gpu.state
    ctypes.memset(ctypes.addressof(state.replay_field_first), 0, ctypes.sizeof(state.replay_field_first))
    for position, (field_id, scope, ret, kind, raw, rate) in enumerate(entries):
        slot = state.replay_fields[position]
        slot.id, slot.scope, slot.ret, slot.type, slot.value, slot.rate = (
            field_id,
            scope,
            ret,
            kind,
            raw,
            rate,
        )
        if not state.replay_field_first[field_id]:
            state.replay_field_first[field_id] = position + 1
    state.replay_field_count = len(entries)


def _value_type(name: str | None) -> int:
    value = getattr(pynvml, name, None) if name else None
    return value if isinstance(value, int) else pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG


def _gpm(gpu: FakeGpu, answers: schema.GpuState, where: str, replayed: Replayed) -> None:
    """GPM support, and each metric's captured answer per instance (the MIG devices' by GPU instance)."""
    support = next((c for c in answers.calls if c.function == "nvmlGpmQueryDeviceSupport" and c.known), None)
    if support is not None:
        supported = support.ok and isinstance(support.value, dict) and support.value.get("isSupportedDevice")
        gpu.gpm_supported = bool(supported)
    instances = {device.gpu_instance: slot + 1 for slot, device in enumerate(gpu.mig_devices)}
    for metric in answers.gpm:
        if not metric.known:
            continue
        instance = 0 if metric.instance is None else instances.get(metric.instance)
        if instance is None or metric.id >= len(gpu.state.gpm_replay_ret[0]):
            replayed.not_reproduced.append(f"{where}: GPM {metric.id} of GPU instance {metric.instance}")
            continue
        gpu.state.gpm_replay_ret[instance][metric.id] = _code(metric.ret) + 1
        value = metric.value if metric.value is not None else 0.0
        gpu.state.gpm_replay_value[instance][metric.id] = value


def _durations(driver: str) -> int | None:
    """The first clock-event duration id of the double's field numbering for ``driver`` (nvml_double.c's
    ``numberings``): 269 from 580.82, 251 from R575, none before."""
    major, _, rest = driver.partition(".")
    try:
        version = int(major) * 1000 + int(rest.partition(".")[0] or 0)
    except ValueError:
        return None
    return 269 if version >= 580082 else 251 if version >= 575000 else None


def _queries(driver: str) -> dict[int, str]:
    """Field id -> the firmware query the double charges it as (nvml_double.c's ``field_query``)."""
    found = {
        83: "energy",
        191: "energy",
        74: "perf_policy",
        75: "perf_policy",
        76: "perf_policy",
        94: "pcie_replay",
    }
    found |= dict.fromkeys(range(1, 7), "ecc") | {169: "field_169", 197: "pcie_bytes", 198: "pcie_bytes"}
    found |= {185: "power", 186: "power"}
    first = _durations(driver)
    if first is not None:
        found |= {first + 1: "hw_thermal", first + 2: "power_brake"}
    return found


def _prices(gpu: FakeGpu, captured: schema.Gpu, driver: str) -> None:
    """The captured prices: each function's per call; a field alone, as its firmware query's (the dearest
    of the fields sharing it) or its own; GPM metrics per metric past the model's base."""
    ids, queries, by_query = _function_ids(), _queries(driver), {}
    for price in captured.prices:
        if price.cpu_seconds is None:
            continue
        us = max(0, round(price.cpu_seconds * 1e6))
        if price.function == "nvmlDeviceGetFieldValues" and price.field is not None:
            query = queries.get(price.field)
            if query is not None:
                by_query[query] = max(by_query.get(query, 0), us)
            elif price.field < MAX_FIELD:
                gpu.state.field_price_us[price.field] = us
        elif price.function == "nvmlGpmMetricsGet" and price.items:
            base = gpu.state.gpm_metrics_base_us
            gpu.state.gpm_metric_price_us = max(0, round((us - base) / price.items))
        elif price.function in ids and price.field is None:
            gpu.state.price_us[ids[price.function]] = us
    gpu.query_prices_us = by_query


def modelled(fake: FakeNvml, capture: schema.Capture) -> list[str]:
    """What the command asked of the double that the capture holds no answer of (the model answered
    it): C functions, with how often, and field ids by GPU."""
    held = {call.function for gpu in capture.gpus for s in gpu.states.values() for call in s.calls}
    held |= {call.function for calls in capture.node.calls.values() for call in calls}
    if any(s.fields for gpu in capture.gpus for s in gpu.states.values()):
        held.add("nvmlDeviceGetFieldValues")
    if any(s.gpm for gpu in capture.gpus for s in gpu.states.values()):
        held.add("nvmlGpmMetricsGet")
    found = []
    for name, position in _function_ids().items():
        count = fake.state.calls[position]
        if count and name not in held and name not in _HELD_BY_THE_NODE:
            found.append(f"{name} ({count} calls)")
    for gpu, captured in zip(fake.gpus, capture.gpus, strict=True):
        answered = {value.id for s in captured.states.values() for value in s.fields}
        missing = sorted(gpu.fields_asked - answered)
        if missing:
            found.append(f"GPU {captured.index}: fields {', '.join(map(str, missing))}")
    return found

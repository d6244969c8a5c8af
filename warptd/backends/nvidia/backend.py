"""NVIDIA GPUs through NVML (nvidia-ml-py). NVML reports mW, mJ, MHz, ns and percent; we convert.

Readings follow nvml.h rather than the names of the calls: ``nvmlDeviceGetPowerUsage`` is a 1 s average
on Ampere and newer, so power is the instantaneous field where the GPU has it; v1 memory "used"
includes driver-reserved memory, so memory is read with ``nvmlMemory_v2`` where the driver has it.
"""

from __future__ import annotations

import ctypes
import functools
import operator
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import structlog

from warptd.backends.base import AcceleratorBackend, throttle_states
from warptd.backends.cadence import SlowReads
from warptd.backends.kept import Kept
from warptd.backends.nvidia import calls as nvml_calls
from warptd.backends.nvidia import fields as nvidia_fields
from warptd.backends.nvidia import session as nvml_session
from warptd.backends.nvidia.base import NvmlBackend
from warptd.backends.nvidia.fields import Decoded, FieldKey, FieldPlan, FieldRequest
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.metrics import catalog
from warptd.models import (
    CLOCK_EVENT_REASONS,
    DeviceReading,
    GPUInfo,
    LabelledValues,
    MemoryUsage,
    Utilization,
)

if TYPE_CHECKING:
    from warptd.config import Settings

log = structlog.get_logger("warptd.nvidia")

# NVML clock-event (throttle) bits, by the reason names warptd exports for every vendor.
_THROTTLE_BITS: dict[str, str] = {
    "gpu_idle": "nvmlClocksEventReasonGpuIdle",
    "applications_clocks_setting": "nvmlClocksEventReasonApplicationsClocksSetting",
    "sw_power_cap": "nvmlClocksEventReasonSwPowerCap",
    "hw_slowdown": "nvmlClocksEventReasonHwSlowdown",
    "sync_boost": "nvmlClocksEventReasonSyncBoost",
    "sw_thermal_slowdown": "nvmlClocksEventReasonSwThermalSlowdown",
    "hw_thermal_slowdown": "nvmlClocksEventReasonHwThermalSlowdown",
    "hw_power_brake_slowdown": "nvmlClocksEventReasonHwPowerBrakeSlowdown",
    "display_clock_setting": "nvmlClocksEventReasonDisplayClockSetting",
}
# Where a driver lacks the duration fields of SW power cap and sync boost: nvmlDeviceGetViolationStatus
# (deprecated in CUDA 13) keeps the same counters.
_VIOLATION_POLICIES: dict[str, str] = {
    "sw_power_cap": "NVML_PERF_POLICY_POWER",
    "sync_boost": "NVML_PERF_POLICY_SYNC_BOOST",
}
_INTEGERS = nvidia_fields.INTEGERS
FI_POWER_AVERAGE, FI_POWER_INSTANT = nvidia_fields.FI_POWER_AVERAGE, nvidia_fields.FI_POWER_INSTANT
FI_TOTAL_ENERGY = nvidia_fields.FI_TOTAL_ENERGY
#: Compute capability from which nvmlDeviceGetPowerUsage is a 1 s average (Ampere and newer; GA100,
#: 8.0, still reads instantaneously).
_AVERAGING_SINCE = (8, 6)
_LAST_PSTATE = 15  # NVML_PSTATE_15
#: Byte counters the driver may keep in fields, which GPM throughput otherwise stands in for.
_TRAFFIC = (catalog.PCIE_BYTES.name, catalog.NVLINK_BYTES.name)
_CLOCKS: dict[str, str] = {
    "graphics": "NVML_CLOCK_GRAPHICS",
    "sm": "NVML_CLOCK_SM",
    "memory": "NVML_CLOCK_MEM",
}


Version = tuple[str, Callable[..., Any], tuple[object, ...]]  # guard key, function, arguments


def memory_versions(nvml: Any, handle: Any) -> tuple[Version, ...]:
    """``nvmlMemory_v2`` (used as nvidia-smi shows it, reserved apart), then v1 for older drivers. A
    GPU's handle or a MIG device's (its own slice of memory)."""
    v2 = getattr(nvml, "nvmlMemory_v2", None)
    v1: Version = ("memory", nvml_calls.memory(nvml, handle, None), ())
    return (("memory_v2", nvml_calls.memory(nvml, handle, v2), ()), v1) if v2 is not None else (v1,)


def memory_usage(backend: AcceleratorBackend, nvml: Any, index: int, handle: Any) -> MemoryUsage | None:
    return backend.call_versions(index, *memory_versions(nvml, handle))


def _temperatures(sensors: tuple[int | None, float | None]) -> dict[str, float]:
    """By sensor: the GPU's (a call), the memory's (a field)."""
    gpu, memory = sensors
    temperatures = {"gpu": float(gpu)} if gpu is not None else {}
    if memory is not None:
        temperatures["memory"] = memory
    return temperatures


def _merged(parts: tuple[dict[str, LabelledValues], ...]) -> dict[str, LabelledValues]:
    return {metric: series for part in parts for metric, series in part.items()}


def _with_pstate(raw: tuple[dict[str, LabelledValues], int]) -> dict[str, LabelledValues]:
    gauges, pstate = raw
    return {**gauges, catalog.PERFORMANCE_STATE.name: {(): float(pstate)}}


@dataclass(slots=True)
class FieldTotals:
    """One GPU's running totals of its field reads, kept across NVML reopens (they are warptd's own)."""

    latency_us: int = 0  # nvmlFieldValue_t.latencyUsec, summed over every answer of every batch
    #: ``latency_us`` as of the last full batch: exported at the health cadence, so that the counters
    #: a steady sample hands over equal the last ones (the sampler keeps their totals whole).
    published_us: int = 0


# The calls of a sample besides its batches (:meth:`NvidiaBackend._sample_calls`), by slot; the clocks
# follow in the order of ``_CLOCKS``.
MEMORY, UTILIZATION, TEMPERATURE, REASONS, PSTATE, CLOCKS = range(6)


def mig_device_handles(backend: AcceleratorBackend, nvml: Any, index: int, handle: Any) -> list[Any]:
    """The handles of GPU ``index``'s MIG devices; none with MIG off or on a GPU without MIG."""
    mode = backend.call(index, "mig_mode", nvml.nvmlDeviceGetMigMode, handle)
    if not mode or not mode[0]:
        return []
    handles = []
    for slot in range(backend.call(index, "mig_count", nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
        try:
            handles.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        except nvml.NVMLError as exc:
            if exc.value != nvml.NVML_ERROR_NOT_FOUND:  # NOT_FOUND: no MIG device in this slot
                backend.on_error(("mig_device", index), backend.classify_error(exc), exc)
    return handles


class NvidiaBackend(NvmlBackend):
    """NVIDIA GPUs; handles come from the shared :mod:`nvml_session`, cached once."""

    name: ClassVar[str] = "nvidia"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        try:
            nvml = self._nvml
            self._handles = self._session.handles
            self._throttle_bits = {reason: getattr(nvml, const) for reason, const in _THROTTLE_BITS.items()}
            self._known_bits = functools.reduce(operator.or_, self._throttle_bits.values(), 0)
            self._policies = {reason: getattr(nvml, const) for reason, const in _VIOLATION_POLICIES.items()}
            self._clocks = tuple(
                (clock, f"clock_{clock}", getattr(nvml, const)) for clock, const in _CLOCKS.items()
            )
            self._unpack = nvidia_fields.unpacker(getattr(nvml, "c_nvmlFieldValue_t", None))
            #: The field ids of the driver's branch (durations, recovery action, power fields moved).
            self._field_set = nvidia_fields.FieldSet(nvidia_fields.numbering(self.get_driver_version()))
            # What the prepared calls (nvml_calls) use, as every nvidia-ml-py wrapper does.
            nvml._nvmlGetFunctionPointer, nvml._nvmlCheckReturn  # noqa: B018
        except AttributeError as exc:  # an nvidia-ml-py too old for these constants
            self._lease.release()
            raise BackendUnavailableError(f"nvidia-ml-py too old: {exc}") from exc
        self._supported_masks: dict[int, int] = {}
        #: By supported and active clock-event masks: the throttle and the clock-event states.
        self._states: dict[tuple[int, int], tuple[dict[str, bool], dict[str, bool]]] = {}
        #: By device and value: what was made of its last answers (:mod:`~warptd.backends.kept`).
        self._kept: defaultdict[tuple[int, str], Kept[Any]] = defaultdict(Kept)
        self._uuids: dict[int, str] = {}
        self._fields: dict[int, dict[FieldKey, float]] = {}  # this read's field values per device
        self._fields_unsupported: dict[int, set[FieldKey]] = {}
        self._field_totals: dict[int, FieldTotals] = {}  # per device, never cleared
        self._plans: dict[int, FieldPlan] = {}  # the full field batch per device (its NVLinks known)
        self._requests: dict[tuple[int, str], FieldRequest] = {}  # the last batch per device and kind
        self._steady: dict[int, tuple[FieldRequest, list[float]]] = {}  # this read's values by position
        self._decoded: dict[int, Decoded] = {}  # this read's gauges and raw counters from the fields
        self._fans: dict[int, int] = {}  # fans per device, asked once
        self._slow_reads = SlowReads(lambda: self.settings)
        self._functions: dict[str, Any] = {}  # pynvml functions by name, looked up once
        #: Per device: its handle and the calls of a sample besides the batches (:meth:`_sample_calls`),
        #: and the one pass made of them while nothing new is unsupported (:meth:`_one_pass`).
        self._calls: dict[int, tuple[Any, tuple[tuple[Version, ...], ...]]] = {}
        self._passes: dict[int, tuple[object, int, list[tuple[int, str, Any, tuple[object, ...], Any]]]] = {}
        #: Per "Supported"/"Current": the clock-event reason calls this nvidia-ml-py has, newest first.
        self._reason_calls = {
            which: [
                (f"clocks_{kind}_{which}", function)
                for kind, name in (("event", "Event"), ("throttle", "Throttle"))
                if self._function(function := f"nvmlDeviceGet{which}Clocks{name}Reasons") is not None
            ]
            for which in ("Supported", "Current")
        }
        #: The slow values of each device's last read of them (:mod:`~warptd.backends.cadence`): its
        #: enforced power limit (W) and nvidia-smi's gauges besides the performance state.
        self._power_limits: dict[int, float | None] = {}
        self._slow_gauges: dict[int, dict[str, LabelledValues]] = {}
        self._known: dict[int, GPUInfo] = {}  # last identity read per index
        self._mig_on = False  # some GPU has MIG on: its instances are re-listed at every rediscovery

    def needs_rediscovery(self) -> bool:
        """After a lost GPU or a reset NVML, while a handle is refused, and while MIG is on anywhere:
        MIG instances come and go at any time (mig-manager), and pods are allocated by their UUIDs."""
        return self._suspect or None in self._handles or self._mig_on

    def rediscover(self) -> bool:
        """Reopen NVML after a lost GPU or a reset NVML (stay suspect until NVML is back); else ask
        again for the handles NVML refused, without disturbing the GPUs that answer. True when the
        devices should be listed again (MIG on: their MIG UUIDs are re-read then)."""
        before = len(self._handles)
        if self._suspect:
            self._gpm.reset()  # free the GPM samples while the NVML that made them is still up
            back = self._session.reopen()
            self._suspect = not back or len(self._handles) < before
            self._sync_generation()
            return back
        recovered = None in self._handles and self._session.retry_refused()
        self._sync_generation()
        return recovered or self._mig_on

    def _sync_generation(self) -> None:
        """After a reopen (by this or another backend on the session) per-device caches are stale."""
        if self._generation != self._session.generation:
            self._generation = self._session.generation
            self._lost_now.clear()
            self._supported_masks.clear()
            self._unsupported.clear()
            self._uuids.clear()
            self._fields_unsupported.clear()
            self._gpm.reset()  # the samples belonged to the NVML before the reopen
            self._plans.clear()
            self._requests.clear()
            self._calls.clear()
            self._passes.clear()
            self._kept.clear()
            self._fans.clear()
            self._slow_reads.forget()
            # A reload may have brought another driver branch, which numbers the fields its own way.
            self._field_set = nvidia_fields.FieldSet(nvidia_fields.numbering(self.get_driver_version()))

    def device_identity(self, index: int) -> str | None:
        with self._session.lock:
            self._sync_generation()
            return self._identity(index)

    def _identity(self, index: int) -> str | None:
        if index >= len(self._handles):
            return None
        if self._handles[index] is None:
            known = self._known.get(index)
            return known.uuid if known else None
        if index not in self._uuids:
            uuid = self._get(index, "uuid", "nvmlDeviceGetUUID")
            if uuid is None:
                return None
            self._uuids[index] = nvml_session.text(uuid)
        return self._uuids[index]

    def read_device(self, index: int) -> DeviceReading:
        with self._session.lock:
            self._sync_generation()
            reading = super().read_device(index)
        if not reading.up:
            self._slow_reads.forget(index)  # back up, it reads everything at once
        return reading

    def read_power(self, index: int) -> tuple[float | None, float | None] | None:
        with self._session.lock:
            self._sync_generation()
            return super().read_power(index)

    def device_present(self, index: int) -> bool:
        """False for an index gone from the list, or a GPU whose handle NVML refused (retried by
        :meth:`rediscover`)."""
        if index < len(self._handles) and self._handles[index] is not None:
            return True
        if index >= len(self._handles):
            self._suspect = True  # NVML lost devices: reopen later
        return False

    def absence_kind(self, index: int) -> ErrorKind:
        refused = self._session.refused.get(index)
        return ErrorKind.DEVICE_LOST if refused is None else self.classify_error(refused)

    # -- discovery and identity -------------------------------------------------------------
    def is_available(self) -> bool:
        return self.get_device_count() > 0

    def get_device_count(self) -> int:
        return len(self._handles)

    def list_devices(self) -> list[GPUInfo]:
        """Every GPU's identity. If NVML went away while listing (reset under us: the reads fail),
        the identities known from before stand, rather than GPUs without UUIDs, until it is back."""
        with self._session.lock:  # never beside a reopen
            self._sync_generation()
            suspect = self._suspect
            devices = self._list_devices()
            if self._suspect and not suspect:
                devices = [self._known.get(info.index, info) for info in devices]
            else:
                self._known.update((info.index, info) for info in devices)
        self._mig_on = any(info.aliases for info in devices)
        return devices

    def _list_devices(self) -> list[GPUInfo]:
        nvml, driver = self._nvml, self.get_driver_version()
        devices = []
        for index, handle in enumerate(self._handles):
            if handle is None:  # lost at the last reopen: keep its identity, so it shows as down
                devices.append(self._known.get(index) or GPUInfo(index=index, model="NVIDIA GPU"))
                continue
            name = self.call(index, "name", nvml.nvmlDeviceGetName, handle)
            uuid = self.call(index, "uuid", nvml.nvmlDeviceGetUUID, handle)
            cc = self.call(index, "cc", nvml.nvmlDeviceGetCudaComputeCapability, handle)
            pci = self.call(index, "pci", nvml.nvmlDeviceGetPciInfo, handle)
            memory = self.get_memory_usage(index)
            devices.append(
                GPUInfo(
                    index=index,
                    model=nvml_session.text(name) if name is not None else "NVIDIA GPU",
                    **GPUInfo.memory_fields(memory.total if memory else None),
                    uuid=nvml_session.text(uuid) if uuid is not None else None,
                    compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
                    pcie_gen=self.call(index, "pcie_gen", nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
                    pci_bus_id=nvml_session.text(pci.busId) if pci is not None else None,
                    driver_version=driver,
                    aliases=self._mig_uuids(index, handle),
                )
            )
        return devices

    def _mig_uuids(self, index: int, handle: Any) -> list[str] | None:
        """The ``MIG-…`` UUIDs of the GPU's MIG devices: the IDs NVIDIA's device plugin gives pods that
        hold a MIG slice, so their allocation and energy are matched to this GPU."""
        uuids = []
        for mig in mig_device_handles(self, self._nvml, index, handle):
            uuid = self.call(index, "mig_uuid", self._nvml.nvmlDeviceGetUUID, mig)
            if uuid is not None:
                uuids.append(nvml_session.text(uuid))
        return uuids or None

    def get_pytorch_device_string(self, device_id: int) -> str:
        return f"cuda:{device_id}"

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """CUDA orders GPUs fastest-first and honours CUDA_VISIBLE_DEVICES, NVML does neither:
        pin the worker to this GPU by UUID so the GPU that runs is the one measured."""
        if not info.uuid:
            return self.get_pytorch_device_string(info.index), {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        return "cuda:0", {"CUDA_VISIBLE_DEVICES": info.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    # -- telemetry --------------------------------------------------------------------------
    def _function(self, name: str) -> Any:
        """A pynvml function, or None where this nvidia-ml-py no longer has it (its deprecated names,
        such as ``…ClocksThrottleReasons`` and ``nvmlDeviceGetViolationStatus``, go in CUDA 14)."""
        return getattr(self._nvml, name, None)

    def _get(self, index: int, what: str, fn_name: str, *args: object) -> Any:
        function = self._functions.get(fn_name)
        if function is None:
            function = self._function(fn_name)
            if function is None:
                self._unsupported.add((what, index))
                return None
            self._functions[fn_name] = function
        return self.call(index, what, function, self._handles[index], *args)

    def _plan(self, index: int) -> FieldPlan | None:
        """The device's full field batch, built once its NVLink count is known (one field read)."""
        if index not in self._plans:
            answers = self._get(index, "nvlink_count", "nvmlDeviceGetFieldValues", [nvidia_fields.LINK_COUNT])
            if answers is None and ("nvlink_count", index) not in self._unsupported:
                return None  # failing now: this read asks the fields without the links
            links = 0
            for _, code, value_type, value in self._unpack(answers or ()):
                if code == self._nvml.NVML_SUCCESS and value_type in _INTEGERS:
                    links = int(value)  # type: ignore[arg-type]
            fields = self._field_set
            self._plans[index] = FieldPlan.build((*fields.device, *fields.other), links)
        return self._plans[index]

    def begin_read(self, index: int, power_only: bool) -> None:
        """The batched reads of one GPU: its field values, then (full reads only) its GPM sample. Every
        ``--health-interval`` the batch holds every field (health, links), decoded once for the gauges
        and counters, and the other slow values are read; the samples between report those."""
        fields = self._field_set
        if power_only:
            self._read_fields(index, fields.power, None)
            return
        if not self._slow_reads.due(index):
            self._read_fields(index, fields.sample, None)
        else:
            plan = self._plan(index)
            complete = self._read_fields(index, plan.keys if plan else fields.sample, plan)
            self._decoded[index] = self._field_metrics(index)
            if not (self._read_slow(index) and complete and plan is not None):
                # What failed is absent from this sample, as any failed value is, and not for a whole
                # health interval: the slow values are read again at the next sample.
                self._slow_reads.forget(index)
        self._read_gpm(index)

    def _read_slow(self, index: int) -> bool:
        """The slow values besides the field batch: the enforced power limit, fans, encoder and
        decoder. False when one failed now (rather than being unsupported)."""
        milliwatts = self._get(index, "power_limit", "nvmlDeviceGetEnforcedPowerLimit")
        self._power_limits[index] = milliwatts / 1000 if milliwatts is not None else None
        answered = milliwatts is not None or ("power_limit", index) in self._unsupported
        gauges: dict[str, LabelledValues] = {}
        fans = {(str(fan),): percent / 100 for fan, percent in self._fan_speeds(index).items()}
        if fans:
            gauges[catalog.FAN_SPEED.name] = fans
        for metric, fn_name in (
            (catalog.ENCODER_UTILIZATION, "nvmlDeviceGetEncoderUtilization"),
            (catalog.DECODER_UTILIZATION, "nvmlDeviceGetDecoderUtilization"),
        ):
            answer = self._get(index, metric.name, fn_name)  # [percent, sampling period in µs]
            if answer is not None:
                gauges[metric.name] = {(): answer[0] / 100}
            elif (metric.name, index) not in self._unsupported:
                answered = False
        self._slow_gauges[index] = gauges
        return answered

    def _read_fields(self, index: int, field_ids: tuple[FieldKey, ...], plan: FieldPlan | None) -> bool:
        """One field batch (``plan``: the full one, which decodes into gauges and counters). Each
        value carries its own return code: a field answered "not supported" once is not asked again
        for this GPU. False when the batch, or some field in it, failed now."""
        self._fields[index] = values = {}
        self._steady.pop(index, None)
        unsupported = self._fields_unsupported.setdefault(index, set())
        nvml = self._nvml
        request = self._request(index, plan, field_ids, unsupported)
        if request is None:
            return True
        answers = self.call(index, "fields", request.send, self._handles[index])
        if answers is None:
            if ("fields", index) in self._unsupported:  # a driver without field values
                unsupported.update(field_ids)
                return True
            return False
        totals = self._totals(index)
        totals.latency_us += request.latency_us(answers)
        if plan is not None:
            totals.published_us = totals.latency_us
        numbers = request.steady(answers)
        if numbers is not None:  # every field answered as in the last clean read
            self._fields[index] = request.looked_up(numbers)
            self._steady[index] = (request, numbers)
            return True
        success, types, answered, failed = nvml.NVML_SUCCESS, self._field_set.types, [], False
        for field_id, code, value_type, value in self._unpack(answers):
            answered.append(value_type)
            if code == success and value_type in types.get(field_id[0], _INTEGERS):
                values[field_id] = float(value)  # type: ignore[arg-type]  # an integer type: never None
                continue
            error = nvml.NVMLError(code)
            # An id this driver does not know answers INVALID_ARGUMENT; one that it numbers as another
            # field answers a value of the wrong type: neither is this field, now or later.
            if code in (nvml.NVML_SUCCESS, nvml.NVML_ERROR_INVALID_ARGUMENT):
                unsupported.add(field_id)
                log.debug("nvml_field_unsupported", device=index, field=field_id, type=value_type)
            elif (kind := self.classify_error(error)) is ErrorKind.NOT_SUPPORTED:
                unsupported.add(field_id)
            else:
                self.on_error(("field_{}_{}".format(*field_id), index), kind, error)
                failed = True
        if len(values) == len(answered):
            request.mark_clean(tuple(answered))
        return not failed

    def _request(
        self,
        index: int,
        plan: FieldPlan | None,
        field_ids: tuple[FieldKey, ...],
        unsupported: set[FieldKey],
    ) -> FieldRequest | None:
        """The batch to send: the last one of its kind while neither the plan nor what this GPU lacks
        changed (that set only grows until a reopen, which drops the requests); None when nothing is
        left to ask."""
        kind = "full" if plan is not None else "power" if field_ids is self._field_set.power else "sample"
        request = self._requests.get((index, kind))
        if request is not None and request.made_from == (field_ids, len(unsupported)):
            return request
        wanted = tuple(field for field in field_ids if field not in unsupported)
        if not wanted:
            return None
        if request is None or request.keys != wanted:
            request = self._requests[index, kind] = FieldRequest(
                self._nvml, wanted, self._field_set.looked_up
            )
            if plan is not None:
                request.decode_with(plan)
        request.made_from = (field_ids, len(unsupported))
        return request

    def _read_gpm(self, index: int) -> None:
        """One GPM sample of the whole GPU (MIG off or on: the GPU's total), on GPUs with GPM. The
        throughputs of the series the driver counts in fields are not asked (its counters win)."""
        handle = self._handles[index]
        if self._gpm.supported(index, index, handle):
            self._gpm.sample(index, index, "gpm_sample", "nvmlGpmSampleGet", handle)
            if not self._gpm.covered(index):
                counted = self.field_counters(index)
                self._gpm.cover(
                    index, {(name, labels) for name in _TRAFFIC for labels in counted.get(name, ())}
                )

    def _totals(self, index: int) -> FieldTotals:
        totals = self._field_totals.get(index)
        if totals is None:
            totals = self._field_totals[index] = FieldTotals()
        return totals

    def _field(self, index: int, field_id: int) -> float | None:
        return self._fields.get(index, {}).get((field_id, 0))

    def _field_unsupported(self, index: int, field_id: int) -> bool:
        return (field_id, 0) in self._fields_unsupported.get(index, ())

    # -- the calls of a sample besides the batches ------------------------------------------------
    def _sample_calls(self, index: int) -> tuple[tuple[Version, ...], ...]:
        """By slot (``MEMORY`` …), the versions of each call newest first, prepared once per handle
        (:mod:`~warptd.backends.nvidia.calls`): the getters make them one by one through the guard,
        :meth:`read_values` in one pass. A call this nvidia-ml-py no longer wraps is not made."""
        handle = self._handles[index]
        calls = self._calls.get(index)
        if calls is None or calls[0] is not handle:
            nvml, scalar = self._nvml, nvml_calls.scalar
            calls = self._calls[index] = (
                handle,
                (
                    memory_versions(nvml, handle),
                    self._version("utilization", nvml_calls.utilization(nvml, handle)),
                    self._version(
                        "temperature",
                        scalar(nvml, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU),
                    ),
                    self._reason_versions(handle, "Current"),
                    self._version("pstate", scalar(nvml, "nvmlDeviceGetPerformanceState", handle)),
                    *(
                        self._version(what, scalar(nvml, "nvmlDeviceGetClockInfo", handle, kind))
                        for _, what, kind in self._clocks
                    ),
                ),
            )
        return calls[1]

    def _version(self, what: str, call: nvml_calls.PreparedCall) -> tuple[Version, ...]:
        return () if self._function(call.name) is None else ((what, call, ()),)

    def _reason_versions(self, handle: Any, which: str) -> tuple[Version, ...]:
        """``nvmlDevice{which}ClocksEventReasons`` (R535+), else the older ``…ClocksThrottleReasons``."""
        return tuple(
            (what, nvml_calls.scalar(self._nvml, name, handle, out=ctypes.c_ulonglong), ())
            for what, name in self._reason_calls[which]
        )

    def _guarded(self, index: int, slot: int) -> Any:
        return self.call_versions(index, *self._sample_calls(index)[slot])

    def _one_pass(self, index: int) -> list[Any] | None:
        """Every call of a sample in the version the getters would make now (none that is
        unsupported), unchecked until one fails: answers by slot, None where not asked. The call
        that failed is counted as the guard counts it (its next version asked where it turned out
        unsupported), and the calls after it go through the guard, each made once, as the getters
        make them. None before every call was looked up once (by the getters)."""
        calls = self._sample_calls(index)
        passes = self._passes.get(index)
        if passes is None or passes[0] is not calls or passes[1] != len(self._unsupported):
            unsupported, steps = self._unsupported, []
            for slot, versions in enumerate(calls):
                for what, call, _ in versions:
                    if (what, index) not in unsupported:
                        if call.function is None:
                            return None
                        steps.append((slot, what, call.function, call.args, call.read))
                        break
            passes = self._passes[index] = (calls, len(unsupported), steps)
        answers: list[Any] = [None] * len(calls)
        steps = passes[2]
        for position, (slot, what, function, args, read) in enumerate(steps):
            code = function(*args)
            if code:  # not NVML_SUCCESS
                self._failed_in_pass(index, what, code)
                if (what, index) in self._unsupported:  # as call_versions: the next version now
                    answers[slot] = self._guarded(index, slot)
                for later in steps[position + 1 :]:
                    answers[later[0]] = self._guarded(index, later[0])
                break
            answers[slot] = read()
        return answers

    def _failed_in_pass(self, index: int, what: str, code: int) -> None:
        """The failure of one call of the pass, counted as :meth:`call` counts what a call raises."""
        error = self._nvml.NVMLError(code)
        self.on_error((what, index), self.classify_error(error), error)

    def read_values(self, index: int) -> DeviceReading:
        """The sample's calls in one pass, converted as the getters convert them; through the guarded
        getters where its batch made the GPU lost, or at its first sample."""
        answers = None if index in self._lost_now else self._one_pass(index)
        if answers is None:
            return super().read_values(index)
        throttle, events = self._throttle_states(index, answers[REASONS])
        return DeviceReading(
            index=index,
            memory=answers[MEMORY],
            utilization=answers[UTILIZATION],
            power_watts=self.get_power_usage(index),
            power_average_watts=self.get_power_average(index),
            power_limit_watts=self.get_power_limit(index),
            energy_counter_joules=self.get_energy_counter(index),
            temperatures_celsius=self._temperatures_from(index, answers[TEMPERATURE]),
            clocks_hertz=self._clocks_from(index, answers[CLOCKS:]),
            throttle_active=throttle,
            clock_events_active=events,
            throttle_counter_seconds=self.get_throttle_counters(index),
            gauges=self._gauges(index, answers[PSTATE]),
            counters=self.get_counters(index),
        )

    # -- the getters ------------------------------------------------------------------------------
    def get_memory_usage(self, index: int) -> MemoryUsage | None:
        return self._guarded(index, MEMORY)  # type: ignore[no-any-return]

    def get_utilization(self, index: int) -> Utilization | None:
        return self._guarded(index, UTILIZATION)  # type: ignore[no-any-return]

    def get_temperatures(self, index: int) -> dict[str, float]:
        return self._temperatures_from(index, self._guarded(index, TEMPERATURE))

    def _temperatures_from(self, index: int, gpu: int | None) -> dict[str, float]:
        """The GPU sensor, and the memory (HBM) sensor from the field batch where the GPU has one."""
        memory = self._field(index, nvidia_fields.FI_MEMORY_TEMP)
        return self._kept[index, "temperatures"].of((gpu, memory), _temperatures)

    def get_power_usage(self, index: int) -> float | None:
        """The instantaneous field where the GPU has it; else nvmlDeviceGetPowerUsage where that is
        instantaneous: on a GPU without the field (pre-Ampere, GA100). A driver whose header has no
        power fields (R525/R530) on an averaging GPU has no instantaneous reading: absent."""
        milliwatts = self._field(index, FI_POWER_INSTANT)
        if milliwatts is None and not self._power_usage_averages(index):
            milliwatts = self._get(index, "power", "nvmlDeviceGetPowerUsage")
        return milliwatts / 1000 if milliwatts is not None else None

    def get_power_average(self, index: int) -> float | None:
        """The average field; on a driver without it, nvmlDeviceGetPowerUsage where the GPU averages."""
        milliwatts = self._field(index, FI_POWER_AVERAGE)
        if milliwatts is None and self._power_usage_averages(index):
            milliwatts = self._get(index, "power", "nvmlDeviceGetPowerUsage")
        return milliwatts / 1000 if milliwatts is not None else None

    def _power_usage_averages(self, index: int) -> bool:
        """Whether nvmlDeviceGetPowerUsage stands in for the average rather than the instant: the
        driver numbers no power fields, and the GPU (Ampere and newer but GA100) averages over 1 s."""
        if self._field_set.numbering.power:
            return False
        info = self._known.get(index)
        capability = info.compute_capability if info is not None else None
        if capability is None:
            return True  # unknown: not claimed instantaneous
        major, minor = (int(part) for part in capability.split("."))
        return (major, minor) >= _AVERAGING_SINCE

    def get_power_limit(self, index: int) -> float | None:
        """The enforced limit as of the last read of the slow values."""
        return self._power_limits.get(index)

    def get_energy_counter(self, index: int) -> float | None:
        """The energy field; ``nvmlDeviceGetTotalEnergyConsumption`` only where the driver lacks the
        field (a field failing this read is counted once, as the call's failure would be)."""
        millijoules = self._field(index, FI_TOTAL_ENERGY)
        if millijoules is None and self._field_unsupported(index, FI_TOTAL_ENERGY):
            millijoules = self._get(index, "energy", "nvmlDeviceGetTotalEnergyConsumption")
        return millijoules / 1000 if millijoules is not None else None

    def get_clocks(self, index: int) -> dict[str, float]:
        return self._clocks_from(index, [self._guarded(index, CLOCKS + n) for n in range(len(self._clocks))])

    def _clocks_from(self, index: int, answers: list[int | None]) -> dict[str, float]:
        """Hz from MHz, by clock (``answers`` in the order of ``_CLOCKS``)."""
        return self._kept[index, "clocks"].of(tuple(answers), self._hertz)

    def _hertz(self, answers: tuple[int | None, ...]) -> dict[str, float]:
        return {
            clock: mhz * 1e6
            for (clock, _, _), mhz in zip(self._clocks, answers, strict=True)
            if mhz is not None
        }

    def _supported_mask(self, index: int) -> int:
        if index not in self._supported_masks:
            mask = self.call_versions(index, *self._reason_versions(self._handles[index], "Supported"))
            if mask is None:
                return 0  # lost or failing now: ask again next sample
            self._supported_masks[index] = mask
        return self._supported_masks[index]

    def get_supported_throttle_reasons(self, index: int) -> list[str]:
        mask = self._supported_mask(index)
        return [reason for reason, bit in self._throttle_bits.items() if mask & bit]

    def _throttle_states(self, index: int, mask: int | None) -> tuple[dict[str, bool], dict[str, bool]]:
        """The reading's ``throttle_active`` and ``clock_events_active`` from the clock-event mask:
        what :func:`~warptd.backends.base.throttle_states` and the reading itself would make of it,
        made once per supported and active masks (readings never change the dicts they hold)."""
        supported = self._supported_mask(index) & self._known_bits
        if mask is None or not supported:
            return throttle_states([], self._reason_names(mask)), {}
        states = self._states.get((supported, mask))
        if states is None:
            bits = [
                (reason, mask & bit != 0) for reason, bit in self._throttle_bits.items() if supported & bit
            ]
            states = self._states[supported, mask] = (
                {reason: on for reason, on in bits if reason not in CLOCK_EVENT_REASONS},
                {reason: on for reason, on in bits if reason in CLOCK_EVENT_REASONS},
            )
        return states

    def get_throttle_reasons(self, index: int) -> list[str] | None:
        return self._reason_names(self._guarded(index, REASONS))

    def _reason_names(self, mask: int | None) -> list[str] | None:
        if mask is None:
            return None
        return [reason for reason, bit in self._throttle_bits.items() if mask & bit]

    def get_throttle_counters(self, index: int) -> dict[str, float]:
        """Seconds in each reason from the clock-event duration fields (ns); the violation counters
        stand in only where the driver lacks a field, and only for the reasons they really count."""
        counters, values = {}, self._fields.get(index, {})
        for reason, key in self._field_set.throttle:
            nanoseconds = values.get(key)
            if nanoseconds is None and reason in self._policies and self._field_unsupported(index, key[0]):
                status = self._get(
                    index, f"violation_{reason}", "nvmlDeviceGetViolationStatus", self._policies[reason]
                )
                nanoseconds = status.violationTime if status is not None else None
            if nanoseconds is not None:
                counters[reason] = nanoseconds / 1e9
        return counters

    # -- health, traffic and the rest of nvidia-smi --------------------------------------------
    def _field_metrics(self, index: int) -> Decoded:
        """Gauges and raw counters from this read's field batch (health, PCIe and NVLink bytes), with
        the calls that stand in where the GPU lacks a field (PCIe replays, remapped rows)."""
        plan = self._plans.get(index)
        if plan is None:
            return {}, {}
        values = self._fields.get(index, {})
        steady = self._steady.get(index)
        if steady is not None:
            gauges, counters = steady[0].decode(steady[1], values)
        else:
            gauges, counters = plan.decode(values)
        if self._field_unsupported(index, nvidia_fields.FI_PCIE_REPLAY_COUNTER):
            replays = self._get(index, "pcie_replays", "nvmlDeviceGetPcieReplayCounter")
            if replays is not None:
                counters[catalog.PCIE_REPLAYS.name] = {(): float(replays)}
        errors = self._nvlink_error_calls(index, plan)
        if errors:
            counters[catalog.NVLINK_ERRORS.name] = {**counters.get(catalog.NVLINK_ERRORS.name, {}), **errors}
        if all(self._field_unsupported(index, field_id) for field_id in nvidia_fields.FI_REMAPPED_ROWS):
            rows = self._get(index, "remapped_rows", "nvmlDeviceGetRemappedRows")
            if rows is not None:
                gauges[catalog.REMAPPED_ROWS.name] = {("correctable",): rows[0], ("uncorrectable",): rows[1]}
                gauges[catalog.ROW_REMAP_PENDING.name] = {(): float(bool(rows[2]))}
                gauges[catalog.ROW_REMAP_FAILURE.name] = {(): float(bool(rows[3]))}
        return gauges, counters

    def _nvlink_error_calls(self, index: int, plan: FieldPlan) -> LabelledValues:
        """The error counters of the links no per-link field id numbers (12-17 of an H100/H200), by
        nvmlDeviceGetNvLinkErrorCounter as DCGM reads them. Each link's kind is its own call: one not
        supported (an inactive link) is not asked again, the others are; one failing otherwise (e.g.
        INVALID_ARGUMENT) is absent this read."""
        errors: dict[tuple[str, ...], float] = {}
        for link, kind, counter in plan.error_calls:
            what = f"nvlink_error_counter_{link}_{kind}"
            count = self._get(index, what, "nvmlDeviceGetNvLinkErrorCounter", link, counter)
            if count is not None:
                errors[str(link), kind] = float(count)
        return errors

    def field_counters(self, index: int) -> dict[str, LabelledValues]:
        """This read's raw counters from the field batch: health and traffic (PCIe, NVLink bytes)."""
        return self._decoded.get(index, ({}, {}))[1]

    def get_gauges(self, index: int) -> dict[str, LabelledValues]:
        return self._gauges(index, self._guarded(index, PSTATE))

    def _gauges(self, index: int, pstate: int | None) -> dict[str, LabelledValues]:
        """Health from the field batch, GPM activity over the last sample period, nvidia-smi's rest:
        merged again only when one of them is not the dict it handed over last time."""
        parts = (
            self._decoded.get(index, ({}, {}))[0],
            self._gpm.gauges(index),
            self._smi_gauges(index, pstate),
        )
        return self._kept[index, "gauges"].of(parts, _merged)

    def get_counters(self, index: int) -> dict[str, LabelledValues]:
        """Health and traffic counters of the field batch; PCIe and NVLink bytes integrated from GPM
        throughput stand in for each series the driver keeps no counter of."""
        counted = self.field_counters(index)
        integrated = {metric: series for metric, series in self._gpm.counters(index).items() if series}
        totals = self._field_totals.get(index)
        if totals is not None:  # the driver's time on this GPU's fields, as of the last full batch
            integrated[catalog.FIELD_LATENCY.name] = {(): totals.published_us / 1e6}
        if not integrated:
            return counted  # the batch's own dict: the sampler knows it again by identity
        counters = dict(counted)
        for metric, series in integrated.items():
            fields = counters.get(metric)
            counters[metric] = {**series, **fields} if fields else series
        return counters

    def _smi_gauges(self, index: int, pstate: int | None) -> dict[str, LabelledValues]:
        """What nvidia-smi shows beside: the performance state, read every sample, and the fans,
        encoder and decoder utilization of the last read of the slow values."""
        gauges = self._slow_gauges.get(index, {})
        if pstate is not None and 0 <= pstate <= _LAST_PSTATE:  # NVML_PSTATE_UNKNOWN (32): absent
            return self._kept[index, "smi"].of((gauges, pstate), _with_pstate)
        return gauges

    def _fan_speeds(self, index: int) -> dict[int, float]:
        """Percent by fan; a board without fans answers NOT_SUPPORTED once and is not asked again."""
        if index not in self._fans:
            count = self._get(index, "fans", "nvmlDeviceGetNumFans")
            if count is None:
                return {}
            self._fans[index] = count
        speeds = {}
        for fan in range(self._fans[index]):
            percent = self._get(index, f"fan_{fan}", "nvmlDeviceGetFanSpeed_v2", fan)
            if percent is not None:
                speeds[fan] = float(percent)
        return speeds

"""One NVIDIA GPU as a device object: its NVML handle, its read plan (field batches, the prepared calls
of a sample) and its state (what it lacks, its field totals, GPM source, slow values, identity).

The read plan reads each value as often as it changes and no more, at the price a real driver charges
(``docs/hardware.md``): power, memory, utilization, clocks, temperatures and the clock-event bitmask
every sample (µs each); the energy counter (2.9 ms of CPU on an H200, refreshed every 100 ms) every
``--energy-interval``; throttle times and health every ``--health-interval``; GPM at most once a second
outside windows. A window, profile, stress job or workload recording reads the energy counter and the
throttle times at its edges (:meth:`Gpu.anchor`), so what it measures is the driver's own counters.

Readings follow nvml.h rather than the names of the calls: ``nvmlDeviceGetPowerUsage`` is a 1 s average
on Ampere and newer, so power is the instantaneous field where the GPU has it; v1 memory "used"
includes driver-reserved memory, so memory is read with ``nvmlMemory_v2`` where the driver has it.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from warptd.backends.cadence import DeviceCadence
from warptd.backends.costs import ReadCosts, ReadKind, thread_time
from warptd.backends.kept import Kept
from warptd.backends.nvidia import fields
from warptd.backends.nvidia.api import NvmlApi, States
from warptd.backends.nvidia.batch import FieldBatch
from warptd.backends.nvidia.engines import Presence, engine_counts
from warptd.backends.nvidia.fields import FieldSet
from warptd.backends.nvidia.gpm import GpmContext, GpmSource
from warptd.backends.nvidia.guard import DeviceGuard
from warptd.backends.nvidia.health import HealthValues
from warptd.backends.nvidia.instance import driver_instance
from warptd.backends.nvidia.mig import mig_device_handles
from warptd.backends.nvidia.sample import (
    CLOCKS,
    MEMORY,
    PSTATE,
    REASONS,
    TEMPERATURE,
    UTILIZATION,
    SampleCalls,
)
from warptd.backends.nvidia.session import text
from warptd.metrics import nvidia
from warptd.metrics.spec import Cadence
from warptd.models import DeviceReading, DriverInstance, GPUInfo, LabelledValues, MemoryUsage, Utilization

if TYPE_CHECKING:
    from warptd.config import Settings

#: Compute capability from which nvmlDeviceGetPowerUsage is a 1 s average (Ampere and newer; GA100,
#: 8.0, still reads instantaneously).
AVERAGING_SINCE = (8, 6)
_LAST_PSTATE = 15  # NVML_PSTATE_15
#: Byte counters the driver may keep in fields, which GPM throughput otherwise stands in for.
_TRAFFIC = (nvidia.PCIE_BYTES.name, nvidia.NVLINK_LINK_BYTES.name)
_NO_SCOPES: dict[str, float] = {}
#: The driver's time on the field batches (latencyUsec, summed): NVIDIA's table's row.
_LATENCY = nvidia.row_of(nvidia.FIELD_LATENCY)


@dataclass(frozen=True, slots=True)
class GpuContext:
    """What the GPUs of one NVML initialisation share: the API, the field ids of the driver's branch,
    GPM, the settings in force, and ``report(guard, what, exc)`` (the backend's error counting)."""

    api: NvmlApi
    field_set: FieldSet
    gpm: GpmContext
    settings: Callable[[], Settings]
    report: Callable[[DeviceGuard, str, BaseException], None]
    read_costs: ReadCosts  # the backend's: each kind of read charged its CPU


def read_kind(
    health: DeviceCadence,
    energy: DeviceCadence,
    edge: bool = False,
    pace: float | None = None,
    now: float | None = None,
) -> ReadKind:
    """The kind of a GPU's read by the plan: ``HEALTH`` where the health values are due (the energy
    counter and throttle times come with them), else ``EDGE`` at a window's edge, ``ENERGY`` where the
    counter is due, else the cheap ``POWER``. A cadence found due counts as read from then on; a read
    of the counter (health, edge) counts for its cadence, which runs on from there."""
    counter = energy.due(now, pace)
    if health.due(now, pace):
        energy.read(now)
        return ReadKind.HEALTH
    if edge:
        energy.read(now)
        return ReadKind.EDGE
    return ReadKind.ENERGY if counter else ReadKind.POWER


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
    return {**gauges, nvidia.PERFORMANCE_STATE.name: {(): float(pstate)}}


class Gpu:
    """GPU ``index`` of one NVML initialisation (``handle`` None: NVML refused it, it reads as down).
    ``before``: the object this index had before a reopen, whose totals and identity carry over."""

    def __init__(self, index: int, handle: Any, context: GpuContext, before: Gpu | None = None) -> None:
        api = context.api
        self.index, self.handle, self._context, self._api = index, handle, context, api
        #: Held by whoever reads the GPU (the device object keeps one read's state at a time).
        self.lock = threading.Lock()
        self.guard = guard = DeviceGuard(index, context.report)
        self.batch = FieldBatch(
            api, guard, handle, context.field_set, before.batch.totals if before else None
        )
        self.calls = SampleCalls(api, guard, handle)
        self.health = HealthValues(api, guard, handle, context.field_set.reads)
        self.cadence = DeviceCadence(context.settings)  # when the slow values are read again
        self.energy_cadence = DeviceCadence(context.settings, Cadence.ENERGY)
        #: What this read asked beside the cheap sample: the energy counter, the throttle times.
        self._energy_read = self._throttle_read = False
        self._energy_mj: float | None = None  # the counter read by call, where the GPU lacks the field
        self._presence: Presence | None = None  # its engines and links, once known
        self.gpm: GpmSource | None = None
        self._gpm_supported: bool | None = None  # nvmlGpmQueryDeviceSupport's answer, once it answered
        self.known: GPUInfo | None = before.known if before else None  # the last identity listed
        self._uuid: str | None = None
        self._supported_mask: int | None = None  # the clock-event reasons it can report
        #: By value: what was made of its last answers (:mod:`~warptd.backends.kept`).
        self._kept: defaultdict[str, Kept[Any]] = defaultdict(Kept)

    def _get(self, what: str, name: str, *args: object) -> Any:
        return self._api.get(self.guard, self.handle, what, name, *args)

    # -- reads ---------------------------------------------------------------------------------------
    def read(self, watched: bool = False, edge: bool = False) -> DeviceReading:
        """Every value of the GPU, batched reads first; ``up=False`` where it turned out lost (its slow
        values are then read at once when it is back). ``watched``: a window records it (GPM then
        follows the window's pace); ``edge``: a window, profile, stress job or workload recording
        begins or ends here, so the energy counter and the throttle times are read whatever their
        cadence."""
        guard = self.guard
        guard.lost = False
        self.begin(watched=watched, edge=edge)
        reading = None if guard.lost else self.reading()
        if reading is None or guard.lost:  # lost at the batches, or at a call after them
            self.cadence.forget()
            self.energy_cadence.forget()
            return DeviceReading(index=self.index, up=False)
        return reading

    def read_scopes(self) -> dict[str, float] | None:
        """The power of the parts NVML measures apart (:meth:`power_scopes`), read now alone; None
        when the GPU turned out lost."""
        self.guard.lost = False
        started = thread_time()
        self.batch.read(ReadKind.SCOPES)
        self._context.read_costs.charge(ReadKind.SCOPES, started)
        return None if self.guard.lost else self.power_scopes()

    def read_power(self) -> tuple[float | None, float | None] | None:
        """Power (W) and energy counter (J, None between two reads of it) of a read by the plan; None
        when the GPU turned out lost. No power backend reads NVIDIA GPUs so (``nvml`` reads the parts
        NVML measures apart: :meth:`read_scopes`): the ABC's read, kept whole rather than cheap."""
        reading = self.read()
        return (reading.power_watts, reading.energy_counter_joules) if reading.up else None

    def begin(self, watched: bool = False, edge: bool = False) -> None:
        """The batched reads of this read's plan: the cheap sample's fields, with the energy counter when
        its cadence or an edge asks, the throttle times at an edge; every ``--health-interval`` the health
        batch (every field: health, links, counters), decoded once for the gauges and counters, and the
        other health values; then (full reads only) the GPM sample. Each kind is charged its CPU."""
        batch, costs = self.batch, self._context.read_costs
        started = thread_time()
        settings = self._context.settings()
        pace = settings.window_interval if watched else None  # a window reads it that often
        kind = read_kind(self.cadence, self.energy_cadence, edge, pace)
        energy, throttle = kind is not ReadKind.POWER, kind in (ReadKind.HEALTH, ReadKind.EDGE)
        if kind is ReadKind.HEALTH:
            # What fails now (a field or call answering UNKNOWN, NO_PERMISSION, TIMEOUT; the link
            # count, so no health plan yet) is counted and absent until the next health read, which
            # asks it again: a value that keeps failing never makes cheap samples health reads.
            plan = batch.health_plan()
            if plan is not None:
                batch.read(ReadKind.HEALTH, plan)
            else:
                batch.read(ReadKind.EDGE)
            batch.decoded = self.health.decode(batch)
            self.health.read(self.presence())
        else:
            batch.read(kind)
        self._energy_read, self._throttle_read, self._energy_mj = energy, throttle, None
        if energy and batch.lacks(fields.FI_TOTAL_ENERGY):  # a driver without the field: its call
            self._energy_mj = self._get("energy", "nvmlDeviceGetTotalEnergyConsumption")
        costs.charge(kind, started)
        self._read_gpm(watched)

    def reading(self) -> DeviceReading:
        """The values after :meth:`begin`, the sample's calls in one pass where they can be."""
        answers = self.calls.answers()
        throttle, events = self.throttle(answers[REASONS])
        return DeviceReading(
            index=self.index,
            memory=answers[MEMORY],
            utilization=answers[UTILIZATION],
            power_watts=self.power(),
            power_average_watts=self.power_average(),
            power_limit_watts=self.health.power_limit,
            energy_counter_joules=self.energy(),
            power_scopes_watts=self.power_scopes(),
            temperatures_celsius=self.temperatures(answers[TEMPERATURE]),
            clocks_hertz=self.clocks(answers[CLOCKS:]),
            throttle_active=throttle,
            clock_events_active=events,
            throttle_counter_seconds=self.throttle_counters(),
            gauges=self.gauges(answers[PSTATE]),
            counters=self.counters(),
            read_at=self.batch.read_at,
        )

    def _read_gpm(self, watched: bool) -> None:
        """One GPM sample of the whole GPU (MIG off or on: the GPU's total), on GPUs with GPM, when its
        period is due (``watched``: a window's). The throughputs of the series the driver counts in
        fields are not asked (its counters win)."""
        gpm = self._context.gpm
        if not gpm.table:  # no GPM family is exported
            return
        if self._gpm_supported is None:
            self._gpm_supported = gpm.supported(self.guard, self.handle)
        if not self._gpm_supported:
            return
        if self.gpm is None:
            presence = self.presence()
            if presence is None:
                return  # its NVLinks not known yet: opened once they are
            self.gpm = gpm.open(self.guard, "nvmlGpmSampleGet", (self.handle,), presence)
            if self.gpm is None:
                return
        if not self.gpm.sample(self.guard, "gpm_sample", watched, self._context.read_costs):
            return
        if not self.gpm.covered:
            counted = self.batch.counters()
            self.gpm.cover({(name, labels) for name in _TRAFFIC for labels in counted.get(name, ())})

    def presence(self) -> Presence | None:
        """The media engines (asked once) and NVLinks (from the health batch's plan) the GPU has; None
        until the plan is known."""
        plan = self.batch.plan
        if plan is None:
            return None
        if self._presence is None:
            counts = engine_counts(self._api.nvml, self.guard, self.handle)
            self._presence = Presence(counts, plan.links)
        return self._presence

    def close(self) -> None:
        """Free the GPM samples (before an NVML reopen, at shutdown)."""
        if self.gpm is not None:
            self.gpm.close()
            self.gpm = None

    # -- values, as the getters and the reading convert them ----------------------------------------
    def memory(self) -> MemoryUsage | None:
        return self.calls.answer(MEMORY)  # type: ignore[no-any-return]

    def utilization(self) -> Utilization | None:
        return self.calls.answer(UTILIZATION)  # type: ignore[no-any-return]

    def temperatures(self, gpu: int | None) -> dict[str, float]:
        """The GPU sensor, and the memory (HBM) sensor from the field batch where the GPU has one."""
        memory = self.batch.field(fields.FI_MEMORY_TEMP)
        return self._kept["temperatures"].of((gpu, memory), _temperatures)

    def power(self) -> float | None:
        """The instantaneous field where the GPU has it; else nvmlDeviceGetPowerUsage where that is
        instantaneous: on a GPU that does not average (pre-Ampere, GA100). On one that averages, the
        call is never taken for the instant power, even where the field failed this once (absent then):
        a 1 s average is no instant reading, nor is it to be integrated as one."""
        milliwatts = self.batch.field(fields.FI_POWER_INSTANT)
        if milliwatts is None and not self._power_usage_averages():
            milliwatts = self._get("power", "nvmlDeviceGetPowerUsage")
        return milliwatts / 1000 if milliwatts is not None else None

    def power_scopes(self) -> dict[str, float]:
        """W of the parts NVML measures apart (a Grace Hopper module, the memory): the scoped instant
        field, else the scoped average; none where the GPU answers neither (most GPUs)."""
        values, scopes = self.batch.values, {}
        for part, instant, average in self.batch.field_set.scopes:
            milliwatts = values.get(instant, values.get(average))
            if milliwatts is not None:
                scopes[part] = milliwatts / 1000
        return self._kept["scopes"].of(tuple(scopes.items()), dict) if scopes else _NO_SCOPES

    def power_parts(self) -> tuple[str, ...]:
        """The parts whose power this GPU measures apart, as far as it answered (those it lacks are
        not asked again)."""
        unsupported = self.batch.unsupported
        return tuple(
            part
            for part, instant, average in self.batch.field_set.scopes
            if instant not in unsupported or average not in unsupported
        )

    def power_average(self) -> float | None:
        """The average field; on a driver without it, nvmlDeviceGetPowerUsage where the GPU averages."""
        milliwatts = self.batch.field(fields.FI_POWER_AVERAGE)
        if milliwatts is None and self._power_usage_averages():
            milliwatts = self._get("power", "nvmlDeviceGetPowerUsage")
        return milliwatts / 1000 if milliwatts is not None else None

    def _power_usage_averages(self) -> bool:
        """Whether nvmlDeviceGetPowerUsage is a 1 s average here: on Ampere and newer but GA100 (an
        unknown GPU is not claimed instantaneous)."""
        capability = self.known.compute_capability if self.known is not None else None
        if capability is None:
            return True
        major, minor = (int(part) for part in capability.split("."))
        return (major, minor) >= AVERAGING_SINCE

    def energy(self) -> float | None:
        """The energy counter where this read asked it: the field, or
        ``nvmlDeviceGetTotalEnergyConsumption`` where the driver lacks the field (a field failing this
        read is counted once, as the call's failure would be). None between two reads of it: the
        sampler then adds the energy the power drew (:class:`~warptd.sampling.counters.PowerIntegral`)."""
        if not self._energy_read:
            return None
        millijoules = self.batch.field(fields.FI_TOTAL_ENERGY)
        if millijoules is None:
            millijoules = self._energy_mj
        return millijoules / 1000 if millijoules is not None else None

    def clocks(self, answers: list[int | None]) -> dict[str, float]:
        """Hz from MHz, by clock (``answers`` in the order of the API's clocks)."""
        return self._kept["clocks"].of(tuple(answers), self._hertz)

    def _hertz(self, answers: tuple[int | None, ...]) -> dict[str, float]:
        clocks = self._api.clocks
        return {
            clock: mhz * 1e6 for (clock, _, _), mhz in zip(clocks, answers, strict=True) if mhz is not None
        }

    def supported_mask(self) -> int:
        """The clock-event reasons the GPU can report (0 while that read fails: asked again)."""
        if self._supported_mask is None:
            mask = self.guard.call_versions(*self._api.reason_versions(self.handle, "Supported"))
            if mask is None:
                return 0
            self._supported_mask = mask
        return self._supported_mask

    def throttle(self, mask: int | None) -> States:
        """The reading's throttle and clock-event states from the active reasons ``mask``."""
        return self._api.states(self.supported_mask(), mask)

    def throttle_counters(self) -> dict[str, float]:
        """Seconds in each reason from the clock-event duration fields (ns), where this read asked them
        (health, edges); the violation counters stand in only where the driver lacks a field, and only
        for the reasons they really count. A reason the numbering gives two ids takes the one answering."""
        counters: dict[str, float] = {}
        if not self._throttle_read:
            return counters
        values, policies, batch = self.batch.values, self._api.policies, self.batch
        for reason, key in batch.field_set.throttle:
            if reason in counters:
                continue
            nanoseconds = values.get(key)
            if nanoseconds is None and self._has_other_id(reason, key):
                continue
            if nanoseconds is None and reason in policies and batch.lacks(key[0]):
                status = self._get(f"violation_{reason}", "nvmlDeviceGetViolationStatus", policies[reason])
                nanoseconds = status.violationTime if status is not None else None
            if nanoseconds is not None:
                counters[reason] = nanoseconds / 1e9
        return counters

    def _has_other_id(self, reason: str, key: fields.FieldKey) -> bool:
        """Whether ``reason`` has another duration id this GPU does not lack (asked beside ``key``)."""
        return any(
            other != key and r == reason and other not in self.batch.unsupported
            for r, other in self.batch.field_set.throttle
        )

    def gauges(self, pstate: int | None) -> dict[str, LabelledValues]:
        """Health from the field batch, GPM activity over the last sample period, nvidia-smi's rest:
        merged again only when one of them is not the dict it handed over last time."""
        gpm = self.gpm.gauges if self.gpm is not None else {}
        parts = (self.batch.gauges(), gpm, self._smi_gauges(pstate))
        return self._kept["gauges"].of(parts, _merged)

    def _smi_gauges(self, pstate: int | None) -> dict[str, LabelledValues]:
        """What nvidia-smi shows beside: the performance state, read every sample, and the fans,
        encoder and decoder utilization of the last read of the slow values."""
        gauges = self.health.gauges
        if pstate is not None and 0 <= pstate <= _LAST_PSTATE:  # NVML_PSTATE_UNKNOWN (32): absent
            return self._kept["smi"].of((gauges, pstate), _with_pstate)
        return gauges

    def counters(self) -> dict[str, LabelledValues]:
        """Health and traffic counters of the field batch; PCIe and NVLink bytes integrated from GPM
        throughput stand in for each series the driver keeps no counter of."""
        counted = self.batch.counters()
        gpm = self.gpm.counters() if self.gpm is not None else {}
        integrated = {metric: series for metric, series in gpm.items() if series}
        totals = self.batch.totals
        if totals is not None:  # the driver's time on this GPU's fields, as of the last health batch
            integrated[_LATENCY.metric.name] = {(): _LATENCY.convert(totals.published_us)}
        if not integrated:
            return counted  # the batch's own dict: the sampler knows it again by identity
        counters = dict(counted)
        for metric, series in integrated.items():
            batched = counters.get(metric)
            counters[metric] = {**series, **batched} if batched else series
        return counters

    # -- identity ------------------------------------------------------------------------------------
    def uuid(self) -> str | None:
        """The GPU's UUID, asked once; the last one listed while NVML refuses its handle."""
        if self.handle is None:
            return self.known.uuid if self.known else None
        if self._uuid is None:
            uuid = self._get("uuid", "nvmlDeviceGetUUID")
            if uuid is None:
                return None
            self._uuid = text(uuid)
        return self._uuid

    def info(self, driver: str | None) -> GPUInfo:
        """The GPU's identity now (the last one listed where NVML refused its handle)."""
        if self.handle is None:  # lost at the last reopen: keep its identity, so it shows as down
            return self.known or GPUInfo(index=self.index, model="NVIDIA GPU")
        nvml, guard, handle = self._api.nvml, self.guard, self.handle
        name = guard.call("name", nvml.nvmlDeviceGetName, handle)
        uuid = guard.call("uuid", nvml.nvmlDeviceGetUUID, handle)
        cc = guard.call("cc", nvml.nvmlDeviceGetCudaComputeCapability, handle)
        pci = guard.call("pci", nvml.nvmlDeviceGetPciInfo, handle)
        bus_id = text(pci.busId) if pci is not None else None
        memory = self.memory()
        return GPUInfo(
            index=self.index,
            model=text(name) if name is not None else "NVIDIA GPU",
            **GPUInfo.memory_fields(memory.total if memory else None),
            uuid=text(uuid) if uuid is not None else None,
            compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
            pcie_gen=guard.call("pcie_gen", nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
            pci_bus_id=bus_id,
            driver_version=driver,
            aliases=self._mig_uuids(),
            driver_instance=self._driver_instance(bus_id),
        )

    def _driver_instance(self, bus_id: str | None) -> DriverInstance:
        """The driver's current initialisation of the GPU, the one known before while it is the same
        (its start, from whole seconds of uptime, varies by a second from one reading to the next)."""
        now = driver_instance(self._api.nvml, self.guard, self.handle, bus_id, self._context.settings().sysfs)
        known = self.known.driver_instance if self.known is not None else None
        return known if known is not None and now.same_as(known) and now.sysfs == known.sysfs else now

    def _mig_uuids(self) -> list[str] | None:
        """The ``MIG-…`` UUIDs of the GPU's MIG devices: the IDs NVIDIA's device plugin gives pods that
        hold a MIG slice, so their allocation and energy are matched to this GPU."""
        nvml, uuids = self._api.nvml, []
        for mig in mig_device_handles(self.guard, nvml, self.handle):
            uuid = self.guard.call("mig_uuid", nvml.nvmlDeviceGetUUID, mig)
            if uuid is not None:
                uuids.append(text(uuid))
        return uuids or None

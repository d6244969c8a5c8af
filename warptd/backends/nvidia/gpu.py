"""One NVIDIA GPU as a device object: its NVML handle, its read plan (field batches, the prepared calls
of a sample) and its state, each job in a part of its own: the counters read at edges
(:mod:`~warptd.backends.nvidia.edges`), power (:mod:`~warptd.backends.nvidia.power`), GPM activity
(:mod:`~warptd.backends.nvidia.activity`), the health values (:mod:`~warptd.backends.nvidia.health`) and
its identity (:mod:`~warptd.backends.nvidia.identity`).

The read plan reads each value as often as it changes and no more, at the price a real driver charges
(``docs/hardware.md``): power, memory, utilization, clocks, temperatures and the clock-event bitmask
every sample (µs each); the energy counter (2.9 ms of CPU on an H200, refreshed every 100 ms) every
``--energy-interval``; throttle times and health every ``--health-interval``; GPM at most once a second
outside windows. A window, profile, stress job or workload recording reads the energy counter and the
throttle times at its edges (the plan's ``edge``), so what it measures is the driver's own counters.

Readings follow nvml.h rather than the names of the calls: v1 memory "used" includes driver-reserved
memory, so memory is read with ``nvmlMemory_v2`` where the driver has it.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from warptd.backends.cadence import DeviceCadence
from warptd.backends.costs import ReadCosts, ReadKind, thread_time
from warptd.backends.device import ReadPlan
from warptd.backends.kept import Kept
from warptd.backends.nvidia import fields
from warptd.backends.nvidia.activity import GpuActivity
from warptd.backends.nvidia.api import GpuHandle, NvmlApi, States
from warptd.backends.nvidia.batch import FieldBatch
from warptd.backends.nvidia.edges import EdgeCounters, read_kind
from warptd.backends.nvidia.fields import FieldSet
from warptd.backends.nvidia.gpm import GpmContext
from warptd.backends.nvidia.guard import DeviceGuard
from warptd.backends.nvidia.health import HealthValues
from warptd.backends.nvidia.identity import GpuIdentity
from warptd.backends.nvidia.power import GpuPower
from warptd.backends.nvidia.sample import (
    CLOCKS,
    MEMORY,
    PSTATE,
    REASONS,
    TEMPERATURE,
    UTILIZATION,
    SampleCalls,
)
from warptd.metrics import nvidia
from warptd.metrics.spec import Cadence
from warptd.models import DeviceReading, LabelledValues, MemoryUsage, Utilization

if TYPE_CHECKING:
    from warptd.config import Settings

_LAST_PSTATE = 15  # NVML_PSTATE_15


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


def _temperatures(sensors: tuple[int | None, float | None]) -> dict[str, float]:
    """By sensor: the GPU's (a call), the memory's (a field)."""
    gpu, memory = sensors
    temperatures = {"gpu": float(gpu)} if gpu is not None else {}
    if memory is not None:
        temperatures["memory"] = memory
    return temperatures


def _merged(parts: tuple[dict[str, LabelledValues], ...]) -> dict[str, LabelledValues]:
    return {metric: series for part in parts for metric, series in part.items()}


def _merged_counters(
    raw: tuple[dict[str, LabelledValues], dict[str, LabelledValues], int | None],
) -> dict[str, LabelledValues]:
    """The batch's counters, with GPM's integrated bytes for the series it lacks, and the driver's time
    on the GPU's fields (µs as of the last full batch) where known."""
    counted, activity, published_us = raw
    integrated = {metric: series for metric, series in activity.items() if series}
    if published_us is not None:
        integrated[nvidia.FIELD_LATENCY.name] = {(): published_us / 1e6}
    if not integrated:
        return counted  # the batch's own dict: the sampler knows it again by identity
    counters = dict(counted)
    for metric, series in integrated.items():
        batched = counters.get(metric)
        counters[metric] = {**series, **batched} if batched else series
    return counters


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
        asked = GpuHandle(api, guard, handle)
        self.batch = batch = FieldBatch(asked, context.field_set, before.batch.totals if before else None)
        self.calls = SampleCalls(api, guard, handle)
        self.health = HealthValues(asked, context.field_set.reads)
        self.cadence = DeviceCadence(context.settings)  # when the slow values are read again
        self.energy_cadence = DeviceCadence(context.settings, Cadence.ENERGY)
        self.identity = GpuIdentity(index, asked, context.settings, before.identity.known if before else None)
        self.edges = EdgeCounters(asked, batch)
        self.power = GpuPower(asked, batch, lambda: self.identity.compute_capability)
        self.activity = GpuActivity(asked, batch, context.gpm, context.read_costs)
        self._supported_mask: int | None = None  # the clock-event reasons it can report
        #: By value: what was made of its last answers (:mod:`~warptd.backends.kept`).
        self._kept: defaultdict[str, Kept[Any]] = defaultdict(Kept)

    # -- reads ---------------------------------------------------------------------------------------
    def read(self, plan: ReadPlan) -> DeviceReading:
        """Every value of the GPU, batched reads first; ``up=False`` where it turned out lost (its slow
        values are then read at once when it is back). ``plan.watched``: a window records it (GPM then
        follows the window's pace); ``plan.edge``: a window, profile, stress job or workload recording
        begins or ends here, so the energy counter and the throttle times are read whatever their
        cadence. A power-only plan reads the whole GPU too: no power backend reads NVIDIA GPUs so
        (``nvml`` reads the parts NVML measures apart: :meth:`read_scopes`)."""
        guard = self.guard
        guard.lost = False
        self.begin(watched=plan.watched, edge=plan.edge)
        reading = None if guard.lost else self.reading()
        if reading is None or guard.lost:  # lost at the batches, or at a call after them
            self.cadence.forget()
            self.energy_cadence.forget()
            return DeviceReading(index=self.index, up=False)
        return reading

    def read_scopes(self) -> dict[str, float] | None:
        """The power of the parts NVML measures apart (:meth:`GpuPower.scopes`), read now alone; None
        when the GPU turned out lost."""
        self.guard.lost = False
        started = thread_time()
        self.batch.read(ReadKind.SCOPES)
        self._context.read_costs.charge(ReadKind.SCOPES, started)
        return None if self.guard.lost else self.power.scopes()

    def begin(self, watched: bool = False, edge: bool = False) -> None:
        """The batched reads of this read's plan: the cheap sample's fields, with the energy counter when
        its cadence or an edge asks, the throttle times at an edge; every ``--health-interval`` the full
        batch (every field: health, links, counters), decoded once for the gauges and counters, and the
        other slow values; then (full reads only) the GPM sample. Each kind is charged its CPU."""
        batch, costs = self.batch, self._context.read_costs
        started = thread_time()
        settings = self._context.settings()
        pace = settings.window_interval if watched else None  # a window reads it that often
        kind = read_kind(self.cadence, self.energy_cadence, edge, pace)
        if kind is ReadKind.HEALTH:
            # What fails now (a field or call answering UNKNOWN, NO_PERMISSION, TIMEOUT; the link
            # count, so no full plan yet) is counted and absent until the next health read, which
            # asks it again: a value that keeps failing never makes cheap samples health reads.
            plan = batch.health_plan()
            if plan is not None:
                batch.read(ReadKind.HEALTH, plan)
            else:
                batch.read(ReadKind.EDGE)
            batch.decoded = self.health.decode(batch)
            self.health.read(self.activity.presence())
        else:
            batch.read(kind)
        self.edges.asked(kind)
        costs.charge(kind, started)
        self.activity.sample(watched)

    def reading(self, answers: list[Any] | None = None) -> DeviceReading:
        """The values after :meth:`begin`; ``answers``: the sample's calls by slot, made in one pass
        where they can be when not given. Under the UUID last listed: the one the sampler publishes
        the reading under, so that it need not copy it to set it."""
        answers = self.calls.answers() if answers is None else answers
        throttle, events = self.throttle(answers[REASONS])
        known = self.identity.known
        return DeviceReading(
            index=self.index,
            uuid=(known.uuid or "") if known is not None else "",
            memory=answers[MEMORY],
            utilization=answers[UTILIZATION],
            power_watts=self.power.instant(),
            power_average_watts=self.power.average(),
            power_limit_watts=self.health.power_limit,
            energy_counter_joules=self.edges.energy(),
            power_scopes_watts=self.power.scopes(),
            temperatures_celsius=self.temperatures(answers[TEMPERATURE]),
            clocks_hertz=self.clocks(answers[CLOCKS:]),
            throttle_active=throttle,
            clock_events_active=events,
            throttle_counter_seconds=self.edges.throttle_seconds(),
            gauges=self.gauges(answers[PSTATE]),
            counters=self.counters(),
            read_at=self.batch.read_at,
        )

    def close(self) -> None:
        """Free the GPM samples (before an NVML reopen, at shutdown)."""
        self.activity.close()

    # -- values --------------------------------------------------------------------------------------
    def memory(self) -> MemoryUsage | None:
        """Total, used (as nvidia-smi shows it), reserved and free memory now, bytes."""
        return self.calls.answer(MEMORY)  # type: ignore[no-any-return]

    def utilization(self) -> Utilization | None:
        """GPU and memory-controller busy ratios over the driver's last sample period, 0..1."""
        return self.calls.answer(UTILIZATION)  # type: ignore[no-any-return]

    def temperatures(self, gpu: int | None) -> dict[str, float]:
        """°C: the GPU sensor, and the memory (HBM) sensor from the field batch where the GPU has one."""
        memory = self.batch.field(fields.FI_MEMORY_TEMP)
        return self._kept["temperatures"].of((gpu, memory), _temperatures)

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

    def gauges(self, pstate: int | None) -> dict[str, LabelledValues]:
        """Health from the field batch, GPM activity over the last sample period, nvidia-smi's rest:
        merged again only when one of them is not the dict it handed over last time."""
        parts = (self.batch.gauges(), self.activity.gauges(), self._smi_gauges(pstate))
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
        throughput stand in for each series the driver keeps no counter of. Merged again only when
        one of them changed (GPM integrates once a second, the batch decodes every health read)."""
        totals = self.batch.totals
        published_us = totals.published_us if totals is not None else None
        return self._kept["counters"].of(
            (self.batch.counters(), self.activity.counters(), published_us), _merged_counters
        )

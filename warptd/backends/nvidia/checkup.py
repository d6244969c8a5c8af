"""What ``warptd doctor`` asks of the NVIDIA GPUs (:mod:`warptd.backends.checkup`), after one full read of
each: the field numbering chosen and why, and which clock-event duration ids answered; the CPU of every
read of the plan (each field batch kind, the prepared calls, the slow values, a GPM sample with its
metrics, the energy call), each the median of a few calls of that exact read; how often energy and
power change; the paths that must agree (field 83 and ``nvmlDeviceGetTotalEnergyConsumption``, field
185 and ``nvmlDeviceGetPowerUsage``, GPM SM activity and utilization on an idle GPU); and what a GPU
has no series of, and why (the prices of the plan's reads: :mod:`~warptd.backends.nvidia.prices`).
Reads only: nothing of the backend's own state changes.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from warptd.backends.checkup import (
    Absent,
    Agreement,
    BackendCheckup,
    CheckupPlan,
    DeviceCheckup,
    NumberingCheck,
    ReadPrice,
    Refresh,
    interval_key,
    sdk_versions,
)
from warptd.backends.costs import ReadKind, thread_time
from warptd.backends.nvidia import calls, fields
from warptd.backends.nvidia.engines import MEDIA_UTILIZATION
from warptd.backends.nvidia.fields import FieldKey, FieldRequest
from warptd.backends.nvidia.gpm import MIN_SAMPLE_GAP_S, GpmContext, GpmSource
from warptd.backends.nvidia.gpu import Gpu
from warptd.backends.nvidia.power import AVERAGING_SINCE
from warptd.backends.nvidia.prices import Prices, plan_rates
from warptd.backends.nvidia.session import text
from warptd.errors import ErrorKind
from warptd.metrics import catalog, nvidia

if TYPE_CHECKING:
    from warptd.backends.nvidia.api import NvmlApi
    from warptd.backends.nvidia.backend import NvidiaBackend

ENERGY_PAIR = "field 83 = nvmlDeviceGetTotalEnergyConsumption"
POWER_PAIR = "field 185 = nvmlDeviceGetPowerUsage"
ACTIVITY_PAIR = "GPM SM activity = utilization, idle"
#: The value each pair reads, in plain words.
_VALUES = {
    ENERGY_PAIR: "the energy counter",
    POWER_PAIR: "the 1 s average power",
    ACTIVITY_PAIR: "SM activity on an idle GPU",
}
#: The energy counter refreshes every 100 ms: two reads of it may be one refresh apart.
ENERGY_REFRESH_S = 0.1
#: How often the driver refreshes the two reads of its 1 s average power (shared/notes/real-h200.md):
#: field 185 every 100 ms, nvmlDeviceGetPowerUsage every 50 ms. Read back to back, what they hold may
#: be as old as the longer period apart, and the average moves meanwhile: by that time, a second
#: (its window), times what the instant power spanned.
AVERAGE_REFRESH_APART_S = 0.1
#: So the instant power (field 186) is watched this long before the two are compared (the second both
#: averages cover, and a refresh), this often (it refreshes every 100 ms).
POWER_WATCH_S = 1.2
POWER_WATCH_EVERY_S = 0.02
#: Two reads of the 1 s average power agree within this share of it (and a watt).
AVERAGE_SHARE = 0.03
#: SM activity an idle GPU may show (a tick of the driver's own work).
IDLE_SM = 0.02
#: nvml.h: utilization is over "the past sample period", between 1/6 s and 1 s by product. A reading
#: stays that long at least, so reads this often see every period; the last one covering a span is
#: read by the longest period after it.
UTILIZATION_POLL_S = 0.1
UTILIZATION_LONGEST_PERIOD_S = 1.0
_ENERGY: FieldKey = (fields.FI_TOTAL_ENERGY, 0)
_INSTANT: FieldKey = (fields.FI_POWER_INSTANT, 0)
_AVERAGE: FieldKey = (fields.FI_POWER_AVERAGE, 0)
_POLLED = {
    _ENERGY: "energy counter (field 83)",
    _INSTANT: "instant power (field 186)",
    _AVERAGE: "average power (field 185)",
}

#: The NVLink families: each link's and the GPU's totals.
_NVLINK = (nvidia.NVLINK_ERRORS, nvidia.NVLINK_LINK_ERRORS, nvidia.NVLINK_BYTES, nvidia.NVLINK_LINK_BYTES)


def checkup(backend: NvidiaBackend, api: NvmlApi, plan: CheckupPlan) -> BackendCheckup:
    """Every GPU of ``backend`` that NVML hands out, each read after the backend's first full read."""
    settings, reads = backend.settings, backend.selection.reads
    driver = backend.get_driver_version()
    numbering = fields.numbering(driver)
    rates = {interval_key(i): plan_rates(settings, i) for i in plan.intervals}
    gpus = [gpu for gpu in backend.gpus if gpu.handle is not None]
    notes = [f"GPU {gpu.index}: NVML refused its handle" for gpu in backend.gpus if gpu.handle is None]
    probes = [_Probe(gpu, api, plan, rates) for gpu in gpus]
    for probe in probes:
        probe.gpu.batch.health_plan()  # built by the first health read; asked here where it failed then
    gpm = _gpm(probes, backend, api, plan, rates)
    activity = _activity_pairs(probes, gpm)  # at once: utilization must still cover the GPM pair
    refresh = [r for probe in _first_of_each_model(probes) for r in probe.poll(plan)]
    power = _power_pairs(probes)
    agreements = []
    for probe in probes:
        agreements += [probe.energy_pair(), power[probe.index], activity[probe.index]]
    devices = [
        DeviceCheckup(
            index=probe.index,
            model=probe.model,
            uuid=probe.gpu.identity.uuid(),
            prices=(*probe.prices.of_plan(settings), *gpm[probe.index].prices),
            durations=probe.durations(),
            absent=probe.absent(reads),
        )
        for probe in probes
    ]
    if not reads(catalog.THROTTLE_SECONDS.name):
        notes.append(f"{catalog.THROTTLE_SECONDS.name} is not exported: no duration field is asked")
    return BackendCheckup(
        backend=backend.name,
        source=backend.source,
        kind="accelerator",
        driver=driver,
        sdk={**sdk_versions(backend.sdk), **_library_versions(api)},
        numbering=_numbering_check(numbering, driver),
        devices=tuple(devices),
        refresh=tuple(refresh),
        agreements=tuple(agreements),
        notes=tuple(notes),
    )


def _numbering_check(numbering: fields.Numbering, driver: str | None) -> NumberingCheck:
    if numbering.ambiguous:
        why = f"ambiguous: both ranges asked, the 64-bit one kept (driver {driver}: {numbering.branch})"
    else:
        why = f"driver {driver} is in {numbering.branch}"
    return NumberingCheck(branch=numbering.branch, why=why, asked=dict(numbering.throttle))


def _library_versions(api: NvmlApi) -> dict[str, str]:
    """NVML's own version and the CUDA driver's, where the library answers them."""
    nvml, versions = api.nvml, {}
    for name, label, shown in (
        ("nvmlSystemGetNVMLVersion", "NVML", text),
        ("nvmlSystemGetCudaDriverVersion_v2", "CUDA driver", lambda v: f"{v // 1000}.{v % 1000 // 10}"),
    ):
        function = api.function(name)
        try:
            versions[label] = shown(function()) if function is not None else None
        except nvml.NVMLError:
            continue
    return {label: version for label, version in versions.items() if version is not None}


def _first_of_each_model(probes: Sequence[_Probe]) -> list[_Probe]:
    """The first GPU of each model: how often a value refreshes is the driver's, per model."""
    seen: dict[str, _Probe] = {}
    for probe in probes:
        seen.setdefault(probe.model, probe)
    return list(seen.values())


class _GpmResult:
    """One GPU's GPM pairs as measured: their price, the SM activity of the last one (or why not), the
    GPU's utilization read with each of that pair's two samples, and when the pair ended (monotonic)."""

    def __init__(
        self,
        prices: tuple[ReadPrice, ...] = (),
        sm_active: float | None = None,
        why: str = "",
        utilization: tuple[float | None, ...] = (),
        ended_at: float = 0.0,
    ) -> None:
        self.prices, self.sm_active, self.why = prices, sm_active, why
        self.utilization, self.ended_at = utilization, ended_at


def _gpm(
    probes: Sequence[_Probe],
    backend: NvidiaBackend,
    api: NvmlApi,
    plan: CheckupPlan,
    rates: dict[str, dict[str, float]],
) -> dict[int, _GpmResult]:
    """A few GPM pairs (``nvmlGpmSampleGet`` + ``nvmlGpmMetricsGet`` of the metrics the backend asks)
    of every GPU with GPM, from sources of the doctor's own (:func:`_gpm_pairs`)."""
    context = GpmContext(
        api.nvml,
        lambda exc: backend.classify_error(exc) is ErrorKind.NOT_SUPPORTED,
        gap=lambda watched: MIN_SAMPLE_GAP_S,
        reject=lambda n: None,
        reads=backend.selection.reads,
    )
    if not context.table:
        return {p.index: _GpmResult(why="GPM is not read: no GPM family is exported") for p in probes}
    results: dict[int, _GpmResult] = {}
    sources: dict[int, tuple[_Probe, GpmSource]] = {}
    for probe in probes:
        gpu = probe.gpu
        source = None
        if context.supported(gpu.guard, gpu.handle):
            source = context.open(gpu.guard, "nvmlGpmSampleGet", (gpu.handle,), gpu.activity.presence())
        if source is None:
            results[probe.index] = _GpmResult(why="no GPM on this GPU (Hopper and newer have it)")
        else:
            sources[probe.index] = (probe, source)
    try:
        return {**results, **_gpm_pairs(sources, plan, rates)}
    finally:
        for _, source in sources.values():
            source.close()


def _gpm_pairs(
    sources: dict[int, tuple[_Probe, GpmSource]], plan: CheckupPlan, rates: dict[str, dict[str, float]]
) -> dict[int, _GpmResult]:
    """The GPUs' pairs taken in turn 110 ms apart (the driver refreshes its counters every 100 ms):
    each pair's CPU, the last pair's SM activity, and utilization read right after each GPU's samples
    (the last pair's two say whether it was idle)."""
    spent: dict[int, list[float]] = {index: [] for index in sources}
    busy: dict[int, list[float | None]] = {index: [] for index in sources}
    ended: dict[int, float] = {}
    for pair in range(plan.gpm_pairs + 1):
        began = time.monotonic()
        for index, (probe, source) in sources.items():
            started = thread_time()
            if source.sample(probe.gpu.guard, "doctor_gpm_sample") and pair:
                spent[index].append(thread_time() - started)
            busy[index].append(probe.compute())
            ended[index] = time.monotonic()
        time.sleep(max(0.0, began + MIN_SAMPLE_GAP_S + 0.005 - time.monotonic()))
    results = {}
    for index, (_, source) in sources.items():
        metrics, cpu = len(source.metrics), spent[index]
        price = ReadPrice(
            read=f"GPM sample + metrics ({metrics})",
            what=f"GPM activity ({metrics} metrics)",
            charged_as=ReadKind.GPM,
            cpu_seconds=statistics.median(cpu) if cpu else 0.0,
            measured=len(cpu),
            cadence="once a second",
            per_second={key: rate.get(ReadKind.GPM, 0.0) for key, rate in rates.items()},
        )
        active = source.gauges.get(nvidia.SM_ACTIVE.name, {}).get(())
        why = "" if active is not None else f"{nvidia.SM_ACTIVE.name} is not read or did not answer"
        last = tuple(busy[index][-2:])
        results[index] = _GpmResult((price,) if cpu else (), active, why, last, ended[index])
    return results


def _activity_pairs(probes: Sequence[_Probe], gpm: dict[int, _GpmResult]) -> dict[int, Agreement]:
    """GPM's SM activity against utilization over the same span, by GPU. Utilization read with the
    pair's samples and not 0 (a job ran, or just ended): skipped. SM activity that would disagree is
    confirmed first: utilization is read on every :data:`UTILIZATION_POLL_S` until the driver's longest
    period has passed since the pair, so a period covering it that saw a kernel is seen (the GPUs
    together, at most a second, only then)."""
    found: dict[int, Agreement] = {}
    doubtful: list[_Probe] = []
    for probe in probes:
        result = gpm.get(probe.index)
        verdict = probe.activity_pair(result)
        if verdict is None and result is not None:
            doubtful.append(probe)
        else:
            found[probe.index] = verdict or probe.pair(ACTIVITY_PAIR, "skipped", "GPM not measured")
    if not doubtful:
        return found
    until = max(gpm[probe.index].ended_at for probe in doubtful) + UTILIZATION_LONGEST_PERIOD_S
    seen: dict[int, float] = dict.fromkeys((probe.index for probe in doubtful), 0.0)
    while True:
        for probe in doubtful:
            seen[probe.index] = max(seen[probe.index], probe.compute() or 0.0)
        if time.monotonic() >= until:
            break
        time.sleep(min(UTILIZATION_POLL_S, max(0.0, until - time.monotonic())))
    for probe in doubtful:
        active = gpm[probe.index].sm_active or 0.0
        if seen[probe.index] > 0:
            why = (
                f"the GPU was busy around the GPM pair (utilization {seen[probe.index]:.0%} within a second)"
            )
            found[probe.index] = probe.pair(ACTIVITY_PAIR, "skipped", why)
        else:
            said = f"SM active {active:.1%}, utilization 0 % from the pair to a second after it"
            found[probe.index] = probe.pair(ACTIVITY_PAIR, "disagree", said)
    return found


def _power_pairs(probes: Sequence[_Probe]) -> dict[int, Agreement]:
    """Field 185 and ``nvmlDeviceGetPowerUsage`` on every GPU: the instant power watched for
    :data:`POWER_WATCH_S` (the GPUs together), then the field, the call and the field back to back. On a
    steady load they agree within :data:`AVERAGE_SHARE` and a watt; on a changing one (a ramp) also
    within what the 1 s average can move in the :data:`AVERAGE_REFRESH_APART_S` their refreshes may
    be apart: that time over a second, times what the instant power spanned."""
    found = {probe.index: skip for probe in probes if (skip := probe.power_skip()) is not None}
    watched = [probe for probe in probes if probe.index not in found]
    seen: dict[int, list[float]] = {probe.index: [] for probe in watched}
    until = time.monotonic() + POWER_WATCH_S
    while watched:
        for probe in watched:
            try:
                instant = probe.instant()
            except probe.api.nvml.NVMLError:
                continue
            if instant is not None:
                seen[probe.index].append(instant)
        if time.monotonic() >= until:
            break
        time.sleep(POWER_WATCH_EVERY_S)
    for probe in watched:
        try:
            before, called, after = probe.average(), float(probe.power_call()), probe.average()
        except probe.api.nvml.NVMLError as exc:
            found[probe.index] = probe.pair(POWER_PAIR, "skipped", f"not answered: {exc}")
            continue
        found[probe.index] = probe.power_verdict(before, called, after, seen[probe.index])
    return found


class _Probe:
    """The doctor's reads of one GPU: its own requests and calls beside the GPU's plan."""

    def __init__(self, gpu: Gpu, api: NvmlApi, plan: CheckupPlan, rates: dict[str, dict[str, float]]) -> None:
        self.gpu, self.api, self.index = gpu, api, gpu.index
        self.model = gpu.identity.known.model if gpu.identity.known is not None else "NVIDIA GPU"
        nvml, handle = api.nvml, gpu.handle
        self.energy_call = calls.scalar(
            nvml, "nvmlDeviceGetTotalEnergyConsumption", handle, out=ctypes.c_ulonglong
        )
        self.power_call = calls.scalar(nvml, "nvmlDeviceGetPowerUsage", handle)
        #: Its plan's reads priced: each the median of ``plan.calls`` calls, made as often as ``rates`` say.
        self.prices = Prices(gpu, api, plan.calls, rates, self.energy_call)

    # -- what the plan found ---------------------------------------------------------------------------
    def durations(self) -> dict[str, int]:
        """Each clock event's duration id that answered (a 64-bit value) in the full reads so far."""
        batch = self.gpu.batch
        return {reason: key[0] for reason, key in batch.field_set.throttle if key not in batch.unsupported}

    # -- how often values change -------------------------------------------------------------------------
    def poll(self, plan: CheckupPlan) -> list[Refresh]:
        """Energy, instant and average power, read together every ``poll_every_s`` for ``poll_s``: the
        median gap between changes of each."""
        gpu, nvml = self.gpu, self.api.nvml
        keys = tuple(key for key in _POLLED if key not in gpu.batch.unsupported)
        if not keys:
            return []
        request = FieldRequest(nvml, keys, frozenset())
        changed: dict[FieldKey, list[float]] = {key: [] for key in keys}
        last: dict[FieldKey, float] = {}
        began = next_poll = time.monotonic()
        while time.monotonic() < began + plan.poll_s:
            try:
                answers = request.send(gpu.handle)
            except nvml.NVMLError:
                return []
            at = time.monotonic()
            for key, code, _, value in self.api.unpack(answers):
                if code != nvml.NVML_SUCCESS or value is None:
                    continue
                if key in last and value != last[key]:
                    changed[key].append(at)
                last[key] = value
            next_poll += plan.poll_every_s
            time.sleep(max(0.0, next_poll - time.monotonic()))
        polled = time.monotonic() - began
        found = []
        for key, times in changed.items():
            gaps = [later - earlier for earlier, later in pairwise(times)]
            found.append(
                Refresh(
                    value=_POLLED[key],
                    device=self.index,
                    median_seconds=statistics.median(gaps) if gaps else None,
                    changes=len(times),
                    polled_seconds=polled,
                    poll_seconds=plan.poll_every_s,
                )
            )
        return found

    # -- paths that must agree ---------------------------------------------------------------------------
    def _fields(self, keys: tuple[FieldKey, ...]) -> dict[FieldKey, float]:
        """One batch of ``keys`` now: the values that answered."""
        nvml = self.api.nvml
        answers = FieldRequest(nvml, keys, frozenset()).send(self.gpu.handle)
        return {
            key: float(value)
            for key, code, _, value in self.api.unpack(answers)
            if code == nvml.NVML_SUCCESS and value is not None
        }

    def pair(self, pair: str, status: str, detail: str) -> Agreement:
        return Agreement(
            pair=pair,
            value=_VALUES[pair],
            device=self.index,
            status=status,
            detail=detail,  # type: ignore[arg-type]
        )

    def compute(self) -> float | None:
        """The GPU's utilization now (``nvmlDeviceGetUtilizationRates``), None where it did not answer."""
        utilization = self.gpu.utilization()
        return utilization.compute if utilization is not None else None

    def average(self) -> float | None:
        """Field 185 now, mW."""
        return self._fields((_AVERAGE,)).get(_AVERAGE)

    def instant(self) -> float | None:
        """Field 186 now, mW."""
        return self._fields((_INSTANT,)).get(_INSTANT)

    def energy_pair(self) -> Agreement:
        """Field 83 and ``nvmlDeviceGetTotalEnergyConsumption``, one counter, read back to back: equal,
        or apart by at most the power (the enforced limit, or the instant power where higher) times the
        time between the reads and one 100 ms refresh."""
        gpu, nvml = self.gpu, self.api.nvml
        if gpu.batch.lacks(fields.FI_TOTAL_ENERGY):
            return self.pair(ENERGY_PAIR, "skipped", "the GPU lacks field 83: the call stands in for it")
        try:
            with _timed() as field_at:
                values = self._fields((_INSTANT, _ENERGY))
            with _timed() as call_at:
                called = float(self.energy_call())
        except nvml.NVMLError as exc:
            return self.pair(ENERGY_PAIR, "skipped", f"not answered: {exc}")
        field = values.get(_ENERGY)
        if field is None:
            return self.pair(ENERGY_PAIR, "skipped", "field 83 did not answer")
        instant = values.get(_INSTANT, 0.0) / 1000
        watts = max(instant, gpu.health.power_limit or 0.0) or 1000.0  # the most it may draw meanwhile
        apart = call_at.middle - field_at.middle
        allowed, off = watts * (apart + ENERGY_REFRESH_S), abs(called - field) / 1000
        said = f"field {field / 1000:.3f} J, call {called / 1000:.3f} J, {apart * 1e3:.1f} ms apart"
        if off == 0:
            return self.pair(ENERGY_PAIR, "agree", f"{said}: equal")
        status = "agree" if off <= allowed else "disagree"
        return self.pair(
            ENERGY_PAIR, status, f"{said}: {off:.3f} J apart, {allowed:.3f} J allowed at {watts:.0f} W"
        )

    def power_skip(self) -> Agreement | None:
        """Why field 185 and ``nvmlDeviceGetPowerUsage`` are not compared on this GPU, or None."""
        gpu = self.gpu
        if not gpu.batch.field_set.numbering.power or gpu.batch.lacks(fields.FI_POWER_AVERAGE):
            return self.pair(POWER_PAIR, "skipped", "no field 185 (a driver before R535, or this GPU)")
        capability = gpu.identity.known.compute_capability if gpu.identity.known is not None else None
        if capability and tuple(int(part) for part in capability.split(".")) < AVERAGING_SINCE:
            return self.pair(
                POWER_PAIR, "skipped", "nvmlDeviceGetPowerUsage is the instant power before Ampere"
            )
        return None

    def power_verdict(
        self, before: float | None, called: float | None, after: float | None, instant: Sequence[float]
    ) -> Agreement:
        """The call against the field read before and after it (mW), given the instant power over the
        second before (:func:`_power_pairs`; none answered: the power limit stands for its span)."""
        if before is None or after is None or called is None:
            return self.pair(POWER_PAIR, "skipped", "field 185 did not answer")
        limit = (self.gpu.health.power_limit or 0.0) * 1000
        spread = max(instant) - min(instant) if instant else limit
        moved = spread * AVERAGE_REFRESH_APART_S  # the most the 1 s average moves meanwhile, mW
        low, high = min(before, after), max(before, after)
        agree = (
            low * (1 - AVERAGE_SHARE) - 1000 - moved <= called <= high * (1 + AVERAGE_SHARE) + 1000 + moved
        )
        detail = f"field {before / 1000:.1f} W, call {called / 1000:.1f} W, field {after / 1000:.1f} W"
        if moved:
            detail += f" (load spanning {spread / 1000:.0f} W: {moved / 1000:.1f} W more allowed)"
        return self.pair(POWER_PAIR, "agree" if agree else "disagree", detail)

    def activity_pair(self, gpm: _GpmResult | None) -> Agreement | None:
        """GPM's SM activity and ``nvmlDeviceGetUtilizationRates`` read with the pair's two samples: both
        about 0 on an idle GPU. None: SM activity above idle while utilization read 0, to be confirmed
        over the driver's utilization periods (:func:`_activity_pairs`)."""
        if gpm is None or gpm.sm_active is None:
            return self.pair(ACTIVITY_PAIR, "skipped", gpm.why if gpm is not None else "GPM not measured")
        if not gpm.utilization or None in gpm.utilization:
            return self.pair(ACTIVITY_PAIR, "skipped", "utilization did not answer")
        busiest = max(value or 0.0 for value in gpm.utilization)
        if busiest > 0:
            why = f"the GPU is busy (utilization {busiest:.0%} during the GPM pair)"
            return self.pair(ACTIVITY_PAIR, "skipped", why)
        if gpm.sm_active <= IDLE_SM:
            return self.pair(ACTIVITY_PAIR, "agree", f"SM active {gpm.sm_active:.1%}, utilization 0 %")
        return None

    # -- what has no series --------------------------------------------------------------------------------
    def absent(self, reads: Callable[..., bool]) -> tuple[Absent, ...]:
        """Families of hardware the GPU lacks (NVLinks, media engines), of fields it answers NOT_SUPPORTED,
        and its fans where it has none: those the selection reads."""
        gpu, batch, found = self.gpu, self.gpu.batch, []

        def add(families: Sequence[catalog.MetricSpec], reason: str) -> None:
            wanted = tuple(spec.name for spec in families if reads(spec.name))
            if wanted:
                found.append(Absent(families=wanted, reason=reason))

        plan = batch.plan
        if plan is not None and plan.links == 0:
            add(_NVLINK, f"no NVLink: {self._links_answer()}")
        presence = gpu.activity.presence()
        if presence is not None and presence.counts is None:
            add(
                (nvidia.ENGINE_ACTIVE, *MEDIA_UTILIZATION.values()),
                "media engines: NVML gives no count with MIG off (GPU instance profiles NOT_SUPPORTED); "
                "an engine's series, and its kind's average, shows once it reports activity",
            )
        elif presence is not None and presence.counts is not None:
            lacking = {engine: n for engine, n in presence.counts.items()}
            families = [nvidia.ENGINE_ACTIVE]
            families += [spec for engine, spec in MEDIA_UTILIZATION.items() if lacking.get(engine) == 0]
            counts = ", ".join(f"{n} {engine.upper()}" for engine, n in lacking.items())
            add(families, f"media engines beyond the GPU's own ({counts}, its whole-GPU instance profile)")
        missing: dict[catalog.MetricSpec, list[int]] = {}
        for row in fields.HEALTH:
            if row.source.key in batch.unsupported:
                missing.setdefault(row.metric, []).append(row.source.id)
        for metric, ids in missing.items():
            named = f"fields {', '.join(map(str, ids))}" if len(ids) > 1 else f"field {ids[0]}"
            add((metric,), f"{named} not supported by this GPU or driver")
        if "fans" in gpu.guard.unsupported:
            add((nvidia.FAN_SPEED,), "nvmlDeviceGetNumFans NOT_SUPPORTED: a board without fans")
        return tuple(found)

    def _links_answer(self) -> str:
        """What field 91 and ``nvmlDeviceGetNvLinkState`` of link 0 answer."""
        nvml, said = self.api.nvml, []
        try:
            answers = self.api.unpack(nvml.nvmlDeviceGetFieldValues(self.gpu.handle, [fields.LINK_COUNT]))
            said += [f"field 91 {_code_text(nvml, code)}" for _, code, _, _ in answers]
        except nvml.NVMLError as exc:
            said.append(f"field values {exc}")
        try:
            nvml.nvmlDeviceGetNvLinkState(self.gpu.handle, 0)
            said.append("nvmlDeviceGetNvLinkState(link 0) answers")
        except nvml.NVMLError as exc:
            said.append(f"nvmlDeviceGetNvLinkState(link 0) {exc}")
        return ", ".join(said)


def _code_text(nvml: Any, code: int) -> str:
    return "answers" if code == nvml.NVML_SUCCESS else str(nvml.NVMLError(code))


class _Span:
    """When a timed block began and ended (monotonic), and its middle."""

    began = ended = 0.0

    @property
    def middle(self) -> float:
        return (self.began + self.ended) / 2


@contextmanager
def _timed() -> Iterator[_Span]:
    span = _Span()
    span.began = time.perf_counter()
    try:
        yield span
    finally:
        span.ended = time.perf_counter()

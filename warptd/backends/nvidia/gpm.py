"""NVIDIA GPM (GPU Performance Monitoring, Hopper and newer): the graphics, SM, tensor and DRAM
activity that DCGM's profiling fields give, media engines, and PCIe/NVLink throughput, read through
NVML alone.

The driver computes each metric from two samples of the GPU's counters, so every value covers the
period between them. Each source (a GPU, or a MIG GPU instance) keeps two samples and alternates:
one ``nvmlGpmSampleGet``, then ``nvmlGpmMetricsGet`` against the previous sample. The driver refreshes
the counters at most every 100 ms (nvml.h: two samples "should be greater than 100ms" apart), so a
source is sampled only when :func:`sample_gap` has passed since its last sample, however often its
GPU is read (the regular job and a window's 0.1 s job share the source): the reads in between keep
the last period's values. Outside windows a source is sampled at most once a second (a sample and its
metrics cost about 1.8 ms of CPU a pair on an H200); a window's reads sample it at ``--interval``.
"""

from __future__ import annotations

import ctypes
import math
import struct
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from warptd.backends.costs import ReadCosts, ReadKind, thread_time
from warptd.backends.nvidia import calls
from warptd.metrics import nvidia
from warptd.metrics.cadence import GPM_PERIOD_FLOOR_S
from warptd.models import LabelledValues

if TYPE_CHECKING:
    from warptd.backends.nvidia.engines import Presence
    from warptd.backends.nvidia.guard import Guard
    from warptd.config import Settings

MIB = 2**20
#: NVML_GPM_METRIC_MAX of the first header with GPM (CUDA 12.0, R525): ids up to NVLink link 17.
FIRST_HEADER_METRIC_MAX = 98
#: The least time between two samples of one source: the driver's 100 ms refresh (nvml.h), and a
#: tenth more for the scheduler's jitter, so a pair never holds one refresh twice.
MIN_SAMPLE_GAP_S = 0.11


#: The shortest period of a source outside windows: GPM activity is a dashboard's, read once a second
#: (the catalog's "gpm" cadence).
UNWATCHED_PERIOD_S = GPM_PERIOD_FLOOR_S


def sample_gap(settings: Settings, watched: bool = False) -> float:
    """Seconds a source waits between two samples: the driver's :data:`MIN_SAMPLE_GAP_S`, and the
    period (``--interval``; at least :data:`UNWATCHED_PERIOD_S` outside windows) less half a sample
    (reads come that often; a tick a little early still samples), so GPM values stay over one
    ``--interval`` when a window reads the GPU ten times a second."""
    period = settings.interval if watched else max(settings.interval, UNWATCHED_PERIOD_S)
    return max(MIN_SAMPLE_GAP_S, period - min(settings.interval, settings.window_interval) / 2)


@dataclass(frozen=True, slots=True)
class GpmMetric:
    """One GPM metric id and where its value goes: a ratio gauge, or bytes integrated into a counter."""

    id: int
    metric: str
    labels: tuple[str, ...]
    rate: bool  # MiB/s integrated over the period (else percent as a ratio)


def metric_table(nvml: ModuleType, reads: Callable[[str], bool] = lambda name: True) -> tuple[GpmMetric, ...]:
    """The metrics warptd asks for (NVIDIA's table's GPM rows: utilizations in percent, 0-100.0 in
    nvml.h, become ratios; throughputs in MiB/s are integrated into byte counters), from this
    nvidia-ml-py's constants (an older one lacks some), of the families some output ``reads`` (a metric
    costs the driver CPU: none asked for nothing)."""
    table = []
    for row in nvidia.GPM_METRICS:
        metric_id = getattr(nvml, row.source.name, None)
        if metric_id is not None and reads(row.metric.name):
            table.append(GpmMetric(metric_id, row.metric.name, row.labels, rate=row.unit == "MiB/s"))
    return tuple(table)


def _metric_layout(nvml: ModuleType) -> tuple[int, struct.Struct]:
    """Where ``metrics[]`` starts in pynvml's ``c_nvmlGpmMetricsGet_t``, and an unpacker of one
    ``c_nvmlGpmMetric_t`` to (nvmlReturn, value), from pynvml's own field offsets."""
    metric = nvml.c_nvmlGpmMetric_t
    code, value = metric.nvmlReturn.offset, metric.value.offset
    tail = ctypes.sizeof(metric) - value - 8
    layout = struct.Struct(f"={code}xi{value - code - 4}xd{tail}x")
    return nvml.c_nvmlGpmMetricsGet_t.metrics.offset, layout


def _runs(metrics: list[GpmMetric]) -> tuple[tuple[str, bool, int, int, tuple[tuple[str, ...], ...]], ...]:
    """Consecutive metrics of one catalog metric and kind, as (metric, rate?, start, end, labels)."""
    runs: list[tuple[str, bool, int, int, tuple[tuple[str, ...], ...]]] = []
    for position, metric in enumerate(metrics):
        if runs and runs[-1][0] == metric.metric and runs[-1][1] == metric.rate:
            name, rate, start, _, labels = runs[-1]
            runs[-1] = (name, rate, start, position + 1, (*labels, metric.labels))
        else:
            runs.append((metric.metric, metric.rate, position, position + 1, (metric.labels,)))
    return tuple(runs)


def _throughputs(values: tuple[float, ...]) -> bool:
    """Every value a throughput (finite, not negative), checked in C-level passes: NaN or an infinity
    makes the sum non-finite."""
    return math.isfinite(sum(values)) and min(values) >= 0.0


class GpmContext:
    """What the GPM sources of one backend share: this nvidia-ml-py's metric table and struct layout;
    ``unsupported(error)``, whether an NVML error means "not supported"; ``gap(watched)``, the seconds
    between two samples of a source (:func:`sample_gap`); ``reject(n)``, which counts values the
    driver answered that no period can have (NaN, infinite, negative); and the samples NVML refused
    to free while it was shut down (freed at the next :meth:`reset`)."""

    def __init__(
        self,
        nvml: ModuleType,
        unsupported: Callable[[BaseException], bool],
        gap: Callable[[bool], float],
        reject: Callable[[int], None],
        reads: Callable[[str], bool] = lambda name: True,
    ) -> None:
        self.nvml = nvml
        self.unsupported = unsupported  # whether an NVML error says "not supported"
        self.gap = gap
        self.reject = reject
        self.table = metric_table(nvml, reads)  # empty: no GPM sample is taken at all
        self.metrics_offset, self.layout = _metric_layout(nvml)
        self._unfreed: list[Any] = []

    def supported(self, guard: Guard, handle: Any) -> bool | None:
        """``nvmlGpmQueryDeviceSupport`` of a GPU; None when it failed now or is not supported by the
        driver (the guard remembers that), to be asked again (or not) by the guard's rules."""
        answer = guard.call("gpm_support", self.nvml.nvmlGpmQueryDeviceSupport, handle)
        return None if answer is None else bool(answer.isSupportedDevice)

    def open(
        self, guard: Guard, take: str, args: tuple[object, ...], presence: Presence | None = None
    ) -> GpmSource | None:
        """A source with its two samples allocated, taken by the C function ``take`` called with
        ``args`` and the sample; None (asked again next tick) when an allocation fails. ``presence``:
        the engines and links the GPU has (the metrics of those it lacks are not asked)."""
        samples: list[Any] = []
        for _ in range(2):
            sample = guard.call("gpm_alloc", self.nvml.nvmlGpmSampleAlloc)
            if sample is None:
                self.free(samples)
                return None
            samples.append(sample)
        return GpmSource(self, samples, take, args, presence)

    def free(self, samples: list[Any]) -> None:
        """Free samples; those NVML refuses while it is shut down are freed at the next reset."""
        nvml = self.nvml
        for sample in samples:
            try:
                nvml.nvmlGpmSampleFree(sample)
            except nvml.NVMLError as exc:
                if exc.value == nvml.NVML_ERROR_UNINITIALIZED:
                    self._unfreed.append(sample)

    def reset(self) -> None:
        """Free what NVML refused to free before: around an NVML reopen, at shutdown."""
        pending, self._unfreed = self._unfreed, []
        self.free(pending)


class GpmSource:
    """One GPU or GPU instance: its two samples, which holds the previous one, and what it answered;
    each tick one ``nvmlGpmSampleGet`` (or ``…MigSampleGet``), then ``nvmlGpmMetricsGet`` against
    the previous sample."""

    def __init__(
        self,
        context: GpmContext,
        samples: list[Any],
        take: str,
        args: tuple[object, ...],
        presence: Presence | None = None,
    ) -> None:
        nvml = context.nvml
        self._context = context
        self.presence = presence
        self.samples = samples
        #: Per sample taken last, the nvmlGpmMetricsGet_t pairing it with the other: both set up once, so
        #: a tick sets no field through nvidia-ml-py's attribute hooks.
        requests = []
        for current in range(2):
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            request.sample1, request.sample2 = samples[1 - current], samples[current]
            requests.append(request)
        self.requests = tuple(requests)
        #: Per sample: the call taking it, and the call reading the metrics of its request.
        self.takes = tuple(calls.done(nvml, take, (*args, sample)) for sample in samples)
        self.gets = tuple(_metrics_get(nvml, request) for request in requests)
        #: The metrics asked: those of engines and links the GPU lacks are not.
        self.metrics: list[GpmMetric] = [m for m in context.table if _present(m, presence) is not False]
        #: Engine labels of unknown presence: their ratios are shown once they report activity.
        self.unproven = frozenset(
            m.labels for m in self.metrics if m.metric == _ENGINE and _present(m, presence) is None
        )
        self.asked: list[GpmMetric] = []  # the metric ids written into the request
        #: ``asked`` as runs of one metric (metric, rate?, start, end, labels), and one unpacker of all
        #: their (nvmlReturn, value) pairs: a read where every metric succeeded decodes run by run.
        self.runs: tuple[tuple[str, bool, int, int, tuple[tuple[str, ...], ...]], ...] = ()
        self.unpack_all: struct.Struct | None = None
        #: Per ratio run, the values last read and the series made of them: an idle engine's series (most
        #: of them, most of the time) is kept, not rebuilt, and a dict handed over is never changed.
        self.last_series: list[tuple[tuple[float, ...], LabelledValues] | None] = []
        self.previous: int | None = None  # index into samples of the last good sample
        self.last_answers: tuple[float, ...] = ()  # the last decoded (nvmlReturn, value) pairs, flat
        self.integrates = False  # some metric asked is a throughput, integrated each period
        self.current = 0  # index into samples of the one this tick takes
        self.taken_at = -math.inf  # monotonic time of the last sample, taken right before its call
        self.gauges: dict[str, LabelledValues] = {}  # the ratios of the last period
        self.totals: dict[str, LabelledValues] = {}  # integrated bytes, as raw counters
        self.covered = False  # the throughputs of series the driver counts itself are no longer asked
        self._counted: dict[str, LabelledValues] | None = None  # :meth:`counters`' copy of ``totals``

    def sample(self, guard: Guard, what: str, watched: bool = False, costs: ReadCosts | None = None) -> bool:
        """Take one sample (guarded as ``what``) and derive the metrics over the period since the
        previous one (charged to ``costs`` as a ``gpm`` read). Nothing before the gap has passed (the
        last values stand: False); absent values when a step fails."""
        now = time.monotonic()  # the driver times the sample at the call: so does the period
        if now - self.taken_at < self._context.gap(watched):
            return False
        started = thread_time()
        self._sample(guard, what, now)
        if costs is not None:
            costs.charge(ReadKind.GPM, started)
        return True

    def _sample(self, guard: Guard, what: str, now: float) -> None:
        last_gauges, self.gauges, self._counted = self.gauges, {}, None
        self.current = current = 0 if self.previous != 0 else 1
        if guard.call(what, self.takes[current]) is None:
            self.previous = None  # start over: the next sample has nothing to pair with
            return
        previous, self.previous = self.previous, current
        period, self.taken_at = now - self.taken_at, now
        if previous is None or not self.metrics:
            return
        if len(self.asked) != len(self.metrics):  # metrics only lose entries; ids stay between ticks
            self._ask()
        if guard.call("gpm_metrics", self._metrics_get) is None:
            return
        if self.unpack_all is None or not self._collect_all(period, last_gauges):
            self._collect(period)

    def _ask(self) -> None:
        """Write the metrics left into both requests, and how their answers decode."""
        for request in self.requests:
            request.numMetrics = len(self.metrics)
            for slot, metric in enumerate(self.metrics):
                request.metrics[slot].metricId = metric.id
        self.asked = list(self.metrics)
        self.runs = _runs(self.asked)
        self.integrates = any(rate for _, rate, *_ in self.runs)
        self.last_series = [None] * len(self.runs)
        one = self._context.layout.format
        self.unpack_all = struct.Struct(one + one[1:] * (len(self.asked) - 1)) if self.asked else None

    def _metrics_get(self) -> Any:
        """``nvmlGpmMetricsGet``. A driver whose header predates some of the ids may refuse the whole
        request (INVALID_ARGUMENT): then ask only the ids of the first GPM header from the next tick."""
        nvml = self._context.nvml
        try:
            return self.gets[self.current]()
        except nvml.NVMLError as exc:
            first = [metric for metric in self.metrics if metric.id < FIRST_HEADER_METRIC_MAX]
            if exc.value == nvml.NVML_ERROR_INVALID_ARGUMENT and len(first) < len(self.metrics):
                self.metrics = first
            raise

    def _answers(self, request: Any, count: int) -> Iterator[tuple[int, float]]:
        """(nvmlReturn, value) of the first ``count`` metrics, unpacked from the request's memory at
        once: pynvml's structs read field by field cost more than the NVML calls."""
        context = self._context
        raw = ctypes.string_at(
            ctypes.addressof(request) + context.metrics_offset, count * context.layout.size
        )
        return context.layout.iter_unpack(raw)

    def _collect(self, period: float) -> None:
        """The answers one by one: a metric the GPU lacks is dropped, a value no period can have is
        rejected."""
        nvml, dropped, gauges, totals = self._context.nvml, [], self.gauges, self.totals
        bytes_per_rate, rejected = MIB * period, 0
        answers = self._answers(self.requests[self.current], len(self.metrics))
        for metric, (code, value) in zip(self.metrics, answers, strict=True):
            if code:  # not NVML_SUCCESS
                error = nvml.NVMLError(code)
                if code == nvml.NVML_ERROR_INVALID_ARGUMENT or self._context.unsupported(error):
                    dropped.append(metric)  # this GPU lacks it (an engine or link it does not have)
            elif metric.rate:
                if not 0.0 <= value < math.inf:  # NaN fails both: the total would stay NaN for good
                    rejected += 1
                    continue
                counted = totals.get(metric.metric) or totals.setdefault(metric.metric, {})
                counted[metric.labels] = counted.get(metric.labels, 0.0) + value * bytes_per_rate
            elif self._shown(metric.labels, value):
                ratios = gauges.get(metric.metric) or gauges.setdefault(metric.metric, {})
                ratios[metric.labels] = value / 100
        for metric in dropped:
            self.metrics.remove(metric)
        if rejected:
            self._context.reject(rejected)

    def _collect_all(self, period: float, last_gauges: dict[str, LabelledValues]) -> bool:
        """The common case, every metric answered: one unpack, then each run of one metric at once;
        answers as last time without throughputs to integrate keep last time's gauges whole. False
        (nothing taken) when some metric failed: the caller sorts the answers one by one."""
        assert self.unpack_all is not None
        flat = self.unpack_all.unpack_from(self.requests[self.current], self._context.metrics_offset)
        if any(flat[0::2]):  # some nvmlReturn is not NVML_SUCCESS
            self.last_answers = ()  # the gauges made now lack a metric: none to keep next time
            return False
        if flat == self.last_answers and not self.integrates and last_gauges:
            self.gauges = last_gauges
            return True
        self.last_answers = flat
        values, gauges, totals, last = flat[1::2], self.gauges, self.totals, self.last_series
        bytes_per_rate = MIB * period
        for position, (metric, rate, start, end, labels) in enumerate(self.runs):
            read = values[start:end]
            if rate:
                counted = totals.get(metric) or totals.setdefault(metric, {})
                answered: Iterable[tuple[tuple[str, ...], float]] = zip(labels, read, strict=True)
                if not _throughputs(read):  # a NaN, infinite or negative answer: that one is skipped
                    answered = [(label, value) for label, value in answered if 0.0 <= value < math.inf]
                    self._context.reject(len(read) - len(answered))
                for label, value in answered:
                    counted[label] = counted.get(label, 0.0) + value * bytes_per_rate
                continue
            kept = last[position]
            if kept is not None and kept[0] == read:
                series = kept[1]
            else:
                series = dict(zip(labels, [value / 100 for value in read], strict=True))
                if self.unproven and metric == _ENGINE:
                    series = {label: v for label, v in series.items() if self._shown(label, v)}
                last[position] = (read, series)
            if not series:
                continue
            earlier = gauges.get(metric)
            gauges[metric] = {**earlier, **series} if earlier else series
        return True

    def _shown(self, labels: tuple[str, ...], value: float) -> bool:
        """Whether a ratio is exported: always, but an engine's of unknown presence before it has
        reported activity (:class:`~warptd.backends.nvidia.engines.Presence`)."""
        if labels not in self.unproven or self.presence is None:
            return True
        return self.presence.shown(labels, None, value)

    def counters(self) -> dict[str, LabelledValues]:
        """Bytes integrated from the throughputs so far, as raw counters (they restart at a reset);
        copies, as the totals go on growing in place: the same copy until a sample (or :meth:`cover`)
        may change them, so that a reader knows it again by identity."""
        if self._counted is None:
            self._counted = {name: dict(totals) for name, totals in self.totals.items()}
        return self._counted

    def cover(self, counted: set[tuple[str, tuple[str, ...]]]) -> None:
        """Stop asking for the throughputs of ``counted`` series (metric, labels): the driver keeps
        byte counters of them. Once per source: a reset source asks everything again."""
        if self.covered or not counted:
            return
        self.covered, self._counted = True, None
        self.metrics = [m for m in self.metrics if not (m.rate and (m.metric, m.labels) in counted)]
        for name, totals in self.totals.items():
            self.totals[name] = {labels: v for labels, v in totals.items() if (name, labels) not in counted}

    def close(self) -> None:
        """Free the two samples (a GPU reopened, a MIG instance destroyed)."""
        self._context.free(self.samples)


_ENGINE = nvidia.ENGINE_ACTIVE.name
_LINK_BYTES = nvidia.NVLINK_LINK_BYTES.name


def _present(metric: GpmMetric, presence: Presence | None) -> bool | None:
    """Whether the GPU has the engine or NVLink a metric is of (True for the others; None: unknown)."""
    if presence is None:
        return True
    if metric.metric == _ENGINE:
        engine, index = metric.labels
        return presence.engine(engine, int(index))
    if metric.metric == _LINK_BYTES:
        return presence.link(int(metric.labels[0]))
    return True


def _metrics_get(nvml: ModuleType, request: Any) -> calls.PreparedCall:
    def public() -> Any:
        return nvml.nvmlGpmMetricsGet(request)

    return calls.PreparedCall(nvml, "nvmlGpmMetricsGet", (ctypes.byref(request),), lambda: request, public)


class GpmSources:
    """Sources by key, opened at their first sample and freed when gone (``nvidia_mig``'s GPU
    instances), with each GPU's GPM support asked once."""

    def __init__(self, context: GpmContext, presence: Presence | None = None) -> None:
        """``presence``: the engines and links every source has (a MIG GPU instance: no NVLink of its
        own, the parent GPU's series carry them)."""
        self._context = context
        self._presence = presence
        self._supported: dict[Hashable, bool] = {}  # by GPU: nvmlGpmQueryDeviceSupport's answer
        self._sources: dict[Hashable, GpmSource] = {}

    def supported(self, gpu: Hashable, guard: Guard, handle: Any) -> bool:
        """Ask ``nvmlGpmQueryDeviceSupport`` once per GPU (``handle``)."""
        if gpu not in self._supported:
            answer = self._context.supported(guard, handle)
            if answer is None:
                return False  # not supported (remembered by the guard), or failing now: asked again
            self._supported[gpu] = answer
        return self._supported[gpu]

    def sample(
        self,
        key: Hashable,
        guard: Guard,
        what: str,
        take: str,
        *args: object,
        costs: ReadCosts | None = None,
        watched: bool = False,
    ) -> None:
        """One sample of source ``key`` (opened first: see :meth:`GpmContext.open`), when its period is
        due (``watched``: a window's)."""
        source = self._sources.get(key)
        if source is None:
            source = self._context.open(guard, take, args, self._presence)
            if source is None:
                return
            self._sources[key] = source
        source.sample(guard, what, watched, costs)

    def gauges(self, key: Hashable) -> dict[str, LabelledValues]:
        source = self._sources.get(key)
        return source.gauges if source is not None else {}

    def counters(self, key: Hashable) -> dict[str, LabelledValues]:
        source = self._sources.get(key)
        return source.counters() if source is not None else {}

    def forget(self, key: Hashable) -> None:
        """Free the samples of a source that is gone (a destroyed MIG instance)."""
        source = self._sources.pop(key, None)
        if source is not None:
            source.close()

    def opened(self) -> list[Hashable]:
        return list(self._sources)

    def reset(self) -> None:
        """Free every sample and forget every answer: around an NVML reopen, at shutdown."""
        self._context.reset()
        for key in self.opened():
            self.forget(key)
        self._supported.clear()

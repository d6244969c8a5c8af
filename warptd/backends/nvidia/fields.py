"""NVML field values: which field ids each kind of read batches, and what each answer becomes.

The fields of series are NVIDIA's table's rows (:mod:`warptd.metrics.nvidia`); those read one by one
(power, energy, memory temperature, throttle times, recovery action) are numbered here. Ids, scopes,
value types and units are nvml.h's (the driver's ABI), fixed rather than taken from nvidia-ml-py, whose
constants follow one header; ``docs/telemetry.md`` lists each with the driver that added it. Where
branches number a value differently (clock-event durations, recovery action, the power fields),
:data:`NUMBERINGS` holds each branch's ids and :func:`numbering` picks one by the driver's version.
An id a driver does not know answers INVALID_ARGUMENT and is not asked again for that GPU.
"""

from __future__ import annotations

import ctypes
import struct
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from warptd.backends.costs import ReadKind
from warptd.backends.nvidia.calls import pointer
from warptd.metrics import catalog, nvidia
from warptd.metrics.spec import Call, Row
from warptd.models import LabelledValues

#: A field as asked: (field id, scope id). The scope is the NVLink link for per-link fields, else 0.
FieldKey = tuple[int, int]

FI_NVLINK_LINK_COUNT = 91  # NVLink links the GPU has
LINK_COUNT: FieldKey = (FI_NVLINK_LINK_COUNT, 0)
FI_MEMORY_TEMP = 82  # °C, HBM temperature
FI_GPU_RECOVERY_ACTION = 230  # nvmlDeviceGpuRecoveryAction_t (R570+)
#: Before R570 (deprecated by 230 there): 1 = the GPU needs a reset / a drain, then a reset.
FI_RESET_STATUS = 226
FI_DRAIN_AND_RESET_STATUS = 227
FI_POWER_AVERAGE = 185  # mW, the driver's 1 s average (Ampere and newer); R535+
FI_POWER_INSTANT = 186  # mW, instantaneous; R535+
#: The parts 185/186 measure apart with their scopeId (nvml.h NVML_POWER_SCOPE_MODULE, _MEMORY): a
#: Grace Hopper module (CPU included; NVIDIA CPUs only), the memory. Most GPUs answer NOT_SUPPORTED.
POWER_SCOPES = {"module": 1, "memory": 2}
#: mJ since the driver was loaded: nvmlDeviceGetTotalEnergyConsumption's counter (Volta and newer), in
#: the batch rather than a call of its own; the call stands in only where the field is unsupported.
FI_TOTAL_ENERGY = 83
#: NVML_GPU_RECOVERY_ACTION_* in value order (nvml.h; the installed nvidia-ml-py has all eight).
RECOVERY_ACTIONS = (
    "none",
    "gpu_reset",
    "node_reboot",
    "drain_p2p",
    "drain_and_reset",
    "recover_imex_domain",
    "bus_reset",
    "system_reboot",
)


@dataclass(frozen=True, slots=True)
class Numbering:
    """The ids one driver branch's nvml.h gives the values that moved between branches."""

    since: tuple[int, int]  # the first driver (major, minor version) numbering them so
    #: Clock-event reason -> its duration field (ns), or the ids it may have where the version does not
    #: tell (asked together once: the one answering a 64-bit value is the duration, the other is a
    #: power-smoothing setting or not supported, and is not asked again). SW power cap (74) and sync
    #: boost (76) keep their ids; SW thermal is 251 or 269, and 75 (NVML_FI_DEV_PERF_POLICY_THERMAL, the
    #: older id of the same counter) before R575; HW thermal and HW power brake have no field before.
    throttle: Mapping[str, tuple[int, ...]]
    recovery: tuple[int, ...]  # 230, or the status fields 226/227 that it replaced
    power: bool  # 185/186 are known (R535+); before, NVML_FI_MAX of the header stops short of them
    branch: str = ""  # the drivers numbering so, as docs/hardware.md's table names them

    @property
    def ambiguous(self) -> bool:
        """Whether some clock event has two duration ids (both asked: the 64-bit answer is kept)."""
        return any(len(ids) > 1 for ids in self.throttle.values())


#: SW power cap and sync boost: NVML_FI_DEV_PERF_POLICY_POWER / _SYNC_BOOST on every branch.
_PERF_POLICY = {"sw_power_cap": (74,), "sync_boost": (76,)}
_BEFORE_R575 = {**_PERF_POLICY, "sw_thermal_slowdown": (75,)}  # NVML_FI_DEV_PERF_POLICY_THERMAL
#: The durations of CUDA 12.9 to 13.0 GA (R575, R580 up to 580.65), power smoothing at 256-273 ...
_DURATIONS_251 = (251, 252, 253)
#: ... and of CUDA 13.0 Update 1 (580.82, "v580 TRD2") on, power smoothing at 251-268 (NVIDIA's NVML
#: known issues); a real H200 on 580.159.04 answered 269-271 and NOT_SUPPORTED at 251-253.
_DURATIONS_269 = (269, 270, 271)
_CLOCK_EVENTS = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


def _durations(*ranges: tuple[int, int, int]) -> dict[str, tuple[int, ...]]:
    """SW power cap and sync boost, and each clock event's duration at its id in each of ``ranges``."""
    events = {reason: tuple(ids) for reason, *ids in zip(_CLOCK_EVENTS, *ranges, strict=True)}
    return {**_PERF_POLICY, **events}


_RECOVERY = (FI_GPU_RECOVERY_ACTION,)
#: Oldest first; checked against each branch's nvml.h (docs/telemetry.md says which and how).
NUMBERINGS: tuple[Numbering, ...] = (
    Numbering((0, 0), _BEFORE_R575, (), power=False, branch="R525/R530 and before"),
    Numbering(
        (535, 0), _BEFORE_R575, (FI_RESET_STATUS, FI_DRAIN_AND_RESET_STATUS), power=True, branch="R535-R565"
    ),
    Numbering((570, 0), _BEFORE_R575, _RECOVERY, power=True, branch="R570"),
    Numbering((575, 0), _durations(_DURATIONS_251), _RECOVERY, power=True, branch="R575, R580 to 580.65"),
    # R580 between 13.0 GA and Update 1: which header a build took is not known here, so both.
    Numbering(
        (580, 66),
        _durations(_DURATIONS_251, _DURATIONS_269),
        _RECOVERY,
        power=True,
        branch="580.66 to 580.81",
    ),
    # R590, R595 and R610 number them so too: nvml.h of CUDA 13.1 to 13.5 keeps 269-271, and their
    # nvidia-smi shows the counters (tests/captures/).
    Numbering(
        (580, 82),
        _durations(_DURATIONS_269),
        _RECOVERY,
        power=True,
        branch="580.82 on (R590, R595, R610 too)",
    ),
)


def numbering(driver_version: str | None) -> Numbering:
    """The numbering of the driver ``driver_version`` ("580.65.06") belongs to; where the version is
    unknown, the newest one's ids and the older ones' both (the 64-bit type tells them apart)."""
    parts = (driver_version or "").split(".")
    try:
        version = (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0)
    except ValueError:
        return _UNKNOWN_DRIVER
    return [each for each in NUMBERINGS if version >= each.since][-1]


_UNKNOWN_DRIVER = Numbering(
    (0, 0),
    _durations(_DURATIONS_269, _DURATIONS_251),
    _RECOVERY,
    power=True,
    branch="a version that does not parse",
)


#: The device's fields of NVIDIA's table that the health batch decodes into series (the recovery action
#: is decoded apart: one series labelled with the action). A GPU lacking one answers NOT_SUPPORTED once
#: and is not asked again.
HEALTH: tuple[Row, ...] = tuple(
    row for row in nvidia.FIELDS if row.source.link is None and row.metric is not nvidia.RECOVERY_ACTION
)
#: The health fields read by a call of their own where the GPU lacks the field.
FI_PCIE_REPLAY_COUNTER = 94
FI_REMAPPED_ROWS = (142, 143, 144, 145)
# nvmlValueType_t: NVML_VALUE_TYPE_DOUBLE = 0 … UNSIGNED_SHORT = 6.
INTEGERS = frozenset({1, 2, 3, 4, 5, 6})
_64_BIT_INTEGERS = frozenset({2, 3, 4})


class FieldSet:
    """The field batches of one numbering: what each kind of read asks (a cheap sample, one with the
    energy counter, an edge's with the throttle times too, power only), what the health batch adds beside
    the health and link fields (memory temperature, recovery action), and the value type each must
    answer. A duration counter is 64-bit: a field answering another type is another field under that
    id (a power-smoothing setting), and is treated as not supported."""

    def __init__(self, numbering: Numbering, reads: Callable[..., bool] = lambda *names: True) -> None:
        self.numbering = numbering
        #: Whether some output reads a metric family: the fields of the others are not asked.
        self.reads = reads
        power = ((FI_POWER_INSTANT, 0),) if numbering.power else ()
        average = ((FI_POWER_AVERAGE, 0),) if numbering.power else ()
        energy = ((FI_TOTAL_ENERGY, 0),)
        memory_temperature = ((FI_MEMORY_TEMP, 0),)
        #: The scoped power of a GPU's parts (instant, else average: a GB200's memory has only the
        #: average); asked where a power backend exports them, not asked again where unsupported.
        self.scopes: tuple[tuple[str, FieldKey, FieldKey], ...] = tuple(
            (part, (FI_POWER_INSTANT, scope), (FI_POWER_AVERAGE, scope))
            for part, scope in POWER_SCOPES.items()
            if numbering.power and reads(catalog.DOMAIN_POWER.name, catalog.DOMAIN_ENERGY.name)
        )
        scoped = tuple(key for _, instant, average in self.scopes for key in (instant, average))
        #: (reason, the key of a duration field it may have), each of its ids where it has several;
        #: none where no output reads throttle seconds.
        self.throttle: tuple[tuple[str, FieldKey], ...] = tuple(
            (reason, (field_id, 0))
            for reason, ids in numbering.throttle.items()
            for field_id in ids
            if reads(catalog.THROTTLE_SECONDS.name)
        )
        throttle = tuple(key for _, key in self.throttle)
        #: What the health batch asks beside the health and link fields.
        self.device: tuple[FieldKey, ...] = (*power, *energy, *average, *throttle, *scoped)
        #: By kind of read (see :class:`~warptd.backends.nvidia.gpu.Gpu`): the cheap sample (power and
        #: memory temperature, 7 µs on an H200), with the energy counter (2.9 ms), at an edge also the
        #: throttle times (0.58 ms a group); the parts NVML measures apart alone (the nvml power backend).
        self.kinds: dict[ReadKind, tuple[FieldKey, ...]] = {
            ReadKind.POWER: (*power, *average, *memory_temperature, *scoped),
            ReadKind.ENERGY: (*power, *energy, *average, *memory_temperature, *scoped),
            ReadKind.EDGE: (*self.device, *memory_temperature),
            ReadKind.SCOPES: scoped,  # the parts' power alone (the nvml power backend's own read)
        }
        #: Asked beside :data:`HEALTH` but decoded apart (into temperatures, or one-hot).
        self.other: tuple[FieldKey, ...] = (*memory_temperature, *((f, 0) for f in numbering.recovery))
        #: The fields read one by one (power, throttle times …), the rest decode by the plan.
        self.looked_up = frozenset((*self.device, *self.other))
        self.types: dict[int, frozenset[int]] = {
            FI_TOTAL_ENERGY: _64_BIT_INTEGERS,
            **dict.fromkeys((field_id for field_id, _ in throttle), _64_BIT_INTEGERS),
        }


Decoded = tuple[dict[str, LabelledValues], dict[str, LabelledValues]]  # gauges, raw counters


#: The links' error counters read by call (links 12 on).
_ERROR_CALLS = tuple(
    row for row in nvidia.ROWS if row.metric is nvidia.NVLINK_LINK_ERRORS and isinstance(row.source, Call)
)


def nvlink(links: int) -> tuple[Row, ...]:
    """The per-link fields of a GPU with ``links`` NVLinks, link by link (NVIDIA's table: error counters
    of links 0-11, data bytes by direction)."""
    return tuple(row for link in range(links) for row in nvidia.FIELDS if row.source.link == link)


#: A row's conversion: (factor, divisor) of its source's unit (spec.CONVERSIONS).
Conversion = tuple[float, float]
#: One metric's share of a plan: its name, whether it is a counter, and (key, label values, conversion)
#: of each of its fields.
_Group = tuple[str, bool, tuple[tuple[FieldKey, tuple[str, ...], Conversion], ...]]
#: Consecutive answers of one metric in a request: metric, counter?, first and end position, the
#: label values of each, conversion.
Run = tuple[str, bool, int, int, tuple[tuple[str, ...], ...], Conversion]


@dataclass(frozen=True, slots=True)
class FieldPlan:
    """What one GPU is asked in its field batch, and how the answers decode."""

    groups: tuple[_Group, ...]
    keys: tuple[FieldKey, ...]
    rows: Mapping[FieldKey, Row]
    #: (link, kind, nvmlNvLinkErrorCounter_t) of the links the per-link error ids do not number.
    error_calls: tuple[tuple[int, str, int], ...] = ()
    links: int = 0  # the NVLinks the GPU has

    @classmethod
    def build(
        cls, base: tuple[FieldKey, ...], links: int, reads: Callable[[str], bool] = lambda name: True
    ) -> FieldPlan:
        """``base``: the fields asked before the health and link ones (power, throttle times, other);
        of those, the fields of families some output ``reads``."""
        by_metric: dict[str, list[Row]] = {}
        for row in (*HEALTH, *nvlink(links)):
            if reads(row.metric.name):
                by_metric.setdefault(row.metric.name, []).append(row)
        groups = tuple(
            (metric, _counts(members[0]), tuple((r.source.key, r.labels, r.conversion) for r in members))
            for metric, members in by_metric.items()
        )
        rows = {row.source.key: row for members in by_metric.values() for row in members}
        calls = tuple(
            (int(row.labels[0]), row.labels[1], nvidia.NVLINK_ERROR_COUNTERS[row.labels[1]])
            for row in _ERROR_CALLS
            if int(row.labels[0]) < links and reads(row.metric.name)
        )
        return cls(groups, (*base, *rows), rows, calls, links)

    def decode(self, values: Mapping[FieldKey, float]) -> Decoded:
        """The gauges and the raw counters that this read's field values give."""
        gauges: dict[str, LabelledValues] = {}
        counters: dict[str, LabelledValues] = {}
        get = values.get
        for metric, counter, fields in self.groups:
            series = {labels: v * f / d for key, labels, (f, d) in fields if (v := get(key)) is not None}
            if series:
                (counters if counter else gauges)[metric] = series
        _recovery_action(gauges, values)
        return gauges, counters

    def runs(self, keys: tuple[FieldKey, ...]) -> tuple[Run, ...]:
        """The runs of one metric's answers in a request for ``keys`` (which keep the plan's order)."""
        runs: list[Run] = []
        for position, key in enumerate(keys):
            row = self.rows.get(key)
            if row is None:
                continue
            metric, conversion = row.metric.name, row.conversion
            if runs and runs[-1][0] == metric and runs[-1][3] == position and runs[-1][5] == conversion:
                _, counter, start, _, labels, _ = runs[-1]
                runs[-1] = (metric, counter, start, position + 1, (*labels, row.labels), conversion)
            else:
                runs.append((metric, _counts(row), position, position + 1, (row.labels,), conversion))
        return tuple(runs)


def _counts(row: Row) -> bool:
    """Whether a row's values are a counter's (raw totals the sampler makes monotonic)."""
    return row.metric.type == "counter"


#: Each action's one series, made once (a reading's dicts are never changed).
_ACTIONS = tuple({(name,): 1.0} for name in RECOVERY_ACTIONS)


def _recovery_action(gauges: dict[str, LabelledValues], values: Mapping[FieldKey, float]) -> None:
    """The action now, as one series labelled with it: from field 230, else from the status fields it
    replaced (226/227 before R570), which say only "reset", "drain, then reset" or neither. The seven
    others are not exported as 0s: seven constant series per GPU that no alert needs."""
    action = values.get((FI_GPU_RECOVERY_ACTION, 0))
    if action is None:
        reset, drain = values.get((FI_RESET_STATUS, 0)), values.get((FI_DRAIN_AND_RESET_STATUS, 0))
        if reset is None and drain is None:
            return
        action = RECOVERY_ACTIONS.index("drain_and_reset" if drain else "gpu_reset" if reset else "none")
    if action in range(len(RECOVERY_ACTIONS)):  # a newer action (or no integer): unknown, absent
        gauges[nvidia.RECOVERY_ACTION.name] = _ACTIONS[int(action)]


# -- reading the answers ---------------------------------------------------------------------------
#: nvmlFieldValue_t as nvidia-ml-py lays it out: fieldId, scopeId, timestamp, latencyUsec, valueType,
#: nvmlReturn, then the 8-byte nvmlValue_t union. Checked against ``pynvml.c_nvmlFieldValue_t`` by
#: :func:`unpacker`: reading its attributes one by one costs more than the NVML call itself.
_LAYOUT = {"fieldId": 0, "scopeId": 4, "valueType": 24, "nvmlReturn": 28, "value": 32}
_SIZE = 40
#: The union read as its 8 raw bytes, little-endian: each member is then its low bytes.
_ANSWER = struct.Struct("<II16xIIQ")
_DOUBLE = struct.Struct("<d")
#: nvmlValueType_t (DOUBLE, UNSIGNED_INT, UNSIGNED_LONG, UNSIGNED_LONG_LONG, SIGNED_LONG_LONG,
#: SIGNED_INT, UNSIGNED_SHORT) -> the member's value from the union's raw bytes.
_MEMBERS = (
    lambda raw: _DOUBLE.unpack(raw.to_bytes(8, "little"))[0],
    lambda raw: raw & 0xFFFFFFFF,
    lambda raw: raw,
    lambda raw: raw,
    lambda raw: raw - (1 << 64) if raw >> 63 else raw,
    lambda raw: (raw & 0xFFFFFFFF) - (1 << 32) if raw >> 31 & 1 else raw & 0xFFFFFFFF,
    lambda raw: raw & 0xFFFF,
)
_RAW = frozenset({2, 3})  # UNSIGNED_LONG, UNSIGNED_LONG_LONG: the raw 8 bytes are the value
#: One answer: (field id, scope id), nvmlReturn, valueType, value (None for an unknown type).
Answer = tuple[FieldKey, int, int, float | None]


def _unpack(answers: Any) -> list[Answer]:
    return [
        ((field_id, scope_id), code, value_type, raw if value_type in _RAW else _member(value_type, raw))
        for field_id, scope_id, value_type, code, raw in _ANSWER.iter_unpack(bytes(answers))
    ]


def _member(value_type: int, raw: int) -> float | None:
    return _MEMBERS[value_type](raw) if value_type < len(_MEMBERS) else None


def _attributes(answers: Any) -> Iterator[Answer]:
    members = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
    for answer in answers:
        value_type = answer.valueType
        value = getattr(answer.value, members[value_type]) if value_type < len(members) else None
        yield (answer.fieldId, answer.scopeId), answer.nvmlReturn, value_type, value


def unpacker(structure: type[ctypes.Structure] | None) -> Any:
    """How to read an array of ``structure`` (pynvml's c_nvmlFieldValue_t): from its bytes when its
    layout is the one :data:`_LAYOUT` expects, else attribute by attribute."""
    if structure is None:
        return _attributes
    layout = {name: getattr(structure, name).offset for name in _LAYOUT if hasattr(structure, name)}
    fits = layout == _LAYOUT and ctypes.sizeof(structure) == _SIZE and sys.byteorder == "little"
    return _unpack if fits else _attributes


class FieldRequest:
    """One GPU's batch, ready to send: the nvmlFieldValue_t array is laid out once and copied per
    call, where nvidia-ml-py's wrapper would set each id through its slow attribute hooks."""

    def __init__(self, nvml: Any, keys: tuple[FieldKey, ...], looked_up: frozenset[FieldKey]) -> None:
        self.keys = keys
        self._nvml = nvml
        #: The field ids it was made from and how many of them the GPU was known to lack then.
        self.made_from: tuple[tuple[FieldKey, ...], int] | None = None
        #: The C function, as nvidia-ml-py's private lookup finds it (its public wrapper where that
        #: lookup is gone: :func:`~warptd.backends.nvidia.calls.pointer`); looked up at the first send.
        self._function: Any = None
        self._direct = sys.byteorder == "little" and hasattr(nvml, "c_nvmlFieldValue_t")
        if self._direct:
            self._direct = unpacker(nvml.c_nvmlFieldValue_t) is _unpack  # the layout as expected
        if self._direct:
            #: One array for every call, reset from its template first: its answers are read before the
            #: next call of this request.
            self._values = (nvml.c_nvmlFieldValue_t * len(keys))()
            for slot, (field_id, scope_id) in zip(self._values, keys, strict=True):
                slot.fieldId, slot.scopeId = field_id, scope_id
            self._template = bytes(self._values)
            self._address = ctypes.addressof(self._values)
            self._arguments = (ctypes.c_int32(len(keys)), ctypes.byref(self._values))
        #: The values read one by one (power, throttle times …) and their positions in the answers.
        self._looked_up = tuple((key, position) for position, key in enumerate(keys) if key in looked_up)
        #: Each answer's valueType and nvmlReturn as one 64-bit word, as a clean read left them.
        self._clean: bytes | None = None
        self._conversions: tuple[tuple[int, Any], ...] = ()
        self.runs: tuple[Run, ...] = ()
        self._last_series: list[tuple[list[float] | None, LabelledValues]] = []

    def decode_with(self, plan: FieldPlan) -> None:
        """Decode this request's answers by ``plan``'s runs of one metric."""
        self.runs = plan.runs(self.keys)
        self._last_series = [(None, {})] * len(self.runs)

    def steady(self, answers: Any) -> list[float] | None:
        """Every value of a read that answered as the last clean one did (each field succeeded, with
        the same value types), read from the array's 8-byte words at C speed: an answer is five words,
        the fourth its valueType and nvmlReturn, the fifth its value. None otherwise (read answer by
        answer). Integer fields stay ints: a number is made a float only where a series changes."""
        if self._clean is None:
            return None
        words = memoryview(answers).cast("B").cast("Q")
        if words[3::5].tobytes() != self._clean:
            return None
        raw = words[4::5].tolist()
        for position, convert in self._conversions:
            raw[position] = convert(raw[position])
        return raw

    def latency_us(self, answers: Any) -> int:
        """The µs the driver says it spent on this read: its answers' latencyUsec, summed (the third
        8-byte word of each answer, read at C speed where the layout is the expected one)."""
        if self._direct:
            return sum(memoryview(answers).cast("B").cast("q")[2::5])
        return sum(getattr(answer, "latencyUsec", 0) for answer in answers)

    def looked_up(self, numbers: list[float]) -> dict[FieldKey, float]:
        """The values read one by one (by :meth:`NvidiaBackend._field`) from a :meth:`steady` read."""
        return {key: float(numbers[position]) for key, position in self._looked_up}

    def decode(self, numbers: list[float], values: Mapping[FieldKey, float]) -> Decoded:
        """:meth:`FieldPlan.decode` for a :meth:`steady` read: by slices of its runs, and a run read
        as last time (health counters mostly stand still) keeps last time's series."""
        gauges: dict[str, LabelledValues] = {}
        counters: dict[str, LabelledValues] = {}
        last = self._last_series
        for position, (metric, counter, start, end, labels, (factor, divisor)) in enumerate(self.runs):
            read = numbers[start:end]
            if last[position][0] == read:
                series = last[position][1]
            else:
                series = dict(zip(labels, [float(v) * factor / divisor for v in read], strict=True))
                last[position] = (read, series)
            target = counters if counter else gauges
            if metric in target:
                target[metric] = {**target[metric], **series}
            else:
                target[metric] = series
        _recovery_action(gauges, values)
        return gauges, counters

    def mark_clean(self, value_types: tuple[int, ...]) -> None:
        """This request's last read succeeded for every field, with these value types."""
        if self._direct and all(value_type < len(_MEMBERS) for value_type in value_types):
            self._clean = struct.pack(f"<{len(value_types)}Q", *value_types)  # nvmlReturn 0: success
            self._conversions = tuple(
                (position, _MEMBERS[value_type])
                for position, value_type in enumerate(value_types)
                if value_type not in _RAW
            )

    def send(self, handle: Any) -> Any:
        """``nvmlDeviceGetFieldValues`` for these keys; raises the NVMLError of its return code."""
        nvml = self._nvml
        if self._direct and self._function is None:
            self._function = pointer(nvml, "nvmlDeviceGetFieldValues")
            if self._function is None:  # no private lookup: the public wrapper, answer by answer
                self._direct, self._clean = False, None
        if not self._direct:
            return nvml.nvmlDeviceGetFieldValues(handle, list(self.keys))
        ctypes.memmove(self._address, self._template, len(self._template))
        code = self._function(handle, *self._arguments)
        if code:  # not NVML_SUCCESS
            raise nvml.NVMLError(code)
        return self._values

"""The capture format: what one node's NVML answered warptd, as one self-contained, versioned JSON file.

A capture holds, per GPU and per state (``idle``, and ``loaded`` where a load ran), every NVML call
warptd's read plan, ``warptd doctor``, process and MIG discovery made: the C function, its inputs, the
return code by name, the value and its type; field values one by one with their ``valueType`` and
``nvmlReturn``; GPM metrics per GPU instance; the processes listed. Beside them: what each call costs
(thread CPU, measured as ``warptd doctor`` measures it), how often the driver refreshes a value, and the
driver, NVML and CUDA versions. ``docs/captures.md`` describes it for people; ``warptd capture`` writes
one, ``python -m tests.doubles.replay CAPTURE -- CMD`` runs CMD over the NVML double answering from it.

Where an answer came from: the header lists the sources (a real capture, nvidia-smi text, notes, the
double's model) and names the one that answered everything not saying otherwise; any answer, price or
refresh period may name another by ``source``.

**Unknown.** An answer whose ``ret`` is :data:`UNKNOWN` was not observed (nvidia-smi does not show it,
the notes do not say): its ``value`` and ``type`` are None. A price or refresh period whose seconds are
None is unknown alike, and so is a version that is None. A replay answers an unknown (and any call warptd
makes that the capture lacks) with the NVML double's own model value, the H200's as measured on driver
580.159.04 (``tests/doubles/nvml.py``), and lists it (:meth:`Capture.unknowns`): a golden file marks
every series resting on one as unverified. An unknown price or refresh period replays as the H200's.

Names are NVML's own: functions by their C symbol as the driver's library exports them
(``nvmlDeviceGetMemoryInfo_v2``), return codes by their nvml.h name (``NVML_SUCCESS``,
``NVML_ERROR_NOT_SUPPORTED``, ``NVML_ERROR_FUNCTION_NOT_FOUND`` ...), value types by theirs
(``NVML_VALUE_TYPE_UNSIGNED_LONG_LONG``), struct members by nvml.h's names as nvidia-ml-py spells them
(``{"total": ..., "reserved": ..., "free": ..., "used": ...}``). Values are in NVML's units (bytes, mW,
mJ, MHz, °C, ns, percent). A float that is not finite is written ``"NaN"``, ``"Infinity"``.

Compatibility: a reader takes every capture of its :data:`VERSION`; a change that an older reader would
misread bumps it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

FORMAT = "warptd-capture"
VERSION = 1
#: The return code of an answer that was not observed.
UNKNOWN = "unknown"
SUCCESS = "NVML_SUCCESS"
NOT_SUPPORTED = "NVML_ERROR_NOT_SUPPORTED"
#: What pynvml raises for a function the driver's library does not export (see :attr:`Node.absent`).
FUNCTION_NOT_FOUND = "NVML_ERROR_FUNCTION_NOT_FOUND"
IDLE, LOADED = "idle", "loaded"
#: The handle a call was made on: the GPU itself, or one of its MIG devices by the index
#: ``nvmlDeviceGetMigDeviceHandleByIndex`` gave it (``mig:0`` ...).
GPU = "gpu"
DeviceRef = Annotated[str, Field(pattern=r"^(gpu|mig:[0-9]+)$")]
SourceId = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]
#: Where an answer came from: ``capture``, recorded by ``warptd capture`` (on real hardware, or on the
#: NVML double: the source's ``detail`` says which); ``nvidia-smi``, translated from its text; ``notes``,
#: written down by a person who saw it (``shared/notes/real-h200.md``); ``model``, the NVML double's own
#: model, standing in where nothing was observed.
SourceKind = Literal["capture", "nvidia-smi", "notes", "model"]
#: Identifiers that fingerprint a machine or a user, which ``warptd capture`` masks unless ``--no-mask``.
MaskKind = Literal[
    "gpu_uuid", "mig_uuid", "serial", "board_part_number", "hostname", "process_name", "process_cmdline"
]
#: The values whose refresh period is measured: the energy counter (field 83 and its call), the instant
#: power (field 186), the 1 s average (field 185), ``nvmlDeviceGetPowerUsage``, GPM's counters.
RefreshValue = Literal["energy", "power_instant", "power_average", "power_usage", "gpm"]
Number = int | float
#: What names an answer, written first in the file whatever class declares it.
_KEYS = ("function", "device", "args", "id", "scope", "instance")


class Model(BaseModel):
    """Frozen, strict about unknown keys (a typo is an error, not an unknown), NaN as a string."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings")


class Source(Model):
    """One source of answers, named by ``id`` in :attr:`Header.source` and any answer's ``source``."""

    id: SourceId
    kind: SourceKind
    #: What and where, for a person: the GPU, driver and tool that recorded it; the nvidia-smi files;
    #: the notes' path.
    detail: str = ""


class Header(Model):
    """What the file is, who wrote it, and where its answers came from."""

    format: Literal["warptd-capture"]  # always written: FORMAT
    version: Literal[1]  # VERSION
    created: str  # ISO 8601, UTC
    tool: str  # what wrote it: "warptd 0.9.0 capture", "tests.doubles.from_nvidia_smi"
    #: The source of every answer, price and refresh period that names none.
    source: SourceId
    sources: tuple[Source, ...]
    #: The kinds of identifier masked (keeping their shape, the same identifier masked the same
    #: throughout the file); empty where none was (``--no-mask``, or nothing to mask).
    masked: tuple[MaskKind, ...] = ()
    notes: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _sources_named(self) -> Header:
        ids = [source.id for source in self.sources]
        if len(set(ids)) != len(ids):
            raise ValueError(f"source ids must be unique: {ids}")
        if self.source not in ids:
            raise ValueError(f"header.source {self.source!r} is not among the sources {ids}")
        return self


class Observation(Model):
    """An answer's value at a time: seconds since its state began."""

    at: float
    value: JsonValue


class Answer(Model):
    """One answer: its return code by name (:data:`UNKNOWN`: not observed), the value it carried and the
    value's type; ``source`` where not the header's. Where the answer was made more than once in its
    state, ``value`` is the last one (``at``), ``first`` the first where it differed, ``rate`` its
    change per second between the two (a counter: energy in mJ/s, bytes/s), ``count`` how many."""

    ret: str
    value: JsonValue = None
    type: str | None = None
    source: SourceId | None = None
    count: int = Field(default=1, ge=0)
    at: float | None = None
    first: Observation | None = None
    rate: float | None = None

    @property
    def known(self) -> bool:
        return self.ret != UNKNOWN

    @property
    def ok(self) -> bool:
        return self.ret == SUCCESS

    @model_serializer(mode="wrap")
    def _keys_first(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        return {**{key: dumped[key] for key in _KEYS if key in dumped}, **dumped}

    @model_validator(mode="after")
    def _unknown_is_empty(self) -> Answer:
        if self.ret == UNKNOWN and (self.value is not None or self.type is not None):
            raise ValueError("an unknown answer carries no value or type")
        return self


class Call(Answer):
    """One NVML function with one set of inputs, on one handle. ``args``: the inputs besides the handle
    (a clock type, a sensor, a link, a profile, the field keys of a batch), in the C function's order;
    the outputs are the value: one output as itself, several as a list, a struct as a dict of its
    members, an array as a list (``docs/captures.md`` lists each function's)."""

    function: str
    device: DeviceRef = GPU
    args: tuple[JsonValue, ...] = ()


class FieldValue(Answer):
    """One ``nvmlFieldValue_t`` of ``nvmlDeviceGetFieldValues``, by (field id, scope id): its
    ``nvmlReturn`` as ``ret``, its ``valueType`` as ``type`` (``NVML_VALUE_TYPE_*``), the value of that
    type, and the driver's ``latencyUsec``. ``device``: a MIG device's handle where asked on one."""

    id: int = Field(ge=0)
    scope: int = Field(default=0, ge=0)
    device: DeviceRef = GPU
    value: Number | None = None
    latency_us: int | None = None


class GpmMetric(Answer):
    """One metric of ``nvmlGpmMetricsGet`` (``NVML_GPM_METRIC_*`` id): its ``nvmlReturn`` and value over
    a pair of samples at least 100 ms apart, of the whole GPU (``instance`` None: ``nvmlGpmSampleGet``)
    or of a GPU instance (``nvmlGpmMigSampleGet`` with that id)."""

    id: int = Field(ge=0)
    instance: int | None = None
    value: float | None = None
    unit: str | None = None


class Process(Model):
    """A process NVML listed on the GPU (``nvmlDeviceGetComputeRunningProcesses``), with the name and
    command line the node gave it (masked unless ``--no-mask``)."""

    pid: int
    device: DeviceRef = GPU
    used_memory: int | None = None  # bytes; None: NVML cannot tell (NVML_VALUE_NOT_AVAILABLE)
    name: str | None = None
    cmdline: tuple[str, ...] | None = None


class Price(Model):
    """The thread CPU one call costs (the median of ``measured`` calls, as ``warptd doctor`` measures a
    read): of ``function`` (None seconds: unknown), or of ``nvmlDeviceGetFieldValues`` asking ``field``
    alone, or of a call asking ``items`` things at once (``nvmlGpmMetricsGet``: that many metrics)."""

    function: str
    field: int | None = None
    items: int | None = None
    cpu_seconds: float | None
    measured: int = Field(default=0, ge=0)
    source: SourceId | None = None


class Refresh(Model):
    """How often the driver refreshes ``value``: the median gap between its changes while polled
    (``warptd doctor``'s way); None: unknown (fewer than two changes seen, or not polled)."""

    value: RefreshValue
    seconds: float | None
    changes: int = Field(default=0, ge=0)
    polled_seconds: float = 0.0
    poll_seconds: float = 0.0
    source: SourceId | None = None


class GpuState(Model):
    """What one GPU answered in one state, over ``seconds`` of it."""

    seconds: float = Field(ge=0)
    #: What ran on the GPU (None: nothing warptd started; the GPU may still have had other work).
    load: str | None = None
    calls: tuple[Call, ...] = ()
    fields: tuple[FieldValue, ...] = ()
    gpm: tuple[GpmMetric, ...] = ()
    processes: tuple[Process, ...] = ()

    def call(self, function: str, *args: Any, device: str = GPU) -> Call | None:
        """The answer of ``function(args)`` on ``device``; None where the capture does not hold it."""
        wanted = tuple(args)
        for call in self.calls:
            if call.function == function and call.device == device and call.args == wanted:
                return call
        return None

    def field(self, field_id: int, scope: int = 0, device: str = GPU) -> FieldValue | None:
        for value in self.fields:
            if value.id == field_id and value.scope == scope and value.device == device:
                return value
        return None


class Identity(Model):
    """What names the GPU (masked as the header says): as its calls answered them, or from the source."""

    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    board_part_number: str | None = None
    pci_bus_id: str | None = None


class Gpu(Model):
    """One GPU in NVML's order: what names it, each state's answers, its prices and refresh periods."""

    index: int = Field(ge=0)
    identity: Identity = Identity()
    states: dict[str, GpuState]
    prices: tuple[Price, ...] = ()
    refresh: tuple[Refresh, ...] = ()

    @model_validator(mode="after")
    def _idle_first(self) -> Gpu:
        if IDLE not in self.states:
            raise ValueError(f"GPU {self.index} has no {IDLE!r} state")
        return self

    def price(self, function: str, field: int | None = None) -> Price | None:
        for price in self.prices:
            if price.function == function and price.field == field:
                return price
        return None

    def refresh_of(self, value: str) -> Refresh | None:
        return next((refresh for refresh in self.refresh if refresh.value == value), None)


class Node(Model):
    """The node: its driver's versions (None: unknown), the functions its NVML library does not
    export, and the calls made on no GPU (initialisation, counts, versions), per state."""

    hostname: str | None = None
    os: str | None = None  # "Linux 6.8.0-45-generic", "Windows"
    driver_version: str | None = None  # "580.159.04"
    nvml_version: str | None = None  # "13.580.159.04"
    cuda_driver_version: str | None = None  # "13.0"
    nvidia_ml_py: str | None = None
    warptd: str | None = None
    #: C symbols the driver's libnvidia-ml does not export: pynvml answers NVML_ERROR_FUNCTION_NOT_FOUND
    #: for them, and a replay builds the double without them. A function not listed is exported (or
    #: not known to be missing).
    absent: tuple[str, ...] = ()
    calls: dict[str, tuple[Call, ...]] = {}


class Capture(Model):
    """One node's capture (:data:`VERSION`)."""

    header: Header
    node: Node = Node()
    gpus: tuple[Gpu, ...]

    @model_validator(mode="after")
    def _consistent(self) -> Capture:
        indices = [gpu.index for gpu in self.gpus]
        if indices != list(range(len(indices))):
            raise ValueError(f"GPUs must be listed in NVML's order, 0 to n-1: {indices}")
        named = {source.id for source in self.header.sources}
        for where, source in self._named_sources():
            if source not in named:
                raise ValueError(f"{where} names source {source!r}, not among the header's sources")
        return self

    def _named_sources(self) -> list[tuple[str, str]]:
        found = []
        for gpu in self.gpus:
            for name, state in gpu.states.items():
                for answer in (*state.calls, *state.fields, *state.gpm):
                    if answer.source is not None:
                        found.append((f"GPU {gpu.index} {name}", answer.source))
            for entry in (*gpu.prices, *gpu.refresh):
                if entry.source is not None:
                    found.append((f"GPU {gpu.index} prices/refresh", entry.source))
        for name, calls in self.node.calls.items():
            found += [(f"node {name}", call.source) for call in calls if call.source is not None]
        return found

    @property
    def states(self) -> tuple[str, ...]:
        """The states every GPU has, idle first."""
        common = set.intersection(*(set(gpu.states) for gpu in self.gpus)) if self.gpus else {IDLE}
        return tuple(sorted(common, key=lambda state: (state != IDLE, state)))

    def source_of(self, entry: Answer | Price | Refresh) -> Source:
        """The source an answer, price or refresh period came from."""
        wanted = entry.source or self.header.source
        return next(source for source in self.header.sources if source.id == wanted)

    def unknowns(self, state: str = IDLE) -> list[str]:
        """Every answer of ``state`` marked unknown, as ``GPU <i>: <what>`` (``field 83``, ``field 138/2``,
        ``nvmlDeviceGetFanSpeed_v2(0)``, ``GPM 1``, ``GPM 1 on GI 3``, ``mig:0 nvmlDeviceGetName()``)."""
        found = []
        for gpu in self.gpus:
            gpu_state = gpu.states.get(state)
            if gpu_state is None:
                continue
            for call in gpu_state.calls:
                if not call.known:
                    where = "" if call.device == GPU else f"{call.device} "
                    found.append(f"GPU {gpu.index}: {where}{call.function}({', '.join(map(str, call.args))})")
            for value in gpu_state.fields:
                if not value.known:
                    scope = f"/{value.scope}" if value.scope else ""
                    found.append(f"GPU {gpu.index}: field {value.id}{scope}")
            for metric in gpu_state.gpm:
                if not metric.known:
                    on = f" on GI {metric.instance}" if metric.instance is not None else ""
                    found.append(f"GPU {gpu.index}: GPM {metric.id}{on}")
        return found

    def dumps(self) -> str:
        """The file's text: JSON, one key per line, members in the schema's order."""
        return self.model_dump_json(indent=1, exclude_defaults=True) + "\n"

    def write(self, path: Path) -> None:
        path.write_text(self.dumps())

    @classmethod
    def read(cls, path: Path) -> Capture:
        """A capture file; ``ValueError`` (pydantic's) naming what is wrong where it is not one."""
        return cls.model_validate_json(Path(path).read_bytes())

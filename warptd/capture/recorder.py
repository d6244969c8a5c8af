"""Every C call nvidia-ml-py makes into the driver's library, recorded while installed.

nvidia-ml-py finds each C function through its ``_nvmlGetFunctionPointer``; so do warptd's prepared
calls (:func:`warptd.backends.nvidia.calls.pointer`), the field batches and the buffered process calls.
Installed, the recorder puts itself in that lookup: each function comes back wrapped, and each call is
timed in the calling thread's CPU around the C call alone and recorded after it, with the handle it was
made on (a GPU, or one of its MIG devices), its inputs, its return code and what it wrote into its
outputs. A field batch is recorded field by field, a GPM metrics request metric by metric, each
answer keyed by what asked it: the first and last answer of a key are kept, with how many there were
and their CPU, per state (idle, loaded). A function the library does not export is noted as absent.
"""

from __future__ import annotations

import contextlib
import ctypes
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from warptd.capture import schema

#: Calls that ask the library about itself, not the driver: not recorded.
_NOT_RECORDED = frozenset({"nvmlErrorString"})
#: Per function, the positions of inputs that are not part of what it asks (a timestamp that moves, a
#: timeout), left out of its key.
_UNKEYED: dict[str, frozenset[int]] = {
    "nvmlDeviceGetProcessUtilization": frozenset({3}),
    "nvmlEventSetWait_v2": frozenset({2}),
}
#: CPU samples kept per key: enough for a median.
_CPU_SAMPLES = 64
#: nvmlValueType_t -> the member of c_nvmlValue_t holding it.
_UNION_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
Key = tuple[Any, ...]


def code_names(nvml: Any, prefix: tuple[str, ...]) -> dict[int, str]:
    """nvml.h's names of a kind of constant (``NVML_SUCCESS``, ``NVML_ERROR_*``) by value."""
    names: dict[int, str] = {}
    for name in sorted(dir(nvml)):
        value = getattr(nvml, name)
        if name.startswith(prefix) and isinstance(value, int) and value not in names:
            names[value] = name
    return names


@dataclass
class Entry:
    """One key's answers in one state: the last, the first and last that succeeded, their CPU."""

    ret: str = schema.UNKNOWN
    value: Any = None
    type: str | None = None
    at: float = 0.0
    count: int = 0
    first_ok: tuple[float, Any] | None = None
    last_ok: tuple[float, Any] | None = None
    latency_us: int | None = None
    unit: str | None = None
    cpu: list[float] = field(default_factory=list)

    def add(self, ret: str, value: Any, kind: str | None, at: float, cpu: float | None) -> None:
        self.ret, self.value, self.type, self.at = ret, value, kind, at
        self.count += 1
        if ret == schema.SUCCESS:
            if self.first_ok is None:
                self.first_ok = (at, value)
            self.last_ok = (at, value)
        if cpu is not None and len(self.cpu) < _CPU_SAMPLES:
            self.cpu.append(cpu)

    def motion(self) -> tuple[schema.Observation | None, float | None]:
        """The first successful answer where it differs from the last, and the change per second."""
        if self.first_ok is None or self.last_ok is None or self.ret != schema.SUCCESS:
            return None, None
        (began, first), (ended, last) = self.first_ok, self.last_ok
        if first == last:
            return None, None
        rate = None
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (first, last))
        if numbers and ended > began:
            rate = (last - first) / (ended - began)
        return schema.Observation(at=round(began, 6), value=first), rate

    def median_cpu(self) -> float | None:
        return statistics.median(self.cpu) if self.cpu else None


@dataclass
class Book:
    """What one state recorded: entries by GPU index (None: no GPU) and key, and its start."""

    began: float
    entries: dict[int | None, dict[Key, Entry]] = field(default_factory=dict)

    def entry(self, gpu: int | None, key: Key) -> Entry:
        by_key = self.entries.setdefault(gpu, {})
        found = by_key.get(key)
        if found is None:
            found = by_key[key] = Entry()
        return found


@dataclass(frozen=True, slots=True)
class _Made:
    """One call as made: the function, its arguments, its return code by name, when, its CPU."""

    name: str
    args: tuple[Any, ...]
    ret: str
    at: float
    cpu: float


class _Recorded:
    """A C function of the library, wrapped: the call timed alone and handed to the recorder."""

    def __init__(self, recorder: Recorder, name: str, function: Any) -> None:
        object.__setattr__(self, "_recorder", recorder)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_function", function)

    def __call__(self, *args: Any) -> Any:
        started = time.thread_time()
        code = self._function(*args)
        spent = time.thread_time() - started
        self._recorder.record(self._name, args, code, spent)
        return code

    # nvidia-ml-py sets ``restype`` and ``argtypes`` on some functions: they are the C function's.
    def __getattr__(self, name: str) -> Any:
        return getattr(self._function, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._function, name, value)


class Recorder:
    """Records nvidia-ml-py's C calls of ``nvml`` (the pynvml module) into books, one per state."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.returns = code_names(nvml, ("NVML_SUCCESS", "NVML_ERROR_"))
        self.value_types = code_names(nvml, ("NVML_VALUE_TYPE_",))
        self.books: dict[str, Book] = {}
        self.state: str | None = None  # nothing is recorded outside a state
        self.absent: set[str] = set()
        #: Handle address -> (GPU index, device: "gpu" or "mig:<slot>").
        self.handles: dict[int, tuple[int, str]] = {}
        #: GPM sample address -> (GPU index, GPU instance id or None) of the last sample taken into it.
        self.samples: dict[int, tuple[int, int | None]] = {}
        self._wrapped: dict[str, _Recorded] = {}
        self._lock = threading.Lock()

    # -- installing -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def installed(self) -> Iterator[Recorder]:
        """Wrap every function nvidia-ml-py looks up from now on, for the block."""
        nvml = self.nvml
        original = nvml._nvmlGetFunctionPointer

        def lookup(name: str) -> Any:
            try:
                function = original(name)
            except nvml.NVMLError as exc:
                if exc.value == nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    with self._lock:
                        self.absent.add(name)
                raise
            if name in _NOT_RECORDED:
                return function
            with self._lock:
                wrapped = self._wrapped.get(name)
                if wrapped is None or wrapped._function is not function:
                    wrapped = self._wrapped[name] = _Recorded(self, name, function)
            return wrapped

        nvml._nvmlGetFunctionPointer = lookup
        try:
            yield self
        finally:
            nvml._nvmlGetFunctionPointer = original

    def begin(self, state: str) -> None:
        """Record into ``state`` from now on (its clock starts now)."""
        with self._lock:
            self.books.setdefault(state, Book(began=time.monotonic()))
            self.state = state

    def pause(self) -> None:
        """Record nothing until the next :meth:`begin` (the capture's own measurements)."""
        with self._lock:
            self.state = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        state = self.state
        self.pause()
        try:
            yield
        finally:
            if state is not None:
                self.begin(state)

    # -- recording --------------------------------------------------------------------------------
    def ret(self, code: int) -> str:
        return self.returns.get(code, f"NVML_ERROR_{code}")

    def record(self, name: str, args: tuple[Any, ...], code: int, cpu: float) -> None:
        """One call made: where, what it asked, what it answered."""
        with self._lock:
            self._learn_handles(name, args, code)
            book = self.books.get(self.state) if self.state is not None else None
            if book is None:
                return
            made = _Made(name, args, self.ret(code), time.monotonic() - book.began, cpu)
            if name == "nvmlDeviceGetFieldValues":
                self._fields(book, made)
            elif name == "nvmlGpmMetricsGet":
                self._gpm(book, made)
            else:
                self._call(book, made)

    def _where(self, args: tuple[Any, ...]) -> tuple[int | None, str, int]:
        """The GPU, device and position of the handle a call was made on (None, "gpu", -1: none)."""
        handle_type = self.nvml.c_nvmlDevice_t
        for position, arg in enumerate(args):
            if isinstance(arg, handle_type):
                gpu, device = self.handles.get(_address(arg), (None, schema.GPU))
                return gpu, device, position
        return None, schema.GPU, -1

    def _learn_handles(self, name: str, args: tuple[Any, ...], code: int) -> None:
        """Which GPU or MIG device each handle is, and which GPU (instance) each GPM sample holds."""
        if code:
            return
        if name == "nvmlDeviceGetHandleByIndex_v2":
            self.handles[_address(_target(args[1]))] = (_number(args[0]), schema.GPU)
        elif name == "nvmlDeviceGetMigDeviceHandleByIndex":
            parent = self.handles.get(_address(args[0]))
            if parent is not None:
                self.handles[_address(_target(args[2]))] = (parent[0], f"mig:{_number(args[1])}")
        elif name in ("nvmlGpmSampleGet", "nvmlGpmMigSampleGet"):
            parent = self.handles.get(_address(args[0]))
            if parent is not None:
                instance = _number(args[1]) if name == "nvmlGpmMigSampleGet" else None
                self.samples[_address(args[-1])] = (parent[0], instance)

    def _call(self, book: Book, made: _Made) -> None:
        name, args, ret = made.name, made.args, made.ret
        gpu, device, handle_at = self._where(args)
        if name == "nvmlDeviceGetHandleByIndex_v2":  # the GPU it asks for, whatever it answered
            gpu = _number(args[0])
        inputs, outputs = [], []
        unkeyed = _UNKEYED.get(name, frozenset())
        for position, arg in enumerate(args):
            if position == handle_at:
                continue
            if _is_output(arg):
                outputs.append(_target(arg))
            elif _names_a_thing(arg):
                continue  # a GPM sample, an event set: which one is no part of what is asked
            elif position not in unkeyed and not _follows_text(args, position):
                inputs.append(_number(arg))
        if name == "nvmlDeviceGetHandleByIndex_v2":
            inputs = []  # the GPU it asks for is where it is kept
        value, kind = _outputs(name, outputs) if ret == schema.SUCCESS else (None, None)
        key = ("call", device, name, tuple(inputs))
        book.entry(gpu, key).add(ret, value, kind, made.at, made.cpu)

    def _fields(self, book: Book, made: _Made) -> None:
        """A field batch, answer by answer (each carries its own return code)."""
        args, ret, at, cpu = made.args, made.ret, made.at, made.cpu
        gpu, device, _ = self._where(args)
        values = _target(args[2])
        count = _number(args[1])
        if ret != schema.SUCCESS:  # the batch itself failed: every field asked answers that
            for answer in list(values)[:count]:
                key = ("field", device, answer.fieldId, answer.scopeId)
                book.entry(gpu, key).add(ret, None, None, at, None)
            return
        share = cpu / count if count else cpu
        for answer in list(values)[:count]:
            field_ret = self.ret(answer.nvmlReturn)
            kind = self.value_types.get(answer.valueType, str(answer.valueType))
            value = None
            if field_ret == schema.SUCCESS and 0 <= answer.valueType < len(_UNION_MEMBERS):
                value = getattr(answer.value, _UNION_MEMBERS[answer.valueType])
            entry = book.entry(gpu, ("field", device, answer.fieldId, answer.scopeId))
            entry.add(field_ret, value, kind, at, share)
            entry.latency_us = int(answer.latencyUsec)

    def _gpm(self, book: Book, made: _Made) -> None:
        """A GPM metrics request, metric by metric, of the GPU (instance) its samples are of."""
        ret, at = made.ret, made.at
        request = _target(made.args[0])
        where = self.samples.get(_address(request.sample2))
        if where is None:
            return
        gpu, instance = where
        count = min(int(request.numMetrics), len(request.metrics))
        book.entry(gpu, ("gpm_request", instance)).add(ret, count, None, at, made.cpu)
        if ret != schema.SUCCESS:
            return
        for metric in request.metrics[:count]:
            metric_ret = self.ret(metric.nvmlReturn)
            value = float(metric.value) if metric_ret == schema.SUCCESS else None
            entry = book.entry(gpu, ("gpm", instance, int(metric.metricId)))
            entry.add(metric_ret, value, None, at, None)
            unit = metric.metricInfo.unit if metric_ret == schema.SUCCESS else None
            if unit:
                entry.unit = unit.decode(errors="replace") if isinstance(unit, bytes) else str(unit)

    # -- reading back -------------------------------------------------------------------------------
    def field_cpu(self, state: str) -> dict[int, dict[int, list[float]]]:
        """Per GPU and field id, the CPU of the batches that asked that field alone in ``state``."""
        found: dict[int, dict[int, list[float]]] = {}
        book = self.books.get(state)
        for gpu, entries in (book.entries if book else {}).items():
            for key, entry in entries.items():
                if key[0] == "field" and gpu is not None and entry.cpu:
                    found.setdefault(gpu, {}).setdefault(key[2], []).extend(entry.cpu)
        return found

    def cpu_by_function(self, state: str) -> dict[tuple[int | None, str], list[float]]:
        """Per GPU and function, the CPU of its calls in ``state`` (field batches and GPM requests
        apart: a batch's CPU is shared by its fields)."""
        found: dict[tuple[int | None, str], list[float]] = {}
        book = self.books.get(state)
        for gpu, entries in (book.entries if book else {}).items():
            for key, entry in entries.items():
                if key[0] == "call":
                    found.setdefault((gpu, key[2]), []).extend(entry.cpu)
                elif key[0] == "gpm_request":
                    found.setdefault((gpu, "nvmlGpmMetricsGet"), []).extend(entry.cpu)
        return found


def _address(pointer: Any) -> int:
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


def _target(arg: Any) -> Any:
    """What an argument points at: the object of ``byref(x)``, else the argument itself."""
    return getattr(arg, "_obj", arg)


def _number(arg: Any) -> Any:
    value = getattr(arg, "value", arg)
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _is_output(arg: Any) -> bool:
    """``byref(x)``, an array or a structure: written by the call (possibly read too)."""
    return type(arg).__name__ == "CArgObject" or isinstance(arg, ctypes.Array | ctypes.Structure)


def _names_a_thing(arg: Any) -> bool:
    """A pointer passed as itself: a GPM sample, an event set (a handle is found apart)."""
    return isinstance(arg, ctypes._Pointer | ctypes.c_void_p) or arg is None


def _follows_text(args: tuple[Any, ...], position: int) -> bool:
    """A length after a text buffer (``nvmlDeviceGetName(handle, buffer, length)``): not asked."""
    before = args[position - 1] if position else None
    return isinstance(before, ctypes.Array) and before._type_ is ctypes.c_char


def _outputs(name: str, outputs: list[Any]) -> tuple[Any, str | None]:
    """The value of a call's outputs and its type: one output as itself, several as a list; an array
    answered with a count (processes, utilization samples) cut to that count."""
    counts = [o for o in outputs if isinstance(o, ctypes.c_uint)]
    decoded, kinds = [], []
    for output in outputs:
        if isinstance(output, ctypes.Array) and output._type_ is not ctypes.c_char:
            limit = counts[0].value if counts and output is not counts[0] else len(output)
            decoded.append([decode(item) for item in output[:limit]])
            kinds.append(f"{output._type_.__name__}[]")
        else:
            decoded.append(decode(output))
            kinds.append(_type_name(output))
    if name == "nvmlDeviceGetProcessesUtilizationInfo" and decoded:
        decoded[0] = _utilization_info(outputs[0])
    if name in _COUNTED_ARRAYS and len(decoded) == 2:  # (count, array): the array alone
        return decoded[1], kinds[1]
    if not decoded:
        return None, None
    if len(decoded) == 1:
        return decoded[0], kinds[0]
    return decoded, ",".join(kinds) if kinds else None


#: Calls answering a count and an array of that many structs: the array is the value.
_COUNTED_ARRAYS = frozenset(
    {
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetProcessUtilization",
    }
)


def _utilization_info(info: Any) -> dict[str, Any]:
    """``nvmlProcessesUtilizationInfo_v1_t``: its samples through its pointer, as many as it counts."""
    count = int(info.processSamplesCount)
    samples = info.procUtilArray
    rows = [decode(samples[i]) for i in range(count)] if samples else []
    return {
        "version": int(info.version),
        "processSamplesCount": count,
        "lastSeenTimeStamp": int(info.lastSeenTimeStamp),
        "procUtilArray": rows,
    }


def _type_name(value: Any) -> str:
    if isinstance(value, ctypes.Array):
        return "char[]" if value._type_ is ctypes.c_char else f"{value._type_.__name__}[]"
    return type(value).__name__


def decode(value: Any) -> Any:
    """A ctypes value as JSON: numbers, text, a structure as a dict of its members, an array as a list;
    pointers (handles, samples, sets) as None."""
    if isinstance(value, ctypes.Array):
        if value._type_ is ctypes.c_char:
            return value.value.decode(errors="replace")
        return [decode(item) for item in value]
    if isinstance(value, ctypes.Structure | ctypes.Union):
        kind = type(value)
        return {name: decode(getattr(kind, name).__get__(value)) for name, *_ in kind._fields_}
    if isinstance(value, ctypes._Pointer | ctypes.c_void_p):
        return None
    if isinstance(value, ctypes._SimpleCData):
        value = value.value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value

"""Per-process utilization samples of an NVIDIA GPU, each read returning only the samples since the last.

``nvmlDeviceGetProcessesUtilizationInfo`` (R550 and newer) and, on older drivers,
``nvmlDeviceGetProcessUtilization`` answer the samples the driver took (one per process that used
the GPU in each of its sampling windows) newer than a timestamp in µs; NOT_FOUND means no process
used the GPU since, which is no error.

Each call is a firmware round trip (2.1 ms of CPU on an H200, ``shared/notes/real-h200.md``), and
nvidia-ml-py's wrappers make two where there are samples: the count, then the samples. A read here
makes one, into a buffer kept per GPU and sized for the driver's whole sample buffer (100 windows),
and asks again only where the driver says the buffer is too small. The C function comes from
nvidia-ml-py's private lookup (:func:`warptd.backends.nvidia.calls.pointer`); where that is gone, the
public wrappers make the read (two calls, the same samples).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from warptd.backends.nvidia.calls import pointer

_INFO = "nvmlDeviceGetProcessesUtilizationInfo"  # v1 struct, with jpg/ofa utilization
_SAMPLES = "nvmlDeviceGetProcessUtilization"  # drivers before R550
#: The engines exported, by the attribute of pynvml's sample structs holding their percent.
ENGINES: dict[str, str] = {"sm": "smUtil", "memory": "memUtil", "encoder": "encUtil", "decoder": "decUtil"}
#: Samples a read's buffer holds at first: more than the driver keeps (``NV2080_CTRL_PERF_GPUMON_SAMPLE_
#: COUNT_PERFMON_UTIL``, 100 windows in the open kernel modules), so one call fetches them all.
FIRST_CAPACITY = 128
_NOT_FOUND, _INSUFFICIENT_SIZE = 6, 7  # nvmlReturn_t


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One driver sample of one process: µs timestamp and each engine's percent, in ENGINES order."""

    pid: int
    timestamp_us: int
    percents: tuple[int, ...]

    @property
    def sm_ratio(self) -> float:
        return self.percents[0] / 100.0


class UtilizationReader:
    """Reads the new samples of each device, remembering per device the last timestamp it saw."""

    def __init__(self, nvml: Any, version_errors: tuple[type[BaseException], ...]) -> None:
        self._nvml = nvml
        self._version_errors = version_errors
        self._function = _INFO if hasattr(nvml, _INFO) else _SAMPLES
        self._last_seen: dict[int, int] = {}
        self._calls: dict[int, _Call] = {}  # device index -> its prepared call of ``_function``

    def read(self, index: int, handle: Any) -> list[ProcessSample]:
        """The device's samples since the previous read (empty when no process used it); raises
        NVMLError as NVML does (NOT_SUPPORTED where the GPU cannot tell per-process utilization)."""
        last_seen = self._last_seen.get(index, 0)
        try:
            samples = self._call(index, handle, last_seen)
        except self._nvml.NVMLError_NotFound:
            return []
        if samples:
            self._last_seen[index] = max(last_seen, *(s.timestamp_us for s in samples))
        return samples

    def _call(self, index: int, handle: Any, last_seen: int) -> list[ProcessSample]:
        try:
            return self._prepared(index, handle)(last_seen)
        except (self._nvml.NVMLError, *self._version_errors) as exc:
            if not self._older_driver(exc):
                raise
            if self._function == _SAMPLES:
                raise self._nvml.NVMLError(self._nvml.NVML_ERROR_NOT_SUPPORTED) from None
        self._function = _SAMPLES  # the driver lacks the function or its struct version: for good
        self._calls.clear()
        return self._prepared(index, handle)(last_seen)

    def _prepared(self, index: int, handle: Any) -> _Call:
        call = self._calls.get(index)
        if call is None or call.handle is not handle:
            prepare = _info_call if self._function == _INFO else _samples_call
            call = self._calls[index] = prepare(self._nvml, handle)
        return call

    def _older_driver(self, exc: BaseException) -> bool:
        mismatch = getattr(self._nvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25)
        return isinstance(exc, self._version_errors) or getattr(exc, "value", None) == mismatch

    def forget(self) -> None:
        """Start over (NVML reopened: handles and timestamps of the old session mean nothing)."""
        self._last_seen.clear()
        self._calls.clear()


class _Call:
    """One GPU's read of its samples newer than a timestamp: one C call into a kept buffer, a second
    only where the driver answers that more samples are waiting than it holds."""

    def __init__(
        self,
        nvml: Any,
        name: str,
        handle: Any,
        *,
        make: Callable[[int, int], int],
        public: Callable[[int], list[Any]],
        sample: type[ctypes.Structure],
    ) -> None:
        """``make(capacity, last_seen)`` calls the C function ``function`` (set from ``name``) into
        ``self.buffer`` and answers its return code, the count in ``self.count``; ``public(last_seen)``
        is nvidia-ml-py's wrapper."""
        self.nvml, self.name, self.handle = nvml, name, handle
        self._make, self._public = make, public
        self.function: Any = None
        self.buffer: Any = None
        self.count = 0
        self._fields = tuple(
            getattr(sample, field).__get__ for field in ("pid", "timeStamp", *ENGINES.values())
        )
        self._sample = sample
        self.grow(FIRST_CAPACITY)

    def grow(self, capacity: int) -> None:
        self.capacity = capacity
        self.buffer = (self._sample * capacity)()

    def __call__(self, last_seen: int) -> list[ProcessSample]:
        if self.function is None:
            self.function = pointer(self.nvml, self.name) or _PUBLIC
        if self.function is _PUBLIC:
            return list(_convert(self._public(last_seen)))
        code = self._make(self.capacity, last_seen)
        if code == _INSUFFICIENT_SIZE:  # more samples waiting than the driver was thought to keep
            self.grow(max(self.count, 2 * self.capacity))
            code = self._make(self.capacity, last_seen)
        if code:
            raise self.nvml.NVMLError(code)  # NOT_FOUND included: the reader takes it as no sample
        pid, stamp, *engines = self._fields
        samples = []
        for raw in self.buffer[: self.count]:
            percents = tuple(min(read(raw), 100) for read in engines)  # unsigned: a wild value caps
            samples.append(ProcessSample(pid(raw), stamp(raw), percents))
        return samples


_PUBLIC: Any = object()


def _info_call(nvml: Any, handle: Any) -> _Call:
    """``nvmlDeviceGetProcessesUtilizationInfo`` with the v1 struct, as nvidia-ml-py fills it."""
    info = nvml.c_nvmlProcessesUtilizationInfo_v1_t()
    info.version = nvml.ProcessesUtilizationInfo_v1

    def make(capacity: int, last_seen: int) -> int:
        info.procUtilArray = call.buffer
        info.processSamplesCount = capacity
        info.lastSeenTimeStamp = last_seen
        code = call.function(handle, ctypes.byref(info))
        call.count = info.processSamplesCount
        return code

    call = _Call(
        nvml,
        _INFO,
        handle,
        make=make,
        public=lambda last_seen: nvml.nvmlDeviceGetProcessesUtilizationInfo(handle, last_seen),
        sample=nvml.c_nvmlProcessUtilizationInfo_v1_t,
    )
    return call


def _samples_call(nvml: Any, handle: Any) -> _Call:
    """``nvmlDeviceGetProcessUtilization`` (drivers before R550), as nvidia-ml-py calls it."""
    count = ctypes.c_uint(0)

    def make(capacity: int, last_seen: int) -> int:
        count.value = capacity
        code = call.function(handle, call.buffer, ctypes.byref(count), ctypes.c_ulonglong(last_seen))
        call.count = count.value
        return code

    call = _Call(
        nvml,
        _SAMPLES,
        handle,
        make=make,
        public=lambda last_seen: nvml.nvmlDeviceGetProcessUtilization(handle, last_seen),
        sample=nvml.c_nvmlProcessUtilizationSample_t,
    )
    return call


def _convert(raw: Iterable[Any]) -> Iterable[ProcessSample]:
    for sample in raw:
        percents = tuple(min(int(getattr(sample, name)), 100) for name in ENGINES.values())  # unsigned
        yield ProcessSample(int(sample.pid), int(sample.timeStamp), percents)

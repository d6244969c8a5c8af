"""Per-process utilization samples of an NVIDIA GPU, each read returning only the samples since the last.

``nvmlDeviceGetProcessesUtilizationInfo`` (R550 and newer) and, on older drivers,
``nvmlDeviceGetProcessUtilization`` answer the samples the driver took (one per process that used
the GPU in each of its sampling windows) newer than a timestamp in µs; NOT_FOUND means no process
used the GPU since, which is no error. Each call is a firmware round trip (2.1 ms of CPU on an H200,
``shared/notes/real-h200.md``): a read makes one (:mod:`warptd.processes.buffered`), into an array
sized for the driver's whole sample buffer, where nvidia-ml-py's wrappers make two.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from warptd.processes.buffered import BufferedCall

_INFO = "nvmlDeviceGetProcessesUtilizationInfo"  # v1 struct, with jpg/ofa utilization
_SAMPLES = "nvmlDeviceGetProcessUtilization"  # drivers before R550
#: The engines exported, by the attribute of pynvml's sample structs holding their percent.
ENGINES: dict[str, str] = {"sm": "smUtil", "memory": "memUtil", "encoder": "encUtil", "decoder": "decUtil"}
_FIELDS = ("pid", "timeStamp", *ENGINES.values())
#: Samples a read's array holds at first: more than the driver keeps (100 windows:
#: ``NV2080_CTRL_PERF_GPUMON_SAMPLE_COUNT_PERFMON_UTIL`` in the open kernel modules), so one call
#: fetches them all where a process or so was busy; it grows where more come.
FIRST_CAPACITY = 128


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
        self._calls: dict[int, BufferedCall[ProcessSample]] = {}  # device index -> its call

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

    def _prepared(self, index: int, handle: Any) -> BufferedCall[ProcessSample]:
        call = self._calls.get(index)
        if call is None:
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


def _sample(values: tuple[Any, ...]) -> ProcessSample:
    pid, stamp, *percents = values
    return ProcessSample(int(pid), int(stamp), tuple(min(int(p), 100) for p in percents))  # unsigned


def _info_call(nvml: Any, handle: Any) -> BufferedCall[ProcessSample]:
    """``nvmlDeviceGetProcessesUtilizationInfo`` with the v1 struct, filled as nvidia-ml-py fills it."""
    info = nvml.c_nvmlProcessesUtilizationInfo_v1_t()
    info.version = nvml.ProcessesUtilizationInfo_v1

    def make(function: Any, buffer: Any, capacity: int, last_seen: int) -> tuple[int, int]:
        info.procUtilArray = buffer
        info.processSamplesCount = capacity
        info.lastSeenTimeStamp = last_seen
        return function(handle, ctypes.byref(info)), info.processSamplesCount

    return _reading(nvml, handle, _INFO, nvml.c_nvmlProcessUtilizationInfo_v1_t, make)


def _samples_call(nvml: Any, handle: Any) -> BufferedCall[ProcessSample]:
    """``nvmlDeviceGetProcessUtilization`` (drivers before R550), as nvidia-ml-py calls it."""
    count = ctypes.c_uint(0)

    def make(function: Any, buffer: Any, capacity: int, last_seen: int) -> tuple[int, int]:
        count.value = capacity
        return function(handle, buffer, ctypes.byref(count), ctypes.c_ulonglong(last_seen)), count.value

    return _reading(nvml, handle, _SAMPLES, nvml.c_nvmlProcessUtilizationSample_t, make)


def _reading(
    nvml: Any, handle: Any, name: str, struct: Any, make: Callable[[Any, Any, int, int], tuple[int, int]]
) -> BufferedCall[ProcessSample]:
    """The call ``name`` of one GPU, whose public wrapper takes the handle and the timestamp."""
    return BufferedCall(
        nvml,
        name,
        struct,
        _FIELDS,
        make=make,
        read=_sample,
        public=lambda last_seen: getattr(nvml, name)(handle, last_seen),
        capacity=FIRST_CAPACITY,
    )

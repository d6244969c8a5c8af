"""Per-process utilization samples of an NVIDIA GPU, each read returning only the samples since the last.

``nvmlDeviceGetProcessesUtilizationInfo`` (R550 and newer) and, on older drivers,
``nvmlDeviceGetProcessUtilization`` answer the samples the driver took (one per process that used
the GPU in each of its sampling windows) newer than a timestamp in µs; NOT_FOUND means no process
used the GPU since, which is no error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_INFO = "nvmlDeviceGetProcessesUtilizationInfo"  # v1 struct, with jpg/ofa utilization
_SAMPLES = "nvmlDeviceGetProcessUtilization"  # drivers before R550
#: The engines exported, by the attribute of pynvml's sample structs holding their percent.
ENGINES: dict[str, str] = {"sm": "smUtil", "memory": "memUtil", "encoder": "encUtil", "decoder": "decUtil"}


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

    def read(self, index: int, handle: Any) -> list[ProcessSample]:
        """The device's samples since the previous read (empty when no process used it); raises
        NVMLError as NVML does (NOT_SUPPORTED where the GPU cannot tell per-process utilization)."""
        last_seen = self._last_seen.get(index, 0)
        try:
            raw = self._call(handle, last_seen)
        except self._nvml.NVMLError_NotFound:
            return []
        samples = list(_convert(raw))
        if samples:
            self._last_seen[index] = max(last_seen, *(s.timestamp_us for s in samples))
        return samples

    def _call(self, handle: Any, last_seen: int) -> list[Any]:
        try:
            return getattr(self._nvml, self._function)(handle, last_seen)
        except (self._nvml.NVMLError, *self._version_errors) as exc:
            if not self._older_driver(exc):
                raise
            if self._function == _SAMPLES:
                raise self._nvml.NVMLError(self._nvml.NVML_ERROR_NOT_SUPPORTED) from None
        self._function = _SAMPLES  # the driver lacks the function or its struct version: for good
        return getattr(self._nvml, _SAMPLES)(handle, last_seen)

    def _older_driver(self, exc: BaseException) -> bool:
        mismatch = getattr(self._nvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25)
        return isinstance(exc, self._version_errors) or getattr(exc, "value", None) == mismatch

    def forget(self) -> None:
        """Start over (NVML reopened: handles and timestamps of the old session mean nothing)."""
        self._last_seen.clear()


def _convert(raw: Iterable[Any]) -> Iterable[ProcessSample]:
    for sample in raw:
        percents = tuple(min(int(getattr(sample, name)), 100) for name in ENGINES.values())  # unsigned
        yield ProcessSample(int(sample.pid), int(sample.timeStamp), percents)

"""NVML calls prepared once per GPU: the function pointer nvidia-ml-py's wrapper looks up and the
out-value it allocates, made and checked as the wrapper makes them, without its per-call set-up.

A sample makes about ten such calls per GPU, and the wrapper's set-up (a lock-guarded lookup, a new
ctypes value, nvidia-ml-py's attribute hooks on its structs) costs more than the C call itself. The
values are read through ctypes' own field descriptors, past those hooks (which turn bytes into str,
and none of these values is bytes), and the same object is handed back while they stand still.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from warptd.backends.kept import Kept
from warptd.models import MemoryUsage, Utilization


class PreparedCall:
    """One call of one GPU: ``function(*args)`` fills ``out``; ``read()`` turns it into our value."""

    __slots__ = ("args", "function", "name", "nvml", "read")

    def __init__(self, nvml: Any, name: str, args: tuple[object, ...], read: Callable[[], Any]) -> None:
        self.nvml, self.name, self.args, self.read = nvml, name, args, read
        self.function: Any = None  # looked up at the first call, as the wrapper looks it up

    def __call__(self) -> Any:
        """The call as the wrapper makes it: its NVMLError for a failed return (FUNCTION_NOT_FOUND
        for a function this driver lacks), else the value read."""
        nvml = self.nvml
        if self.function is None:
            self.function = nvml._nvmlGetFunctionPointer(self.name)
        nvml._nvmlCheckReturn(self.function(*self.args))
        return self.read()


def scalar(nvml: Any, name: str, handle: Any, *inputs: int, out: type[Any] = ctypes.c_uint) -> PreparedCall:
    """A call answering one number (``nvmlDeviceGetTemperature(handle, sensor, &value)``); enum inputs
    passed as unsigned ints, as the wrapper passes them."""
    value = out()
    return PreparedCall(
        nvml, name, (handle, *map(ctypes.c_uint, inputs), ctypes.byref(value)), lambda: value.value
    )


def memory(nvml: Any, handle: Any, version: int | None) -> PreparedCall:
    """``nvmlDeviceGetMemoryInfo_v2`` with ``version`` set (reserved memory apart), else v1."""
    if version is not None:
        info, name = nvml.c_nvmlMemory_v2_t(), "nvmlDeviceGetMemoryInfo_v2"
        info.version = version
    else:
        info, name = nvml.c_nvmlMemory_t(), "nvmlDeviceGetMemoryInfo"
    kind, kept = type(info), Kept[MemoryUsage]()
    total, used, free = kind.total.__get__, kind.used.__get__, kind.free.__get__
    reserved = kind.reserved.__get__ if version is not None else lambda _: None

    def read() -> MemoryUsage:
        return kept.of((total(info), used(info), free(info), reserved(info)), _memory_usage)

    return PreparedCall(nvml, name, (handle, ctypes.byref(info)), read)


def utilization(nvml: Any, handle: Any) -> PreparedCall:
    """``nvmlDeviceGetUtilizationRates``: percent of the last sample period, as ratios."""
    rates, kept = nvml.c_nvmlUtilization_t(), Kept[Utilization]()
    gpu, memory_ = type(rates).gpu.__get__, type(rates).memory.__get__
    return PreparedCall(
        nvml,
        "nvmlDeviceGetUtilizationRates",
        (handle, ctypes.byref(rates)),
        lambda: kept.of((gpu(rates), memory_(rates)), _ratios),
    )


def _memory_usage(raw: tuple[int, int, int, int | None]) -> MemoryUsage:
    return MemoryUsage(total=raw[0], used=raw[1], free=raw[2], reserved=raw[3])


def _ratios(percents: tuple[int, int]) -> Utilization:
    return Utilization(compute=percents[0] / 100, memory=percents[1] / 100)

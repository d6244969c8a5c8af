"""NVML calls prepared once per GPU: the C function nvidia-ml-py's wrapper would call and the out-value
it allocates, made and checked as the wrapper makes them, without its per-call set-up.

A sample makes about ten such calls per GPU, and the wrapper's set-up (a lock-guarded lookup, a new
ctypes value, nvidia-ml-py's attribute hooks on its structs) costs more than the C call itself. The
values are read through ctypes' own field descriptors, past those hooks (which turn bytes into str,
and none of these values is bytes), and the same object is handed back while they stand still.

The C function is looked up through nvidia-ml-py's private ``_nvmlGetFunctionPointer``: where a
release renames it, or it fails other than with an NVML error, each call goes through the public
wrapper instead (slower, the same values).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import structlog

from warptd.backends.kept import Kept
from warptd.models import MemoryUsage, Utilization

log = structlog.get_logger("warptd.nvml")
#: A prepared call's function when the private lookup is unavailable: the public wrapper is called.
PUBLIC: Any = object()


def pointer(nvml: Any, name: str) -> Any:
    """The C function ``name`` as nvidia-ml-py's wrappers look it up, or None where its private lookup
    is gone or fails other than NVML fails. An NVML error (the driver lacks the function, NVML is not
    initialised) is raised, as the wrapper would raise it."""
    lookup = getattr(nvml, "_nvmlGetFunctionPointer", None)
    if lookup is None:
        return None
    try:
        return lookup(name)
    except nvml.NVMLError:
        raise
    except Exception as exc:  # a changed private function: the public wrappers still work
        log.debug("nvml_private_lookup_failed", function=name, error=repr(exc))
        return None


class PreparedCall:
    """One call of one GPU: ``function(*args)`` fills an out-value; ``read()`` turns it into our value;
    ``public()`` makes the same call through nvidia-ml-py's public wrapper and converts it alike."""

    __slots__ = ("args", "function", "name", "nvml", "public", "read")

    def __init__(
        self,
        nvml: Any,
        name: str,
        args: tuple[object, ...],
        read: Callable[[], Any],
        public: Callable[[], Any],
    ) -> None:
        self.nvml, self.name, self.args, self.read, self.public = nvml, name, args, read, public
        #: None until looked up (at the first call, as the wrapper looks it up); :data:`PUBLIC` where
        #: the public wrapper makes the call.
        self.function: Any = None

    def __call__(self) -> Any:
        """The call as the wrapper makes it: its NVMLError for a failed return (FUNCTION_NOT_FOUND
        for a function this driver lacks), else the value read."""
        function = self.function
        if function is None:
            function = self.function = pointer(self.nvml, self.name) or PUBLIC
        if function is PUBLIC:
            return self.public()
        code = function(*self.args)
        if code:  # not NVML_SUCCESS: the exception class of the code, as _nvmlCheckReturn raises it
            raise self.nvml.NVMLError(code)
        return self.read()


def scalar(nvml: Any, name: str, handle: Any, *inputs: int, out: type[Any] = ctypes.c_uint) -> PreparedCall:
    """A call answering one number (``nvmlDeviceGetTemperature(handle, sensor, &value)``); enum inputs
    passed as unsigned ints, as the wrapper passes them."""
    value = out()
    return PreparedCall(
        nvml,
        name,
        (handle, *map(ctypes.c_uint, inputs), ctypes.byref(value)),
        lambda: value.value,
        lambda: getattr(nvml, name)(handle, *inputs),
    )


def done(nvml: Any, name: str, args: tuple[object, ...]) -> PreparedCall:
    """A call whose out-value is the caller's own (a GPM sample, a metrics request): True once made."""

    def public() -> bool:
        getattr(nvml, name)(*args)
        return True

    return PreparedCall(nvml, name, args, lambda: True, public)


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

    def read(answer: Any = info) -> MemoryUsage:
        return kept.of((total(answer), used(answer), free(answer), reserved(answer)), _memory_usage)

    def public() -> MemoryUsage:
        return read(nvml.nvmlDeviceGetMemoryInfo(handle, version))

    return PreparedCall(nvml, name, (handle, ctypes.byref(info)), read, public)


def utilization(nvml: Any, handle: Any) -> PreparedCall:
    """``nvmlDeviceGetUtilizationRates``: percent of the last sample period, as ratios."""
    rates, kept = nvml.c_nvmlUtilization_t(), Kept[Utilization]()
    gpu, memory_ = type(rates).gpu.__get__, type(rates).memory.__get__

    def read(answer: Any = rates) -> Utilization:
        return kept.of((gpu(answer), memory_(answer)), _ratios)

    def public() -> Utilization:
        return read(nvml.nvmlDeviceGetUtilizationRates(handle))

    return PreparedCall(nvml, "nvmlDeviceGetUtilizationRates", (handle, ctypes.byref(rates)), read, public)


def _memory_usage(raw: tuple[int, int, int, int | None]) -> MemoryUsage:
    return MemoryUsage(total=raw[0], used=raw[1], free=raw[2], reserved=raw[3])


def _ratios(percents: tuple[int, int]) -> Utilization:
    return Utilization(compute=percents[0] / 100, memory=percents[1] / 100)

"""What this nvidia-ml-py offers the GPU device objects, looked up once per backend: the clock-event
bits and their states, the violation policies, the clocks, the reason calls newest first, its
functions by name and the reader of its field-value struct."""

from __future__ import annotations

import ctypes
import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from warptd.backends.device import throttle_states
from warptd.backends.nvidia import calls, fields
from warptd.backends.nvidia.guard import DeviceGuard, Version
from warptd.errors import ErrorKind
from warptd.models import CLOCK_EVENT_REASONS

# NVML clock-event (throttle) bits, by the reason names warptd exports for every vendor.
_THROTTLE_BITS: dict[str, str] = {
    "gpu_idle": "nvmlClocksEventReasonGpuIdle",
    "applications_clocks_setting": "nvmlClocksEventReasonApplicationsClocksSetting",
    "sw_power_cap": "nvmlClocksEventReasonSwPowerCap",
    "hw_slowdown": "nvmlClocksEventReasonHwSlowdown",
    "sync_boost": "nvmlClocksEventReasonSyncBoost",
    "sw_thermal_slowdown": "nvmlClocksEventReasonSwThermalSlowdown",
    "hw_thermal_slowdown": "nvmlClocksEventReasonHwThermalSlowdown",
    "hw_power_brake_slowdown": "nvmlClocksEventReasonHwPowerBrakeSlowdown",
    "display_clock_setting": "nvmlClocksEventReasonDisplayClockSetting",
}
# Where a driver lacks the duration fields of SW power cap and sync boost: nvmlDeviceGetViolationStatus
# (deprecated in CUDA 13) keeps the same counters.
_VIOLATION_POLICIES: dict[str, str] = {
    "sw_power_cap": "NVML_PERF_POLICY_POWER",
    "sync_boost": "NVML_PERF_POLICY_SYNC_BOOST",
}
_CLOCKS: dict[str, str] = {
    "graphics": "NVML_CLOCK_GRAPHICS",
    "sm": "NVML_CLOCK_SM",
    "memory": "NVML_CLOCK_MEM",
}
#: A reading's ``throttle_active`` and ``clock_events_active``.
States = tuple[dict[str, bool], dict[str, bool]]


class NvmlApi:
    """One nvidia-ml-py as the GPUs use it; raises AttributeError for one too old for its constants.
    ``classify`` maps an NVML exception to its :class:`ErrorKind` (the session's)."""

    def __init__(self, nvml: Any, classify: Callable[[BaseException], ErrorKind]) -> None:
        self.nvml = nvml
        self.classify = classify
        self.throttle_bits = {reason: getattr(nvml, const) for reason, const in _THROTTLE_BITS.items()}
        self.known_bits = functools.reduce(operator.or_, self.throttle_bits.values(), 0)
        self.policies = {reason: getattr(nvml, const) for reason, const in _VIOLATION_POLICIES.items()}
        #: (clock, what it is guarded as, nvmlClockType_t) in the order of the clock calls.
        self.clocks = tuple(
            (clock, f"clock_{clock}", getattr(nvml, const)) for clock, const in _CLOCKS.items()
        )
        self.unpack = fields.unpacker(getattr(nvml, "c_nvmlFieldValue_t", None))
        self._functions: dict[str, Any] = {}  # pynvml functions by name, looked up once
        #: Per "Supported"/"Current": the clock-event reason calls this nvidia-ml-py has, newest first.
        self._reason_calls = {
            which: [
                (f"clocks_{kind}_{which}", function)
                for kind, name in (("event", "Event"), ("throttle", "Throttle"))
                if self.function(function := f"nvmlDeviceGet{which}Clocks{name}Reasons") is not None
            ]
            for which in ("Supported", "Current")
        }
        #: By supported and active masks: the states they give (readings never change their dicts).
        self._states: dict[tuple[int, int], States] = {}

    def function(self, name: str) -> Any:
        """A pynvml function, or None where this nvidia-ml-py no longer has it (its deprecated names,
        such as ``…ClocksThrottleReasons`` and ``nvmlDeviceGetViolationStatus``, go in CUDA 14)."""
        function = self._functions.get(name)
        if function is None:
            function = getattr(self.nvml, name, None)
            if function is not None:
                self._functions[name] = function
        return function

    def get(self, guard: DeviceGuard, handle: Any, what: str, name: str, *args: object) -> Any:
        """``nvml.<name>(handle, *args)`` through the device's guard; a function this nvidia-ml-py
        lacks is not supported (nothing counted)."""
        function = self.function(name)
        if function is None:
            guard.refuse(what)
            return None
        return guard.call(what, function, handle, *args)

    def version(self, what: str, call: calls.PreparedCall) -> tuple[Version, ...]:
        """The one version of ``call``; none where this nvidia-ml-py no longer wraps its function."""
        return () if self.function(call.name) is None else ((what, call, ()),)

    def reason_versions(self, handle: Any, which: str) -> tuple[Version, ...]:
        """``nvmlDevice{which}ClocksEventReasons`` (R535+), else the older ``…ClocksThrottleReasons``."""
        return tuple(
            (what, calls.scalar(self.nvml, name, handle, out=ctypes.c_ulonglong), ())
            for what, name in self._reason_calls[which]
        )

    def reason_names(self, mask: int | None) -> list[str] | None:
        """The reasons whose bit is set in ``mask``; None for an unknown mask."""
        if mask is None:
            return None
        return [reason for reason, bit in self.throttle_bits.items() if mask & bit]

    def states(self, supported: int, mask: int | None) -> States:
        """The reading's ``throttle_active`` and ``clock_events_active`` from the clock-event masks:
        what :func:`~warptd.backends.device.throttle_states` and the reading itself would make of them,
        made once per supported and active masks."""
        supported &= self.known_bits
        if mask is None or not supported:
            return throttle_states([], self.reason_names(mask)), {}
        states = self._states.get((supported, mask))
        if states is None:
            bits = [
                (reason, mask & bit != 0) for reason, bit in self.throttle_bits.items() if supported & bit
            ]
            states = self._states[supported, mask] = (
                {reason: on for reason, on in bits if reason not in CLOCK_EVENT_REASONS},
                {reason: on for reason, on in bits if reason in CLOCK_EVENT_REASONS},
            )
        return states


@dataclass(frozen=True, slots=True)
class GpuHandle:
    """One GPU's NVML handle with the API and the guard it is asked through: what each part of a GPU's
    device object (:mod:`~warptd.backends.nvidia.gpu`) reads it with."""

    api: NvmlApi
    guard: DeviceGuard
    handle: Any

    def get(self, what: str, name: str, *args: object) -> Any:
        """``nvml.<name>(handle, *args)`` through the guard (:meth:`NvmlApi.get`)."""
        return self.api.get(self.guard, self.handle, what, name, *args)

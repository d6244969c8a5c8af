"""The calls of a GPU's sample besides its field batch (memory, utilization, temperature, clock
events, performance state, clocks), prepared once per device: one by one through its guard, or all
in one unchecked pass while every call answers."""

from __future__ import annotations

from typing import Any

from warptd.backends.nvidia import calls
from warptd.backends.nvidia.api import NvmlApi
from warptd.backends.nvidia.guard import DeviceGuard, Version

# The slots of the calls of a sample; the clocks follow in the order of ``NvmlApi.clocks``.
MEMORY, UTILIZATION, TEMPERATURE, REASONS, PSTATE, CLOCKS = range(6)
#: One step of the pass: slot, what it is guarded as, the C function, its arguments, its reader.
Step = tuple[int, str, Any, tuple[object, ...], Any]


def memory_versions(nvml: Any, handle: Any) -> tuple[Version, ...]:
    """``nvmlMemory_v2`` (used as nvidia-smi shows it, reserved apart), then v1 for older drivers. A
    GPU's handle or a MIG device's (its own slice of memory)."""
    v2 = getattr(nvml, "nvmlMemory_v2", None)
    v1: Version = ("memory", calls.memory(nvml, handle, None), ())
    return (("memory_v2", calls.memory(nvml, handle, v2), ()), v1) if v2 is not None else (v1,)


class SampleCalls:
    """By slot (``MEMORY`` …), the versions of each call newest first. :meth:`answer` makes one slot's
    call through the guard (the getters); :meth:`answers` every slot's, in one pass where it can."""

    __slots__ = ("_guard", "_nvml", "_steps", "_steps_at", "slots")

    def __init__(self, api: NvmlApi, guard: DeviceGuard, handle: Any) -> None:
        nvml, scalar = api.nvml, calls.scalar
        self._nvml, self._guard = nvml, guard
        self.slots: tuple[tuple[Version, ...], ...] = (
            memory_versions(nvml, handle),
            api.version("utilization", calls.utilization(nvml, handle)),
            api.version(
                "temperature", scalar(nvml, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)
            ),
            api.reason_versions(handle, "Current"),
            api.version("pstate", scalar(nvml, "nvmlDeviceGetPerformanceState", handle)),
            *(
                api.version(what, scalar(nvml, "nvmlDeviceGetClockInfo", handle, kind))
                for _, what, kind in api.clocks
            ),
        )
        self._steps: list[Step] | None = None  # the pass, as of ``_steps_at`` refusals of the guard
        self._steps_at = -1

    def answer(self, slot: int) -> Any:
        """The slot's call in the newest version the device supports, through the guard."""
        return self._guard.call_versions(*self.slots[slot])

    def answers(self) -> list[Any]:
        """Every slot's answer: in one pass (:meth:`one_pass`), else slot by slot."""
        answers = None if self._guard.lost else self.one_pass()
        if answers is None:
            return [self.answer(slot) for slot in range(len(self.slots))]
        return answers

    def _plan(self) -> list[Step] | None:
        """The pass: each slot's call in the version :meth:`answer` would make now (none that the
        device lacks), made again when the device found another call unsupported. None before every
        call was looked up once (by :meth:`answer`), or where a call goes through the public wrapper."""
        guard = self._guard
        if self._steps is not None and self._steps_at == guard.refusals:
            return self._steps
        unsupported, steps = guard.unsupported, []
        for slot, versions in enumerate(self.slots):
            for what, call, _ in versions:
                if what not in unsupported:
                    if call.function is None or call.function is calls.PUBLIC:
                        return None
                    steps.append((slot, what, call.function, call.args, call.read))
                    break
        self._steps, self._steps_at = steps, guard.refusals
        return steps

    def one_pass(self) -> list[Any] | None:
        """Every call of the sample unchecked until one fails: answers by slot, None where not asked.
        The call that failed is counted as the guard counts it (its next version asked where it turned
        out unsupported), and the calls after it go through the guard, each made once. None where
        there is no pass (:meth:`_plan`)."""
        steps = self._plan()
        if steps is None:
            return None
        answers: list[Any] = [None] * len(self.slots)
        for position, (slot, what, function, args, read) in enumerate(steps):
            code = function(*args)
            if code:  # not NVML_SUCCESS
                guard = self._guard
                guard.failed(what, self._nvml.NVMLError(code))
                if what in guard.unsupported:  # as call_versions: the next version now
                    answers[slot] = self.answer(slot)
                for later in steps[position + 1 :]:
                    answers[later[0]] = self.answer(later[0])
                break
            answers[slot] = read()
        return answers

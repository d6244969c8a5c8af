"""Busy ratios from cumulative engine counters, one mechanism for every source of them: amdgpu's
fdinfo ``drm-engine-<name>`` (ns of engine time since the client opened the device) read per DRM
client, and amdsmi's ``engine_usage.gfx`` (the same, per process); or xe's ``drm-cycles-<name>``
over ``drm-total-cycles-<name>``.

A ratio is a counter's advance over the wall time between two polls of one device (busy cycles over
the GPU's timestamp cycles for xe), each engine divided by its capacity. It needs a baseline, so a
key (client or pid) first seen at this poll has none; nor has a pid reused by a new process (another
start time): then the **whole device's** ratios are unknown for this poll rather than zero for the
newcomer (the split falls back to the next weight). A counter that reads lower than before means by
key: one DRM client's may dip for a while and the reader is to stay with the larger value until it
catches up (Documentation/gpu/drm-usage-stats.rst); a process's sum lost a client (one closed), so
it has no baseline either.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True, slots=True)
class EngineCount:
    """One client's or process's cumulative busy counters at one poll, per engine name: ns of engine
    time, or busy cycles where ``ticks`` (the GPU timestamp's cycles per engine, xe) is given;
    ``capacity``: engines behind a name (1 where absent); ``started`` (a process's start time from
    /proc, None where unreadable or not a process) tells a reused pid apart."""

    busy: Mapping[str, int]
    started: int | None = None
    capacity: Mapping[str, int] = field(default_factory=dict)
    ticks: Mapping[str, int] | None = None

    def since(self, before: EngineCount | None, elapsed_ns: int) -> float | None:
        """The busy ratio since ``before``, or None where it is no baseline (none, another process,
        a counter gone back)."""
        if before is None or before.started != self.started:
            return None
        ratio = 0.0
        for name, spent in self.busy.items():
            earlier = before.busy.get(name, spent)  # an engine first reported: no advance known
            if spent < earlier:
                return None
            if self.ticks is None:
                span = elapsed_ns
            else:
                span = self.ticks.get(name, 0) - (before.ticks or {}).get(name, 0)
                if span <= 0:
                    continue
            ratio += (spent - earlier) / span / self.capacity.get(name, 1)
        return ratio


class EngineTime(Generic[Key]):
    """One device's engine counters by key (a DRM client, or a pid) as last polled, turned into busy
    ratios at each poll."""

    def __init__(self, *, per_client: bool = False) -> None:
        """``per_client``: the keys are DRM clients, whose counters may dip (the larger value is kept);
        else processes, whose counter going back has no baseline."""
        self._per_client = per_client
        self._counts: dict[Key, EngineCount] = {}
        self._at_ns: int | None = None

    def update(self, at_ns: int, counts: Mapping[Key, EngineCount]) -> dict[Key, float] | None:
        """Each key's busy ratio since the last update (``at_ns``: monotonic ns), or None where some
        key has no baseline (first poll, new key, reused pid, a process's counter gone back)."""
        previous, elapsed = self._counts, None if self._at_ns is None else at_ns - self._at_ns
        kept = {key: self._kept(count, previous.get(key)) for key, count in counts.items()}
        self._counts, self._at_ns = kept, at_ns
        if not elapsed or elapsed <= 0:
            return None
        ratios = {}
        for key, count in kept.items():
            ratio = count.since(previous.get(key), elapsed)
            if ratio is None:
                return None
            ratios[key] = ratio
        return ratios

    def forget(self) -> None:
        """Start over (the session reopened: the counters of the old handles mean nothing)."""
        self._counts, self._at_ns = {}, None

    def _kept(self, count: EngineCount, before: EngineCount | None) -> EngineCount:
        """A DRM client's counters that read lower than before stay at the larger value (the spec)."""
        if not self._per_client or before is None or before.started != count.started:
            return count
        ticks = None if count.ticks is None else _larger(count.ticks, before.ticks or {})
        return replace(count, busy=_larger(count.busy, before.busy), ticks=ticks)


def _larger(now: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    return {name: max(value, before.get(name, value)) for name, value in now.items()}

"""Busy ratios per process from cumulative engine-time counters (ns of engine time since the process
opened the device, as amdgpu's fdinfo ``drm-engine-gfx`` and amdsmi's ``engine_usage.gfx`` count).

A ratio is a counter's advance over the wall time between two polls of one device. It needs a
baseline, so a pid first seen at this poll has none; nor has a pid reused by a new process (another
start time) or whose counter went back (its DRM client closed and another opened): then the whole
device's ratios are unknown for this poll rather than zero for the newcomer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineCount:
    """One process's cumulative engine time at one poll; ``started`` (start time from /proc, None
    where unreadable) tells a reused pid apart."""

    busy_ns: int
    started: int | None


class EngineTime:
    """One device's engine-time counters as last polled, turned into busy ratios at each poll."""

    def __init__(self) -> None:
        self._counts: dict[int, EngineCount] = {}
        self._at_ns: int | None = None

    def update(self, at_ns: int, counts: dict[int, EngineCount]) -> dict[int, float] | None:
        """Each pid's engine time over the wall time since the last update (``at_ns``: monotonic ns),
        or None where some pid has no baseline (first poll, new or reused pid, counter gone back)."""
        previous, elapsed = self._counts, None if self._at_ns is None else at_ns - self._at_ns
        self._counts, self._at_ns = dict(counts), at_ns
        if not elapsed or elapsed <= 0:
            return None
        ratios = {}
        for pid, count in counts.items():
            before = previous.get(pid)
            if before is None or before.started != count.started or count.busy_ns < before.busy_ns:
                return None
            ratios[pid] = (count.busy_ns - before.busy_ns) / elapsed
        return ratios

    def forget(self) -> None:
        """Start over (the session reopened: the counters of the old handles mean nothing)."""
        self._counts, self._at_ns = {}, None

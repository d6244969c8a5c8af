"""The CPU a backend's reads take, by kind of read: what the driver charges on this node.

A driver's expensive reads (NVML's energy counter, throttle times) are firmware round trips whose time
is CPU spent in the calling thread (system time), not a wait (``shared/notes/real-h200.md``). So each
read is charged the calling thread's CPU time (``time.thread_time``) around it: the wall clock would
also count the other threads the scheduler ran meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from time import thread_time

__all__ = ["ReadCost", "ReadCosts", "ReadKind", "thread_time"]


class ReadKind(StrEnum):
    """A kind of read a backend charges: its value is the ``read`` label of
    warptd_backend_read_cpu_seconds_total (docs/hardware.md gives each backend's), kept as dashboards
    know it (hwmon's health reads are ``slow``, the CPU's ``clock``, AMD's ``clocks``)."""

    POWER = "power"  # a sample's power (NVIDIA: the cheap field batch)
    ENERGY = "energy"  # with the energy counter (NVIDIA: every --energy-interval)
    EDGE = "edge"  # every counter at once, at the edge of a window, profile or stress run
    HEALTH = "health"  # the values read every --health-interval (NVIDIA: the full field batch)
    SCOPES = "scopes"  # the power of the parts NVML measures apart, alone (the nvml power backend)
    GPM = "gpm"  # an NVIDIA GPM sample and its metrics
    METRICS_TABLE = "metrics_table"  # AMD's GPU metrics table
    UTILIZATION = "utilization"
    CLOCKS = "clocks"
    MEMORY = "memory"
    TEMPERATURES = "temperatures"
    TIMES = "times"  # the CPU's times
    CLOCK = "clock"  # the CPU's clock
    SENSORS = "sensors"  # hwmon's sensor files
    SLOW = "slow"  # hwmon's health reads


@dataclass(frozen=True, slots=True)
class ReadCost:
    """One kind of read's totals since the backend started: CPU seconds and how many reads."""

    cpu_seconds: float
    reads: int


class ReadCosts:
    """One backend's read costs by kind (:class:`ReadKind`), cumulative. Charged by the thread that
    reads (a backend's worker: one at a time), handed on as frozen totals with each read."""

    __slots__ = ("_totals",)

    def __init__(self) -> None:
        self._totals: dict[ReadKind, list[float]] = {}

    def charge(self, kind: ReadKind, started: float) -> None:
        """Add one read of ``kind`` that began at ``started`` (this thread's :func:`thread_time`)."""
        spent = thread_time() - started
        entry = self._totals.get(kind)
        if entry is None:
            self._totals[kind] = [spent, 1]
        else:
            entry[0] += spent
            entry[1] += 1

    @contextmanager
    def measure(self, kind: ReadKind) -> Iterator[None]:
        """Charge the block's CPU to one read of ``kind`` (for reads made less often than each sample)."""
        started = thread_time()
        try:
            yield
        finally:
            self.charge(kind, started)

    def totals(self) -> dict[ReadKind, ReadCost]:
        """Every kind's totals so far, frozen (an empty dict where nothing was charged)."""
        return {kind: ReadCost(seconds, int(reads)) for kind, (seconds, reads) in self._totals.items()}

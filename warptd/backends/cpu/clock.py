"""The host CPU's clock: cpufreq's (``cpuinfo_avg_freq`` or ``scaling_cur_freq``) every sample where the
kernel has it and it reads cheaply, else ``/proc/cpuinfo``'s ``cpu MHz`` at the health cadence, never a
``/proc/cpuinfo`` parse a sample.

psutil's ``cpu_freq()`` parses the whole ``/proc/cpuinfo`` at every call, even where cpufreq exists
(psutil #1851): 1.9 ms a sample on a 16-core VM without cpufreq (``shared/notes/real-h200.md``). And
reading ``scaling_cur_freq`` is cheap only on kernels from 5.18, which answer from the scheduler tick's
APERF/MPERF snapshot; from 4.14 to 5.17 x86 sends an IPI to the CPU and sleeps 10 ms when its last
snapshot is over a second old (``aperfmperf.c``): 10 ms a CPU at a 1 s interval. A read of the policies
that takes that long, twice in a row, moves the clock to ``/proc/cpuinfo`` at the health cadence, where
those kernels sleep 10 ms once for every CPU (docs/hardware.md, "What a sample reads, and what each
read costs").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from warptd.backends.cadence import DeviceCadence
from warptd.sysfs import read_int, read_text

if TYPE_CHECKING:
    from warptd.config import Settings

log = structlog.get_logger("warptd.cpu")

#: A policy read taking this long (s, on average per policy) is the kernel waiting for the CPU, not
#: reading a cached value (µs): a 10 ms sleep per stale CPU, longer than any GIL switch interval.
SLOW_READ_S = 0.008
#: Slow reads in a row that move the clock to the health cadence (one may be a preempted thread).
SLOW_READS = 2
#: A policy's current clock (kHz), best first: kernels from 2025 measure it (APERF/MPERF, AMU) in
#: ``cpuinfo_avg_freq`` and may make ``scaling_cur_freq`` the frequency requested instead.
_CURRENT = ("cpuinfo_avg_freq", "scaling_cur_freq")


class CpuClock:
    """The mean current clock of the host's CPUs in Hz, from ``--sysfs`` or ``--procfs``."""

    def __init__(
        self,
        sysfs: Path,
        procfs: Path,
        settings: Callable[[], Settings],
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        #: Each cpufreq policy's current clock files, best first, and how many CPUs it counts for.
        self.policies = _policies(sysfs / "devices" / "system" / "cpu")
        self.cpuinfo = procfs / "cpuinfo"
        #: Whether each sample reads the policies; else the clock is read at the health cadence.
        self.per_sample = bool(self.policies)
        #: The clock as last read (Hz), reported until the next read; None where it was not read.
        self.value: float | None = None
        self._cadence = DeviceCadence(settings)
        self._timer = timer
        self._slow = 0

    def due(self) -> bool:
        """Whether this sample reads the clock (every sample from sysfs, else at the health cadence)."""
        return self.per_sample or self._cadence.due()

    def read(self) -> float | None:
        """Read the clock now (when :meth:`due`); raises OSError where no source answers."""
        if self.per_sample:
            started = self._timer()
            try:
                return self.read_policies()
            finally:
                self._count_slow(self._timer() - started)
        try:
            hertz = cpuinfo_hertz(self.cpuinfo)
        except OSError:
            if not self.policies:
                raise
            hertz = None
        return hertz if hertz is not None or not self.policies else self.read_policies()

    def read_policies(self) -> float:
        """The mean of the policies' current clocks (kHz), weighted by their CPUs. A policy reads its
        first file that answers (``cpuinfo_avg_freq`` may fail where the kernel cannot tell, as for an
        idle CPU); one whose CPUs are offline answers EBUSY and is left out. Raises the last error
        where none answered."""
        total = weight = 0
        error: Exception = FileNotFoundError("no cpufreq policy")
        for files, cpus in self.policies:
            for path in files:
                try:
                    total += read_int(path) * cpus
                except (OSError, ValueError) as exc:
                    error = exc
                    continue
                weight += cpus
                break
        if not weight:
            raise error
        return total / weight * 1e3

    def _count_slow(self, seconds: float) -> None:
        self._slow = self._slow + 1 if seconds > SLOW_READ_S * len(self.policies) else 0
        if self._slow >= SLOW_READS:
            self.per_sample = False
            log.info(
                "cpu_clock_at_health_cadence",
                reason="reading cpufreq's scaling_cur_freq waits for the CPUs on this kernel",
                seconds=round(seconds, 4),
                policies=len(self.policies),
            )


def cpuinfo_hertz(cpuinfo: Path) -> float | None:
    """The mean of ``cpu MHz`` over the CPUs ``cpuinfo`` lists, in Hz; None where it has none (ARM, or
    a kernel answering "Unknown")."""
    megahertz = []
    for line in cpuinfo.read_bytes().splitlines():
        if line.startswith(b"cpu MHz"):
            key, _, value = line.partition(b":")
            if key.strip() == b"cpu MHz":
                try:
                    megahertz.append(float(value))
                except ValueError:
                    continue
    return sum(megahertz) / len(megahertz) * 1e6 if megahertz else None


def _policies(cpu: Path) -> list[tuple[tuple[Path, ...], int]]:
    """Each cpufreq policy's current clock files (:data:`_CURRENT`, those it has) with its number of
    CPUs (``affected_cpus``); the per-CPU ``cpuN/cpufreq`` directories on kernels without policy
    directories."""
    directories = sorted((cpu / "cpufreq").glob("policy[0-9]*"), key=_number) or sorted(
        (d for d in cpu.glob("cpu[0-9]*/cpufreq") if d.is_dir()), key=lambda d: _number(d.parent)
    )
    policies = []
    for directory in directories:
        files = tuple(f for f in (directory / name for name in _CURRENT) if f.exists())
        if files:
            policies.append((files, _cpus(directory)))
    return policies


def _cpus(policy: Path) -> int:
    """How many online CPUs the policy counts for; 1 where ``affected_cpus`` is unreadable."""
    try:
        return max(1, len(read_text(policy / "affected_cpus").split()))
    except OSError:
        return 1


def _number(path: Path) -> int:
    digits = "".join(c for c in path.name if c.isdigit())
    return int(digits) if digits else 0

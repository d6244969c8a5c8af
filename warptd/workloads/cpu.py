"""CPU time read from the kernel: a cgroup's usage, and the node's whole CPU time (busy and idle).

A workload's share of the CPU packages' energy over a period is its cgroup's CPU time over the node's
CPU time (every CPU, idle included, from ``<procfs>/stat``), so a busy node's idle part and the time of
processes in no tracked workload stay unattributed.
"""

from __future__ import annotations

import os
from pathlib import Path

from warptd.files import read_text
from warptd.workloads.placement import CpuCgroup

#: The clock ticks of /proc/stat (USER_HZ), in µs each.
_TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")
#: user nice system idle iowait irq softirq steal: guest time is already in user and nice.
_STAT_FIELDS = 8


def cgroup_usage_us(root: Path, cgroup: CpuCgroup) -> float | None:
    """The cgroup's CPU time in µs (v2 ``cpu.stat`` usage_usec, v1 ``cpuacct.usage`` in ns), or None
    where it is gone or unreadable."""
    try:
        text = read_text(cgroup.file(root))
        if cgroup.v1_controllers:
            return int(text.strip()) / 1000.0
        for line in text.splitlines():
            name, _, number = line.partition(" ")
            if name == "usage_usec":
                return float(int(number))
    except (OSError, ValueError):
        return None
    return None


def node_cpu_us(procfs: Path) -> float | None:
    """Every CPU's time since boot in µs, busy and idle (the ``cpu`` line of ``<procfs>/stat``)."""
    try:
        fields = read_text(procfs / "stat").partition("\n")[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    try:
        return sum(int(v) for v in fields[1 : 1 + _STAT_FIELDS]) * _TICK_US
    except ValueError:
        return None

"""CPU time read from the kernel: a cgroup's usage, and the node's whole CPU time (busy and idle).

A workload's share of the CPU packages' energy over a period is its cgroup's CPU time over the node's
CPU time (every CPU, idle included, from ``<procfs>/stat``), so a busy node's idle part and the time of
processes in no tracked workload stay unattributed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from warptd.files import read_text
from warptd.workloads.placement import CpuCgroup, WorkloadKey
from warptd.workloads.tracked import Workload

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


def share_cpu(
    workloads: Mapping[WorkloadKey, Workload],
    usage: Mapping[WorkloadKey, float | None],
    cgroups: Mapping[WorkloadKey, CpuCgroup],
    elapsed: float | None,
) -> None:
    """Each workload's CPU share: its cgroup's CPU time since the last poll (``usage`` now, in µs) over
    the node's (``elapsed`` µs); a cgroup nested in another tracked one (a user's service in the
    user's slice) is taken out of it, and shares over 1 in all are scaled down to 1."""
    spent: dict[WorkloadKey, float] = {}
    for key, used in usage.items():
        workload = workloads.get(key)
        if workload is None:
            continue
        if used is not None and workload.cpu_usage_us is not None and used >= workload.cpu_usage_us:
            spent[key] = used - workload.cpu_usage_us
        workload.cpu_usage_us = used
    own = dict(spent)
    by_cgroup = {cgroups[key]: key for key in spent}
    for key, used in spent.items():
        parent = _enclosing(cgroups[key], by_cgroup)
        if parent is not None:
            own[parent] -= used
    shares = {k: max(0.0, used) / elapsed for k, used in own.items()} if elapsed and elapsed > 0 else {}
    total = sum(shares.values())
    for workload in workloads.values():
        share = shares.get(workload.key, 0.0)
        workload.cpu_share = share / total if total > 1 else share


def _enclosing(cgroup: CpuCgroup, tracked: Mapping[CpuCgroup, WorkloadKey]) -> WorkloadKey | None:
    """The tracked workload whose cgroup most closely encloses ``cgroup`` (same hierarchy), if any."""
    path = cgroup.path.rstrip("/")
    while "/" in path:
        path = path.rsplit("/", 1)[0]
        found = tracked.get(CpuCgroup(path or "/", cgroup.v1_controllers))
        if found is not None:
            return found
    return None

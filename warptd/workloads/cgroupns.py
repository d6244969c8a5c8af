"""Where warptd's own cgroup namespace sits in the host's cgroup tree.

A container in a private cgroup namespace (containerd and CRI-O on cgroup v2, so most Kubernetes
nodes) reads other processes' ``/proc/PID/cgroup`` relative to its own namespace root:
``0::/../../../system.slice/slurmstepd.scope/job_7``. The names still tell the workload, but the CPU
time is under the host's cgroupfs at the absolute path, which takes the namespace root to rebuild.
The kernel shows only how far up the root is (host init's path climbs that many ``..``); which
directory it is, warptd finds once: the one at that depth whose ``cgroup.procs`` lists warptd itself
(with the host pid namespace, the pid the host knows). Where none does, the depth is still known: a
path that climbs all of it starts at the host's root, and only the others' place is unknown.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import structlog

from warptd.files import read_text

log = structlog.get_logger("warptd.workloads")

#: Directories looked at while searching for the namespace root (a node's containers and units).
MAX_SEARCHED = 20_000


def unified_path(cgroup_text: str) -> str | None:
    """The cgroup v2 (``0::``) path of a ``/proc/PID/cgroup`` text, or None on a v1-only host."""
    for line in cgroup_text.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def climb(path: str) -> int:
    """How many leading ``..`` a namespaced path climbs above the reader's namespace root."""
    count = 0
    for element in path.strip("/").split("/"):
        if element != "..":
            break
        count += 1
    return count


def absolute(path: str, root: str) -> str | None:
    """A namespaced cgroup path as the host's cgroupfs has it, or None where it climbs above the
    host's root (so ``root`` is not the namespace's), holds ``..`` past its leading run, or hangs
    under a part of the root that is not known (``..`` in ``root``: :func:`namespace_root`)."""
    up = climb(path)
    base = [element for element in root.split("/") if element]
    rest = [element for element in path.split("/") if element][up:]
    kept = base[: len(base) - up]
    if up > len(base) or ".." in rest or ".." in kept:  # the kernel writes ".." only as a leading run
        return None
    return "/" + "/".join(kept + rest)


def namespace_root(procfs: Path, cgroupfs: Path, pid: int | None = None) -> str:
    """``/`` in the host's cgroup namespace (or on a v1-only host), else the absolute path of this
    process's namespace root; where it cannot be found, a warning and its depth alone, as ``..``
    for each unknown level (``/../../..``): paths that climb all of it are the host's, the others
    give no CPU share."""
    try:
        depth = climb(unified_path(read_text(procfs / "1" / "cgroup")) or "")
    except OSError:
        return "/"
    if depth == 0:
        return "/"
    wanted = str(os.getpid() if pid is None else pid)
    for directory in _at_depth(cgroupfs, depth):
        try:
            if wanted in read_text(directory / "cgroup.procs").split():
                return "/" + directory.relative_to(cgroupfs).as_posix()
        except OSError:
            continue
    log.warning(
        "cgroup_namespace_root_unknown",
        depth=depth,
        reason="no cgroup at that depth of --cgroupfs lists this process: the CPU time of workloads "
        "beside warptd's own (sharing its ancestors) unread",
    )
    return "/" + "/".join([".."] * depth)


def _at_depth(cgroupfs: Path, depth: int) -> Iterator[Path]:
    """The directories ``depth`` levels under ``cgroupfs``, at most ``MAX_SEARCHED`` looked at."""
    level, searched = [cgroupfs], 0
    for _ in range(depth):
        below = []
        for directory in level:
            try:
                below += [entry for entry in directory.iterdir() if entry.is_dir()]
            except OSError:
                continue
            searched += 1
            if searched > MAX_SEARCHED:
                return
        level = below
    yield from level

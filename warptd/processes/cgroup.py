"""The Kubernetes pod UID and container ID of a process, from ``<procfs>/<pid>/cgroup``.

Handles cgroup v1 and v2 and both kubelet cgroup drivers::

    0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/
        cri-containerd-<64 hex>.scope                                       (systemd driver)
    11:memory:/kubepods/burstable/pod<uid>/<64 hex>                         (cgroupfs driver)

A path seen through a private cgroup namespace (``/../kubepods-…``) still names its pod. Outside
Kubernetes, or for a process that is gone, both are empty strings; only a process whose cgroup was
read is ``resolved`` (a readable cgroup that names no pod: outside any pod; unresolved: cannot tell).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from warptd.files import read_text

# A pod UID (dashes; underscores in systemd slice names) or a static pod's 32-hex config hash.
_UID = r"[0-9a-f]{8}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{12}"
_POD = re.compile(rf"(?:.*-)?pod({_UID})(?:\.slice)?")
_CONTAINER = re.compile(r"(?:(?:cri-containerd|containerd|docker|crio)-)?([0-9a-f]{64})(?:\.scope)?")
Found = TypeVar("Found")
#: Index of ``starttime`` (field 22 of /proc/<pid>/stat) among the fields after the ``(comm)``.
_STARTTIME = 22 - 3


@dataclass(frozen=True)
class Attribution:
    """Where a process runs: its pod UID and container ID, empty outside Kubernetes; ``resolved`` is
    False where its cgroup could not be read (gone, or outside our pid namespace): no one can tell."""

    pod_uid: str = ""
    container_id: str = ""
    resolved: bool = True


NONE = Attribution()
#: A process whose cgroup could not be read: in a pod or not, nobody can tell.
UNRESOLVED = Attribution(resolved=False)


def parse_cgroup(text: str) -> Attribution:
    """Pod UID and container ID from the lines of a /proc/<pid>/cgroup file (v1, v2 or hybrid)."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        found = _parse_path(parts[2])
        if found is not NONE:
            return found
    return NONE


def _parse_path(path: str) -> Attribution:
    elements = [e for e in path.split("/") if e]
    for position in range(len(elements) - 1, -1, -1):
        pod = _POD.fullmatch(elements[position])
        if pod is None or ("kubepods" not in path and not path.startswith("/..")):
            continue
        uid = pod.group(1).replace("_", "-")
        below = elements[position + 1] if position + 1 < len(elements) else ""
        container = _CONTAINER.fullmatch(below)
        return Attribution(uid, container.group(1) if container else "")
    return NONE


def read_attribution(procfs: Path, pid: int) -> Attribution | None:
    """The process' attribution, or None when it is gone (or unreadable) between two reads."""
    try:
        return parse_cgroup(read_text(procfs / str(pid) / "cgroup"))
    except OSError:
        return None


def start_time(procfs: Path, pid: int) -> int | None:
    """The process' start time in clock ticks since boot: with the pid, it names one process."""
    try:
        stat = read_text(procfs / str(pid) / "stat")
        return int(stat.rpartition(")")[2].split()[_STARTTIME])
    except (OSError, ValueError, IndexError):
        return None


class PidCache(Generic[Found]):
    """What ``read`` made of a pid's /proc entries, cached by (pid, start time) so a reused pid is
    read again: a new process under an old pid never inherits the old one's cgroup."""

    def __init__(self, procfs: Path, read: Callable[[Path, int], Found | None]) -> None:
        self.procfs = procfs
        self._read = read
        self._cache: dict[int, tuple[int, Found]] = {}

    def get(self, pid: int) -> Found | None:
        """The pid's entry, or None when it is gone (or not in our pid namespace) or unreadable."""
        started = start_time(self.procfs, pid)
        if started is None:  # gone since the SDK listed it (or not in our pid namespace)
            self._cache.pop(pid, None)
            return None
        cached = self._cache.get(pid)
        if cached is not None and cached[0] == started:
            return cached[1]
        found = self._read(self.procfs, pid)
        if found is None:
            self._cache.pop(pid, None)
            return None
        self._cache[pid] = (started, found)
        return found

    def retain(self, pids: set[int]) -> None:
        """Forget every pid but these (the latest poll's), which bounds the cache."""
        for pid in self._cache.keys() - pids:
            del self._cache[pid]

    def peek(self, pid: int) -> Found | None:
        """The pid's entry as last read, without a read (nor the start-time check)."""
        cached = self._cache.get(pid)
        return None if cached is None else cached[1]

    def forget(self, pid: int) -> None:
        """Drop one pid's entry: its next :meth:`get` reads it again."""
        self._cache.pop(pid, None)

    def __len__(self) -> int:
        return len(self._cache)


class CgroupResolver:
    """Attribution per pid, cached by (pid, start time) so a reused pid is read again."""

    def __init__(self, procfs: Path) -> None:
        self.procfs = procfs
        self._pids = PidCache(procfs, read_attribution)

    def resolve(self, pid: int) -> Attribution:
        """The pid's attribution: NONE for a readable cgroup outside any pod, UNRESOLVED where unreadable."""
        found = self._pids.get(pid)
        return UNRESOLVED if found is None else found

    def retain(self, pids: set[int]) -> None:
        """Forget every pid but these (the latest poll's), which bounds the cache."""
        self._pids.retain(pids)

    def __len__(self) -> int:
        return len(self._pids)

"""The Kubernetes pod UID and container ID of a process, from ``<procfs>/<pid>/cgroup``, and the
grammar of cgroup paths that the workloads share: where each manager puts what it runs.

Handles cgroup v1 and v2 and both kubelet cgroup drivers::

    0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/
        cri-containerd-<64 hex>.scope                                       (systemd driver)
    11:memory:/kubepods/burstable/pod<uid>/<64 hex>                         (cgroupfs driver)

A pod is taken only where the kubelet puts it: the last of a run of systemd slices from the top
(slices are made by systemd as root; a user's own delegated ``user@UID.service`` subtree, which can
hold any name, ``kubepods-…-pod<uid>.slice`` included, is not a slice and ends the run), or the
cgroupfs driver's ``kubepods/[<qos>/]pod<uid>`` from the top. A path seen through a private cgroup
namespace (``/../kubepods-…``) climbs to one of the reader's own ancestors, which whoever deployed
warptd chose, and may start partway down the same chain. Outside Kubernetes, or for a process that
is gone, both are empty strings; only a process whose cgroup was read is ``resolved`` (a readable
cgroup that names no pod: outside any pod; unresolved: cannot tell).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from warptd.files import read_text

# A pod UID (dashes; underscores in systemd slice names) or a static pod's 32-hex config hash.
_UID = r"[0-9a-f]{8}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{12}"
#: The kubelet's pod slice (systemd driver; ``<root>-kubepods-…`` under a ``--cgroup-root`` slice).
_POD_SLICE = re.compile(rf"(?:[^/]+-)?kubepods(?:-besteffort|-burstable)?-pod({_UID})\.slice")
_POD_DIR = re.compile(rf"pod({_UID})")  # cgroupfs driver
_QOS = frozenset({"besteffort", "burstable"})
#: A container's cgroup: a runtime's systemd scope (``docker-``, ``libpod-`` (Podman), ``nerdctl-``,
#: ``cri-containerd-``, ``crio-`` ``<64 hex>.scope``) or a cgroupfs driver's directory (``<64 hex>``,
#: ``libpod-<64 hex>``).
CONTAINER = re.compile(
    r"(?:(?:docker|libpod|nerdctl|cri-containerd|containerd|crio)-)?([0-9a-f]{64})(?:\.scope)?"
)
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


def parse_cgroup(text: str, host: Hierarchies | None = None) -> Attribution:
    """Pod UID and container ID from the lines of a /proc/<pid>/cgroup file (v1, v2 or hybrid);
    ``host``: the hierarchies every process lists (:func:`kernel_lines`)."""
    for _, _, path in kernel_lines(text, host) or ():
        found = _parse_path(path)
        if found is not NONE:
            return found
    return NONE


#: A host's cgroup hierarchies, (id, controllers) each: every process's /proc/<pid>/cgroup lists them.
Hierarchies = frozenset[tuple[str, str]]


def kernel_lines(text: str, host: Hierarchies | None = None) -> list[tuple[str, str, str]] | None:
    """The (hierarchy id, controllers, path) lines of a /proc/<pid>/cgroup text, or None where the
    kernel cannot have written them: a hierarchy or a controller twice, or a hierarchy that not every
    process lists (``host``, where known). A cgroup v1 renamed to a name holding a newline (refused
    since Linux 5.13 and the stable kernels of June 2021) adds such a line."""
    lines = [
        (parts[0], parts[1], parts[2])
        for parts in (line.split(":", 2) for line in text.splitlines())
        if len(parts) == 3
    ]
    ids = [line[0] for line in lines]
    controllers = [name for line in lines for name in line[1].split(",") if name]
    if len(set(ids)) < len(ids) or len(set(controllers)) < len(controllers):
        return None
    if host is not None and not {line[:2] for line in lines} <= host:
        return None
    return lines


def read_hierarchies(procfs: Path) -> Hierarchies | None:
    """The hierarchies every process lists, as host init's ``<procfs>/1/cgroup`` does; None where
    it cannot be read."""
    try:
        lines = kernel_lines(read_text(procfs / "1" / "cgroup"))
    except OSError:
        return None
    return None if lines is None else frozenset(line[:2] for line in lines)


@dataclass(frozen=True)
class CgroupPath:
    """A cgroup path's names, after the ``..`` it climbs first: seen through a private cgroup
    namespace, a path starts from one of the reader's own ancestors, ``climbed`` levels up."""

    climbed: int
    elements: tuple[str, ...]


def split_path(path: str) -> CgroupPath | None:
    """The path's leading climb and names, or None where a ``..`` or ``.`` follows a name: the
    kernel writes ``..`` only as a leading run, and no cgroup can be named either."""
    elements = [element for element in path.split("/") if element]
    climbed = 0
    while climbed < len(elements) and elements[climbed] == "..":
        climbed += 1
    rest = tuple(elements[climbed:])
    if ".." in rest or "." in rest:
        return None
    return CgroupPath(climbed, rest)


def slice_run(elements: Sequence[str]) -> int:
    """How many of the leading elements are systemd slices: systemd alone makes them, as root,
    outside a delegated subtree (a service or scope), so the first other element ends what root
    placed by name."""
    count = 0
    while count < len(elements) and elements[count].endswith(".slice"):
        count += 1
    return count


def kube_pod(path: CgroupPath) -> tuple[str, int] | None:
    """The pod UID and its element's position, where the kubelet puts pods (module docstring)."""
    elements = path.elements
    run = slice_run(elements)
    pod = _POD_SLICE.fullmatch(elements[run - 1]) if run else None
    if pod is not None:
        return pod.group(1).replace("_", "-"), run - 1
    for at in range(min(len(elements), 3)):
        pod = _POD_DIR.fullmatch(elements[at])
        if pod is None:
            continue
        above = elements[:at]
        chain = above[:1] == ("kubepods",) and all(qos in _QOS for qos in above[1:])
        partway = path.climbed > 0 and len(above) <= 1 and all(qos in _QOS for qos in above)
        return (pod.group(1).replace("_", "-"), at) if chain or partway else None
    return None


def _parse_path(path: str) -> Attribution:
    parsed = split_path(path)
    pod = kube_pod(parsed) if parsed is not None else None
    if parsed is None or pod is None:
        return NONE
    uid, at = pod
    below = parsed.elements[at + 1] if at + 1 < len(parsed.elements) else ""
    container = CONTAINER.fullmatch(below)
    return Attribution(uid, container.group(1) if container else "")


def read_attribution(procfs: Path, pid: int) -> Attribution | None:
    """The process' attribution, or None when it is gone (or unreadable) between two reads."""
    try:
        return parse_cgroup(read_text(procfs / str(pid) / "cgroup"), read_hierarchies(procfs))
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

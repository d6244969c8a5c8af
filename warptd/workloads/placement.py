"""Which workload a process belongs to, from ``<procfs>/<pid>/cgroup``, and where its CPU time is kept.

In order, the first that a cgroup path names:

- a Slurm job (and step), only where slurmd puts jobs (:data:`~warptd.config.SLURM_ROOTS`, or the
  roots ``--workload-slurm-roots`` names), so that no one else's cgroup named ``job_J`` is charged
  as a job: cgroup v1 ``/slurm/uid_U/job_J/step_S[/task_T]`` (``/slurm_<node>/…`` with several
  slurmd on one host), cgroup v2 (Slurm 22.05 and newer)
  ``/system.slice/slurmstepd.scope/job_J/step_S/user/task_T`` (``<node>_slurmstepd.scope``);
- a container: ``docker-``, ``libpod-`` (Podman), ``nerdctl-``, ``cri-containerd-``/``crio-`` (a
  Kubernetes pod's container) ``<64 hex>.scope``, or a bare ``<64 hex>`` directory (cgroupfs drivers);
- a systemd unit: the last ``*.service`` in the path (a user's own ``user@U.service`` is the user);
- else the user, by the process's real uid.

Ids are ASCII digits, at most a 32-bit number's ten (``int()`` takes ``²`` and ``٤٢`` too). The
workload's CPU time is its cgroup's: the path cut after the element that named it (the job, not
the step, so every step counts), or the user's ``user-U.slice``.
"""

from __future__ import annotations

import pwd
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

from warptd.config import SLURM_ROOTS
from warptd.config import WORKLOAD_KINDS as KINDS
from warptd.config import WorkloadKind as Kind
from warptd.files import read_text
from warptd.workloads.cgroupns import absolute, climb

__all__ = ["KINDS", "Kind", "Placement", "SlurmRoots", "WorkloadKey", "place", "read_placement", "user_name"]

#: A job id or a uid: ASCII digits, no more than a 32-bit number has.
ID = "[0-9]{1,10}"
_JOB = re.compile(f"job_({ID})")
_STEP = re.compile(r"step_([A-Za-z0-9_]{1,32})")
_UID = re.compile(f"uid_({ID})")
_CONTAINER = re.compile(r"(?:(?:docker|libpod|nerdctl|cri-containerd|crio)-)?([0-9a-f]{64})(?:\.scope)?")
_USER_SERVICE = re.compile(f"user@({ID})\\.service")
_USER_SLICE = re.compile(f"user-({ID})\\.slice")
#: Where slurmd puts jobs, each root as its path's elements (``fnmatch`` patterns, one element each).
SlurmRoots = tuple[tuple[str, ...], ...]


def slurm_roots(paths: Sequence[str] = SLURM_ROOTS) -> SlurmRoots:
    """Each root's elements: ``/system.slice/*_slurmstepd.scope`` is ``system.slice``, then
    ``*_slurmstepd.scope``."""
    return tuple(tuple(element for element in path.split("/") if element) for path in paths)


_DEFAULT_ROOTS = slurm_roots()


@dataclass(frozen=True)
class WorkloadKey:
    """A workload by its kind and id (``slurm_job``/``4242``, ``systemd_unit``/``ollama.service``)."""

    kind: Kind
    id: str


@dataclass(frozen=True)
class CpuCgroup:
    """Where a workload's CPU time is: cgroup v2 ``cpu.stat`` (``usage_usec``) or v1 ``cpuacct.usage``
    (ns), relative to the cgroupfs root."""

    path: str
    v1_controllers: str = ""  # the v1 hierarchy's directory (``cpu,cpuacct``); empty on v2

    def file(self, root: Path) -> Path:
        if self.v1_controllers:
            return root / self.v1_controllers / self.path.lstrip("/") / "cpuacct.usage"
        return root / self.path.lstrip("/") / "cpu.stat"


@dataclass(frozen=True)
class Placement:
    """A process's workload, its Slurm step (if any), its uid, and its workload's CPU cgroup."""

    key: WorkloadKey
    uid: int | None
    step: str | None = None
    cpu: CpuCgroup | None = None


def place(
    cgroup_text: str, uid: int | None, root: str = "/", slurm: SlurmRoots = _DEFAULT_ROOTS
) -> Placement:
    """The workload of a process with this /proc/<pid>/cgroup text and real uid; ``root`` is where
    warptd's own cgroup namespace sits in the host's tree (:mod:`warptd.workloads.cgroupns`);
    ``slurm``: where slurmd puts jobs."""
    lines = [line.split(":", 2) for line in cgroup_text.splitlines()]
    lines = [parts for parts in lines if len(parts) == 3]
    # CPU accounting where the kernel keeps it: v1 cpuacct if mounted (legacy, hybrid), else unified.
    ordered = sorted(lines, key=lambda p: 0 if "cpuacct" in p[1].split(",") else 1 if p[0] == "0" else 2)
    for hierarchy, controllers, seen in ordered:
        v1 = controllers if "cpuacct" in controllers.split(",") else ""
        keeps_cpu = v1 if v1 or controllers == "" else None
        path = seen
        if climb(seen):  # seen from a private cgroup namespace: rebuilt from its root (v2 only)
            host_path = absolute(seen, root) if hierarchy == "0" else None
            path, keeps_cpu = (host_path, keeps_cpu) if host_path else (seen, None)
        found = _classify(path, uid, keeps_cpu, slurm)
        if found is not None:
            return found
    return _user(uid, None)


def _classify(path: str, uid: int | None, v1: str | None, slurm: SlurmRoots) -> Placement | None:
    """The workload this cgroup path names, or None where it names none but a user; ``v1`` None: the
    line's hierarchy keeps no CPU time (a v1 controller other than cpuacct)."""
    elements = [e for e in path.split("/") if e and e != ".."]

    def cpu(upto: int) -> CpuCgroup | None:
        return None if v1 is None else CpuCgroup("/" + "/".join(elements[: upto + 1]), v1)

    job = slurm_job(elements, slurm)
    if job is not None:
        position, job_id, slurm_uid = job
        step = _STEP.fullmatch(elements[position + 1]) if position + 1 < len(elements) else None
        key = WorkloadKey("slurm_job", job_id)
        return Placement(
            key, slurm_uid if slurm_uid is not None else uid, step and step.group(1), cpu(position)
        )
    for position in range(len(elements) - 1, -1, -1):
        container = _CONTAINER.fullmatch(elements[position])
        if container is not None:
            return Placement(WorkloadKey("container", container.group(1)), uid, None, cpu(position))
    for position in range(len(elements) - 1, -1, -1):
        element = elements[position]
        if element.endswith(".service") and not _USER_SERVICE.fullmatch(element):
            return Placement(WorkloadKey("systemd_unit", element), uid, None, cpu(position))
    for position, element in enumerate(elements):
        if _USER_SLICE.fullmatch(element):
            return _user(uid, cpu(position))
    return None


def slurm_job(elements: Sequence[str], slurm: SlurmRoots) -> tuple[int, str, int | None] | None:
    """Where a path's elements name a job right under one of slurmd's roots (``ROOT/job_J`` or
    ``ROOT/uid_U/job_J``): the job element's position, the job id and the uid the path names."""
    for root in slurm:
        at = len(root)
        if len(elements) <= at or not all(map(fnmatchcase, elements[:at], root)):
            continue
        named_uid = _UID.fullmatch(elements[at])
        if named_uid is not None and at + 1 < len(elements):
            at += 1
        job = _JOB.fullmatch(elements[at])
        if job is not None:
            return at, job.group(1), int(named_uid.group(1)) if named_uid is not None else None
    return None


def _user(uid: int | None, cpu: CpuCgroup | None) -> Placement:
    return Placement(WorkloadKey("user", user_name(uid)), uid, None, cpu)


@lru_cache(maxsize=1024)
def user_name(uid: int | None) -> str:
    """The login name of ``uid`` as this host's passwd knows it, else the number ("" if unknown)."""
    if uid is None:
        return ""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def read_uid(procfs: Path, pid: int) -> int | None:
    """The process's real uid from ``<procfs>/<pid>/status``, or None where unreadable."""
    try:
        for line in read_text(procfs / str(pid) / "status").splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def read_placement(
    procfs: Path, pid: int, root: str = "/", slurm: SlurmRoots = _DEFAULT_ROOTS
) -> Placement | None:
    """The process's placement, or None when it is gone or unreadable (a FIFO, a name that is not
    UTF-8, a file too large: :mod:`warptd.files`) between two reads."""
    try:
        text = read_text(procfs / str(pid) / "cgroup")
    except OSError:
        return None
    return place(text, read_uid(procfs, pid), root, slurm)

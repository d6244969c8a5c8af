"""Which workload a process belongs to, from ``<procfs>/<pid>/cgroup``, and where its CPU time is kept.

A workload is recognised only where its owner's manager puts it, walking each path from the cgroup
tree's root, and the first (outermost) thing named owns everything below it, whatever the names
there: below a container, a unit or a user's ``user@U.service`` its owner may make cgroups and name
them anything. In order:

- a Slurm job (and step), only where slurmd puts jobs (:data:`~warptd.config.SLURM_ROOTS`, or the
  roots ``--workload-slurm-roots`` names): cgroup v1 ``/slurm/uid_U/job_J/step_S[/task_T]``
  (``/slurm_<node>/…`` with several slurmd on one host), cgroup v2 (Slurm 22.05 and newer)
  ``/system.slice/slurmstepd.scope/job_J/step_S/user/task_T`` (``<node>_slurmstepd.scope``);
- a user's slice ``user-U.slice`` in the run of systemd slices from the top (systemd alone makes
  slices, as root): everything in it is user U's. In U's own manager (``user-U.slice/user@U.service``,
  delegated to U), past the manager's slices, a container scope is U's container
  (``container``, id ``user@U.service/<id>``: rootless Podman or Docker), a ``*.service`` U's unit
  (``systemd_unit``, id ``user@U.service/<unit>``), anything else U;
- past the top's run of slices, the first other element: a container (``docker-``, ``libpod-``,
  ``nerdctl-``, ``cri-containerd-``, ``crio-`` ``<64 hex>.scope``: ``system.slice``, ``machine.slice``,
  the kubelet's QoS and pod slices) or a system unit (``*.service``);
- a cgroupfs driver's container: ``/<dir>/<64 hex>`` (``/docker/<id>``, containerd's
  ``/<namespace>/<id>``, ``/libpod_parent/libpod-<id>``) or the kubelet's
  ``/kubepods/[<qos>/]pod<uid>/<id>``;
- else the user, by the process's real uid.

A path seen through a private cgroup namespace (:mod:`warptd.workloads.cgroupns`) is rebuilt from
warptd's namespace root; where that root's place is unknown, a path hanging under it is placed by
the rules that hold partway down (slices, units, containers, the kubelet's chain), without a CPU
cgroup. Ids are ASCII digits, at most a 32-bit number's ten (``int()`` takes ``²`` and ``٤٢`` too);
unit names systemd's characters. The workload's CPU time is its cgroup's: the path cut after the
element that named it (the job, not the step, so every step counts), or the user's ``user-U.slice``.
"""

from __future__ import annotations

import pwd
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

from warptd.config import SLURM_ROOTS
from warptd.config import WorkloadKind as Kind
from warptd.files import read_text
from warptd.processes.cgroup import (
    CONTAINER,
    CgroupPath,
    Hierarchies,
    kernel_lines,
    kube_pod,
    read_hierarchies,
    slice_run,
    split_path,
)
from warptd.workloads.cgroupns import absolute

#: A job id or a uid: ASCII digits, no more than a 32-bit number has.
ID = "[0-9]{1,10}"
_JOB = re.compile(f"job_({ID})")
_STEP = re.compile(r"step_([A-Za-z0-9_]{1,32})")
_UID = re.compile(f"uid_({ID})")
_USER_SERVICE = re.compile(f"user@({ID})\\.service")
_USER_SLICE = re.compile(f"user-({ID})\\.slice")
#: A service's name as systemd allows it (unit_name_is_valid: ASCII letters, digits and ``:-_.\@``).
_UNIT = re.compile(r"[A-Za-z0-9:_.\\@-]{1,247}\.service")
#: The longest workload id: a unit name is at most 255 characters, a user's has ``user@U.service/``.
MAX_ID_CHARS = 256
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
    cgroup_text: str,
    uid: int | None,
    root: str = "/",
    slurm: SlurmRoots = _DEFAULT_ROOTS,
    host: Hierarchies | None = None,
) -> Placement:
    """The workload of a process with this /proc/<pid>/cgroup text and real uid; ``root`` is where
    warptd's own cgroup namespace sits in the host's tree (:mod:`warptd.workloads.cgroupns`);
    ``slurm``: where slurmd puts jobs; ``host``: the hierarchies every process lists. A text the
    kernel cannot have written names no workload: the process is its uid's user."""
    lines = kernel_lines(cgroup_text, host)
    if lines is None:
        return _user(uid, None)
    # CPU accounting where the kernel keeps it: v1 cpuacct if mounted (legacy, hybrid), else unified.
    ordered = sorted(lines, key=lambda p: 0 if "cpuacct" in p[1].split(",") else 1 if p[0] == "0" else 2)
    for hierarchy, controllers, seen in ordered:
        v1 = controllers if "cpuacct" in controllers.split(",") else ""
        keeps_cpu = v1 if v1 or controllers == "" else None
        found = _host_path(seen, hierarchy == "0", root)
        if found is None:
            continue
        path, anchored = found
        placement = _classify(path, anchored, uid, keeps_cpu if anchored else None, slurm)
        if placement is not None:
            return placement
    return _user(uid, None)


def _host_path(seen: str, unified: bool, root: str) -> tuple[CgroupPath, bool] | None:
    """The path as the host's tree has it and True, or as seen and False where its place in the
    host's tree is not known (it hangs under warptd's namespace root or one of its ancestors); None
    for a path the kernel does not write."""
    host = absolute(seen, root) if root != "/" and unified else None  # a private cgroup namespace
    parsed = split_path(host or seen)
    if parsed is None:
        return None
    return parsed, host is not None or (root == "/" and parsed.climbed == 0)


def _classify(
    path: CgroupPath, anchored: bool, uid: int | None, v1: str | None, slurm: SlurmRoots
) -> Placement | None:
    """The workload this cgroup path names, or None where it names none but the process's user;
    ``anchored``: the path starts at the host tree's root (else only the rules that hold partway
    down apply); ``v1`` None: no CPU time is read there (a v1 controller other than cpuacct)."""
    elements = path.elements
    if not anchored and path.climbed == 0:  # inside warptd's own namespace root: nothing to go by
        return None

    def cpu(upto: int) -> CpuCgroup | None:
        return None if v1 is None else CpuCgroup("/" + "/".join(elements[: upto + 1]), v1)

    job = slurm_job(elements, slurm) if anchored else None
    if job is not None:
        position, job_id, slurm_uid = job
        step = _STEP.fullmatch(elements[position + 1]) if position + 1 < len(elements) else None
        key = WorkloadKey("slurm_job", job_id)
        return Placement(
            key, slurm_uid if slurm_uid is not None else uid, step and step.group(1), cpu(position)
        )
    run = slice_run(elements)
    for position in range(run):
        owner = _USER_SLICE.fullmatch(elements[position])
        if owner is not None:
            return _users_own(elements, position, int(owner.group(1)), cpu)
    named = _named(elements[run], uid, cpu(run)) if run < len(elements) else None
    if named is not None or run:
        return named
    # cgroupfs drivers: /<dir>/<id>, the kubelet's /kubepods/[<qos>/]pod<uid>/<id> (or partway down)
    pod = kube_pod(path)
    at = pod[1] + 1 if pod is not None else 1 if anchored else len(elements)
    return _container(elements[at], uid, cpu(at), "") if at < len(elements) else None


def _users_own(
    elements: Sequence[str], at: int, owner: int, cpu: Callable[[int], CpuCgroup | None]
) -> Placement:
    """A process in user ``owner``'s slice (at ``at``): its own unit or container in the user's
    manager, named under ``user@U.service/`` so that it merges with no one else's, else the user."""
    manager = at + 1
    if manager < len(elements) and elements[manager] == f"user@{owner}.service":
        below = manager + 1 + slice_run(elements[manager + 1 :])
        if below < len(elements):
            named = _named(elements[below], owner, cpu(below), f"{elements[manager]}/")
            if named is not None:
                return named
    return _user(owner, cpu(at))


def _named(element: str, uid: int | None, cpu: CpuCgroup | None, owner: str = "") -> Placement | None:
    """The container or unit one element names (None for neither), its id after ``owner``."""
    container = _container(element, uid, cpu, owner)
    if container is not None:
        return container
    unit = f"{owner}{element}"
    if _UNIT.fullmatch(element) and not _USER_SERVICE.fullmatch(element) and len(unit) <= MAX_ID_CHARS:
        return Placement(WorkloadKey("systemd_unit", unit), uid, None, cpu)
    return None


def _container(element: str, uid: int | None, cpu: CpuCgroup | None, owner: str) -> Placement | None:
    container = CONTAINER.fullmatch(element)
    if container is None:
        return None
    return Placement(WorkloadKey("container", f"{owner}{container.group(1)}"), uid, None, cpu)


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
    return place(text, read_uid(procfs, pid), root, slurm, read_hierarchies(procfs))

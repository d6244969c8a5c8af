"""The Slurm jobs that have a cgroup on this node, found in the cgroup tree (``--cgroupfs``), so a job
that runs on no accelerator still gets its share of the CPU packages' energy.

cgroup v2 (Slurm 22.05 and newer): ``<cgroupfs>/system.slice/[<node>_]slurmstepd.scope/job_J``;
cgroup v1: ``<cgroupfs>/cpu,cpuacct/slurm[_<node>]/uid_U/job_J`` (or a ``cpuacct`` hierarchy).
"""

from __future__ import annotations

from pathlib import Path

from warptd.files import read_text
from warptd.workloads.placement import CpuCgroup, Placement, WorkloadKey, read_uid

_V2 = "system.slice/*slurmstepd.scope/job_*"
_V1_HIERARCHIES = ("cpu,cpuacct", "cpuacct")
_V1 = "slurm*/uid_*/job_*"


def slurm_jobs(cgroupfs: Path) -> list[Placement]:
    """Each job's placement (the uid only where the v1 path names it) and its CPU cgroup."""
    found = []
    for job in cgroupfs.glob(_V2):
        if job.is_dir() and job.name[4:].isdigit():
            cgroup = CpuCgroup("/" + job.relative_to(cgroupfs).as_posix())
            found.append(Placement(WorkloadKey("slurm_job", job.name[4:]), None, None, cgroup))
    for hierarchy in _V1_HIERARCHIES:
        for job in (cgroupfs / hierarchy).glob(_V1):
            uid = job.parent.name[4:]
            if job.is_dir() and job.name[4:].isdigit() and uid.isdigit():
                cgroup = CpuCgroup("/" + job.relative_to(cgroupfs / hierarchy).as_posix(), hierarchy)
                found.append(Placement(WorkloadKey("slurm_job", job.name[4:]), int(uid), None, cgroup))
    return found


def job_uid(cgroupfs: Path, procfs: Path, cgroup: CpuCgroup) -> int | None:
    """The uid of a process in the job's cgroup (v2 paths name none), or None where none is there."""
    root = cgroupfs / cgroup.v1_controllers if cgroup.v1_controllers else cgroupfs
    for procs in sorted((root / cgroup.path.lstrip("/")).rglob("cgroup.procs")):
        try:
            pids = read_text(procs).split()
        except OSError:
            continue
        for pid in pids:
            uid = read_uid(procfs, int(pid)) if pid.isdigit() else None
            if uid is not None:
                return uid
    return None

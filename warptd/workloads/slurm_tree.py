"""The Slurm jobs that have a cgroup on this node, found in the cgroup tree (``--cgroupfs``), so a job
that runs on no accelerator still gets its share of the CPU packages' energy.

Only under slurmd's roots (``--workload-slurm-roots``): cgroup v2 (Slurm 22.05 and newer)
``<cgroupfs>/system.slice/[<node>_]slurmstepd.scope/job_J``; cgroup v1
``<cgroupfs>/cpu,cpuacct/slurm[_<node>]/uid_U/job_J`` (or a ``cpuacct`` hierarchy).
"""

from __future__ import annotations

from pathlib import Path

from warptd.files import read_text
from warptd.workloads.placement import (
    CpuCgroup,
    Placement,
    SlurmRoots,
    WorkloadKey,
    read_uid,
    slurm_job,
    slurm_roots,
)

#: The unified tree (cgroup v2) and the v1 hierarchies that keep CPU time.
_HIERARCHIES = ("", "cpu,cpuacct", "cpuacct")


def slurm_jobs(cgroupfs: Path, slurm: SlurmRoots | None = None) -> list[Placement]:
    """Each job's placement (the uid only where the path names it) and its CPU cgroup."""
    roots = slurm_roots() if slurm is None else slurm
    found: dict[tuple[WorkloadKey, CpuCgroup], Placement] = {}
    for hierarchy in _HIERARCHIES:
        base = cgroupfs / hierarchy
        for root in roots:
            pattern = "/".join(root)
            for job in [*base.glob(f"{pattern}/job_*"), *base.glob(f"{pattern}/uid_*/job_*")]:
                elements = job.relative_to(base).parts
                named = slurm_job(elements, roots)
                if named is None or named[0] != len(elements) - 1 or not job.is_dir():
                    continue
                cgroup = CpuCgroup("/" + "/".join(elements), hierarchy)
                key = WorkloadKey("slurm_job", named[1])
                found[(key, cgroup)] = Placement(key, named[2], None, cgroup)
    return list(found.values())


def job_uid(cgroupfs: Path, procfs: Path, cgroup: CpuCgroup) -> int | None:
    """The uid of a process in the job's cgroup (v2 paths name none), or None where none is there."""
    root = cgroupfs / cgroup.v1_controllers if cgroup.v1_controllers else cgroupfs
    for procs in sorted((root / cgroup.path.lstrip("/")).rglob("cgroup.procs")):
        try:
            pids = read_text(procs).split()
        except OSError:
            continue
        for pid in pids:
            uid = read_uid(procfs, int(pid)) if pid.isascii() and pid.isdigit() else None
            if uid is not None:
                return uid
    return None

"""A hostile node: what one process, one cgroup name or one file can do to warptd's reads.

Each case is a fixture /proc or cgroup tree, or a file, shaped by someone on the node, and what it
may change: its own process's attribution at most, never anyone else's, never a poll, a start or a
reload. A case that would block (a FIFO) runs on a thread bounded in time and is unblocked after."""

from __future__ import annotations

from warptd.workloads.slurm_tree import slurm_jobs


def test_the_cgroup_tree_holds_jobs_only_under_slurmds_roots(tmp_path):
    cgroupfs = tmp_path / "cgroup"
    for path in (
        "system.slice/slurmstepd.scope/job_1",
        "system.slice/node7_slurmstepd.scope/job_2",
        "cpu,cpuacct/slurm/uid_1000/job_3",
        "user.slice/user-1000.slice/user@1000.service/app.slice/slurmstepd.scope/job_66",
        "cpu,cpuacct/user.slice/slurm/uid_0/job_67",
    ):
        (cgroupfs / path).mkdir(parents=True)
    found = {(job.key.id, job.uid) for job in slurm_jobs(cgroupfs)}
    assert found == {("1", None), ("2", None), ("3", 1000)}

"""warptd in a private cgroup namespace (a Kubernetes pod on cgroup v2): other processes' cgroup paths
climb above its root (``0::/../../..``), and their workloads' CPU time is found under the host's tree
once the namespace root is known. Fixture trees as the kernel shows them from inside such a pod."""

from __future__ import annotations

from warptd.workloads.placement import CpuCgroup, WorkloadKey, place

#: warptd's own container: its cgroup namespace root, three levels under the host's root.
POD = "/kubepods.slice/kubepods-pod0a.slice/cri-containerd-" + "a" * 64 + ".scope"
#: A Slurm job's task as a process in that pod reads it: up to the host root, then down.
JOB_TASK = "0::/../../../system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n"
#: A neighbour pod's container: the common ancestor is kubepods.slice, one level below the root.
NEIGHBOUR_ID = "b" * 64
NEIGHBOUR = f"0::/../../kubepods-pod0b.slice/cri-containerd-{NEIGHBOUR_ID}.scope\n"


def test_paths_seen_from_the_pod_place_their_workload_and_its_host_cgroup():
    job = place(JOB_TASK, 1000, root=POD)
    assert job.key == WorkloadKey("slurm_job", "77") and job.step == "0"
    assert job.cpu == CpuCgroup("/system.slice/slurmstepd.scope/job_77")
    neighbour = place(NEIGHBOUR, 0, root=POD)
    assert neighbour.key == WorkloadKey("container", NEIGHBOUR_ID)
    assert neighbour.cpu == CpuCgroup(
        f"/kubepods.slice/kubepods-pod0b.slice/cri-containerd-{NEIGHBOUR_ID}.scope"
    )
    # the root was not found, its depth was: a path that climbs all of it is the host's, CPU file and all
    unknown_root = place(JOB_TASK, 1000, root="/../../..")
    assert unknown_root.key == WorkloadKey("slurm_job", "77") and unknown_root.cpu == job.cpu
    # one that climbs less hangs under an unknown ancestor: named, but no CPU file
    neighbour = place(NEIGHBOUR, 0, root="/../../..")
    assert neighbour.key == WorkloadKey("container", NEIGHBOUR_ID) and neighbour.cpu is None

"""warptd in a private cgroup namespace (a Kubernetes pod on cgroup v2): other processes' cgroup paths
climb above its root (``0::/../../..``), and their workloads' CPU time is found under the host's tree
once the namespace root is known. Fixture trees as the kernel shows them from inside such a pod."""

from __future__ import annotations

import os

import pytest

from tests.test_workloads import TICK_US, Node, Rig
from warptd.processes.nvml import ProcessMonitor
from warptd.workloads.cgroupns import absolute, climb, namespace_root
from warptd.workloads.placement import CpuCgroup, WorkloadKey, place

#: warptd's own container: its cgroup namespace root, three levels under the host's root.
POD = "/kubepods.slice/kubepods-pod0a.slice/cri-containerd-" + "a" * 64 + ".scope"
#: A Slurm job's task as a process in that pod reads it: up to the host root, then down.
JOB_TASK = "0::/../../../system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n"
#: A neighbour pod's container: the common ancestor is kubepods.slice, one level below the root.
NEIGHBOUR_ID = "b" * 64
NEIGHBOUR = f"0::/../../kubepods-pod0b.slice/cri-containerd-{NEIGHBOUR_ID}.scope\n"


def in_a_pod(node: Node, pid: int = os.getpid()) -> None:
    """The fixture node seen from inside warptd's pod: host init climbs three levels, and the pod's
    cgroup (one of several at that depth) lists warptd's host pid."""
    init = node.proc.root / "1"
    init.mkdir(parents=True, exist_ok=True)
    (init / "cgroup").write_text("0::/../../..\n")
    for name in (POD, POD.replace("0a", "0c").replace("a" * 64, "c" * 64)):
        (node.cgroupfs / name.lstrip("/")).mkdir(parents=True)
        (node.cgroupfs / name.lstrip("/") / "cgroup.procs").write_text("1\n12\n")
    (node.cgroupfs / POD.lstrip("/") / "cgroup.procs").write_text(f"1\n{pid}\n")
    (node.cgroupfs / "system.slice/cron.service").mkdir(parents=True)


def test_climb_and_absolute():
    assert climb("/../../..") == 3 and climb("/system.slice/x.service") == 0 and climb("/") == 0
    assert (
        absolute("/../../kubepods-pod0b.slice/c.scope", POD) == "/kubepods.slice/kubepods-pod0b.slice/c.scope"
    )
    assert absolute("/../../../system.slice/x.service", POD) == "/system.slice/x.service"
    assert absolute("/../../../../x", POD) is None  # above the host's root: the root is not this one
    assert absolute("/../system.slice/../../x", POD) is None  # ".." past the leading run: no guess


def test_the_namespace_root_is_the_cgroup_at_init_s_depth_that_lists_warptd(tmp_path):
    node = Node(tmp_path)
    assert namespace_root(node.proc.root, node.cgroupfs) == "/"  # host namespace: no /proc/1/cgroup climb
    in_a_pod(node)
    assert namespace_root(node.proc.root, node.cgroupfs) == POD
    # listed nowhere: where it is is unknown, how deep it is is not
    assert namespace_root(node.proc.root, node.cgroupfs, pid=999_999) == "/../../.."


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


@pytest.fixture
def pod_node(tmp_path):
    node = Node(tmp_path)
    in_a_pod(node)
    return node


def test_a_job_seen_from_a_pod_gets_its_cpu_share_and_gpu_energy(pod_node, fake_nvml):
    """End to end through the tracker: without the namespace root the job's CPU time would be read
    at ``<cgroupfs>/../../../system.slice/…``, outside the host's tree, and be absent."""
    monitor = ProcessMonitor(pod_node.proc.root)
    try:
        rig = Rig(pod_node, monitor, fake_nvml.gpus)
        rig.device_joules(0.0, 0.0)
        rig.package_joules(0.0)
        job = CpuCgroup("/system.slice/slurmstepd.scope/job_77")
        pod_node.cpu(job, 1e6)
        pod_node.add(3001, JOB_TASK, uid=1000)
        fake_nvml.gpus[0].processes = [(3001, 1 << 30)]
        rig.poll()
        pod_node.cpu(job, 3e6)  # 2 s of CPU time over 8 CPUs for 1 s
        pod_node.tick(round(8e6 / TICK_US))
        rig.poll()
        rig.package_joules(40.0)
        rig.device_joules(100.0, 0.0)
        view = rig.workload("slurm_job", "77")
        assert view.cpu_joules == pytest.approx(40.0 * 2e6 / 8e6, rel=0.01)
        assert view.accelerator_joules == pytest.approx(100.0)
    finally:
        monitor.stop()


def test_the_namespace_root_is_searched_at_the_first_poll_not_at_construction(pod_node, fake_nvml):
    """Building the tracker reads no cgroup tree (the daemon's start is not delayed by the search)."""
    monitor = ProcessMonitor(pod_node.proc.root)
    try:
        (pod_node.proc.root / "1" / "cgroup").unlink()  # a search now would find no depth: root "/"
        rig = Rig(pod_node, monitor, fake_nvml.gpus)
        (pod_node.proc.root / "1" / "cgroup").write_text("0::/../../..\n")  # as it is by the poll
        pod_node.add(3001, JOB_TASK, uid=1000)
        fake_nvml.gpus[0].processes = [(3001, 1 << 30)]
        rig.poll()
        assert rig.tracker.lists._cgroup_root == POD
    finally:
        monitor.stop()

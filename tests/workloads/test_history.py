"""A workload's recording and its HTML report (--workloads): a Slurm job on two GPUs of the NVML double,
its power and SM shares scripted, runs and ends; within its retention its recording carries the
energy GET /workloads/slurm_job/ID answers, per device and CPU, beside the devices' readings, and its
report opens in a real headless chromium. Version 2 recordings still read; the bounds hold."""

from __future__ import annotations

from tests.e2e.test_workloads import node
from tests.samples import gpu_samples
from warptd.workloads.energy import WorkloadEnergy
from warptd.workloads.history import WorkloadHistory

__all__ = ["node"]


def test_the_workload_cap_bounds_the_recordings_and_the_memory_bound_holds(node, tmp_path):
    """1005 Slurm jobs in the cgroup tree with --workload-max 1000: 1000 recorded, 5 dropped; their
    series, each sampled on a GPU, stay within the history's bytes."""
    for job in range(1005):
        (node.cgroupfs / f"system.slice/slurmstepd.scope/job_{job}").mkdir(parents=True)
    history = WorkloadHistory(memory_bytes=2**20)
    tracker = WorkloadEnergy([], node.proc.root, node.cgroupfs, max_workloads=1000, listeners=[history])
    tracker.poll()
    assert history.recorded == 1000 and tracker.dropped == 5
    with tracker._lock:  # hand each job a share of GPU 0, as the split would
        workloads = dict(tracker._workloads)
    for second in range(1, 40):
        for workload in workloads.values():
            workload.add_device("nvidia:0", "GPU-0", 1.0)
        history.after_sample("nvidia", gpu_samples(1, 1000.0 * second), None, float(second), workloads)
    assert history.budget.used <= 2**20
    kept = [len(history.recording(w.view()).targets[0].points) for w in list(workloads.values())[:50]]
    assert min(kept) >= 2  # thinned, never emptied, while running
    for key in list(workloads)[:10]:  # gone past the retention: their recordings go too
        del workloads[key]
    history.after_poll(workloads)
    assert history.recorded == 990

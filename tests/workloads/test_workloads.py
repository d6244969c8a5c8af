"""Energy per workload (--workloads): fixture /proc and cgroup trees for each layout, the NVML double
(real pynvml structs) reporting their pids, memory and SM samples, and RAPL domains as the sampler
hands them over."""

from __future__ import annotations

import shutil

import pytest
from prometheus_client import CollectorRegistry

from tests.doubles.nvml import ProcessSample
from tests.e2e.test_processes import GIB, Proc
from tests.helpers import parse
from warptd.exporter.text import render_text
from warptd.models import DeviceReading
from warptd.power.base import DomainPower, PowerSource
from warptd.processes.nvml import ProcessMonitor
from warptd.sampling.snapshot import DeviceSample
from warptd.workloads.collector import WorkloadCollector
from warptd.workloads.energy import WorkloadEnergy
from warptd.workloads.placement import CpuCgroup

CID = "c" * 64


UNSUPPORTED = {"nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization"}


SLURM_V1 = "".join(  # cgroup v1: each controller its own hierarchy, cpu and cpuacct mounted together
    f"{n}:{controllers}:/slurm/uid_1000/job_4242/step_0/task_0\n"
    for n, controllers in ((11, "memory"), (4, "cpu,cpuacct"), (3, "freezer"), (2, "devices"))
)


SLURM_V2 = "0::/system.slice/slurmstepd.scope/job_4243/step_1/user/task_0\n"


SERVICE = "0::/system.slice/ollama.service\n"


DOCKER = f"0::/system.slice/docker-{CID}.scope\n"


USER = "0::/user.slice/user-1000.slice/session-3.scope\n"


class Node:
    """A fixture node: /proc (stat, status, cgroup per pid; the node's /proc/stat) and a cgroup tree."""

    def __init__(self, root):
        self.proc = Proc(root / "proc")
        self.cgroupfs = root / "cgroup"
        self.node_ticks = 100_000
        self.tick(0)

    def add(self, pid: int, cgroup: str, uid: int = 1000, started: int = 4242) -> None:
        self.proc.add(pid, cgroup, started)
        (self.proc.root / str(pid) / "status").write_text(
            f"Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        )

    def remove(self, pid: int) -> None:
        (self.proc.root / str(pid) / "status").unlink()
        self.proc.remove(pid)

    def tick(self, ticks: int) -> None:
        """The node's CPU time goes on by ``ticks`` clock ticks (of every CPU, idle included)."""
        self.node_ticks += ticks
        self.proc.root.mkdir(parents=True, exist_ok=True)
        idle = self.node_ticks - 300
        (self.proc.root / "stat").write_text(
            f"cpu  100 0 200 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
        )

    def cpu(self, cgroup: CpuCgroup, usage_us: float) -> None:
        """The cgroup's CPU time so far, in its hierarchy's file and unit."""
        path = cgroup.file(self.cgroupfs)
        path.parent.mkdir(parents=True, exist_ok=True)
        if cgroup.v1_controllers:
            path.write_text(f"{int(usage_us * 1000)}\n")
        else:
            path.write_text(f"usage_usec {int(usage_us)}\nuser_usec 0\nsystem_usec 0\n")

    def gone(self, cgroup: CpuCgroup) -> None:
        """The cgroup is removed, as Slurm and the runtimes do when a job or container ends."""
        shutil.rmtree(cgroup.file(self.cgroupfs).parent)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Rig:
    """The monitor and the tracker, polled by hand; energy handed over as the sampler does."""

    def __init__(self, node: Node, monitor: ProcessMonitor, gpus, **options) -> None:
        self.node, self.monitor, self.gpus = node, monitor, gpus
        self.clock = Clock()
        self.tracker = WorkloadEnergy([monitor], node.proc.root, node.cgroupfs, clock=self.clock, **options)
        self.t_us = 0
        self.energy = [0.0] * len(gpus)
        self.package = 0.0

    def poll(self, sm: dict[int, dict[int, int]] | None = None) -> None:
        """One poll period: the driver's SM samples per GPU index (pid -> percent), then both polls."""
        self.t_us += 1_000_000
        for index, by_pid in (sm or {}).items():
            self.gpus[index].process_samples = [ProcessSample(self.t_us, pid, p) for pid, p in by_pid.items()]
        self.monitor.poll()
        self.tracker.poll()

    def device_joules(self, *added: float) -> None:
        """Each GPU's energy counter goes on by these joules, handed over as one sample."""
        samples = []
        for index, joules in enumerate(added):
            self.energy[index] += joules
            reading = DeviceReading(index=index, uuid=self.gpus[index].uuid)
            samples.append(DeviceSample(reading, energy_joules=self.energy[index]))
        self.tracker.on_sample("nvidia", samples, None, self.clock.now)

    def package_joules(self, joules: float) -> None:
        self.package += joules
        domains = [DomainPower("package-0", PowerSource.RAPL, None, self.package)]
        self.tracker.on_sample("rapl", None, domains, self.clock.now)

    def workload(self, kind: str, workload_id: str):
        return self.tracker.view(kind, workload_id)

    def scrape(self) -> list:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(WorkloadCollector(self.tracker))
        return parse(render_text(registry.collect()).decode())


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


@pytest.fixture
def monitor(fake_nvml, node):
    monitor = ProcessMonitor(node.proc.root)
    yield monitor
    monitor.stop()


@pytest.fixture
def rig(node, monitor, fake_nvml):
    rig = Rig(node, monitor, fake_nvml.gpus)
    rig.device_joules(0.0, 0.0)  # the counters' baselines
    rig.package_joules(0.0)
    return rig


def layouts(node: Node, fake_nvml) -> None:
    """GPU 0: two Slurm jobs (v1, v2) and a process whose cgroup cannot be read; GPU 1 (no
    per-process utilization): a systemd service, a Docker container and a bare user process."""
    node.add(1001, SLURM_V1, uid=0)  # the uid the job's cgroup names wins
    node.add(1002, SLURM_V2, uid=1001)
    node.add(1003, SERVICE, uid=0)
    node.add(1004, DOCKER, uid=0)
    node.add(1005, USER, uid=1000)
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.processes = [(1001, 2 * GIB), (1002, GIB), (1009, GIB)]  # 1009: gone, or another pid namespace
    gpu1.processes = [(1003, GIB), (1004, 2 * GIB), (1005, GIB)]
    gpu1.unsupported = set(UNSUPPORTED)


def test_an_idle_device_and_a_stale_poll_are_unattributed(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    fake_nvml.gpus[0].processes = []
    rig.poll()
    rig.device_joules(40.0, 0.0)  # nobody on GPU 0
    rig.clock.now += 10.0  # three intervals without a poll: who holds GPU 1 is not known any more
    rig.device_joules(0.0, 60.0)
    assert rig.tracker.unattributed()["accelerator"] == pytest.approx(100.0)
    assert rig.workload("container", CID).accelerator_joules == 0.0


def test_a_pid_reused_by_a_new_job_does_not_carry_energy_over(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    rig.poll({0: {1001: 100}})
    rig.device_joules(100.0, 0.0)
    node.remove(1001)
    node.add(1001, SLURM_V1.replace("job_4242", "job_4250"), started=99999)  # the same pid, a new process
    rig.poll({0: {1001: 100}})
    rig.device_joules(30.0, 0.0)
    assert rig.workload("slurm_job", "4242").accelerator_joules == pytest.approx(100.0, rel=0.01)
    assert rig.workload("slurm_job", "4250").accelerator_joules == pytest.approx(30.0, rel=0.01)

"""A route's answer as the server would send it, and a recorded job behind the workload API: job 4242
beside a container, stepped a second at a time over the NVML double's GPUs."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_processes import GIB
from tests.e2e.test_workloads import CID, SLURM_V1, Node, Rig
from tests.workloads.test_energy import TICK_US, V1_JOB
from warptd.http.app import HttpError, Request, Router
from warptd.http.workload_routes import WorkloadApi
from warptd.models import DeviceReading, Utilization
from warptd.power.base import DomainPower, PowerSource
from warptd.sampling.snapshot import DeviceSample
from warptd.workloads.history import WorkloadHistory
from warptd.workloads.placement import CpuCgroup

JOB_TASK_1 = SLURM_V1.replace("task_0", "task_1")


CONTAINER = f"0::/system.slice/docker-{CID}.scope\n"


def request(path: str, **headers: str) -> Request:
    return Request("GET", path, {}, {"host": "localhost", **headers}, b"", "127.0.0.1")


def answer(router: Router, path: str) -> tuple[int, dict]:
    """The route's status and JSON body (an error's too), as the server would send them."""
    try:
        response = router.dispatch(request(path))
    except HttpError as exc:
        response = exc.response()
    return response.status, json.loads(response.body)


class Job:
    """Job 4242 (pids 1001 on GPU 0, 1002 on GPU 1) beside a container (pid 1004) on GPU 0, stepped
    a second at a time with scripted power, SM samples and CPU time, as the sampler hands them over."""

    def __init__(self, node: Node, rig: Rig, history: WorkloadHistory) -> None:
        self.node, self.rig, self.history = node, rig, history
        self.cgroup = CpuCgroup(V1_JOB, "cpu,cpuacct")
        self.cpu_us = 0.0
        self.step_count = 0
        node.add(1001, SLURM_V1, uid=0)
        node.add(1002, JOB_TASK_1, uid=0)
        node.add(1004, CONTAINER, uid=0)
        node.cpu(self.cgroup, 0)
        gpu0, gpu1 = rig.gpus
        gpu0.processes = [(1001, 2 * GIB), (1004, GIB)]
        gpu1.processes = [(1002, GIB)]

    def step(self, watts: tuple[float, float], sm: dict[int, dict[int, int]], package_watts: float) -> None:
        """One second: both polls (the job's CPU time 0.5 s of 4 s of node time), then a sample of
        each GPU at ``watts`` and of the CPU package."""
        self.step_count += 1
        self.rig.clock.now += 1.0
        self.cpu_us += 0.5e6
        self.node.cpu(self.cgroup, self.cpu_us)
        self.node.tick(round(4e6 / TICK_US))
        self.rig.poll(sm)
        samples = []
        for index, power in enumerate(watts):
            self.rig.energy[index] += power
            reading = DeviceReading(
                index=index,
                uuid=self.rig.gpus[index].uuid,
                power_watts=power,
                energy_counter_joules=self.rig.energy[index],
                utilization=Utilization(compute=min(1.0, power / 400)),
                temperatures_celsius={"gpu": 40 + power / 20 + self.step_count / 10},
                clocks_hertz={"sm": 1.4e9 + 1e6 * self.step_count},
            )
            samples.append(DeviceSample(reading, energy_joules=self.rig.energy[index]))
        self.rig.tracker.on_sample("nvidia", samples, None, self.rig.clock.now)
        self.rig.package += package_watts
        domain = DomainPower("package-0", PowerSource.RAPL, package_watts, self.rig.package)
        self.rig.tracker.on_sample("rapl", None, [domain], self.rig.clock.now)

    def end(self) -> None:
        """The job's processes and cgroup go; the container stays on GPU 0."""
        self.node.remove(1001)
        self.node.remove(1002)
        self.node.gone(self.cgroup)
        gpu0, gpu1 = self.rig.gpus
        gpu0.processes, gpu1.processes = [(1004, GIB)], []
        self.rig.clock.now += 1.0
        self.rig.poll({0: {1004: 30}})


def run_job(rig: Rig, node: Node, history: WorkloadHistory) -> Job:
    job = Job(node, rig, history)
    rig.poll({0: {1001: 60, 1004: 20}, 1: {1002: 50}})  # found; the counters' baselines follow
    for second in range(40):
        ramp = min(1.0, second / 10)
        job.step((100 + 200 * ramp, 80 + 150 * ramp), {0: {1001: 60, 1004: 20}, 1: {1002: 50}}, 50.0)
    job.end()
    return job


@pytest.fixture
def recorded(node, monitor, fake_nvml):
    rig = Rig(node, monitor, fake_nvml.gpus)
    history = WorkloadHistory(clock=rig.clock, wall=lambda: 1_780_000_000.0 + rig.clock.now)
    rig.tracker.listeners.append(history)
    rig.device_joules(0.0, 0.0)
    rig.package_joules(0.0)
    router = Router()
    WorkloadApi.add(router, rig.tracker, lambda: None, history)
    return rig, history, router

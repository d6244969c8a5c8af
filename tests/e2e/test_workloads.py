"""Energy per workload (--workloads): fixture /proc and cgroup trees for each layout, the NVML double
(real pynvml structs) reporting their pids, memory and SM samples, and RAPL domains as the sampler
hands them over."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import assert_promtool_clean
from tests.doubles.nvml import ProcessSample
from tests.e2e.test_processes import GIB, Proc
from tests.helpers import parse, select, value
from warptd.exporter.text import render_text
from warptd.models import DeviceReading
from warptd.power.base import DomainPower, PowerSource
from warptd.processes.nvml import ProcessMonitor
from warptd.sampling.snapshot import DeviceSample
from warptd.workloads.collector import WorkloadCollector
from warptd.workloads.energy import WorkloadEnergy
from warptd.workloads.placement import CpuCgroup, user_name

CID = "c" * 64


UNSUPPORTED = {"nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization"}


ENERGY = "warptd_workload_energy_joules_total"


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


@pytest.mark.slow
def test_series_are_promtool_clean_and_name_no_command_line(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    node.cpu(CpuCgroup("/system.slice/ollama.service"), 0)
    rig.poll({0: {1001: 60, 1002: 40}})
    rig.device_joules(10.0, 10.0)
    rig.package_joules(5.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkloadCollector(rig.tracker))
    body = render_text(registry.collect())
    assert_promtool_clean(body)
    assert b"python3" not in body and b"task_0" not in body
    samples = parse(body.decode())
    service = {"kind": "systemd_unit", "workload": "ollama.service", "user": "root"}
    assert value(samples, ENERGY, source="cpu", **service) == 0.0  # readable, no period measured yet
    assert value(samples, ENERGY, source="accelerator", **service) == pytest.approx(2.5)


def workloads_daemon(node: Node, tmp_path: Path):
    """A real daemon started with --workloads over the fixture node and the NVML double (stop it)."""
    from warptd.config import load_settings
    from warptd.daemon import Daemon

    settings = load_settings(
        listen="127.0.0.1:0", backends=["nvidia"], interval=0.1, procfs=node.proc.root,
        cgroupfs=node.cgroupfs, sysfs=tmp_path, workloads=True,
    )  # fmt: skip
    daemon = Daemon(settings)
    daemon.start()
    return daemon


@pytest.mark.slow
def test_a_daemon_serves_workloads_to_loopback_or_the_token_and_the_cli_prints_one(
    node, fake_nvml, tmp_path, capsys
):
    """End to end: --workloads on a real daemon (its threads poll, sample and serve over loopback)."""
    from tests.helpers import http, wait_until
    from warptd.cli import main

    node.add(1001, SLURM_V1, uid=0)
    gpu0 = fake_nvml.gpus[0]
    gpu0.processes = [(1001, GIB)]
    daemon = workloads_daemon(node, tmp_path)
    try:
        assert daemon.process_sources != []  # nvidia's
        assert not select(
            parse(http(daemon.port, "GET", "/metrics")[2].decode()), "warptd_device_process_memory_bytes"
        )

        def attributed() -> bool:
            gpu0.energy_mj += 1000
            status, _, body = http(daemon.port, "GET", "/workloads/slurm_job/4242")
            return status == 200 and json.loads(body)["accelerator_joules"] > 0

        assert wait_until(attributed, timeout=10.0, interval=0.05)
        job = json.loads(http(daemon.port, "GET", "/workloads/slurm_job/4242")[2])
        assert job["devices"][0]["device"] == "nvidia:0" and job["user"] == user_name(1000)
        assert set(job) == {
            "kind", "id", "user", "steps", "started_at", "ended_at", "devices", "accelerator_joules",
            "cpu_joules", "total_joules",
        }  # fmt: skip
        listing = json.loads(http(daemon.port, "GET", "/workloads")[2])
        assert [(w["kind"], w["id"]) for w in listing["workloads"]] == [("slurm_job", "4242")]
        samples = parse(http(daemon.port, "GET", "/metrics")[2].decode())
        assert value(samples, ENERGY, kind="slurm_job", workload="4242", source="accelerator") > 0
        for path, status in (
            ("/workloads/slurm_job/4243", 404),
            ("/workloads/pod/4242", 404),
            ("/workloads/slurm_job/" + "9" * 300, 414),
        ):
            assert http(daemon.port, "GET", path)[0] == status, path
        assert http(daemon.port, "GET", "/workloads", headers={"Origin": "http://evil.example"})[0] == 403
        assert http(daemon.port, "GET", "/workloads", headers={"Host": "evil.example"})[0] == 403
        url = f"http://127.0.0.1:{daemon.port}"
        assert main(["workload", "slurm_job", "4242", "--url", url]) == 0
        printed = capsys.readouterr().out
        assert "slurm_job 4242" in printed and "nvidia:0" in printed and "total" in printed
        assert main(["workload", "--url", url]) == 0
        listed = capsys.readouterr().out.splitlines()  # the daemon's own log lines too: same process
        assert any(line.startswith("slurm_job 4242  user ") for line in listed), listed
        assert main(["workload", "slurm_job", "--url", url]) == 2
        assert "give the slurm_job's ID" in capsys.readouterr().err
        recorded = run_epilog(tmp_path, url)
        assert re.fullmatch(r"update JobId=4242 AdminComment=warptd_joules_\S+=\d+\n", recorded), recorded
        daemon._token = "s3cret"  # as a reload with --stress-token sets it
        assert http(daemon.port, "GET", "/workloads")[0] == 401
        authorized = {"Authorization": "Bearer s3cret"}
        assert http(daemon.port, "GET", "/workloads/slurm_job/4242", headers=authorized)[0] == 200
        assert main(["workload", "slurm_job", "4242", "--url", url]) == 1
        assert "401" in capsys.readouterr().err
    finally:
        daemon.stop()


def run_epilog(tmp_path, url: str, extra_env: dict[str, str] | None = None) -> str:
    """deploy/slurm's epilog for job 4242 against the daemon at ``url`` (``extra_env`` added to its
    environment), with a stand-in scontrol that records its arguments; returns them."""
    bin_dir, log = tmp_path / "bin", tmp_path / "scontrol.log"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text('#!/bin/sh\necho "$@" > "$SCONTROL_LOG"\n')
    scontrol.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "WARPTD_URL": url,
        "WARPTD": f"{sys.executable} -m warptd",
        "SCONTROL_LOG": str(log),
        **(extra_env or {}),
    }
    epilog = Path(__file__).parents[2] / "deploy" / "slurm" / "warptd-epilog.sh"
    done = subprocess.run(
        ["sh", str(epilog)], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return log.read_text()

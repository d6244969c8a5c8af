"""Energy per workload (--workloads): fixture /proc and cgroup trees for each layout, the NVML double
(real pynvml structs) reporting their pids, memory and SM samples, and RAPL domains as the sampler
hands them over."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Mapping

import pytest
from prometheus_client import CollectorRegistry

from tests.doubles.nvml import ProcessSample
from tests.e2e.test_processes import GIB, Proc
from tests.helpers import parse, select, value
from warptd.exporter.text import render_text
from warptd.models import DeviceReading
from warptd.power.base import DomainPower, PowerSource
from warptd.processes.nvml import ProcessMonitor
from warptd.sampling.snapshot import DeviceSample
from warptd.sampling.tracks import DeviceTrack
from warptd.workloads.collector import WorkloadCollector
from warptd.workloads.energy import WorkloadEnergy
from warptd.workloads.placement import CpuCgroup, Placement, WorkloadKey, place, user_name

CID = "c" * 64
UNSUPPORTED = {"nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization"}
ENERGY = "warptd_workload_energy_joules_total"
UNATTRIBUTED = "warptd_workload_energy_unattributed_joules_total"
DROPPED = "warptd_workloads_dropped_total"
TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")

# The layouts, as /proc/<pid>/cgroup shows them.
SLURM_V1 = "".join(  # cgroup v1: each controller its own hierarchy, cpu and cpuacct mounted together
    f"{n}:{controllers}:/slurm/uid_1000/job_4242/step_0/task_0\n"
    for n, controllers in ((11, "memory"), (4, "cpu,cpuacct"), (3, "freezer"), (2, "devices"))
)
SLURM_V2 = "0::/system.slice/slurmstepd.scope/job_4243/step_1/user/task_0\n"
SERVICE = "0::/system.slice/ollama.service\n"
DOCKER = f"0::/system.slice/docker-{CID}.scope\n"
USER = "0::/user.slice/user-1000.slice/session-3.scope\n"
USER_SERVICE = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service\n"


V1_JOB = "/slurm/uid_1000/job_4242"
V2_JOB = "/system.slice/slurmstepd.scope/job_4243"
JUPYTER = "/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service"
USER_1000 = ("user", user_name(1000))
#: A user's own unit: named under its manager, so that it merges with no other user's or the system's.
JUPYTER_UNIT = ("systemd_unit", "user@1000.service/jupyter.service")


@pytest.mark.parametrize(
    ("cgroup", "uid", "workload", "step", "cpu"),
    [
        (SLURM_V1, 1000, ("slurm_job", "4242"), "0", CpuCgroup(V1_JOB, "cpu,cpuacct")),  # uid_1000 wins
        (SLURM_V2, 1001, ("slurm_job", "4243"), "1", CpuCgroup(V2_JOB)),
        (
            "0::/system.slice/node7_slurmstepd.scope/job_9/step_batch\n", 5, ("slurm_job", "9"), "batch",
            CpuCgroup("/system.slice/node7_slurmstepd.scope/job_9"),
        ),  # several slurmd on one host
        (
            "4:cpuacct:/slurm_node7/uid_7/job_12/step_extern\n", 7, ("slurm_job", "12"), "extern",
            CpuCgroup("/slurm_node7/uid_7/job_12", "cpuacct"),
        ),
        (SERVICE, 0, ("systemd_unit", "ollama.service"), None, CpuCgroup("/system.slice/ollama.service")),
        (DOCKER, 0, ("container", CID), None, CpuCgroup(f"/system.slice/docker-{CID}.scope")),
        (
            f"0::/machine.slice/libpod-{CID}.scope/container\n", 0, ("container", CID), None,
            CpuCgroup(f"/machine.slice/libpod-{CID}.scope"),
        ),  # Podman
        (f"0::/default/{CID}\n", 0, ("container", CID), None, CpuCgroup(f"/default/{CID}")),  # containerd
        (
            f"0::/system.slice/nerdctl-{CID}.scope\n", 0, ("container", CID), None,
            CpuCgroup(f"/system.slice/nerdctl-{CID}.scope"),
        ),
        (f"0::/docker/{CID}\n", 0, ("container", CID), None, CpuCgroup(f"/docker/{CID}")),  # cgroupfs driver
        (USER_SERVICE, 1000, JUPYTER_UNIT, None, CpuCgroup(JUPYTER)),
        (USER, 1000, USER_1000, None, CpuCgroup("/user.slice/user-1000.slice")),
        (
            "0::/user.slice/user-1000.slice/user@1000.service/init.scope\n", 1000, USER_1000, None,
            CpuCgroup("/user.slice/user-1000.slice"),
        ),
        ("0::/\n", 4321, ("user", user_name(4321)), None, None),
        ("0::/system.slice/job_5/step_0\n", 3, ("user", user_name(3)), None, None),  # not Slurm's
    ],
)  # fmt: skip
def test_placement_of_each_layout(cgroup, uid, workload, step, cpu):
    given_uid = 0 if cgroup == SLURM_V1 else uid  # Slurm v1: the uid its path names, not the process's
    assert place(cgroup, given_uid) == Placement(WorkloadKey(*workload), uid, step, cpu)


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


def test_each_workload_gets_its_scripted_share_and_the_parts_sum_to_the_device(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    rig.poll({0: {1001: 60, 1002: 20, 1009: 20}})
    rig.device_joules(100.0, 80.0)
    rig.poll({0: {1001: 30, 1002: 10, 1009: 10}})
    rig.device_joules(50.0, 40.0)
    expected = {
        ("slurm_job", "4242"): (90.0, "nvidia:0"),  # SM 60 % of 150 J
        ("slurm_job", "4243"): (30.0, "nvidia:0"),
        ("systemd_unit", "ollama.service"): (30.0, "nvidia:1"),  # by memory held: 1 of 4 GiB of 120 J
        ("container", CID): (60.0, "nvidia:1"),
        ("user", user_name(1000)): (30.0, "nvidia:1"),
    }
    for (kind, workload_id), (joules, device) in expected.items():
        view = rig.workload(kind, workload_id)
        assert view.accelerator_joules == pytest.approx(joules, rel=0.01), (kind, workload_id)
        assert [d.device for d in view.devices] == [device]
    job = rig.workload("slurm_job", "4242")
    assert (job.user, job.steps, job.ended_at) == (user_name(1000), ["0"], None)
    assert rig.workload("slurm_job", "4243").user == user_name(1001)
    unattributed = rig.tracker.unattributed()["accelerator"]
    assert unattributed == pytest.approx(30.0, rel=0.01)  # the unreadable pid's SM share
    attributed = sum(view.accelerator_joules for view in rig.tracker.views())
    assert attributed + unattributed == pytest.approx(150.0 + 120.0, rel=1e-9)


def test_even_split_where_neither_sm_nor_memory_tells(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    fake_nvml.gpus[1].processes = [(1003, None), (1004, None), (1005, None)]  # memory not available
    rig.poll()
    rig.device_joules(0.0, 90.0)
    for kind, workload_id in (
        ("systemd_unit", "ollama.service"),
        ("container", CID),
        ("user", user_name(1000)),
    ):
        assert rig.workload(kind, workload_id).accelerator_joules == pytest.approx(30.0, rel=1e-9)


def test_an_ended_job_keeps_its_total_for_the_retention_then_goes(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    v1 = CpuCgroup("/slurm/uid_1000/job_4242", "cpu,cpuacct")
    node.cpu(v1, 0)
    rig.poll({0: {1001: 50, 1002: 50}})
    rig.device_joules(100.0, 0.0)
    node.remove(1001)  # job 4242 ends: its process and its cgroup go
    node.gone(v1)
    fake_nvml.gpus[0].processes = [(1002, GIB)]
    rig.clock.now += 1.0
    rig.poll({0: {1002: 50}})
    rig.device_joules(100.0, 0.0)
    job = rig.workload("slurm_job", "4242")
    assert job.accelerator_joules == pytest.approx(50.0, rel=0.01)
    assert job.ended_at is not None
    assert value(
        rig.scrape(), ENERGY, kind="slurm_job", workload="4242", source="accelerator"
    ) == pytest.approx(50.0, rel=0.01)
    rig.clock.now += 599.0  # 600 s after it was last seen: still there
    rig.poll({0: {1002: 50}})
    assert rig.workload("slurm_job", "4242") is not None
    rig.clock.now += 2.0
    rig.poll({0: {1002: 50}})
    assert rig.workload("slurm_job", "4242") is None
    assert not select(rig.scrape(), ENERGY, workload="4242")
    assert select(rig.scrape(), ENERGY, workload="4243")


def test_a_counter_reset_is_the_samplers_to_take_and_a_late_total_adds_nothing(node, monitor, fake_nvml):
    """The split gets warptd's totals, not the raw counter: a driver reload that sets GPU 0's counter
    back near 0 goes on counting (the track takes it), so no joule after it is lost. A lower total can
    only be an older read handed over late (a fast and a scheduled read crossing): it adds nothing and
    is no new baseline, else the joules up to the newer read would be counted twice."""
    rig = Rig(node, monitor, fake_nvml.gpus)
    node.add(1001, SLURM_V1, uid=0)
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.processes, gpu1.processes = [(1001, GIB)], []
    rig.poll({0: {1001: 100}})
    track = DeviceTrack("nvidia", 0, gpu0.uuid)

    def read(raw: float, at: float) -> DeviceSample:
        sample = track.update(DeviceReading(index=0, uuid=gpu0.uuid, energy_counter_joules=raw), at)
        assert sample is not None
        return sample

    totals = []
    for raw in (0.0, 500.0, 20.0, 320.0):  # 20: the counter restarted (a GPU reset), then counted 300
        rig.clock.now += 1.0
        rig.poll({0: {1001: 100}})
        sample = read(raw, rig.clock.now)
        totals.append(sample.energy_joules)
        rig.tracker.on_sample("nvidia", [sample], None, rig.clock.now)
    assert totals == [0.0, 500.0, 520.0, 820.0]  # monotonic across the reset
    assert rig.workload("slurm_job", "4242").accelerator_joules == pytest.approx(820.0)
    late = read(400.0, rig.clock.now + 0.5)  # read before the next one, handed over after it
    rig.clock.now += 1.0
    rig.poll({0: {1001: 100}})
    newer = read(500.0, rig.clock.now)
    rig.tracker.on_sample("nvidia", [newer], None, rig.clock.now)
    rig.tracker.on_sample("nvidia", [late], None, rig.clock.now)
    assert (late.energy_joules, newer.energy_joules) == (900.0, 1000.0)
    assert rig.workload("slurm_job", "4242").accelerator_joules == pytest.approx(1000.0)
    rig.clock.now += 1.0
    rig.poll({0: {1001: 100}})
    rig.tracker.on_sample("nvidia", [read(600.0, rig.clock.now)], None, rig.clock.now)
    assert rig.workload("slurm_job", "4242").accelerator_joules == pytest.approx(1100.0)  # not 1200


class SlowListener:
    """A workload listener that holds the sampler's (or the poller's) thread until released, keeping
    what it was handed."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.handed: list[Mapping] = []

    def after_poll(self, workloads: Mapping) -> None:
        self._hold(workloads)

    def after_sample(self, backend, devices, domains, at, workloads: Mapping) -> None:
        self._hold(workloads)

    def _hold(self, workloads: Mapping) -> None:
        self.handed.append(workloads)
        self.entered.set()
        assert self.release.wait(timeout=10.0)


def _promptly(call, timeout: float = 2.0):
    """``call()`` on a thread, joined for at most ``timeout`` s: its result, or None if it waited."""
    got = []
    thread = threading.Thread(target=lambda: got.append(call()), daemon=True)
    thread.start()
    thread.join(timeout)
    return got[0] if got else None


@pytest.mark.parametrize("told", ["sample", "poll"])
def test_a_scrape_never_waits_for_the_listeners(rig, node, fake_nvml, told):
    """The split tells its listeners (each workload's recording: 46 ms at 1000 workloads) after it
    let go of its lock, with a frozen copy of the totals: a scrape reads them meanwhile."""
    node.add(1001, SLURM_V1, uid=0)
    fake_nvml.gpus[0].processes, fake_nvml.gpus[1].processes = [(1001, GIB)], []
    rig.poll({0: {1001: 100}})
    rig.device_joules(100.0, 0.0)
    slow = SlowListener()
    rig.tracker.listeners.append(slow)
    held = threading.Thread(
        target=(lambda: rig.device_joules(50.0, 0.0)) if told == "sample" else rig.poll, daemon=True
    )
    held.start()
    try:
        assert slow.entered.wait(timeout=5.0)
        totals = _promptly(rig.tracker.totals)
        assert totals is not None, "totals() waited for a listener"
        scraped = _promptly(rig.scrape)
        assert scraped is not None, "the collector waited for a listener"
        assert value(scraped, ENERGY, kind="slurm_job", workload="4242", source="accelerator") > 0
        handed = slow.handed[0][WorkloadKey("slurm_job", "4242")]
        assert handed.ended_at is None and handed.devices["nvidia:0"][1] == pytest.approx(
            150.0 if told == "sample" else 100.0
        )
    finally:
        slow.release.set()
        held.join(timeout=5.0)
    assert not held.is_alive()
    rig.tracker.listeners.remove(slow)
    rig.device_joules(30.0, 0.0)  # a copy: what the listener was handed does not change after
    assert handed.devices["nvidia:0"][1] == pytest.approx(150.0 if told == "sample" else 100.0)
    with pytest.raises(TypeError):
        handed.devices["nvidia:0"] = ("", 0.0)  # type: ignore[index]


def test_cpu_packages_split_by_cgroup_cpu_time_idle_unattributed(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    node.add(1006, USER_SERVICE, uid=1000)  # a user's own service: its CPU time is in the user's slice too
    fake_nvml.gpus[1].processes = [*fake_nvml.gpus[1].processes, (1006, GIB)]
    cgroups = {
        ("slurm_job", "4242"): CpuCgroup(V1_JOB, "cpu,cpuacct"),  # cpuacct.usage, ns
        ("slurm_job", "4243"): CpuCgroup(V2_JOB),  # cpu.stat, µs
        USER_1000: CpuCgroup("/user.slice/user-1000.slice"),
        JUPYTER_UNIT: CpuCgroup(JUPYTER),
    }
    start = {key: 5e6 for key in cgroups}
    for key, cgroup in cgroups.items():
        node.cpu(cgroup, start[key])
    rig.poll()
    spent = {  # µs of CPU time in the period; the user's slice holds jupyter's second too
        ("slurm_job", "4242"): 2.0e6,
        ("slurm_job", "4243"): 1.0e6,
        ("user", user_name(1000)): 3.0e6,
        JUPYTER_UNIT: 1.0e6,
    }
    for key, cgroup in cgroups.items():
        node.cpu(cgroup, start[key] + spent[key])
    node_us = 8 * 1.25e6  # 8 CPUs over 1.25 s
    node.tick(round(node_us / TICK_US))
    rig.poll()
    rig.package_joules(50.0)
    own = {**spent, ("user", user_name(1000)): 2.0e6}
    for (kind, workload_id), used in own.items():
        assert rig.workload(kind, workload_id).cpu_joules == pytest.approx(50.0 * used / node_us, rel=0.01)
    assert rig.workload("container", CID).cpu_joules is None  # its cgroup has no cpu.stat here: absent
    unattributed = rig.tracker.unattributed()["cpu"]
    assert unattributed == pytest.approx(50.0 * (1 - 6.0e6 / node_us), rel=0.01)
    total = sum(view.cpu_joules or 0.0 for view in rig.tracker.views()) + unattributed
    assert total == pytest.approx(50.0, rel=1e-9)
    samples = rig.scrape()
    assert value(samples, ENERGY, kind="slurm_job", workload="4243", source="cpu") == pytest.approx(
        5.0, rel=0.01
    )
    assert value(samples, UNATTRIBUTED, source="cpu") == pytest.approx(unattributed)


def test_kinds_and_the_cap(node, monitor, fake_nvml):
    layouts(node, fake_nvml)
    rig = Rig(node, monitor, fake_nvml.gpus, kinds={"slurm_job", "user"}, max_workloads=2)
    rig.device_joules(0.0, 0.0)
    rig.poll({0: {1001: 50, 1002: 50}})
    rig.device_joules(100.0, 40.0)
    # the service and the container are not chosen kinds: they count for their users (uid 0 here),
    # who are over the cap of two, as is the user of pid 1005
    assert {(v.kind, v.id) for v in rig.tracker.views()} == {("slurm_job", "4242"), ("slurm_job", "4243")}
    assert rig.tracker.dropped == 2
    assert rig.tracker.unattributed()["accelerator"] == pytest.approx(40.0)
    rig.poll({0: {1001: 50, 1002: 50}})
    assert rig.tracker.dropped == 2  # counted once per workload, not per poll
    assert value(rig.scrape(), DROPPED) == 2


def test_workload_settings_from_flags_and_environment(monkeypatch):
    from warptd.arguments import build_parser
    from warptd.cli import _settings
    from warptd.config import SettingsError, load_settings

    args = build_parser().parse_args(
        ["--workloads", "--workload-kinds", "slurm_job, user", "--workload-max", "5", "--cgroupfs", "/cg"]
    )
    settings = _settings(args)
    assert (settings.workloads, settings.workload_kinds, settings.workload_max) == (
        True,
        ["slurm_job", "user"],
        5,
    )
    assert str(settings.cgroupfs) == "/cg" and settings.workload_retention == 600.0
    assert load_settings().workloads is False  # off by default (docs/workloads.md says why)
    monkeypatch.setenv("WARPTD_WORKLOAD_KINDS", "container")
    monkeypatch.setenv("WARPTD_WORKLOAD_RETENTION", "30")
    assert (load_settings().workload_kinds, load_settings().workload_retention) == (["container"], 30.0)
    for bad in (
        {"workload_kinds": "pod"},
        {"workload_kinds": ""},
        {"workload_max": 0},
        {"workload_retention": -1},
    ):
        with pytest.raises(SettingsError):
            load_settings(**bad)


def test_a_user_first_seen_outside_its_slice_takes_the_slice_for_cpu(rig, node, fake_nvml):
    node.add(1010, "0::/\n", uid=1000)  # e.g. started by a root-cgroup daemon, under the user's uid
    fake_nvml.gpus[0].processes = [(1010, GIB)]
    rig.poll()
    slice_ = CpuCgroup("/user.slice/user-1000.slice")
    node.cpu(slice_, 1e6)
    node.add(1011, USER, uid=1000)
    fake_nvml.gpus[0].processes = [(1010, GIB), (1011, GIB)]
    rig.poll()
    node.cpu(slice_, 2e6)
    node.tick(int(4e6 / TICK_US))
    rig.poll()
    rig.package_joules(40.0)
    assert rig.workload(*USER_1000).cpu_joules == pytest.approx(10.0, rel=0.01)


def test_a_slurm_job_on_no_device_is_found_in_the_cgroup_tree_for_its_cpu_share(rig, node, fake_nvml):
    v2 = CpuCgroup("/system.slice/slurmstepd.scope/job_5000")
    v1 = CpuCgroup("/slurm/uid_1003/job_5001", "cpu,cpuacct")
    node.cpu(v2, 0)
    node.cpu(v1, 0)
    task = node.cgroupfs / "system.slice/slurmstepd.scope/job_5000/step_0/user/task_0"
    task.mkdir(parents=True)
    (task / "cgroup.procs").write_text("2000\n")
    node.add(2000, "0::/system.slice/slurmstepd.scope/job_5000/step_0/user/task_0\n", uid=1002)
    (node.cgroupfs / "system.slice/slurmstepd.scope/job_x").mkdir()  # not a job: ignored
    rig.poll()
    assert {(v.id, v.user) for v in rig.tracker.views()} == {
        ("5000", user_name(1002)),
        ("5001", user_name(1003)),
    }
    node.cpu(v2, 1e6)
    node.cpu(v1, 3e6)
    node.tick(int(8e6 / TICK_US))
    rig.poll()
    rig.package_joules(80.0)
    assert rig.workload("slurm_job", "5000").cpu_joules == pytest.approx(10.0, rel=0.01)
    assert rig.workload("slurm_job", "5001").cpu_joules == pytest.approx(30.0, rel=0.01)
    assert rig.workload("slurm_job", "5000").devices == []
    node.gone(v2)
    rig.poll()
    assert rig.workload("slurm_job", "5000").ended_at is not None
    assert rig.workload("slurm_job", "5001").ended_at is None

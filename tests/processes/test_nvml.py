"""The NVML process monitor's reads of per-process utilization at their own cadence, through the NVML
double under the real pynvml, a fixture /proc, and the workload split it feeds; polled by hand on a
clock of the test's own (as the polling thread would, at --interval)."""

from __future__ import annotations

import os
import time

import pytest
import structlog

from tests.doubles.nvml import FakeGpu, FakeNvml, ProcessSample
from tests.e2e import test_processes as e2e_processes
from tests.e2e.test_processes import GIB, HOST, SYSTEMD_V2, UID
from tests.e2e.test_workloads import ENERGY, SLURM_V1, SLURM_V2, Node, Rig
from tests.helpers import select, value, wait_until
from tests.processes.test_cgroup import NOT_UTF8
from tests.processes.test_collector import METRIC, scrape
from tests.workloads.test_energy import TICK_US
from warptd.config import SettingsError, load_settings
from warptd.models import DeviceReading
from warptd.processes.nvml import ProcessMonitor, open_process_monitor
from warptd.sampling.snapshot import DeviceSample
from warptd.workloads.energy import WorkloadEnergy
from warptd.workloads.placement import CpuCgroup
from warptd.workloads.slurm_tree import slurm_jobs

proc = e2e_processes.proc  # a fixture

INFO = "nvmlDeviceGetProcessesUtilizationInfo"
#: The driver's per-process sampling window in these tests: 1/6 s, the shortest NVML documents.
WINDOW_US = 1_000_000 // 6


class Clock:
    """Monotonic time moved on by hand, from now (the split judges a poll's freshness by the real
    clock too)."""

    def __init__(self) -> None:
        self.base, self.elapsed = time.monotonic(), 0.0

    def __call__(self) -> float:
        return self.base + self.elapsed


class Driver:
    """One GPU's driver as the test's time goes on: a sampling window every 1/6 s, with one sample per
    process busy in it (the SM percent it keeps), the last 128 kept."""

    def __init__(self, gpu) -> None:
        self.gpu = gpu
        self.busy: dict[int, int] = {}  # pid -> SM percent
        self.windows = 0

    def run_to(self, seconds: float) -> None:
        samples = []
        while (self.windows + 1) * WINDOW_US <= round(seconds * 1e6):
            self.windows += 1
            samples += [ProcessSample(self.windows * WINDOW_US, pid, sm) for pid, sm in self.busy.items()]
        if samples:
            self.gpu.process_samples = [*self.gpu.process_samples, *samples][-128:]


def polls(monitor: ProcessMonitor, clock: Clock, driver: Driver, seconds: float, step: float = 0.1):
    """Poll every ``step`` for ``seconds``, the driver's samples running on; yields after each poll."""
    for _ in range(round(seconds / step)):
        clock.elapsed = round(clock.elapsed + step, 6)
        driver.run_to(clock.elapsed)
        monitor.poll()
        yield clock.elapsed


def test_at_10_hz_utilization_is_read_once_a_second_and_never_where_no_process_runs(fake_nvml, proc):
    """Before, every 0.1 s poll read every GPU: 2.1 ms of CPU each on an H200, and half of the reads
    found no new window (the driver's are 1/6 s or longer), so a process's share flickered to 0."""
    gpu0 = fake_nvml.gpus[0]
    proc.add(1001, HOST)
    gpu0.processes = [(1001, GIB)]
    clock, driver = Clock(), Driver(gpu0)
    driver.busy = {1001: 80}
    clock.elapsed = 1.0
    driver.run_to(1.0)  # it has been running a second
    monitor = ProcessMonitor(proc.root, interval=0.1, utilization_interval=1.0, clock=clock)
    try:
        shares = []
        for _ in polls(monitor, clock, driver, 5.0):
            (process,) = monitor.processes()
            shares.append(process.utilization["sm"])
        assert fake_nvml.calls(INFO) == 5  # GPU 0 once a second (1 call each), GPU 1 never
        assert shares == [pytest.approx(0.8)] * 50  # the mean of each second's six windows, held
    finally:
        monitor.stop()


def test_a_read_is_one_call_and_the_array_grows_once_where_more_samples_wait(fake_nvml, proc):
    """nvidia-ml-py asks the count first, then the samples: two round trips where there are samples.
    One here, into an array kept per GPU; the driver's whole buffer of four busy processes (400
    samples) is more than it holds at first: that read asks twice, and the array stays grown."""
    gpu0 = fake_nvml.gpus[0]
    for pid in range(1001, 1005):
        proc.add(pid, HOST)
    gpu0.processes = [(pid, GIB, 25) for pid in range(1001, 1005)]
    gpu0.process_window_us = WINDOW_US  # the driver samples live, keeping its last 100 windows
    monitor = ProcessMonitor(proc.root)
    try:
        monitor.poll()
        assert fake_nvml.calls(INFO) == 2
        assert [p.utilization["sm"] for p in monitor.processes()] == [0.25] * 4
        gpu0.process_window_us = 0
        gpu0.process_samples = [ProcessSample(2**62 + t, 1001, 30) for t in range(120)]
        monitor.poll()
        monitor.poll()  # nothing newer: NOT_FOUND
        assert fake_nvml.calls(INFO) == 2 + 1 + 1
        assert monitor.processes()[0].utilization["sm"] == 0  # used nothing since
    finally:
        monitor.stop()


def test_a_process_that_leaves_has_no_weight_before_the_next_read(fake_nvml, proc):
    """Read at 75/25, then 1002 exits: its SM weight goes with it at the next poll, not at the next
    read five seconds on (its pod or workload would get energy it never used)."""
    gpu0 = fake_nvml.gpus[0]
    proc.add(1001, HOST)
    proc.add(1002, SYSTEMD_V2)
    gpu0.processes = [(1001, GIB), (1002, GIB)]
    clock, driver = Clock(), Driver(gpu0)
    driver.busy = {1001: 60, 1002: 20}
    monitor = ProcessMonitor(proc.root, utilization_interval=5.0, clock=clock)
    try:
        list(polls(monitor, clock, driver, 2.0, step=1.0))
        weights = monitor.devices()[gpu0.uuid].sm_by_pid
        assert weights[1001] == pytest.approx(3 * weights[1002])
        assert {a.pod_uid for a in monitor.sm_usage(gpu0.uuid).by_attribution} == {"", UID}
        calls = fake_nvml.calls(INFO)
        del driver.busy[1002]
        gpu0.processes = [(1001, GIB)]
        proc.remove(1002)
        list(polls(monitor, clock, driver, 1.0, step=1.0))
        assert fake_nvml.calls(INFO) == calls  # no read: who left needs none
        assert set(monitor.devices()[gpu0.uuid].sm_by_pid) == {1001}
        assert {a.pod_uid for a in monitor.sm_usage(gpu0.uuid).by_attribution} == {""}
    finally:
        monitor.stop()


def test_a_list_as_it_was_is_handed_on_and_resolved_again_at_the_next_read(fake_nvml, proc):
    """Between two reads a poll that finds the same processes makes nothing anew (no /proc read); the
    next read makes the list again, and a process gone from /proc meanwhile is unresolved then."""
    gpu0 = fake_nvml.gpus[0]
    proc.add(1001, SYSTEMD_V2)
    gpu0.processes = [(1001, GIB)]
    clock, driver = Clock(), Driver(gpu0)
    driver.busy = {1001: 50}
    changes = []
    monitor = ProcessMonitor(
        proc.root, interval=0.1, on_change=lambda: changes.append(1), utilization_interval=1.0, clock=clock
    )
    try:
        list(polls(monitor, clock, driver, 1.5))
        first = monitor.processes()
        assert first[0].pod_uid == UID
        proc.remove(1001)  # exited; NVML still lists its context
        changed = len(changes)
        memory = monitor.devices()[gpu0.uuid].memory_by_pid
        list(polls(monitor, clock, driver, 0.5))  # up to 2.0 s: no read due (the last at 1.1 s)
        assert monitor.processes()[0] is first[0]
        assert monitor.devices()[gpu0.uuid].memory_by_pid is memory
        assert len(changes) == changed  # nothing new: no change told at every poll
        list(polls(monitor, clock, driver, 0.2))  # the read at 2.1 s makes it again
        assert monitor.processes()[0].pod_uid == ""
        assert len(changes) == changed + 1
    finally:
        monitor.stop()


def _workload_rig(fake_nvml, tmp_path, utilization_interval: float):
    node = Node(tmp_path)
    node.add(1001, SLURM_V1, uid=0)  # job 4242
    node.add(1002, SLURM_V2, uid=1001)  # job 4243
    clock = Clock()
    monitor = ProcessMonitor(
        node.proc.root, interval=0.1, utilization_interval=utilization_interval, clock=clock
    )
    tracker = WorkloadEnergy([monitor], node.proc.root, node.cgroupfs, clock=clock, interval=lambda: 0.1)
    return node, clock, monitor, tracker


@pytest.mark.parametrize("utilization_interval", [1.0, 5.0])
def test_a_workloads_energy_is_split_right_when_processes_come_and_go_between_two_reads(
    fake_nvml, tmp_path, utilization_interval
):
    """GPU 0 at 100 W, sampled at 10 Hz: job 4242's process (60 % SM) alone for 3 s; job 4243's (20 %)
    joins at 3.0 s, between two reads, and exits at 8.0 s, between two reads; 10 s in all.

    Its arrival is read at once (closing 4242's span alone) and a driver window later, so 4243 has its
    share of 75/25 from 4.0 s on; its weight goes when it exits. 4243 gets 25 % of 4 s (100 J), like
    a read every poll would give it were the reads never empty, 4242 the rest (900 J): nothing of
    4242's span alone dilutes 4243's share, and nothing after 8.0 s goes to 4243."""
    _, clock, monitor, tracker = _workload_rig(fake_nvml, tmp_path, utilization_interval)
    gpu0 = fake_nvml.gpus[0]
    driver = Driver(gpu0)
    energy = 0.0

    def sample() -> None:
        reading = DeviceReading(index=0, uuid=gpu0.uuid)
        tracker.on_sample("nvidia", [DeviceSample(reading, energy_joules=energy)], None, clock())

    try:
        sample()  # the counter's baseline
        gpu0.processes, driver.busy = [(1001, GIB)], {1001: 60}
        for step in range(1, 101):
            clock.elapsed = step / 10
            driver.run_to(clock.elapsed)
            if step == 30:
                gpu0.processes, driver.busy[1002] = [(1001, GIB), (1002, GIB)], 20
            if step == 80:
                gpu0.processes = [(1001, GIB)]
                del driver.busy[1002]
            monitor.poll()
            tracker.poll()
            energy += 10.0  # 100 W over the 0.1 s since the last sample
            sample()
        assert tracker.view("slurm_job", "4242").accelerator_joules == pytest.approx(900.0, rel=1e-6)
        assert tracker.view("slurm_job", "4243").accelerator_joules == pytest.approx(100.0, rel=1e-6)
        assert tracker.unattributed().get("accelerator", 0.0) == 0.0
    finally:
        monitor.stop()


@pytest.mark.slow
def test_the_daemon_hands_the_setting_to_the_monitor_and_a_reload_changes_it(fake_nvml, tmp_path):
    from warptd.config import RELOADABLE
    from warptd.daemon import Daemon

    def settings(seconds: float):
        return load_settings(
            listen="127.0.0.1:0", backends=["nvidia"], processes=True, sysfs=tmp_path,
            procfs=tmp_path / "proc", process_utilization_interval=seconds,
        )  # fmt: skip

    assert "process_utilization_interval" in RELOADABLE
    daemon = Daemon(settings(3.0), reload=lambda: settings(7.0))
    try:
        (monitor,) = daemon.process_sources  # nvidia's
        assert monitor.utilization_interval == 3.0
        daemon.reload()
        assert monitor.utilization_interval == 7.0
    finally:
        daemon.stop()


@pytest.mark.parametrize("seconds", [0.5, 11.0])
def test_the_interval_stays_within_the_drivers_windows_and_its_buffer(seconds):

    with pytest.raises(SettingsError, match="process_utilization_interval"):
        load_settings(process_utilization_interval=seconds)
    assert load_settings(process_utilization_interval=10).process_utilization_interval == 10


POD = "/kubepods.slice/kubepods-pod0a.slice/cri-containerd-" + "a" * 64 + ".scope"


JOB_TASK = "0::/../../../system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n"


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


def test_a_cgroup_name_that_is_not_utf8_leaves_the_jobs_their_energy(fake_nvml, tmp_path):
    node = Node(tmp_path)
    node.add(1001, SLURM_V2, uid=1001)
    node.add(1002, "")
    (node.proc.root / "1002" / "cgroup").write_bytes(NOT_UTF8)
    fake_nvml.gpus[0].processes = [(1001, GIB), (1002, GIB)]
    monitor = ProcessMonitor(node.proc.root)
    try:
        rig = Rig(node, monitor, fake_nvml.gpus)
        rig.device_joules(0.0, 0.0)
        rig.poll()
        rig.device_joules(100.0, 0.0)
        rig.poll()
        rig.device_joules(100.0, 0.0)
    finally:
        monitor.stop()
    job = rig.workload("slurm_job", "4243")
    assert job is not None and job.accelerator_joules == pytest.approx(100.0)  # half of each 100 J
    assert value(rig.scrape(), ENERGY, kind="slurm_job", workload="4243", source="accelerator") > 0


def test_directories_with_such_ids_are_no_jobs_and_the_poll_goes_on(fake_nvml, tmp_path):
    node = Node(tmp_path)
    for path in (
        "cpu,cpuacct/slurm/uid_\u00b2/job_6",
        "cpu,cpuacct/slurm/uid_5/job_\u0664\u0662",
        f"system.slice/slurmstepd.scope/job_{'9' * 200}",
        "system.slice/slurmstepd.scope/job_7",
    ):
        (node.cgroupfs / path).mkdir(parents=True)
    assert [job.key.id for job in slurm_jobs(node.cgroupfs)] == ["7"]
    monitor = ProcessMonitor(node.proc.root)
    try:
        rig = Rig(node, monitor, fake_nvml.gpus)
        rig.poll()  # raised ValueError
    finally:
        monitor.stop()
    assert rig.workload("slurm_job", "7") is not None


# -- the process list: capped, an older driver's struct, the polling thread, no NVML ----------------
def test_processes_per_device_are_capped_to_the_largest(fake_nvml, proc):
    fake_nvml.gpus[0].processes = [(2000 + i, (i + 1) * 2**20) for i in range(70)]
    monitor = ProcessMonitor(proc.root, max_per_device=64)
    try:
        with structlog.testing.capture_logs() as logs:
            monitor.poll()
            monitor.poll()
        pids = {int(s.labels["pid"]) for s in select(scrape(monitor), METRIC)}
        assert pids == {2000 + i for i in range(6, 70)}
        capped = [e for e in logs if e["event"] == "processes_capped"]
        assert len(capped) == 1 and capped[0]["dropped"] == 6 and capped[0]["device"] == 0
    finally:
        monitor.stop()


def test_a_driver_without_the_newest_struct_falls_back_to_v2(proc):
    """An R470 driver has no ..._v3: pynvml raises NVMLLibraryMismatchError, and the monitor switches."""
    fake = FakeNvml(gpus=2, driver="r470")
    fake.gpus[1].processes = [(1003, GIB)]
    proc.add(1003, HOST)
    with fake.installed():
        monitor = ProcessMonitor(proc.root)
        try:
            monitor.poll()
            monitor.poll()
            assert value(scrape(monitor), METRIC, device="1", pid="1003") == GIB
            # one call per poll and GPU, into an array sized for the list (nvidia-ml-py asks its size first)
            assert fake.calls("nvmlDeviceGetComputeRunningProcesses_v2") == 4
        finally:
            monitor.stop()
    fake.close()


@pytest.mark.slow
def test_the_thread_polls_and_stops_promptly(fake_nvml, proc):
    proc.add(1001, SYSTEMD_V2)
    fake_nvml.gpus[0].processes = [(1001, GIB)]
    changes = []
    monitor = open_process_monitor(proc.root, interval=0.05, on_change=lambda: changes.append(1))
    monitor.start()
    try:
        assert wait_until(monitor.processes, timeout=5)
        fake_nvml.gpus[0].processes = []
        assert wait_until(lambda: not monitor.processes(), timeout=5)
        assert len(changes) == 2  # on appearance and on ending, not at every poll
    finally:
        started = time.monotonic()
        monitor.stop()
    assert time.monotonic() - started < 1
    assert fake_nvml.initialised == 0


def test_nvml_absent_means_no_monitor(proc):
    fake = FakeNvml([FakeGpu()])
    fake.library_missing = True
    with fake.installed():
        assert open_process_monitor(proc.root) is None

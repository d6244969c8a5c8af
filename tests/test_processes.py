"""Per-process device memory through the NVML double, attributed through a fixture /proc tree."""

from __future__ import annotations

import time

import pytest
import structlog
from prometheus_client import CollectorRegistry

from tests.conftest import assert_promtool_clean
from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import parse, select, value, wait_until
from warptd.exporter.text import render_text
from warptd.processes.cgroup import Attribution, parse_cgroup, start_time
from warptd.processes.collector import ProcessesCollector
from warptd.processes.nvml import ProcessMonitor, open_process_monitor

GIB = 2**30
UID = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
UID2 = "11111111-2222-3333-4444-555555555555"
CID = "a" * 64
CID2 = "b" * 64
SYSTEMD_V2 = (
    "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
)
CGROUPFS_V1 = "".join(
    f"{n}:{controller}:/kubepods/besteffort/pod{UID2}/{CID2}\n"
    for n, controller in ((12, "memory"), (11, "cpu,cpuacct"), (1, "name=systemd"))
)
HOST = "0::/user.slice/user-1000.slice/session-3.scope\n"
METRIC = "warptd_device_process_memory_bytes"


class Proc:
    """A fixture procfs: /proc/<pid>/stat (with its start time, field 22) and /proc/<pid>/cgroup."""

    def __init__(self, root):
        self.root = root

    def add(self, pid: int, cgroup: str, started: int = 4242, comm: str = "python3 (worker) x") -> None:
        directory = self.root / str(pid)
        directory.mkdir(parents=True, exist_ok=True)
        fields = ["S", *["0"] * 18, str(started), *["0"] * 30]  # fields 3..52; field 22 is starttime
        (directory / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")
        (directory / "cgroup").write_text(cgroup)

    def remove(self, pid: int) -> None:
        for name in ("stat", "cgroup"):
            (self.root / str(pid) / name).unlink()
        (self.root / str(pid)).rmdir()


@pytest.fixture
def proc(tmp_path):
    return Proc(tmp_path / "proc")


@pytest.fixture
def monitor(fake_nvml, proc):
    monitor = ProcessMonitor(proc.root)
    yield monitor
    monitor.stop()


def scrape(monitor) -> list:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProcessesCollector(monitor))
    return parse(render_text(registry.collect()).decode())


@pytest.mark.parametrize(
    ("cgroup", "expected"),
    [
        (SYSTEMD_V2, (UID, CID)),
        (CGROUPFS_V1, (UID2, CID2)),
        (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope\n", (UID, CID)),
        (
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID2}.slice/docker-{CID}.scope",
            (UID2, CID),
        ),
        (
            f"0::/../kubepods-besteffort-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
            (UID, CID),
        ),
        (f"0::/../pod{UID}/{CID}\n", (UID, CID)),  # cgroupfs driver seen from a private cgroup namespace
        (f"0::/kubepods/burstable/pod{'c' * 32}/{CID}\n", ("c" * 32, CID)),  # a static pod's config hash
        (f"0::/kubepods/burstable/pod{UID}\n", (UID, "")),  # in the pod's cgroup, not a container's
        (f"12:memory:/kubepods/pod{UID}/{CID}\n0::/\n", (UID, CID)),  # hybrid v1 + v2
        (f"0::/system.slice/docker-{CID}.scope\n", ("", "")),  # a container outside Kubernetes
        (f"0::/machine.slice/libpod-pod-{CID}.slice\n", ("", "")),
        (HOST, ("", "")),
        ("", ("", "")),
    ],
)
def test_parse_cgroup(cgroup, expected):
    assert parse_cgroup(cgroup) == Attribution(*expected)


def test_start_time_survives_a_comm_with_spaces_and_parentheses(proc):
    proc.add(7, HOST, started=987654, comm="a) b (c")
    assert start_time(proc.root, 7) == 987654
    assert start_time(proc.root, 8) is None


def test_processes_attributed_to_pods_and_containers(monitor, fake_nvml, proc):
    proc.add(1001, SYSTEMD_V2)
    proc.add(1002, CGROUPFS_V1)
    proc.add(1003, HOST)
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.processes = [(1001, 2 * GIB), (1003, GIB)]
    gpu1.processes = [(1002, 3 * GIB), (1004, GIB // 2), (1005, None)]  # 1004 gone; 1005 memory unknown
    monitor.poll()
    samples = scrape(monitor)
    dev0 = {"backend": "nvidia", "device": "0", "uuid": gpu0.uuid}
    dev1 = {"backend": "nvidia", "device": "1", "uuid": gpu1.uuid}
    assert value(samples, METRIC, pid="1001", pod_uid=UID, container_id=CID, **dev0) == 2 * GIB
    assert value(samples, METRIC, pid="1003", pod_uid="", container_id="", **dev0) == GIB
    assert value(samples, METRIC, pid="1002", pod_uid=UID2, container_id=CID2, **dev1) == 3 * GIB
    assert value(samples, METRIC, pid="1004", pod_uid="", container_id="", **dev1) == GIB // 2
    assert not select(samples, METRIC, pid="1005")  # usedGpuMemory not available: absent, not 0
    assert len(select(samples, METRIC)) == 4


def test_an_ended_process_loses_its_series(monitor, fake_nvml, proc):
    proc.add(1001, SYSTEMD_V2)
    proc.add(1003, HOST)
    fake_nvml.gpus[0].processes = [(1001, GIB), (1003, GIB)]
    monitor.poll()
    assert len(select(scrape(monitor), METRIC)) == 2
    fake_nvml.gpus[0].processes = [(1003, GIB)]
    proc.remove(1001)
    monitor.poll()
    assert [s.labels["pid"] for s in select(scrape(monitor), METRIC)] == ["1003"]
    assert len(monitor._resolver) == 1  # the cache holds the latest poll's pids only


def test_cgroup_cached_per_process_and_read_again_for_a_reused_pid(monitor, fake_nvml, proc):
    proc.add(1001, SYSTEMD_V2, started=100)
    fake_nvml.gpus[0].processes = [(1001, GIB)]
    monitor.poll()
    (proc.root / "1001" / "cgroup").write_text(CGROUPFS_V1)  # same process: the cached answer holds
    monitor.poll()
    assert value(scrape(monitor), METRIC, pid="1001", pod_uid=UID) == GIB
    proc.add(1001, CGROUPFS_V1, started=200)  # the pid now names another process
    monitor.poll()
    assert value(scrape(monitor), METRIC, pid="1001", pod_uid=UID2, container_id=CID2) == GIB


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


def test_unsupported_device_asked_once_and_lost_device_skipped(monitor, fake_nvml, proc):
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.unsupported = {"nvmlDeviceGetComputeRunningProcesses_v3"}
    gpu1.processes = [(1003, GIB)]
    proc.add(1003, HOST)
    monitor.poll()
    monitor.poll()
    # GPU 0 asked once; GPU 1 once a poll (into an array sized for its list)
    assert fake_nvml.calls("nvmlDeviceGetComputeRunningProcesses_v3") == 3
    assert [s.labels["device"] for s in select(scrape(monitor), METRIC)] == ["1"]
    gpu1.lost = True  # its processes drop out while it does not answer
    monitor.poll()
    assert not select(scrape(monitor), METRIC)


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


@pytest.mark.slow
def test_exposition_is_promtool_clean(monitor, fake_nvml, proc):
    proc.add(1001, SYSTEMD_V2)
    proc.add(1003, HOST)
    fake_nvml.gpus[0].processes = [(1001, GIB), (1003, GIB)]
    fake_nvml.gpus[1].processes = [(1001, GIB)]  # one process on two GPUs
    monitor.poll()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProcessesCollector(monitor))
    body = render_text(registry.collect())
    assert_promtool_clean(body)

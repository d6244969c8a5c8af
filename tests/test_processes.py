"""Per-process device memory through the NVML double, attributed through a fixture /proc tree."""

from __future__ import annotations

import time

import pytest
import structlog
from prometheus_client import CollectorRegistry

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import parse, select, value, wait_until
from warptd.exporter.text import render_text
from warptd.processes.collector import ProcessesCollector
from warptd.processes.nvml import ProcessMonitor, open_process_monitor

GIB = 2**30
UID = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
CID = "a" * 64
SYSTEMD_V2 = (
    "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
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

"""Per-process device memory through the NVML double, attributed through a fixture /proc tree."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import assert_promtool_clean
from warptd.exporter.text import render_text
from warptd.processes.collector import ProcessesCollector
from warptd.processes.nvml import ProcessMonitor

GIB = 2**30


UID = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"


CID = "a" * 64


SYSTEMD_V2 = (
    "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
)


HOST = "0::/user.slice/user-1000.slice/session-3.scope\n"


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

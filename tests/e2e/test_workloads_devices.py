"""Energy per workload on the accelerators whose SDK lists no processes (TPU, Tenstorrent, Gaudi, DRM
GPUs through sysfs): who holds each device from fixture /proc trees (fd links to the device's node,
DRM fdinfo) and sysfs class devices, each device's identity from the real backend over its double."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import assert_promtool_clean
from tests.doubles.pyluwen import FakeChip, FakeLuwen, blackhole_words
from tests.e2e.test_workloads import SLURM_V1, SLURM_V2, Clock, Node
from tests.helpers import parse, value
from tests.sysfs_tree import SysfsTree, drm_card
from warptd.backends.tenstorrent.backend import TenstorrentBackend
from warptd.exporter.text import render_text
from warptd.models import DeviceReading, GPUInfo
from warptd.processes import device_files
from warptd.processes.collector import DeviceFilesCollector
from warptd.processes.device_files import DeviceFiles
from warptd.processes.device_nodes import device_key
from warptd.registry import node_rules
from warptd.sampling.snapshot import DeviceSample
from warptd.workloads.energy import WorkloadEnergy

RULES = node_rules()  # each vendor package declares its backends' device nodes


JOB_A, JOB_B = ("slurm_job", "4242"), ("slurm_job", "4243")  # SLURM_V1's and SLURM_V2's jobs


N300, P150 = 0x0100014111712034, 0x0000004310234567


def class_device(sysfs: SysfsTree, kind: str, name: str, devname: str, pci: Path) -> None:
    """``class/<kind>/<name>`` as the kernel lays it out: a ``device`` link to its PCI device and a
    ``uevent`` naming its node (``DEVNAME``)."""
    entry = sysfs.root / "class" / kind / name
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "device").symlink_to(pci)
    (entry / "uevent").write_text(f"MAJOR=1\nMINOR=1\nDEVNAME={devname}\n")


def pci_device(sysfs: SysfsTree, address: str) -> Path:
    """``devices/pci0000:00/<address>`` and its ``bus/pci/devices`` link."""
    path = sysfs.root / "devices" / "pci0000:00" / address
    path.mkdir(parents=True, exist_ok=True)
    link = sysfs.root / "bus" / "pci" / "devices" / address
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(path)
    return path


class Holders:
    """The fixture /proc's open files: ``/proc/PID/fd/N`` links and ``/proc/PID/fdinfo/N``."""

    def __init__(self, node: Node) -> None:
        self.root = node.proc.root

    def open(self, pid: int, fd: int, target: str, fdinfo: str | None = None) -> None:
        (self.root / str(pid) / "fd").mkdir(parents=True, exist_ok=True)
        link = self.root / str(pid) / "fd" / str(fd)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target)
        if fdinfo is not None:
            self.fdinfo(pid, fd, fdinfo)

    def fdinfo(self, pid: int, fd: int, text: str) -> None:
        (self.root / str(pid) / "fdinfo").mkdir(parents=True, exist_ok=True)
        (self.root / str(pid) / "fdinfo" / str(fd)).write_text(f"pos:\t0\nflags:\t02100002\n{text}")

    def gone(self, pid: int) -> None:
        """The process exits: its open files go with it."""
        for kind in ("fd", "fdinfo"):
            shutil.rmtree(self.root / str(pid) / kind, ignore_errors=True)


class Rig:
    """The kernel scanner and the workload tracker, polled by hand; energy handed over as the sampler
    does, keyed as its tracks key it (the uuid the backend listed, else the index)."""

    def __init__(self, node: Node, sysfs: SysfsTree, infos: dict[str, list[GPUInfo]], **options) -> None:
        self.node, self.infos = node, infos
        rules = {backend: RULES[backend] for backend in infos}
        self.files = DeviceFiles(node.proc.root, sysfs.root, lambda b: infos.get(b, []), rules, **options)
        self.clock = Clock()
        self.tracker = WorkloadEnergy(self.files.sources(), node.proc.root, node.cgroupfs, clock=self.clock)
        self.energy: dict[tuple[str, int], float] = {}
        for backend, listed in infos.items():  # the counters' baselines
            self.joules(backend, dict.fromkeys(range(len(listed)), 0.0))

    def poll(self) -> None:
        self.clock.now += 1.0
        self.files.poll()
        self.tracker.poll()

    def joules(self, backend: str, added: dict[int, float]) -> None:
        samples = []
        for info in self.infos[backend]:
            if info.index in added:
                key = (backend, info.index)
                self.energy[key] = self.energy.get(key, 0.0) + added[info.index]
                reading = DeviceReading(index=info.index, uuid=info.uuid or "")
                samples.append(DeviceSample(reading, energy_joules=self.energy[key]))
        self.tracker.on_sample(backend, samples, None, self.clock.now)

    def joules_of(self, kind_id: tuple[str, str]) -> float:
        view = self.tracker.view(*kind_id)
        return 0.0 if view is None else view.accelerator_joules

    def holders(self, backend: str, key: str) -> set[int]:
        return set(self.files.devices(backend)[key].memory_by_pid)

    def attributed(self) -> float:
        return sum(view.accelerator_joules for view in self.tracker.views())


@pytest.fixture
def node(tmp_path):
    node = Node(tmp_path)
    node.add(1001, SLURM_V1, uid=0)
    node.add(1002, SLURM_V2, uid=1001)
    return node


@pytest.fixture
def files(node):
    return Holders(node)


@pytest.fixture
def tenstorrent(settings, sysfs):
    sysfs.write("module/tenstorrent/version", "2.4.1")
    luwen = FakeLuwen(
        [
            FakeChip(board_id=N300, pci_interface=0),
            FakeChip(board_id=N300, remote=True),
            FakeChip(arch="blackhole", board_id=P150, pci_interface=1, words=blackhole_words()),
        ]
    )
    with luwen.installed():
        backend = TenstorrentBackend(settings)
        infos = backend.list_devices()
        backend.shutdown()
    for n, address in enumerate(("0000:3b:00.0", "0000:3c:00.0")):  # tt-kmd: class tenstorrent
        class_device(sysfs, "tenstorrent", f"tenstorrent!{n}", f"tenstorrent/{n}", pci_device(sysfs, address))
    return infos


@pytest.mark.slow
@pytest.mark.parametrize("refused", ["open", "readlink"])
def test_unreadable_fd_directories_are_skipped_and_counted(node, sysfs, tenstorrent, monkeypatch, refused):
    """Without CAP_SYS_PTRACE another user's process is refused: a daemon not running as root cannot
    open its fd directory (mode 0500, the process's owner), and root can list it but each readlink
    fails the kernel's ptrace access check (EACCES)."""
    files = Holders(node)
    files.open(1001, 5, "/dev/tenstorrent/1")
    files.open(1002, 5, "/dev/tenstorrent/1")
    other = str(node.proc.root / "1002" / "fd")
    real = getattr(os, refused)

    def no_ptrace(path, *args, **kwargs):
        where = os.readlink(f"/proc/self/fd/{kwargs['dir_fd']}") if "dir_fd" in kwargs else str(path)
        if where == other:
            raise PermissionError(13, "Permission denied", where)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(device_files.os, refused, no_ptrace)
    rig = Rig(node, sysfs, {"tenstorrent": tenstorrent})
    rig.poll()
    assert rig.files.unreadable == 1
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DeviceFilesCollector(rig.files))
    body = render_text(registry.collect())
    assert_promtool_clean(body)
    assert value(parse(body.decode()), "warptd_workload_unreadable_processes") == 1
    assert rig.holders("tenstorrent", device_key(tenstorrent[2])) == {1001}
    rig.joules("tenstorrent", {2: 30.0})
    assert rig.joules_of(JOB_A) == pytest.approx(30.0, rel=0.01)
    assert rig.tracker.view(*JOB_B) is None


@pytest.mark.slow
def test_a_daemon_with_workloads_attributes_a_drm_gpu_from_the_kernel(node, files, tmp_path):
    """End to end: --workloads on a real daemon with only the sysfs GPU backend (no NVML): its scanner
    thread finds the job on the render node and the sampler's energy goes to it."""
    from tests.helpers import http, wait_until
    from warptd.config import load_settings
    from warptd.daemon import Daemon

    sysfs = SysfsTree(tmp_path / "sys")
    energy = drm_card(sysfs, 0, "i915", "0000:00:02.0", {}, {"energy1_input": 5_000_000})
    class_device(sysfs, "drm", "renderD128", "dri/renderD128", energy)
    files.open(1001, 5, "/dev/dri/renderD128", "drm-driver:\ti915\ndrm-client-id:\t3\n")
    settings = load_settings(
        listen="127.0.0.1:0", backends=["hwmon"], interval=0.1, procfs=node.proc.root,
        cgroupfs=node.cgroupfs, sysfs=sysfs.root, workloads=True,
    )  # fmt: skip
    daemon = Daemon(settings)
    daemon.start()
    try:
        assert daemon.process_sources == [] and daemon.device_files is not None
        counter = energy / "hwmon" / "hwmon3" / "energy1_input"

        def attributed() -> bool:
            counter.write_text(f"{int(counter.read_text()) + 1_000_000}\n")
            status, _, body = http(daemon.port, "GET", "/workloads/slurm_job/4242")
            return status == 200 and json.loads(body)["accelerator_joules"] > 0

        assert wait_until(attributed, timeout=10.0, interval=0.05)
        job = json.loads(http(daemon.port, "GET", "/workloads/slurm_job/4242")[2])
        assert job["devices"][0]["device"] == "hwmon:0"
        metrics = parse(http(daemon.port, "GET", "/metrics")[2].decode())
        assert value(metrics, "warptd_workload_unreadable_processes") == 0
    finally:
        daemon.stop()

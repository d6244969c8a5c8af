"""Processes holding accelerator device nodes, on a fixture /proc and sysfs: the nodes' sysfs entries, the
open files of each holder, and the kernel scanner with the workload tracker polled by hand."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.doubles.pyluwen import FakeChip, FakeLuwen, blackhole_words
from tests.e2e.test_workloads import SLURM_V1, SLURM_V2, Clock, Node
from tests.sysfs_tree import SysfsTree, drm_card
from warptd.backends.hwmon.backend import HwmonBackend
from warptd.backends.tenstorrent.backend import TenstorrentBackend
from warptd.models import DeviceReading, GPUInfo
from warptd.processes.device_files import DeviceFiles
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


@pytest.fixture
def drm(settings, sysfs):
    amd = drm_card(sysfs, 0, "amdgpu", "0000:03:00.0", {"unique_id": "a1b2c3d4e5f60718"}, {})
    intel = drm_card(sysfs, 1, "i915", "0000:00:02.0", {}, {"energy1_input": 5_000_000})
    for card, device in enumerate((amd, intel)):
        entry = sysfs.root / "class" / "drm" / f"card{card}"
        (entry / "uevent").write_text(f"MAJOR=226\nMINOR={card}\nDEVNAME=dri/card{card}\n")
        class_device(sysfs, "drm", f"renderD{128 + card}", f"dri/renderD{128 + card}", device)
    backend = HwmonBackend(settings)
    infos = backend.list_devices()
    backend.shutdown()
    return infos


def amdgpu(client: int, gfx_ns: int, compute_ns: int = 0, vram_kib: int = 0) -> str:
    return (
        f"drm-driver:\tamdgpu\ndrm-client-id:\t{client}\ndrm-pdev:\t0000:03:00.0\n"
        f"drm-engine-gfx:\t{gfx_ns} ns\ndrm-engine-compute:\t{compute_ns} ns\n"
        f"drm-total-vram:\t{2 * vram_kib} KiB\ndrm-resident-vram:\t{vram_kib} KiB\n"
        "drm-resident-gtt:\t2 MiB\n"
    )

"""Energy per workload on the accelerators whose SDK lists no processes (TPU, Tenstorrent, Gaudi, DRM
GPUs through sysfs): who holds each device from fixture /proc trees (fd links to the device's node,
DRM fdinfo) and sysfs class devices, each device's identity from the real backend over its double."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e.test_workloads import SLURM_V1, SLURM_V2, Clock, Node
from tests.sysfs_tree import SysfsTree, drm_card
from warptd.backends.hwmon.backend import HwmonBackend
from warptd.models import DeviceReading, GPUInfo
from warptd.processes.device_files import DeviceFiles
from warptd.processes.engine_time import EngineTime
from warptd.processes.fdinfo import parse_fdinfo
from warptd.registry import node_rules
from warptd.sampling.snapshot import DeviceSample
from warptd.workloads.energy import WorkloadEnergy

RULES = node_rules()  # each vendor package declares its backends' device nodes


JOB_A, JOB_B = ("slurm_job", "4242"), ("slurm_job", "4243")  # SLURM_V1's and SLURM_V2's jobs


def class_device(sysfs: SysfsTree, kind: str, name: str, devname: str, pci: Path) -> None:
    """``class/<kind>/<name>`` as the kernel lays it out: a ``device`` link to its PCI device and a
    ``uevent`` naming its node (``DEVNAME``)."""
    entry = sysfs.root / "class" / kind / name
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "device").symlink_to(pci)
    (entry / "uevent").write_text(f"MAJOR=1\nMINOR=1\nDEVNAME={devname}\n")


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


def test_fdinfo_units_aliases_and_the_spec_rules():
    client = parse_fdinfo(
        "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1121\n"
        "drm-driver:\txe\ndrm-client-id:\t41\ndrm-pdev:\t0000:04:00.0\n"
        "drm-memory-vram0:\t16 MiB\ndrm-total-vram0:\t64 MiB\ndrm-memory-system:\t512 KiB\n"
        "drm-memory-stolen:\t4096\ndrm-shared-vram0:\t1 MiB\ndrm-memory-gtt:\t7 GiB\n"
        "drm-cycles-rcs:\t1000\ndrm-total-cycles-rcs:\t50000\ndrm-engine-capacity-ccs:\t4\n"
        "drm-cycles-ccs:\t0\ndrm-total-cycles-ccs:\t50000\n"
    )
    assert (client.driver, client.pdev, client.client_id) == ("xe", "0000:04:00.0", "41")
    assert client.memory_bytes == 16 * 2**20  # resident (the alias), device-local; GiB is no unit
    assert client.capacity == {"ccs": 4} and client.cycles == {"rcs": 1000, "ccs": 0}
    assert parse_fdinfo("pos:\t0\nflags:\t0100002\n") is None  # not a DRM file
    busy: EngineTime[tuple[str, str]] = EngineTime(per_client=True)
    share = lambda read, ns: (busy.update(ns, {("p", "41"): read.count()}) or {}).get(("p", "41"))  # noqa: E731
    assert share(client, 0) is None  # the first read is the baseline
    later = parse_fdinfo(
        "drm-driver:\txe\ndrm-cycles-rcs:\t26000\ndrm-total-cycles-rcs:\t100000\n"
        "drm-engine-capacity-ccs:\t4\ndrm-cycles-ccs:\t20000\ndrm-total-cycles-ccs:\t100000\n"
    )
    assert share(later, 10**9) == pytest.approx(25_000 / 50_000 + 20_000 / 50_000 / 4)
    busy = EngineTime(per_client=True)
    read = lambda ns: parse_fdinfo(f"drm-driver:\tamdgpu\ndrm-engine-gfx:\t{ns} ns\n")  # noqa: E731
    assert share(read(10**9), 0) is None
    assert share(read(10**9 + 5 * 10**8), 10**9) == pytest.approx(0.5)
    assert share(read(10**9), 2 * 10**9) == 0.0  # lower: stay with the larger value
    assert share(read(10**9 + 7 * 10**8), 3 * 10**9) == pytest.approx(0.2)


def test_drm_memory_weighs_device_local_regions_only_where_the_file_reports_any(node, files, sysfs, drm):
    """Host memory (amdgpu GTT and CPU, i915 system) is not device memory, as amdsmi's ``vram_mem``
    is not: a job with little VRAM and much GTT weighs its VRAM; an integrated GPU (system memory
    only) weighs every region."""
    big_gtt = amdgpu(7, 0, vram_kib=1024).replace("drm-resident-gtt:\t2 MiB", "drm-resident-gtt:\t900 MiB")
    assert parse_fdinfo(big_gtt).memory_bytes == 2**20
    discrete = "drm-driver:\ti915\ndrm-resident-system0:\t64 MiB\ndrm-resident-local0:\t8 MiB\n"
    assert parse_fdinfo(discrete).memory_bytes == 8 * 2**20
    xe = "drm-driver:\txe\ndrm-resident-gtt:\t64 MiB\ndrm-resident-vram0:\t4 MiB\ndrm-memory-vram1:\t2 MiB\n"
    assert parse_fdinfo(xe).memory_bytes == 6 * 2**20
    integrated = "drm-driver:\ti915\ndrm-resident-system0:\t64 MiB\ndrm-resident-stolen-system0:\t1 MiB\n"
    assert parse_fdinfo(integrated).memory_bytes == 65 * 2**20
    files.open(1001, 5, "/dev/dri/renderD128", big_gtt)  # 1 MiB VRAM, 900 MiB GTT
    files.open(1002, 4, "/dev/dri/renderD128", amdgpu(9, 0, vram_kib=3 * 1024))  # 3 MiB VRAM, 2 MiB GTT
    rig = Rig(node, sysfs, {"hwmon": drm})
    rig.poll()
    rig.poll()
    rig.joules("hwmon", {0: 100.0})
    assert rig.joules_of(JOB_A) == pytest.approx(25.0, rel=0.01)
    assert rig.joules_of(JOB_B) == pytest.approx(75.0, rel=0.01)

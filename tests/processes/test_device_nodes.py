"""Energy per workload on the accelerators whose SDK lists no processes (TPU, Tenstorrent, Gaudi, DRM
GPUs through sysfs): who holds each device from fixture /proc trees (fd links to the device's node,
DRM fdinfo) and sysfs class devices, each device's identity from the real backend over its double."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from tests.doubles.pyluwen import FakeChip, FakeLuwen, blackhole_words
from tests.doubles.tpu_runtime import tpu_pci_device
from tests.e2e.test_workloads import SLURM_V1, SLURM_V2, Clock, Node
from tests.sysfs_tree import SysfsTree, drm_card
from warptd.backends.hwmon.backend import HwmonBackend
from warptd.backends.tenstorrent.backend import TenstorrentBackend
from warptd.backends.tpu.backend import TpuBackend
from warptd.models import DeviceReading, GPUInfo
from warptd.processes.device_files import DeviceFiles
from warptd.processes.device_nodes import device_key, device_nodes
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


def test_two_jobs_on_one_tenstorrent_board_split_both_chips_evenly(node, files, sysfs, tenstorrent):
    files.open(1001, 5, "/dev/tenstorrent/0")
    files.open(1002, 7, "/dev/tenstorrent/0")  # both on the n300: its local and its remote chip
    files.open(1001, 8, "/dev/tenstorrent/1")  # the p150: job A alone
    files.open(1002, 3, "/dev/null")
    rig = Rig(node, sysfs, {"tenstorrent": tenstorrent})
    rig.poll()
    local, remote, _ = (device_key(info) for info in tenstorrent)
    assert remote.startswith(f"{N300:016x}-") and local != remote  # the uuids the backend puts on samples
    assert rig.holders("tenstorrent", local) == rig.holders("tenstorrent", remote) == {1001, 1002}
    rig.joules("tenstorrent", {0: 60.0, 1: 40.0, 2: 30.0})
    assert rig.joules_of(JOB_A) == pytest.approx(50.0 + 30.0, rel=0.01)
    assert rig.joules_of(JOB_B) == pytest.approx(50.0, rel=0.01)
    assert rig.attributed() + rig.tracker.unattributed().get("accelerator", 0.0) == pytest.approx(130.0)


@pytest.fixture
def tpus(settings, sysfs):
    tpu_pci_device(sysfs, "0000:00:04.0", "0x0063", iommu_group=0)  # v5e, through VFIO
    v4 = tpu_pci_device(sysfs, "0000:00:05.0", "0x005e", accel=1, driver="accel")
    class_device(sysfs, "accel", "accel1", "accel1", v4)
    backend = TpuBackend(settings)
    infos = backend.list_devices()
    backend.shutdown()
    return infos


def test_tpu_holders_through_vfio_and_accel_and_a_tpu_reports_no_energy(node, files, sysfs, tpus):
    files.open(1001, 11, "/dev/vfio/0")
    files.open(1002, 12, "/dev/accel1")
    files.open(1002, 13, "/dev/vfio/vfio")  # the VFIO container, not a chip
    rig = Rig(node, sysfs, {"tpu": tpus})
    rig.poll()
    v4, v5e = (device_key(info) for info in tpus)  # the backend's order: accel nodes first
    assert v5e == "TPU-0000:00:04.0"  # the backend's identity: the chip's PCI address
    assert (rig.holders("tpu", v5e), rig.holders("tpu", v4)) == ({1001}, {1002})
    samples = [DeviceSample(DeviceReading(index=i.index, uuid=i.uuid or "")) for i in tpus]
    rig.tracker.on_sample("tpu", samples, None, rig.clock.now)  # as the sampler hands them: no energy
    running = {(v.kind, v.id): v for v in rig.tracker.views()}
    assert {JOB_A, JOB_B} <= running.keys()
    assert running[JOB_A].ended_at is None and running[JOB_A].accelerator_joules == 0.0


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


def test_a_drm_gpu_is_split_by_fdinfo_engine_time_each_client_counted_once(node, files, sysfs, drm):
    node.add(1011, SLURM_V1, uid=0)  # a second process of job A, sharing its parent's client
    files.open(1001, 5, "/dev/dri/renderD128", amdgpu(7, 1_000_000_000))
    files.open(1001, 6, "/dev/dri/renderD128", amdgpu(7, 1_000_000_000))  # dup'd: the same client
    files.open(1011, 5, "/dev/dri/renderD128", amdgpu(7, 1_000_000_000))  # inherited: the same client
    files.open(1002, 4, "/dev/dri/renderD128", amdgpu(9, 5_000_000_000))
    rig = Rig(node, sysfs, {"hwmon": drm})
    rig.poll()  # the baselines of the clients' engine time
    files.fdinfo(1001, 5, amdgpu(7, 1_600_000_000, 300_000_000))  # +0.9 s busy
    files.fdinfo(1001, 6, amdgpu(7, 1_600_000_000, 300_000_000))
    files.fdinfo(1011, 5, amdgpu(7, 1_600_000_000, 300_000_000))
    files.fdinfo(1002, 4, amdgpu(9, 5_300_000_000))  # +0.3 s busy
    rig.poll()
    amd = device_key(drm[0])
    busy = rig.files.devices("hwmon")[amd].sm_by_pid
    assert busy[1001] / busy[1002] == pytest.approx(3.0, rel=1e-6) and busy[1011] == 0.0
    rig.joules("hwmon", {0: 200.0})
    assert rig.joules_of(JOB_A) == pytest.approx(150.0, rel=0.01)  # 0.9 of 1.2 s of engine time
    assert rig.joules_of(JOB_B) == pytest.approx(50.0, rel=0.01)
    assert rig.attributed() == pytest.approx(200.0)


def test_a_pid_reused_by_a_new_process_does_not_carry_its_device_over(node, files, sysfs, tenstorrent):
    files.open(1001, 5, "/dev/tenstorrent/1")
    files.open(1002, 5, "/dev/tenstorrent/1")
    rig = Rig(node, sysfs, {"tenstorrent": tenstorrent})
    rig.poll()
    rig.joules("tenstorrent", {2: 40.0})
    files.gone(1002)  # job B ends; a new process of job 4250 gets its pid, holding no device
    node.remove(1002)
    node.add(1002, SLURM_V2.replace("job_4243", "job_4250"), uid=1001, started=99999)
    rig.poll()
    rig.joules("tenstorrent", {2: 40.0})
    assert rig.holders("tenstorrent", device_key(tenstorrent[2])) == {1001}
    assert rig.joules_of(JOB_A) == pytest.approx(20.0 + 40.0, rel=0.01)
    assert rig.joules_of(JOB_B) == pytest.approx(20.0, rel=0.01)
    assert rig.joules_of(("slurm_job", "4250")) == 0.0
    files.gone(1001)  # job A ends too; its pid goes to a process of job 4251 on the same node and fd
    node.remove(1001)
    node.add(1001, SLURM_V1.replace("job_4242", "job_4251"), uid=0, started=77777)
    files.open(1001, 5, "/dev/tenstorrent/1")
    rig.poll()
    rig.joules("tenstorrent", {2: 10.0})
    assert rig.joules_of(("slurm_job", "4251")) == pytest.approx(10.0, rel=0.01)
    assert rig.joules_of(JOB_A) == pytest.approx(60.0, rel=0.01)


def test_a_device_listed_later_is_watched_from_then_on(node, files, sysfs, tenstorrent):
    infos = {"tenstorrent": tenstorrent[:2]}  # the p150 not (yet) listed: rediscovered later
    files.open(1001, 5, "/dev/tenstorrent/1")
    rig = Rig(node, sysfs, infos)
    rig.poll()
    assert device_key(tenstorrent[2]) not in rig.files.devices("tenstorrent")
    infos["tenstorrent"] = tenstorrent
    rig.poll()
    assert rig.holders("tenstorrent", device_key(tenstorrent[2])) == {1001}


def test_the_scan_is_bounded_new_pids_first_the_others_in_turn(node, files, sysfs, tenstorrent):
    for pid in range(2001, 2009):
        node.add(pid, "0::/system.slice/other.service\n", uid=0)
        files.open(pid, 1, "/dev/null")
    rig = Rig(node, sysfs, {"tenstorrent": tenstorrent}, budget=3, young=0.0)
    polls = 0
    while len(rig.files._seen) < 10 and polls < 10:
        rig.poll()  # the first polls look at every pid once, 3 a poll
        polls += 1
    assert polls == math.ceil(10 / 3)
    files.open(2005, 7, "/dev/tenstorrent/1")  # a process seen before opens the device
    node.add(1003, "0::/system.slice/late.service\n", uid=0)
    files.open(1003, 7, "/dev/tenstorrent/1")  # a new process holding it
    rig.poll()
    key = device_key(tenstorrent[2])
    assert 1003 in rig.holders("tenstorrent", key)  # new pids are read at once
    found = 1
    while 2005 not in rig.holders("tenstorrent", key) and found < 10:
        rig.poll()
        found += 1
    assert 1 < found <= math.ceil(10 / 3)  # the others in turn, within ceil(processes / budget) polls


def test_a_young_process_that_opens_its_device_after_its_first_look_is_found_at_the_next_poll(
    node, files, sysfs, tenstorrent
):
    for pid in range(2001, 2009):
        node.add(pid, "0::/system.slice/other.service\n", uid=0)
    rig = Rig(node, sysfs, {"tenstorrent": tenstorrent}, budget=3)
    for _ in range(4):
        rig.poll()  # every pid looked at once
    node.add(1003, "0::/system.slice/late.service\n", uid=0)
    rig.poll()  # looked at: it holds nothing yet
    files.open(1003, 7, "/dev/tenstorrent/1")  # the job opens its device once it has started
    rig.poll()
    assert rig.holders("tenstorrent", device_key(tenstorrent[2])) == {1003}


def test_every_kernel_rule_is_data_and_a_device_without_nodes_is_unattributed(node, sysfs, tenstorrent):
    assert set(RULES) == {"tpu", "tenstorrent", "gaudi", "hwmon"}
    assert device_nodes(sysfs.root, RULES["tenstorrent"], tenstorrent) == {
        device_key(tenstorrent[0]): {"/dev/tenstorrent/0"},
        device_key(tenstorrent[1]): {"/dev/tenstorrent/0"},  # the remote chip: its board's node
        device_key(tenstorrent[2]): {"/dev/tenstorrent/1"},
    }
    rig = Rig(node, sysfs, {"tenstorrent": tenstorrent})
    rig.poll()
    rig.joules("tenstorrent", {0: 10.0})
    assert rig.tracker.unattributed()["accelerator"] == pytest.approx(10.0)


def test_a_holder_that_opens_another_device_later_is_found_in_turn(node, files, sysfs, tenstorrent):
    """A process already holding a device is read afresh in turn like any other: a job on the n300
    that later opens the p150 too holds it within ``ceil(processes / budget)`` polls."""
    for pid in range(2001, 2009):
        node.add(pid, "0::/system.slice/other.service\n", uid=0)
    files.open(1001, 5, "/dev/tenstorrent/0")
    rig = Rig(node, sysfs, {"tenstorrent": tenstorrent}, budget=3, young=0.0)
    for _ in range(math.ceil(10 / 3)):
        rig.poll()  # every pid looked at once
    files.open(1001, 8, "/dev/tenstorrent/1")  # the same job later opens the p150 too
    polls = 0
    while 1001 not in rig.holders("tenstorrent", device_key(tenstorrent[2])) and polls < 10:
        rig.poll()
        polls += 1
    assert 1 <= polls <= math.ceil(10 / 3)
    assert 1001 in rig.holders("tenstorrent", device_key(tenstorrent[0]))  # still on the n300


def test_a_holder_s_new_drm_client_is_read_in_turn(node, files, sysfs, drm):
    """A holder that opens a second DRM client (a new fd) has its memory counted within the bound."""
    files.open(1001, 5, "/dev/dri/renderD128", amdgpu(7, 0, vram_kib=1024))
    files.open(1002, 4, "/dev/dri/renderD128", amdgpu(9, 0, vram_kib=1024))
    rig = Rig(node, sysfs, {"hwmon": drm}, budget=1, young=0.0)
    for _ in range(3):
        rig.poll()
    files.open(1001, 6, "/dev/dri/renderD128", amdgpu(8, 0, vram_kib=3 * 1024))  # its second client
    amd = device_key(drm[0])
    polls = 0
    while rig.files.devices("hwmon")[amd].memory_by_pid[1001] < 4 * 2**20 and polls < 10:
        rig.poll()
        polls += 1
    assert 1 <= polls <= 2  # two processes, one a poll


def test_a_drm_newcomer_already_busy_does_not_hand_its_first_interval_to_the_others(node, files, sysfs, drm):
    """A client first read at this poll has no baseline: the device gets no busy shares that poll
    (split by memory, the next weight), as an AMD GPU does through amdsmi, rather than giving the
    newcomer none and its busy interval to the clients already there."""
    files.open(1001, 5, "/dev/dri/renderD128", amdgpu(7, 1_000_000_000, vram_kib=1024))
    rig = Rig(node, sysfs, {"hwmon": drm})
    rig.poll()
    files.fdinfo(1001, 5, amdgpu(7, 1_500_000_000, vram_kib=1024))
    files.open(1002, 4, "/dev/dri/renderD128", amdgpu(9, 5_000_000_000, vram_kib=3 * 1024))  # busy already
    rig.poll()
    amd = device_key(drm[0])
    assert rig.files.devices("hwmon")[amd].sm_by_pid is None
    rig.joules("hwmon", {0: 100.0})
    assert rig.joules_of(JOB_A) == pytest.approx(25.0, rel=0.01)  # by memory: 1 of 4 MiB
    files.fdinfo(1001, 5, amdgpu(7, 1_900_000_000, vram_kib=1024))  # +0.4 s each: both have baselines
    files.fdinfo(1002, 4, amdgpu(9, 5_400_000_000, vram_kib=3 * 1024))
    rig.poll()
    busy = rig.files.devices("hwmon")[amd].sm_by_pid
    assert busy[1001] > 0 and busy[1001] == pytest.approx(busy[1002], rel=1e-6)
    rig.joules("hwmon", {0: 100.0})
    assert rig.joules_of(JOB_A) == pytest.approx(25.0 + 50.0, rel=0.01)
    assert rig.joules_of(JOB_B) == pytest.approx(75.0 + 50.0, rel=0.01)


def test_a_drm_device_keeps_its_clients_baselines_when_its_nodes_are_read_again(node, files, sysfs, drm):
    """The nodes are read again from sysfs every minute; the device's engine counters stay with it."""
    seconds = iter(range(0, 10_000, 61))  # each poll more than a minute after the last: nodes read again
    files.open(1001, 5, "/dev/dri/renderD128", amdgpu(7, 1_000_000_000))
    files.open(1002, 4, "/dev/dri/renderD128", amdgpu(9, 1_000_000_000))
    rig = Rig(node, sysfs, {"hwmon": drm}, clock=lambda: float(next(seconds)))
    rig.poll()
    files.fdinfo(1001, 5, amdgpu(7, 31_500_000_000))  # 30.5 s of 61
    files.fdinfo(1002, 4, amdgpu(9, 7_100_000_000))  # 6.1 s of 61
    rig.poll()
    busy = rig.files.devices("hwmon")[device_key(drm[0])].sm_by_pid
    assert busy == pytest.approx({1001: 0.5, 1002: 0.1})

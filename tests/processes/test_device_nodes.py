"""Energy per workload on the accelerators whose SDK lists no processes (TPU, Tenstorrent, Gaudi, DRM
GPUs through sysfs): who holds each device from fixture /proc trees (fd links to the device's node,
DRM fdinfo) and sysfs class devices, each device's identity from the real backend over its double."""

from __future__ import annotations

import math

import pytest

from tests.doubles.tpu_runtime import tpu_pci_device
from tests.e2e.test_workloads import SLURM_V1, SLURM_V2
from tests.processes import holders
from tests.processes.holders import JOB_A, JOB_B, N300, RULES, Rig, amdgpu, class_device
from warptd.backends.tpu.backend import TpuBackend
from warptd.models import DeviceReading
from warptd.processes.device_nodes import device_key, device_nodes
from warptd.sampling.snapshot import DeviceSample

drm = holders.drm  # an amdgpu and an i915 card listed by hwmon, a fixture
files = holders.files  # the processes' open files, a fixture
node = holders.node  # a node running jobs A and B (processes 1001, 1002), a fixture
tenstorrent = holders.tenstorrent  # an n300 and a p150 listed by their backend, a fixture


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

"""Energy per workload on the accelerators whose SDK lists no processes (TPU, Tenstorrent, Gaudi, DRM
GPUs through sysfs): who holds each device from fixture /proc trees (fd links to the device's node,
DRM fdinfo) and sysfs class devices, each device's identity from the real backend over its double."""

from __future__ import annotations

import pytest

from tests.doubles.hlml import FakeHlml
from tests.processes import holders
from tests.processes.holders import JOB_A, JOB_B, Rig, amdgpu, class_device, pci_device
from warptd.backends.gaudi.backend import GaudiBackend

drm = holders.drm  # an amdgpu and an i915 card listed by hwmon, a fixture
files = holders.files  # the processes' open files, a fixture
node = holders.node  # a node running jobs A and B (processes 1001, 1002), a fixture


@pytest.fixture
def gaudi(settings, sysfs):
    fake = FakeHlml(aips=2)
    with fake.installed():
        backend = GaudiBackend(settings)
        infos = backend.list_devices()
        backend.shutdown()
    card0, card1 = (pci_device(sysfs, aip.bus_id) for aip in fake.aips)
    class_device(sysfs, "accel", "accel0", "accel/accel0", card0)  # the accel subsystem
    class_device(sysfs, "accel", "accel_controlD0", "accel/accel_controlD0", card0)
    class_device(sysfs, "habanalabs", "hl1", "hl1", card1)  # a driver from before it
    class_device(sysfs, "habanalabs", "hl_controlD1", "hl_controlD1", card1)
    return infos


def test_each_job_takes_its_gaudi_card_and_monitors_on_control_nodes_take_none(node, files, sysfs, gaudi):
    node.add(1003, "0::/system.slice/hl-exporter.service\n", uid=0)
    files.open(1001, 9, "/dev/accel/accel0")
    files.open(1002, 9, "/dev/hl1")
    files.open(1003, 4, "/dev/accel/accel_controlD0")  # hl-smi / HLML: the control nodes
    files.open(1003, 5, "/dev/hl_controlD1")
    rig = Rig(node, sysfs, {"gaudi": gaudi})
    rig.poll()
    assert [info.uuid for info in gaudi] == [key for key in rig.files.devices("gaudi")]
    rig.joules("gaudi", {0: 100.0, 1: 70.0})
    assert rig.joules_of(JOB_A) == pytest.approx(100.0, rel=0.01)
    assert rig.joules_of(JOB_B) == pytest.approx(70.0, rel=0.01)
    assert rig.tracker.view("systemd_unit", "hl-exporter.service") is None


def test_a_drm_gpu_without_engine_time_is_split_by_memory_and_one_without_uuid_by_index(
    node, files, sysfs, drm
):
    files.open(1001, 5, "/dev/dri/renderD128", amdgpu(7, 0, vram_kib=3 * 1024))  # 3 MiB (+ GTT: host)
    files.open(1002, 4, "/dev/dri/card0", amdgpu(9, 0, vram_kib=13 * 1024))  # 13 MiB (+ GTT: host)
    files.open(1001, 9, "/dev/dri/renderD129", "drm-driver:\ti915\ndrm-client-id:\t3\n")
    files.open(1002, 9, "/dev/dri/renderD129", "drm-driver:\ti915\ndrm-client-id:\t4\n")
    rig = Rig(node, sysfs, {"hwmon": drm})
    rig.poll()
    rig.poll()
    assert drm[1].uuid is None and "1" in rig.files.devices("hwmon")  # i915 has no unique_id
    rig.joules("hwmon", {0: 100.0, 1: 40.0})
    assert rig.joules_of(JOB_A) == pytest.approx(18.75 + 20.0, rel=0.01)  # 3 of 16 MiB; i915 evenly
    assert rig.joules_of(JOB_B) == pytest.approx(81.25 + 20.0, rel=0.01)

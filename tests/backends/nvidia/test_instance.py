"""Which initialisation of a GPU by its driver this is (issue 38, finding 6): the GPU's uptime where
NVML has it (nvml.h of CUDA 13.5; not the R610 drivers, issue 40), the sysfs nodes a module reload or
a rebind makes anew."""

from __future__ import annotations

import os
import time

from tests.doubles.nvml import FakeNvml
from tests.helpers import Rig


def _instance(settings, fake: FakeNvml):
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        try:
            return rig.loaded.accelerators[0].list_devices()[0].driver_instance
        finally:
            rig.close()


def _sysfs_gpu(sysfs, bus: str = "0000:18:00.0") -> None:
    (sysfs / "module" / "nvidia").mkdir(parents=True, exist_ok=True)
    devices = sysfs / "bus" / "pci" / "devices" / bus
    devices.mkdir(parents=True, exist_ok=True)
    (sysfs / "bus" / "pci" / "drivers" / "nvidia").mkdir(parents=True, exist_ok=True)
    link = devices / "driver"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(sysfs / "bus" / "pci" / "drivers" / "nvidia")


def test_the_gpus_uptime_gives_when_the_driver_initialised_it_and_a_reload_moves_it(settings):
    fake = FakeNvml(gpus=1)
    fake.gpus[0].state.driver_loaded_ns -= 30 * 10**9  # initialised 30 s ago
    first = _instance(settings, fake)
    booted = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert first is not None and first.up_since is not None
    assert booted - 33 <= first.up_since <= booted - 28
    assert _instance(settings, fake).same_as(first)  # the same initialisation, read again
    fake.gpus[0].reload_driver()
    assert _instance(settings, fake).same_as(first) is False


def test_an_old_driver_without_the_uptime_tells_a_module_reload_by_its_sysfs_nodes(settings, sysfs):
    fake = FakeNvml(gpus=1, driver="r470")  # no nvmlDeviceGetGpuUptime_v1: FUNCTION_NOT_FOUND
    _sysfs_gpu(sysfs.root)
    first = _instance(settings, fake)
    assert first is not None and first.up_since is None and first.sysfs is not None
    again = _instance(settings, fake)
    assert again.sysfs == first.sysfs and again.same_as(first) is None  # nothing tells a GPU reset
    module = sysfs.root / "module"
    (module / "nvidia-loaded-again").mkdir()  # the module loaded again: a node of its own, as kernfs
    os.rmdir(module / "nvidia")  # gives every node it makes (ext4 here would reuse the freed number)
    os.rename(module / "nvidia-loaded-again", module / "nvidia")
    assert _instance(settings, fake).same_as(first) is False


def test_the_r610_driver_exports_no_gpu_uptime_and_the_sysfs_nodes_tell_a_reload(settings, sysfs):
    """Over a real R610's answers and exports (RTX 2080 Super on 610.57.04, tests/captures/): no
    nvmlDeviceGetGpuUptime_v1, so no uptime, and no error counted for it; the sysfs nodes stand in."""
    from pathlib import Path

    from tests.doubles.capture_double import fake_nvml
    from warptd.capture import schema

    capture = schema.Capture.read(Path(__file__).parents[2] / "captures" / "rtx-2080-super-610.57.04.json")
    assert "nvmlDeviceGetGpuUptime_v1" in capture.node.absent
    fake, _ = fake_nvml(capture)
    _sysfs_gpu(sysfs.root, "0000:0c:00.0")
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        try:
            found = rig.loaded.accelerators[0].list_devices()[0].driver_instance
            errors = rig.loaded.accelerators[0].take_errors()
        finally:
            rig.close()
    fake.close()
    assert found is not None and found.up_since is None and found.sysfs is not None
    assert not errors

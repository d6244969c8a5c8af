"""GPUs without an SDK (amdgpu, i915, xe) through fixture DRM/hwmon sysfs trees."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.sysfs_tree import drm_card
from warptd.backends import cadence
from warptd.backends.hwmon.backend import HwmonBackend
from warptd.config import load_settings

GIB = 2**30


@pytest.fixture
def three_gpus(sysfs):
    amd = drm_card(
        sysfs,
        0,
        "amdgpu",
        "0000:03:00.0",
        {
            "device": "0x744c",
            "unique_id": "a1b2c3d4e5f60718",
            "mem_info_vram_total": 24 * GIB,
            "mem_info_vram_used": 3 * GIB,
            "gpu_busy_percent": 87,
            "mem_busy_percent": 40,
        },
        {
            "power1_average": 212_000_000,
            "power1_cap": 300_000_000,
            "temp1_input": 61000,
            "temp1_label": "edge",
            "temp2_input": 78000,
            "temp2_label": "junction",
            "temp3_input": 70000,
            "temp3_label": "mem",
            "freq1_input": 2_482_000_000,
            "freq2_input": 1_249_000_000,
        },
    )
    i915 = drm_card(sysfs, 1, "i915", "0000:00:02.0", {"device": "0xa780"}, {"energy1_input": 5_000_000})
    xe = drm_card(
        sysfs,
        2,
        "xe",
        "0000:04:00.0",
        {"device": "0xe20b"},
        {"energy1_input": 1_000_000, "temp1_input": 52000},
    )
    drm_card(sysfs, 3, "nouveau", "0000:05:00.0", {}, {})  # not ours: skipped
    return sysfs, amd, i915, xe


pytestmark = pytest.mark.rig("hwmon", doubles=["three_gpus"])


def test_vram_total_and_power_cap_are_read_at_the_health_cadence(sysfs, procfs, three_gpus, monkeypatch):
    _, amd, _, _ = three_gpus
    settings = load_settings(sysfs=sysfs.root, procfs=procfs, interval=1.0, health_interval=10.0)
    now = [100.0]
    monkeypatch.setattr(cadence, "time", SimpleNamespace(monotonic=lambda: now[0]))
    backend = HwmonBackend(settings)
    first = backend.read_device(0)
    assert first.power_limit_watts == pytest.approx(300.0) and first.memory.total == 24 * GIB
    for name in ("hwmon/hwmon3/power1_cap", "mem_info_vram_total"):  # a read now would fail, counted
        (amd / name).unlink()
        (amd / name).mkdir()
    (amd / "mem_info_vram_used").write_text(f"{5 * GIB}\n")
    for _ in range(9):
        now[0] += 1.0
        reading = backend.read_device(0)
        assert reading.power_limit_watts == pytest.approx(300.0) and reading.memory.total == 24 * GIB
        assert reading.memory.used == 5 * GIB  # what changes is read every sample
    assert not backend.take_errors()
    now[0] += 1.0
    reading = backend.read_device(0)  # 10 s on: read again, and now they fail
    assert reading.power_limit_watts is None and reading.memory is None
    assert backend.take_errors()["unexpected"] == 2

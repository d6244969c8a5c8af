"""GPUs without an SDK (amdgpu, i915, xe) through fixture DRM/hwmon sysfs trees."""

from __future__ import annotations

import shutil
import time
from types import SimpleNamespace

import pytest

from tests.helpers import select, value
from tests.sysfs_tree import drm_card
from warptd.backends import cadence
from warptd.backends.hwmon.backend import HwmonBackend
from warptd.config import load_settings
from warptd.errors import BackendUnavailableError

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


AMD = {"backend": "hwmon", "device": "0"}


I915 = {"backend": "hwmon", "device": "1"}


XE = {"backend": "hwmon", "device": "2"}


def test_amdgpu_values_in_base_units(rig):
    samples = rig.tick()
    assert value(samples, "warptd_device_power_watts", **AMD) == pytest.approx(212.0)  # µW
    assert value(samples, "warptd_device_power_limit_watts", **AMD) == pytest.approx(300.0)
    assert value(samples, "warptd_device_memory_total_bytes", **AMD) == 24 * GIB
    assert value(samples, "warptd_device_memory_free_bytes", **AMD) == 21 * GIB
    assert value(samples, "warptd_device_utilization_ratio", **AMD) == pytest.approx(0.87)
    assert value(samples, "warptd_device_memory_utilization_ratio", **AMD) == pytest.approx(0.40)
    assert value(samples, "warptd_device_temperature_celsius", sensor="junction", **AMD) == 78.0
    assert value(samples, "warptd_device_clock_hertz", clock="graphics", **AMD) == 2.482e9
    info = select(samples, "warptd_device_info", **AMD)[0].labels
    assert info["uuid"] == "a1b2c3d4e5f60718" and info["pci_bus_id"] == "0000:03:00.0"
    assert info["model"] == "AMD GPU 0x744c"
    assert not select(samples, "warptd_device_up", device="3")  # nouveau and connectors skipped


def test_intel_energy_only_gives_derived_power_and_absent_rest(rig, three_gpus):
    _, _, i915, _ = three_gpus
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **I915) == pytest.approx(5.0)  # µJ
    assert not select(samples, "warptd_device_power_watts", **I915)  # one reading: no rate yet
    for metric in (
        "warptd_device_memory_total_bytes",
        "warptd_device_utilization_ratio",
        "warptd_device_temperature_celsius",
        "warptd_device_clock_hertz",
    ):
        assert not select(samples, metric, **I915), metric  # unsupported: absent, never 0
    assert value(samples, "warptd_device_temperature_celsius", sensor="gpu", **XE) == 52.0
    (i915 / "hwmon" / "hwmon4" / "energy1_input").write_text("15000000\n")  # +10 J
    time.sleep(0.5)
    samples = rig.tick()
    watts = value(samples, "warptd_device_energy_joules_total", **I915)
    assert watts == pytest.approx(15.0)
    assert 10 / 1.0 < value(samples, "warptd_device_power_watts", **I915) < 10 / 0.5 + 1


def test_energy_counter_reset_stays_monotonic(rig, three_gpus):
    _, _, _, xe = three_gpus
    rig.tick()
    (xe / "hwmon" / "hwmon5" / "energy1_input").write_text("4000000\n")
    assert value(rig.tick(), "warptd_device_energy_joules_total", **XE) == pytest.approx(4.0)
    (xe / "hwmon" / "hwmon5" / "energy1_input").write_text("500000\n")  # driver reload
    assert value(rig.tick(), "warptd_device_energy_joules_total", **XE) == pytest.approx(4.5)


def test_a_removed_card_goes_down_the_others_stay_up(rig, three_gpus):
    _, amd, _, _ = three_gpus
    rig.tick()
    shutil.rmtree(amd)  # driver unbound: the device directory is gone
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **AMD) == 0
    assert not select(samples, "warptd_device_power_watts", **AMD)
    assert value(samples, "warptd_device_up", **XE) == 1
    assert value(samples, "warptd_sample_errors_total", backend="hwmon", kind="device_lost") >= 1


def test_torch_devices_per_runtime(settings, three_gpus):
    backend = HwmonBackend(settings)
    assert [backend.worker_device(info)[0] for info in backend.list_devices()] == ["cuda:0", "xpu:0", "xpu:1"]


def test_no_cards_means_unavailable(settings):
    with pytest.raises(BackendUnavailableError, match="no amdgpu"):
        HwmonBackend(settings)


def test_each_kind_of_read_is_charged(settings, three_gpus):
    backend = HwmonBackend(settings)
    for index in range(3):
        backend.read_device(index)
    reads = {kind: cost.reads for kind, cost in backend.read_costs.totals().items()}
    # amdgpu: VRAM used, busy %, temperatures, clocks, power; i915: energy; xe: energy, temperature
    assert reads == {"slow": 1, "memory": 1, "sensors": 4, "power": 3}


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

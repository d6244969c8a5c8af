"""The CPU backend: psutil plus hwmon temperatures from a fixture sysfs tree."""

from __future__ import annotations

import psutil

from tests.helpers import Rig, select, value

CPU = {"backend": "cpu", "device": "0", "uuid": ""}


def test_cpu_series(settings, sysfs):
    sysfs.hwmon(0, "acpitz", {"temp1": 27800})  # not a CPU sensor
    sysfs.hwmon(1, "coretemp", {"Package id 0": 52000, "Core 0": 50000, "Core 1": 49000})
    sysfs.hwmon(2, "coretemp", {"Package id 1": 55500})
    settings.backends = ["cpu"]
    rig = Rig(settings)
    assert not select(rig.tick(), "warptd_device_utilization_ratio")  # no baseline yet: absent
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **CPU) == 1
    assert value(samples, "warptd_device_temperature_celsius", sensor="package_id_0", **CPU) == 52.0
    assert value(samples, "warptd_device_temperature_celsius", sensor="package_id_1", **CPU) == 55.5
    assert len(select(samples, "warptd_device_temperature_celsius")) == 2  # per-core sensors skipped
    total = value(samples, "warptd_device_memory_total_bytes", **CPU)
    assert total == psutil.virtual_memory().total
    assert 0 <= value(samples, "warptd_device_utilization_ratio", **CPU) <= 1
    assert not select(samples, "warptd_device_memory_utilization_ratio")  # a CPU has no such counter
    assert not select(samples, "warptd_device_power_watts")  # comes from rapl, not invented
    info = select(samples, "warptd_device_info", **CPU)[0].labels
    assert info["model"]
    rig.close()

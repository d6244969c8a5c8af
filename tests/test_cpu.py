"""The CPU backend: psutil plus hwmon temperatures from a fixture sysfs tree."""

from __future__ import annotations

import psutil
import pytest

from tests.helpers import Rig, select, value
from warptd.backends.cpu import CpuBackend

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


def test_first_utilization_is_absent_not_zero(settings):
    backend = CpuBackend(settings)
    assert backend.get_utilization(0) is None
    assert 0 <= backend.get_utilization(0).compute <= 1


def test_two_socket_k10temp_keeps_both(settings, sysfs):
    sysfs.hwmon(0, "k10temp", {"Tctl": 50000})
    sysfs.hwmon(1, "k10temp", {"Tctl": 60000})
    assert CpuBackend(settings).get_temperatures(0) == {"tctl": 50.0, "tctl_1": 60.0}


def test_k10temp_labels_and_unlabeled_sensor(settings, sysfs):
    sysfs.hwmon(0, "k10temp", {"Tctl": 61250, "Tccd1": 58000})
    sysfs.hwmon(1, "cpu_thermal", {"temp1": 45000})
    backend = CpuBackend(settings)
    assert backend.get_temperatures(0) == {"tctl": 61.25, "tccd1": 58.0, "cpu": 45.0}
    assert backend.get_temperature(0) == 61.25


def test_cpu_without_sensors_has_no_temperature(settings):
    backend = CpuBackend(settings)
    assert backend.get_temperatures(0) == {}
    assert backend.get_pytorch_device_string(0) == "cpu"


def test_psutil_failure_is_counted(settings, monkeypatch):
    backend = CpuBackend(settings)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: (_ for _ in ()).throw(psutil.AccessDenied()))
    assert backend.get_memory_usage(0) is None
    assert backend.take_errors()["permission"] == 1


@pytest.mark.parametrize("freq", [None])
def test_no_cpufreq_no_clock(settings, monkeypatch, freq):
    monkeypatch.setattr(psutil, "cpu_freq", lambda: freq)
    assert CpuBackend(settings).get_clocks(0) == {}

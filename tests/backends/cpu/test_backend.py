"""The CPU backend: psutil plus hwmon temperatures from a fixture sysfs tree."""

from __future__ import annotations

from pathlib import Path

import psutil

from tests.helpers import Rig
from warptd.backends.cpu.backend import CpuBackend


def test_first_utilization_is_absent_not_zero(settings):
    backend = CpuBackend(settings)
    assert backend.devices[0].utilization() is None
    assert 0 <= backend.devices[0].utilization().compute <= 1


def test_two_socket_k10temp_keeps_both(settings, sysfs):
    sysfs.hwmon(0, "k10temp", {"Tctl": 50000})
    sysfs.hwmon(1, "k10temp", {"Tctl": 60000})
    assert CpuBackend(settings).devices[0].temperatures() == {"tctl": 50.0, "tctl_1": 60.0}


def test_k10temp_labels_and_unlabeled_sensor(settings, sysfs):
    sysfs.hwmon(0, "k10temp", {"Tctl": 61250, "Tccd1": 58000})
    sysfs.hwmon(1, "cpu_thermal", {"temp1": 45000})
    backend = CpuBackend(settings)
    assert backend.devices[0].temperatures() == {"tctl": 61.25, "tccd1": 58.0, "cpu": 45.0}
    assert backend.read_device(0).primary_temperature == ("tctl", 61.25)


def test_cpu_without_sensors_has_no_temperature(settings):
    backend = CpuBackend(settings)
    assert backend.devices[0].temperatures() == {}
    assert backend.worker_device(backend.list_devices()[0]) == ("cpu", {})


def test_psutil_failure_is_counted(settings, monkeypatch):
    backend = CpuBackend(settings)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: (_ for _ in ()).throw(psutil.AccessDenied()))
    assert backend.devices[0].memory() is None
    assert backend.take_errors()["permission"] == 1


def test_no_cpufreq_and_no_cpuinfo_no_clock(settings):
    backend = CpuBackend(settings)
    assert backend.devices[0].clocks() == {} and backend.devices[0].clocks() == {}
    assert not backend.take_errors()  # no such file: not supported, asked once


def unreadable_cpuinfo(procfs: Path) -> None:
    """A ``cpuinfo`` any read of which fails (a directory: even root cannot read it as a file)."""
    (procfs / "cpuinfo").unlink(missing_ok=True)
    (procfs / "cpuinfo").mkdir()


def test_the_clock_comes_from_cpufreq_every_sample_never_from_cpuinfo(settings, sysfs, procfs):
    """Two policies (one of 3 CPUs, one of 1): the mean over CPUs, each sample, in Hz."""
    first = sysfs.cpufreq_policy(0, 2_000_000, [0, 1, 2])
    sysfs.cpufreq_policy(3, 3_000_000, [3])
    unreadable_cpuinfo(procfs)
    backend = CpuBackend(settings)
    assert backend.devices[0].clocks() == {"cpu": 2.25e9}
    first.write_text("1000000\n")
    assert backend.devices[0].clocks() == {"cpu": 1.5e9}  # read again: it changes as often as it is read
    assert not backend.take_errors()
    assert backend.read_costs.totals()["clock"].reads == 2


def test_each_kind_of_read_is_charged(settings, sysfs):
    sysfs.hwmon(0, "k10temp", {"Tctl": 50000})
    sysfs.cpufreq_policy(0, 2_000_000, [0])
    backend = CpuBackend(settings)
    backend.read_device(0)
    backend.read_device(0)
    totals = backend.read_costs.totals()
    assert {kind: cost.reads for kind, cost in totals.items()} == {
        "memory": 2,
        "times": 2,
        "temperatures": 2,
        "clock": 2,
    }
    assert all(cost.cpu_seconds > 0 for cost in totals.values())


def test_a_read_serving_only_excluded_families_is_not_made(settings, monkeypatch):
    """The CPU backend's clock (cpufreq, else /proc/cpuinfo) and temperatures are not read once their
    families are left out; the rest of its reading is."""
    from warptd.backends.cpu.clock import CpuClock

    calls = []
    monkeypatch.setattr(CpuClock, "read", lambda self: calls.append(1) or 2.4e9)
    settings.metrics_exclude = ["warptd_device_clock_hertz", "warptd_device_temperature_celsius"]
    rig = Rig(settings.model_copy(update={"backends": ["cpu"]}))
    try:
        rig.tick("cpu")
        reading = rig.snapshot.get("cpu").devices[0].reading
    finally:
        rig.close()
    assert calls == [] and reading.clocks_hertz == {} and reading.memory is not None
    settings.metrics_exclude = []
    rig = Rig(settings.model_copy(update={"backends": ["cpu"]}))
    try:
        rig.tick("cpu")
    finally:
        rig.close()
    assert calls  # read where exported

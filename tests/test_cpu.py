"""The CPU backend: psutil plus hwmon temperatures from a fixture sysfs tree."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from tests.helpers import Rig, select, value
from tests.sysfs_tree import cpuinfo
from warptd.backends import cadence
from warptd.backends.cpu.backend import CpuBackend
from warptd.backends.cpu.clock import CpuClock
from warptd.config import load_settings

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


def _unreadable_cpuinfo(procfs: Path) -> None:
    """A ``cpuinfo`` any read of which fails (a directory: even root cannot read it as a file)."""
    (procfs / "cpuinfo").unlink(missing_ok=True)
    (procfs / "cpuinfo").mkdir()


def test_the_clock_comes_from_cpufreq_every_sample_never_from_cpuinfo(settings, sysfs, procfs):
    """Two policies (one of 3 CPUs, one of 1): the mean over CPUs, each sample, in Hz."""
    first = sysfs.cpufreq_policy(0, 2_000_000, [0, 1, 2])
    sysfs.cpufreq_policy(3, 3_000_000, [3])
    _unreadable_cpuinfo(procfs)
    backend = CpuBackend(settings)
    assert backend.devices[0].clocks() == {"cpu": 2.25e9}
    first.write_text("1000000\n")
    assert backend.devices[0].clocks() == {"cpu": 1.5e9}  # read again: it changes as often as it is read
    assert not backend.take_errors()
    assert backend.read_costs.totals()["clock"].reads == 2


def test_without_cpufreq_cpuinfo_is_read_at_the_health_cadence_only(sysfs, procfs, monkeypatch):
    settings = load_settings(sysfs=sysfs.root, procfs=procfs, interval=1.0, health_interval=10.0)
    cpuinfo(procfs, "AuthenticAMD", megahertz=[2596.136, 1500.0])
    now = [100.0]
    monkeypatch.setattr(cadence, "time", SimpleNamespace(monotonic=lambda: now[0]))
    backend = CpuBackend(settings)
    assert backend.devices[0].clocks() == {"cpu": pytest.approx(2048.068e6)}
    _unreadable_cpuinfo(procfs)  # a read between two health reads would fail, and be counted
    for _ in range(9):
        now[0] += 1.0
        assert backend.devices[0].clocks() == {"cpu": pytest.approx(2048.068e6)}
    assert not backend.take_errors()
    now[0] += 1.0  # 10 s after the first read: read again, and now it fails
    assert backend.devices[0].clocks() == {}
    assert backend.take_errors() == {"unexpected": 1}
    assert backend.read_costs.totals()["clock"].reads == 2


def test_a_cpufreq_read_waiting_for_the_cpus_moves_the_clock_to_the_health_cadence(settings, sysfs, procfs):
    """Kernels 4.14-5.17 sleep 10 ms per CPU whose APERF/MPERF snapshot is over a second old: two such
    reads in a row and the clock comes from cpuinfo at the health cadence."""
    sysfs.cpufreq_policy(0, 2_000_000, [0])
    sysfs.cpufreq_policy(1, 2_200_000, [1])
    cpuinfo(procfs, "GenuineIntel", megahertz=[3000.0, 3000.0])
    ticks = iter(range(1000))
    clock = CpuClock(sysfs.root, procfs, lambda: settings, timer=lambda: next(ticks) * 0.025)  # 25 ms a read
    assert clock.read() == 2.1e9 and clock.per_sample  # one slow read may be a preempted thread
    assert clock.read() == 2.1e9 and not clock.per_sample
    assert clock.due() and clock.read() == 3e9


def test_a_cpufreq_read_at_its_usual_price_stays_every_sample(settings, sysfs, procfs):
    sysfs.cpufreq_policy(0, 2_000_000, [0, 1])
    ticks = iter(range(1000))
    clock = CpuClock(sysfs.root, procfs, lambda: settings, timer=lambda: next(ticks) * 0.000_05)
    assert all(clock.read() == 2e9 for _ in range(5)) and clock.per_sample


def test_the_measured_average_is_preferred_where_the_kernel_has_it(settings, sysfs, procfs):
    """Kernels from 2025 may make scaling_cur_freq the requested clock and measure it in cpuinfo_avg_freq."""
    sysfs.cpufreq_policy(0, 2_000_000, [0])
    average = sysfs.write("devices/system/cpu/cpufreq/policy0/cpuinfo_avg_freq", 2_750_000)
    clock = CpuClock(sysfs.root, procfs, lambda: settings)
    assert clock.read() == 2.75e9
    average.unlink()
    average.mkdir()  # unreadable (the kernel cannot tell): that policy's scaling_cur_freq
    assert clock.read() == 2e9


def test_an_offline_policy_is_left_out(settings, sysfs, procfs):
    sysfs.cpufreq_policy(0, 2_000_000, [0])
    offline = sysfs.cpufreq_policy(1, 1_000_000, [1])
    clock = CpuClock(sysfs.root, procfs, lambda: settings)
    offline.unlink()
    offline.mkdir()  # reading it fails, as EBUSY does for a policy without online CPUs
    assert clock.read() == 2e9


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

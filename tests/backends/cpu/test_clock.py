"""The CPU backend: psutil plus hwmon temperatures from a fixture sysfs tree."""

from __future__ import annotations

from tests.sysfs_tree import cpuinfo
from warptd.backends.cpu.clock import CpuClock


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

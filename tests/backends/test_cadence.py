"""One device's health cadence (:class:`~warptd.backends.cadence.DeviceCadence`), held by its device."""

from __future__ import annotations

from warptd.backends.cadence import DeviceCadence
from warptd.config import Settings
from warptd.metrics.spec import Cadence


def test_a_device_cadence_reads_the_slow_values_every_health_interval():
    defaults = Settings()
    cadence = DeviceCadence(lambda: defaults)
    due = [second for second in range(90) if cadence.due(now=float(second))]
    assert due == [0, 30, 60]


def test_forgetting_makes_the_next_read_due_and_devices_keep_their_own_time():
    defaults = Settings()
    first, second = DeviceCadence(lambda: defaults), DeviceCadence(lambda: defaults)
    assert first.due(now=0.0) and not first.due(now=1.0)
    assert second.due(now=1.0)  # another device: its own first read
    first.forget()
    assert first.due(now=2.0) and not first.due(now=3.0)
    assert not second.due(now=3.0)


def test_every_read_is_due_when_sampling_is_no_faster_than_the_health_interval():
    slow = Settings(interval=10.0, health_interval=10.0)
    cadence = DeviceCadence(lambda: slow)
    assert all(cadence.due(now=float(second)) for second in range(3))
    assert cadence._last is None  # nothing to wait for, nothing recorded


def test_a_watched_device_reads_its_energy_counter_every_window_energy_interval():
    """A window samples the device at 0.1 s: its counter is read every --window-energy-interval (1 s)
    rather than every --energy-interval (30 s), and again every 30 s once nothing watches it."""
    defaults = Settings()
    energy = DeviceCadence(lambda: defaults, Cadence.ENERGY)
    watched = [round(t / 10, 1) for t in range(0, 35) if energy.due(now=t / 10, pace=0.1)]
    assert watched == [0.0, 1.0, 2.0, 3.0]
    unwatched = [second for second in range(4, 70) if energy.due(now=float(second))]
    assert unwatched == [33, 63]


def test_the_default_health_interval_reads_the_health_batch_every_thirtieth_second():
    """dcgm-exporter collects every 30 s; at the default 1 s interval the health batch (5.3 ms of CPU
    on an H200, the energy counter with it) is read every thirtieth sample, not every sample."""
    defaults = Settings()
    assert (defaults.interval, defaults.health_interval, defaults.energy_interval) == (1.0, 30.0, 30.0)
    reads = DeviceCadence(lambda: defaults)
    due = [second for second in range(90) if reads.due(now=float(second))]
    assert due == [0, 30, 60]

"""One device's health cadence (:class:`~warptd.backends.cadence.DeviceCadence`), held by its device."""

from __future__ import annotations

from warptd.backends.cadence import DeviceCadence, SlowReads
from warptd.config import Settings


def test_a_device_cadence_reads_the_slow_values_every_health_interval():
    defaults = Settings()
    cadence = DeviceCadence(lambda: defaults)
    due = [second for second in range(30) if cadence.due(now=float(second))]
    assert due == [0, 10, 20]


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


def test_slow_reads_by_index_follow_the_device_cadence():
    """The index-keyed :class:`SlowReads` (NVIDIA) gives the same answers, one cadence per index."""
    defaults = Settings()
    reads = SlowReads(lambda: defaults)
    assert [s for s in range(25) if reads.due(1, now=float(s))] == [0, 10, 20]
    assert reads.due(0, now=24.0)
    reads.forget(1)
    assert reads.due(1, now=25.0) and not reads.due(0, now=25.0)
    reads.forget()
    assert reads.due(0, now=26.0)

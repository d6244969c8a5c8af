"""The pure per-device and per-domain tracks: readings at explicit times, no threads, no sleeps."""

from __future__ import annotations

import time
from dataclasses import replace

from structlog.testing import capture_logs

from warptd.models import DeviceReading, GPUInfo
from warptd.power.base import DomainPower, DomainReading, PowerSource
from warptd.sampling.counters import EnergyTracker, Resumed
from warptd.sampling.tracks import DeviceTrack, DeviceTracks, DomainTrack, DomainTracks

ECC = "warptd_device_ecc_errors_total"


def gpu(index: int, uuid: str | None) -> GPUInfo:
    return GPUInfo(index=index, model="H100", uuid=uuid)


def test_energy_from_a_counter_and_the_mean_power_it_gives():
    """A device with only an energy counter: its total is the counter's, its power the mean since the
    last reading, put in the sample's reading (a new one: the one read is left as it was)."""
    track = DeviceTrack("nvidia", 0, "GPU-0")
    first = DeviceReading(index=0, energy_counter_joules=1000.0)
    assert (sample := track.update(first, 10.0)) is not None
    assert sample.energy_joules == 1000.0 and sample.reading.power_watts is None
    second = DeviceReading(index=0, energy_counter_joules=1600.0, power_watts=999.0)
    assert (sample := track.update(second, 12.0)) is not None
    assert sample.energy_joules == 1600.0
    assert sample.reading.power_watts == 999.0  # an instant reading is kept as read
    third = DeviceReading(index=0, energy_counter_joules=2200.0)
    assert (sample := track.update(third, 14.0)) is not None
    assert sample.reading.power_watts == 300.0 and third.power_watts is None


def test_the_drivers_average_is_no_instant_reading_to_replace():
    track = DeviceTrack("nvidia", 0, "GPU-0")
    track.update(DeviceReading(index=0, uuid="GPU-0", energy_counter_joules=0.0), 0.0)
    reading = DeviceReading(index=0, uuid="GPU-0", power_average_watts=250.0, energy_counter_joules=500.0)
    assert (sample := track.update(reading, 1.0)) is not None
    assert sample.reading is reading  # nothing to change: the reading as checked, no copy
    assert sample.reading.power_watts is None and sample.energy_joules == 500.0


def test_energy_integrated_from_power_times_time():
    track = DeviceTrack("cpu", 0)
    totals = []
    for at, watts in ((0.0, 100.0), (2.0, 200.0), (3.0, 200.0)):
        sample = track.update(DeviceReading(index=0, power_watts=watts), at)
        assert sample is not None
        totals.append(sample.energy_joules)
    assert totals == [0.0, 300.0, 500.0]  # trapezoids: (100 + 200) / 2 * 2, then 200 * 1


def test_a_lost_device_integrates_nothing_across_its_absence():
    track = DeviceTrack("cpu", 0, "CPU-0")
    track.update(DeviceReading(index=0, power_watts=100.0), 0.0)
    lost = track.update(DeviceReading(index=0, up=False), 1.0)
    assert lost is not None and lost.energy_joules is None and lost.reading.uuid == "CPU-0"
    back = track.update(DeviceReading(index=0, power_watts=100.0), 5.0)
    assert back is not None and back.energy_joules == 0.0  # not 100 W over 5 s


def test_a_counter_reset_adds_what_it_counted_since():
    track = DeviceTrack("nvidia", 0, "GPU-0")
    for at, joules in ((0.0, 1000.0), (1.0, 1500.0)):
        track.update(DeviceReading(index=0, energy_counter_joules=joules, power_limit_watts=700.0), at)
    sample = track.update(DeviceReading(index=0, energy_counter_joules=200.0, power_limit_watts=700.0), 2.0)
    assert sample is not None and sample.energy_joules == 1700.0  # the driver reloaded: +200
    assert track.energy.tracker.dropped_joules == 0.0


def test_a_reset_claiming_more_than_the_limit_allows_is_dropped_counted_and_logged():
    tracks = DeviceTracks("nvidia")
    tracks.follow([gpu(0, "GPU-0")])
    tracks.update([DeviceReading(index=0, energy_counter_joules=5000.0, power_limit_watts=700.0)], 0.0)
    with capture_logs() as logs:
        (sample,) = tracks.update(
            [DeviceReading(index=0, energy_counter_joules=4000.0, power_limit_watts=700.0)], 2.0
        )
    assert sample.energy_joules == 5000.0 + 1400.0  # 700 W for 2 s at most
    assert tracks.dropped.joules == 2600.0
    (event,) = [e for e in logs if e["event"] == "energy_jump_dropped"]
    assert event["counter"] == "nvidia/GPU-0" and event["dropped_joules"] == 2600.0


def test_a_domain_counter_wraps_at_its_range():
    track = DomainTrack("rapl/package-0")
    reading = DomainReading("package-0", energy_counter_joules=900.0, energy_range_joules=1000.0)
    assert track.update(reading, 0.0, PowerSource.RAPL) == DomainPower(
        "package-0", PowerSource.RAPL, None, 900.0
    )
    wrapped = replace(reading, energy_counter_joules=100.0)
    assert track.update(wrapped, 2.0, PowerSource.RAPL) == DomainPower(
        "package-0", PowerSource.RAPL, 100.0, 1100.0
    )
    assert track.tracker.counter is not None and track.tracker.counter.wraps == 1


def test_an_unreadable_domain_has_no_values_and_no_integration_across():
    tracks = DomainTracks("hwmon", PowerSource.HWMON)
    assert tracks.update([DomainReading("card0", power_watts=50.0)], 0.0) == [
        DomainPower("card0", PowerSource.HWMON, 50.0, 0.0)
    ]
    assert tracks.update([DomainReading("card0", readable=False)], 1.0) == [
        DomainPower("card0", PowerSource.HWMON, None, None, False)
    ]
    (back,) = tracks.update([DomainReading("card0", power_watts=50.0)], 4.0) or []
    assert back.energy_joules == 0.0


def test_a_backend_failure_integrates_nothing_across_the_outage():
    tracks = DeviceTracks("cpu")
    tracks.update([DeviceReading(index=0, power_watts=100.0)], 0.0)
    tracks.gap()
    (sample,) = tracks.update([DeviceReading(index=0, power_watts=100.0)], 10.0)
    assert sample.energy_joules == 0.0


def test_saved_totals_are_resumed_under_the_backend_and_identity():
    asked = []

    def resume(key: str, tracker: EnergyTracker) -> None:
        asked.append(key)
        tracker.resume_from(Resumed(5000.0, None, read_at=time.time() - 60, power=100.0))  # after a reboot

    tracks = DeviceTracks("nvidia", resume)
    tracks.follow([gpu(0, "GPU-0"), gpu(1, None)])
    assert asked == ["nvidia/GPU-0", "nvidia/1"]
    (sample,) = tracks.update([DeviceReading(index=0, energy_counter_joules=10.0)], 0.0)
    assert sample.energy_joules == 5010.0
    assert dict((key, t.total) for key, t in ((e.key, e.tracker.counter) for e in tracks.energy()) if t) == {
        "nvidia/GPU-0": 5010.0
    }


def test_throttle_seconds_from_sampled_time_and_from_violation_counters():
    track = DeviceTrack("nvidia", 0, "GPU-0")
    readings = [
        (0.0, {"sw_power_cap": True}, {"hw_slowdown": 5.0}),
        (2.0, {"sw_power_cap": True}, {"hw_slowdown": 6.5}),
        (3.0, {"sw_power_cap": False}, {"hw_slowdown": 1.0}),  # the counter reset: +1
        (7.0, {"sw_power_cap": False}, {"hw_slowdown": 1.0}),  # idle: nothing added
    ]
    seconds = []
    for at, active, counted in readings:
        reading = DeviceReading(index=0, throttle_active=active, throttle_counter_seconds=counted)
        sample = track.update(reading, at)
        assert sample is not None
        seconds.append(sample.throttle_seconds)
    assert seconds == [
        {"sw_power_cap": 0.0, "hw_slowdown": 5.0},
        {"sw_power_cap": 2.0, "hw_slowdown": 6.5},
        {"sw_power_cap": 2.0, "hw_slowdown": 7.5},  # each reading's state covers the time up to it
        {"sw_power_cap": 2.0, "hw_slowdown": 7.5},
    ]


def test_further_counters_are_made_monotonic_across_a_reset():
    track = DeviceTrack("nvidia", 0, "GPU-0")
    totals = []
    for at, raw in ((0.0, 10.0), (1.0, 12.0), (2.0, 12.0), (3.0, 2.0), (4.0, 5.0)):
        reading = DeviceReading(index=0, counters={ECC: {("volatile", "corrected"): raw}})
        sample = track.update(reading, at)
        assert sample is not None
        totals.append(sample.counters[ECC][("volatile", "corrected")])
    assert totals == [10.0, 12.0, 12.0, 14.0, 17.0]


def test_the_uuid_follows_the_list_of_devices_and_a_device_listed_again_continues():
    tracks = DeviceTracks("nvidia")
    first_list = [gpu(0, "GPU-a"), gpu(1, "GPU-b")]
    tracks.follow(first_list)
    samples = tracks.update([DeviceReading(index=i, energy_counter_joules=100.0) for i in (0, 1)], 0.0)
    assert [s.reading.uuid for s in samples] == ["GPU-a", "GPU-b"]
    samples = tracks.update([DeviceReading(index=0, energy_counter_joules=150.0)], 1.0)
    assert samples[0].energy_joules == 150.0
    tracks.follow([gpu(0, "MIG-c")])  # rediscovered: index 0 now names another device
    (other,) = tracks.update([DeviceReading(index=0, energy_counter_joules=7.0)], 2.0)
    assert other.reading.uuid == "MIG-c" and other.energy_joules == 7.0
    tracks.follow(first_list)  # listed again
    (back,) = tracks.update([DeviceReading(index=0, energy_counter_joules=180.0)], 3.0)
    assert back.reading.uuid == "GPU-a" and back.energy_joules == 180.0 and back.reading.power_watts == 15.0
    (unlisted,) = tracks.update([DeviceReading(index=5, uuid="stale")], 4.0)
    assert unlisted.reading.uuid == ""  # the list names no device 5: known by index
    assert {e.key for e in tracks.energy()} == {"nvidia/GPU-a", "nvidia/GPU-b", "nvidia/MIG-c", "nvidia/5"}


def test_a_reading_older_than_the_last_made_one_is_ignored():
    track = DeviceTrack("nvidia", 0, "GPU-0")
    assert track.update(DeviceReading(index=0, energy_counter_joules=100.0), 5.0) is not None
    assert track.update(DeviceReading(index=0, energy_counter_joules=90.0), 4.0) is None  # older
    assert track.update(DeviceReading(index=0, energy_counter_joules=95.0), 5.0) is None  # as old
    sample = track.update(DeviceReading(index=0, energy_counter_joules=110.0), 6.0)
    assert sample is not None and sample.energy_joules == 110.0  # no reset counted from the older
    assert track.energy.tracker.counter is not None and track.energy.tracker.counter.resets == 0


def test_an_older_read_of_a_backend_drops_its_device_and_domain_samples():
    devices = DeviceTracks("nvidia")
    devices.follow([gpu(0, "GPU-0"), gpu(1, "GPU-1")])
    assert len(devices.update([DeviceReading(index=0)], 3.0)) == 1  # a fast read of device 0
    older = devices.update([DeviceReading(index=0), DeviceReading(index=1)], 2.0)  # began before it
    assert [s.reading.index for s in older] == [1]
    domains = DomainTracks("rapl", PowerSource.RAPL)
    assert domains.update([DomainReading("package-0", power_watts=10.0)], 3.0) is not None
    assert domains.update([DomainReading("package-0", power_watts=99.0)], 2.0) is None

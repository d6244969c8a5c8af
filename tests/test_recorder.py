"""The shared Recorder on hand-made samples: exact summaries, bounded series, both energies, carbon, cost."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from warptd.models import DeviceReading, Utilization
from warptd.power.base import DomainPower, PowerSource
from warptd.recording.anchors import CounterAnchors
from warptd.recording.digest import activity_ratios
from warptd.recording.recorder import Recorder, Target, with_carbon_and_cost
from warptd.sampling.snapshot import DeviceSample

GPU = Target("device", "nvidia", "0", model="H100", uuid="GPU-0")
PACKAGE = Target("domain", "rapl", "package-0", source="rapl")


def sample(
    watts: float | None, energy: float | None, *, counter: bool = True, util: float = 0.5
) -> DeviceSample:
    reading = DeviceReading(
        index=0,
        power_watts=watts,
        energy_counter_joules=energy if counter else None,
        utilization=Utilization(compute=util),
        temperatures_celsius={"gpu": 40 + (watts or 0) / 10, "memory": 30},
        throttle_active={"sw_power_cap": (watts or 0) > 250},
    )
    return DeviceSample(
        reading,
        energy_joules=energy,
        throttle_seconds={"sw_power_cap": (watts or 0) / 100},
        energy_counted_joules=energy if counter else None,
    )


def test_counter_and_integrated_energy_and_their_disagreement():
    recorder = Recorder([GPU], kind="window", name="w")
    recorder.start()
    for at, watts, energy in ((10.0, 100, 1000.0), (11.0, 300, 1210.0), (12.0, 100, 1400.0)):
        recorder.add_device(GPU, sample(watts, energy), at)
    gpu = recorder.recording_now().targets[0]
    assert gpu.energy_joules == gpu.energy_counter_joules == 400 and gpu.energy_source == "counter"
    assert gpu.energy_integrated_joules == 400  # (100+300)/2 + (300+100)/2
    assert gpu.energy_disagreement_ratio == 0
    assert gpu.power_mean_watts == pytest.approx(500 / 3) and gpu.power_peak_watts == 300
    assert gpu.temperature_peak_celsius == 70 and gpu.utilization_mean_ratio == 0.5
    assert gpu.throttle_seconds == {"sw_power_cap": 0.0} and gpu.points[1].throttle_active == ["sw_power_cap"]
    assert [p.energy_joules for p in gpu.points] == [0, 210, 400]
    assert gpu.model == "H100" and gpu.uuid == "GPU-0" and gpu.id == "nvidia:0"


def test_without_a_counter_the_energy_is_integrated_power():
    recorder = Recorder([GPU], kind="window", name="w")
    recorder.start()
    for at, watts in ((0.0, 100), (2.0, 200)):
        recorder.add_device(GPU, sample(watts, None, counter=False), at)
    gpu = recorder.recording_now().targets[0]
    assert (
        gpu.energy_joules == 300 and gpu.energy_source == "integrated" and gpu.energy_counter_joules is None
    )
    assert gpu.energy_disagreement_ratio is None


def test_absent_values_stay_absent():
    recorder = Recorder([GPU], kind="window", name="w")
    recorder.start()
    recorder.add_device(GPU, sample(None, None, counter=False), 1.0)
    gpu = recorder.recording_now().targets[0]
    assert gpu.samples == 1 and gpu.energy_joules is None and gpu.power_mean_watts is None
    assert recorder.recording_now().energy_joules is None


def test_the_series_is_thinned_but_the_summary_stays_exact():
    recorder = Recorder([GPU], kind="window", name="w", max_points=100)
    recorder.start()
    for i in range(1000):
        recorder.add_device(GPU, sample(100 + i % 7, 10.0 * i), float(i))
    gpu = recorder.recording_now().targets[0]
    assert gpu.samples == 1000 and gpu.energy_joules == 9990
    assert gpu.power_mean_watts == pytest.approx(sum(100 + i % 7 for i in range(1000)) / 1000)
    assert 50 <= len(gpu.points) <= 100
    times = [p.t for p in gpu.points]
    steps = {round(b - a, 6) for a, b in itertools.pairwise(times)}
    assert len(steps) == 1  # evenly spaced


def test_older_and_outside_samples_are_ignored():
    recorder = Recorder([GPU], kind="window", name="w")
    recorder.add_device(GPU, sample(100, 1.0), 1.0)  # before start
    recorder.start()
    recorder.add_device(GPU, sample(100, 10.0), 5.0)
    recorder.add_device(GPU, sample(100, 5.0), 4.0)  # a slower read that crossed a faster one
    recorder.add_device(GPU, sample(100, 20.0), 6.0)
    recorder.stop()
    recorder.add_device(GPU, sample(100, 99.0), 7.0)
    gpu = recorder.recording_now().targets[0]
    assert gpu.samples == 2 and gpu.energy_joules == 10


def test_domains_and_the_total():
    recorder = Recorder([GPU, PACKAGE], kind="profile", name="p")
    recorder.start()
    for at, energy in ((0.0, 100.0), (1.0, 150.0)):
        recorder.add_device(GPU, sample(100, energy), at)
        recorder.on_sample("rapl", None, [DomainPower("package-0", PowerSource.RAPL, 40, energy / 2)], at)
        recorder.on_sample(
            "rapl", None, [DomainPower("psys", PowerSource.RAPL, 90, energy)], at
        )  # not a target
    recording = recorder.recording_now()
    package = recording.targets[1]
    assert package.id == "rapl:package-0" and package.energy_joules == 25 and package.kind == "domain"
    assert recording.energy_joules == 75


def test_carbon_and_cost_per_kwh():
    recorder = Recorder([GPU], kind="window", name="w")
    recorder.start()
    recorder.add_device(GPU, sample(100, 0.0), 0.0)
    recorder.add_device(GPU, sample(100, 3.6e6), 1.0)  # one kWh
    recording = with_carbon_and_cost(recorder.recording_now(), 350.0, 0.2)
    assert recording.carbon_grams == pytest.approx(350) and recording.cost == pytest.approx(0.2)
    assert recording.targets[0].carbon_grams == pytest.approx(350)
    assert with_carbon_and_cost(recorder.recording_now(), None, None).carbon_grams is None


def test_activity_ratios_from_a_backends_gauges():
    assert activity_ratios(DeviceReading(index=0)) == {}
    gauges = {
        "warptd_device_sm_active_ratio": {(): 0.5},
        "warptd_device_pipe_active_ratio": {("tensor",): 0.25},
        "warptd_device_fan_speed_ratio": {(): 0.4},  # a ratio, but not activity
        "warptd_device_engine_active_ratio": {("nvdec", "1"): 0.125},
    }
    reading = DeviceReading(index=0, gauges=gauges)
    assert activity_ratios(reading) == {
        "sm_active": 0.5,
        "pipe_active_tensor": 0.25,
        "engine_active_nvdec_1": 0.125,
    }


def test_edges_extrapolate_the_power_to_the_recordings_own_start_and_end():
    """A window's integrated power spans its start and end: the gaps to its first and last samples
    count at their power; without ``edges`` (a stress run) only what the samples span counts. Its
    counter is read at its edges (those samples), so the counter's delta is its energy either way."""
    for edges, integrated in ((True, 300.0), (False, 100.0)):
        recorder = Recorder([GPU], kind="window", name="w", edges=edges)
        recorder.start()
        start = recorder.started_mono
        recorder.add_device(GPU, sample(100, 1000.0), start + 1.0)
        recorder.add_device(GPU, sample(100, 1100.0), start + 2.0)
        recorder.stop()
        recorder.ended_mono = start + 3.0  # ended a second after the last sample
        gpu = recorder.recording_now().targets[0]
        assert gpu.energy_joules == pytest.approx(100.0) and gpu.energy_source == "counter"
        assert gpu.energy_integrated_joules == pytest.approx(integrated)


def test_no_extrapolation_past_a_lost_device():
    recorder = Recorder([GPU], kind="window", name="w", edges=True)
    recorder.start()
    start = recorder.started_mono
    recorder.add_device(GPU, sample(100, 1000.0), start)
    recorder.add_device(GPU, sample(100, 1100.0), start + 1.0)
    lost = sample(None, None)
    lost = replace(lost, reading=replace(lost.reading, up=False))
    recorder.add_device(GPU, lost, start + 1.5)
    recorder.stop()
    recorder.ended_mono = start + 5.0
    gpu = recorder.recording_now().targets[0]
    assert gpu.up is False and gpu.energy_joules == pytest.approx(100)


def test_a_device_whose_index_now_names_another_device_is_gone():
    """MIG instances are re-listed: the index a window recorded may name another device; its samples
    are not this target's, which reads as lost from then on, keeping what it used until then."""
    recorder = Recorder([GPU], kind="window", name="w")
    recorder.start()
    for at, watts, energy in ((0.0, 100, 0.0), (1.0, 100, 100.0)):
        own = sample(watts, energy)
        own = replace(own, reading=replace(own.reading, uuid="GPU-0"))
        recorder.on_sample("nvidia", [own], None, at)
    other = sample(400, 5000.0)
    other = replace(other, reading=replace(other.reading, uuid="MIG-other"))
    recorder.on_sample("nvidia", [other], None, 2.0)
    gpu = recorder.recording_now().targets[0]
    assert gpu.up is False and gpu.samples == 2
    assert gpu.energy_joules == 100 and gpu.power_peak_watts == 100


def test_one_sample_counts_its_power_over_the_recordings_span_and_says_so():
    """A window whose end read never came (or as short as one read) has no counter delta and no
    integral: its one power reading over the window's span, with ``power_times_duration`` as the
    source. Without edges (a stress run's timed part) one sample spans nothing: no energy."""
    recorder = Recorder([GPU], kind="window", name="w", edges=True)
    recorder.start()
    start = recorder.started_mono
    recorder.add_device(GPU, sample(200, 1000.0), start + 0.01)
    recorder.stop()
    recorder.ended_mono = start + 0.5
    recording = recorder.recording_now()
    gpu = recording.targets[0]
    assert gpu.samples == 1 and gpu.energy_joules == pytest.approx(200 * 0.5)
    assert gpu.energy_source == "power_times_duration" and recording.energy_joules == gpu.energy_joules
    assert gpu.energy_counter_joules is None and gpu.energy_integrated_joules is None
    assert gpu.energy_disagreement_ratio is None
    stress = Recorder([GPU], kind="stress", name="s")
    stress.start()
    stress.add_device(GPU, sample(200, 1000.0), stress.started_mono + 0.01)
    assert stress.recording_now().targets[0].energy_joules is None
    assert stress.recording_now().targets[0].energy_source is None


def test_a_version_1_recording_still_reads():
    """Version 2 only added a value of energy_source: a saved version 1 recording is a valid one."""
    from warptd.recording.schema import SCHEMA_VERSION, Recording

    recorder = Recorder([GPU], kind="window", name="w")
    recorder.start()
    saved = recorder.recording_now().model_dump(mode="json") | {"schema_version": 1}
    assert Recording.model_validate(saved).schema_version == 1
    assert recorder.recording_now().schema_version == SCHEMA_VERSION == 3
    with pytest.raises(ValueError, match="schema_version"):
        Recording.model_validate(saved | {"schema_version": 4})


def test_an_always_throttled_device_is_throttled_no_longer_than_the_recording():
    """A profile of 2.029 s, sampled every 0.1 s and once more at its end (2.027 s), on a device
    throttled throughout: the last sample's state holds up to the recording's end, not an interval
    past it (the comparison page once said 2.127 s throttled of 2.029 s)."""
    from warptd.recording.compare import compare
    from warptd.recording.glance import throttled_seconds
    from warptd.sampling.counters import ThrottleSeconds

    now = [100.0]
    recorder = Recorder(
        [GPU], kind="profile", name="p", interval_seconds=0.1, edges=True, clock=lambda: now[0]
    )
    recorder.start()
    totals = ThrottleSeconds()
    for at in [100.0 + i / 10 for i in range(21)] + [102.027]:
        reading = DeviceReading(index=0, power_watts=700.0, throttle_active={"sw_power_cap": True})
        seconds = totals.update(at, reading.throttle_active, {})
        recorder.add_device(GPU, DeviceSample(reading, throttle_seconds=seconds), at)
    now[0] = 102.029
    recorder.stop("command_exited")
    recording = recorder.recording_now()
    gpu = recording.targets[0]
    assert recording.duration_seconds == pytest.approx(2.029)
    assert gpu.throttle_seconds["sw_power_cap"] == pytest.approx(2.027)  # the counted seconds, first to last
    assert throttled_seconds(recording, gpu) == pytest.approx(2.029)  # from the first sample to the end
    compared = compare(recording, recording).devices[0]
    assert compared.measure("throttled").a == pytest.approx(compared.measure("time").a)
    lost = gpu.model_copy(update={"up": False})  # a lost device: its state is known up to its last sample
    assert throttled_seconds(recording, lost) == pytest.approx(2.027)


def test_the_counter_span_is_the_counters_own_where_the_total_handed_out_ran_ahead_of_it():
    """Between two reads the total handed out is an estimate, and where it ran ahead of the counter it
    is held, not lowered: a recording between two edge reads is the counter's own delta (issue 38)."""
    recorder = Recorder([GPU], kind="window", name="w", edges=True)
    recorder.start()
    start = recorder.started_mono
    recorder.add_device(GPU, sample(700, 1000.0), start + 0.01)  # the start's edge read
    recorder.add_device(GPU, sample(700, 1400.0, counter=False), start + 0.5)  # bridged, ahead
    ahead = DeviceSample(DeviceReading(index=0, power_watts=700, energy_counter_joules=1700.0), 1400.0)
    ahead = replace(ahead, energy_counted_joules=1350.0)  # the counter's total, below the one held
    recorder.add_device(GPU, ahead, start + 0.51)  # the end's edge read
    recorder.stop()
    gpu = recorder.recording_now().targets[0]
    assert gpu.energy_joules == pytest.approx(350.0) and gpu.energy_source == "counter"


def test_points_hold_the_counters_own_total_at_its_reads_when_the_total_handed_out_ran_ahead():
    """Between reads of the counter the daemon hands out a total tiled from the power's average; a
    lagged average makes it run ahead, held back at the next read. The points keep the counter's
    own total at each read and share its growth out between reads, so a per-second rate from the
    points is the counter's, and the last point is the recording's energy."""
    recorder = Recorder([GPU], kind="window", name="w", edges=True)
    recorder.start()
    start = recorder.started_mono
    rows = (  # (seconds in, W, total handed out, the counter's own where read)
        (0.0, 700, 1000.0, 1000.0),
        (0.5, 700, 1400.0, None),  # bridged 50 J ahead of the truth
        (1.0, 700, 1750.0, 1700.0),  # read: handed out 1750 J, held there until the counter passes it
        (1.5, 700, 1750.0, None),
        (2.0, 700, 2400.0, 2400.0),
        (2.5, 700, 2750.0, None),
    )
    for at, watts, handed, counted in rows:
        taken = DeviceSample(
            DeviceReading(index=0, power_watts=watts, energy_counter_joules=counted or handed),
            energy_joules=handed,
            energy_counted_joules=counted,
        )
        recorder.add_device(GPU, taken, start + at + 0.001)
    recorder.stop()
    gpu = recorder.recording_now().targets[0]
    energies = [p.energy_joules for p in gpu.points]
    assert energies == pytest.approx([0.0, 400 * 700 / 750, 700.0, 700.0, 1400.0, 1750.0])
    assert gpu.energy_counter_joules == pytest.approx(energies[-1]) and gpu.energy_source == "counter"


def test_counter_anchors_are_bounded_and_stay_monotonic():
    anchors = CounterAnchors()
    for read in range(3 * CounterAnchors.LIMIT):
        anchors.add(read * 10.0 + (read % 3), read * 10.0)  # ahead by 0, 1 or 2 J at each read
    assert len(anchors._handed) <= CounterAnchors.LIMIT
    mapped = [anchors.counted(h / 4) for h in range(0, 4 * 30 * CounterAnchors.LIMIT, 97)]
    assert mapped == sorted(mapped) and mapped[0] == 0.0
    assert anchors.counted(10.0 * (3 * CounterAnchors.LIMIT - 1) + 5) == pytest.approx(
        10.0 * (3 * CounterAnchors.LIMIT - 1) + 5 - ((3 * CounterAnchors.LIMIT - 1) % 3)
    )


def test_counter_anchors_on_one_line_keep_two():
    anchors = CounterAnchors()
    for read in range(1000):
        anchors.add(read * 5.0, 100.0 + read * 5.0)  # the handed-out total never ran ahead
    assert len(anchors._handed) == 2 and anchors.counted(1234.5) == 1234.5


def test_the_counter_span_starts_at_the_counters_first_read_not_at_a_bridged_total_before_it():
    """A read in flight while a window opened gives it a first sample whose total is the bridge's
    (the counter not read then, up to 100 ms of power behind); the edge read right after reads the
    counter: the window's energy is the counter's from that read on."""
    recorder = Recorder([GPU], kind="window", name="w", edges=True)
    recorder.start()
    start = recorder.started_mono
    recorder.add_device(GPU, sample(700, 1000.0, counter=False), start + 0.001)  # bridged, 70 J behind
    recorder.add_device(GPU, sample(700, 1070.0), start + 0.01)  # the edge read: the counter
    recorder.add_device(GPU, sample(700, 1420.0), start + 0.5)  # the end's edge read
    recorder.stop()
    gpu = recorder.recording_now().targets[0]
    assert gpu.energy_joules == pytest.approx(350.0) and gpu.energy_source == "counter"

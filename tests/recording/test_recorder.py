"""The shared Recorder on hand-made samples: exact summaries, bounded series, both energies, carbon, cost."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from tests.samples import sample
from warptd.models import DeviceReading
from warptd.recording.recorder import Recorder, Target, with_carbon_and_cost
from warptd.sampling.snapshot import DeviceSample

GPU = Target("device", "nvidia", "0", model="H100", uuid="GPU-0")


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


def test_carbon_and_cost_per_kwh():
    recorder = Recorder([GPU], kind="window", name="w")
    recorder.start()
    recorder.add_device(GPU, sample(100, 0.0), 0.0)
    recorder.add_device(GPU, sample(100, 3.6e6), 1.0)  # one kWh
    recording = with_carbon_and_cost(recorder.recording_now(), 350.0, 0.2)
    assert recording.carbon_grams == pytest.approx(350) and recording.cost == pytest.approx(0.2)
    assert recording.targets[0].carbon_grams == pytest.approx(350)
    assert with_carbon_and_cost(recorder.recording_now(), None, None).carbon_grams is None


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

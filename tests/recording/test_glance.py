"""The shared Recorder on hand-made samples: exact summaries, bounded series, both energies, carbon, cost."""

from __future__ import annotations

import pytest

from tests.recordings import busy_recording
from warptd.models import DeviceReading
from warptd.recording.glance import status_text, throttle_intervals
from warptd.recording.recorder import Recorder, Target
from warptd.recording.report import render_html
from warptd.recording.schema import Point
from warptd.sampling.snapshot import DeviceSample

GPU = Target("device", "nvidia", "0", model="H100", uuid="GPU-0")


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


def test_throttle_spans_merge_and_the_last_sample_lasts_one_interval():
    points = [Point(t=t, throttle_active=r) for t, r in [(0, ["a"]), (1, ["a"]), (2, []), (3, ["a"])]]
    assert throttle_intervals(points, "a", tail=0.5) == [(0, 2), (3, 3.5)]
    assert throttle_intervals(points, "b", tail=0.5) == []


def test_a_window_ended_when_asked_says_ended_once():
    window = busy_recording(gpus=1, count=3)
    assert status_text(window) == "ended"
    assert "ended (ended)" not in render_html(window)
    exited = window.model_copy(update={"end_reason": "command_exited"})
    assert status_text(exited) == "ended: the command exited"
    assert status_text(window.model_copy(update={"status": "open", "end_reason": None})) == "open"

"""The shared Recorder on hand-made samples: exact summaries, bounded series, both energies, carbon, cost."""

from __future__ import annotations

from warptd.models import DeviceReading
from warptd.recording.digest import activity_ratios


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

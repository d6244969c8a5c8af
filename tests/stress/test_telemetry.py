"""Stress pieces without a worker: discovery, parameter checks, telemetry summaries, GPU plumbing."""

from __future__ import annotations

import time

import pytest

from tests.samples import telemetry_sample
from warptd.stress.telemetry import TelemetryRecorder


def test_summary_from_device_counter():
    rec = TelemetryRecorder(recording=True)
    rec.add_device(telemetry_sample(300, 1000.0, 1000.0, 0.9, 60, {"sw_power_cap": 1.0}))
    rec.add_device(
        telemetry_sample(500, 1400.0, 1400.0, 1.0, 71, {"sw_power_cap": 2.5}, {"sw_power_cap": True})
    )
    s = rec.summary()
    assert s.samples == 2 and s.power_mean_watts == 400 and s.power_peak_watts == 500
    assert s.energy_joules == 400 and s.energy_source == "counter"
    assert s.temperature_peak_celsius == 71 and s.utilization_mean_ratio == pytest.approx(0.95)
    assert s.throttle_seconds == {"sw_power_cap": 1.5}


def test_idle_and_clock_settings_are_not_throttling_in_the_summary():
    rec = TelemetryRecorder(recording=True)
    idle = {"gpu_idle": True, "applications_clocks_setting": True, "display_clock_setting": True}
    rec.add_device(telemetry_sample(100, 10.0, 10.0, 0.0, 40, active=idle))
    rec.add_device(telemetry_sample(100, 20.0, 20.0, 0.0, 40, active={**idle, "sw_power_cap": False}))
    assert rec.summary().throttle_seconds == {}


def _record_gpu0(rig) -> TelemetryRecorder:
    """A recorder fed by the rig's sampler with GPU 0's samples, as a stress job is."""
    rec = TelemetryRecorder(recording=True)

    def listener(backend, devices, domains, at):
        for sample in devices or ():
            if sample.reading.index == 0:
                rec.add_device(sample, at)

    rig.sampler.listeners.append(listener)
    return rec


def test_a_run_on_an_idle_gpu_records_no_throttling(make_rig, fake_nvml):
    """Through the sampler, as the stress jobs get their samples: gpu_idle accumulates nothing."""
    rig = make_rig("nvidia")
    rec = _record_gpu0(rig)
    for _ in range(3):
        rig.tick("nvidia")
        time.sleep(0.05)
    summary = rec.summary()
    assert summary.samples == 3
    assert summary.throttle_seconds == {}


@pytest.mark.slow
def test_peak_power_is_the_peak_of_instant_readings_not_of_one_second_averages(make_rig, fake_nvml):
    """On Ampere and newer nvmlDeviceGetPowerUsage averages a second: a short spike barely shows there."""
    rig = make_rig("nvidia")
    rec = _record_gpu0(rig)
    gpu = fake_nvml.gpus[0]
    time.sleep(1.0)  # a second at 120 W
    rig.tick("nvidia")
    gpu.power_mw = 650_000  # a spike the sample lands in (after the driver's next refresh)
    fake_nvml.next_refresh()
    rig.tick("nvidia")
    gpu.power_mw = 120_000
    fake_nvml.next_refresh()
    rig.tick("nvidia")
    assert rec.summary().power_peak_watts == 650  # the 1 s average at that instant was under 200 W


def test_recorder_ignores_samples_outside_the_run():
    rec = TelemetryRecorder()
    rec.add_device(telemetry_sample(100, 1.0, 1.0, 0.1, 40))
    assert rec.summary().samples == 0 and rec.summary().energy_joules is None

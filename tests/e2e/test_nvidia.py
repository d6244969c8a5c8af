"""The nvidia and nvml backends against the NVML double (tests/doubles/nvml.py); no GPU needed."""

from __future__ import annotations

import time

import pynvml
import pytest

from tests.backends.nvidia.test_backend import by_reason
from tests.conftest import assert_promtool_clean
from tests.helpers import select, value

DEV0 = {"backend": "nvidia", "device": "0"}


pytestmark = pytest.mark.rig("nvidia", doubles=["fake_nvml"])


CLOCK_EVENTS = ("gpu_idle", "applications_clocks_setting", "display_clock_setting")


THROTTLING = (
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)


@pytest.mark.slow
def test_an_idle_gpu_is_a_clock_event_not_throttling(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.current_reasons = pynvml.nvmlClocksEventReasonGpuIdle
    rig.tick()
    time.sleep(0.1)
    samples = rig.tick()
    assert value(samples, "warptd_device_clock_event_active", reason="gpu_idle", **DEV0) == 1
    for reason in ("applications_clocks_setting", "display_clock_setting"):
        assert value(samples, "warptd_device_clock_event_active", reason=reason, **DEV0) == 0
    for reason in CLOCK_EVENTS:  # neither a throttle series nor sampled throttle time
        assert not select(samples, "warptd_device_throttle_active", reason=reason), reason
        assert not select(samples, "warptd_device_throttle_seconds_total", reason=reason), reason
    active = by_reason(samples, "warptd_device_throttle_active", DEV0)
    assert active == dict.fromkeys(THROTTLING, 0)
    throttled = select(samples, "warptd_device_throttle_seconds_total", **DEV0)
    assert throttled and all(s.value == 0 for s in throttled)
    assert_promtool_clean(rig.exposition.render(None, None)[0])

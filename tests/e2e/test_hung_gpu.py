"""A node with one hung GPU among eight, on the running daemon scraped over loopback (issue 39 #3): the
seven others keep every series and stay current, the hung one reads down and is named."""

from __future__ import annotations

import time

import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import http, parse, select, serving, value, wait_until

HUNG = 5


def _scrape(port: int):
    status, _, body = http(port, "GET", "/metrics")
    assert status == 200
    return parse(body.decode())


def _series(samples, device: str) -> set[tuple[str, tuple]]:
    return {
        (s.name, tuple(sorted(s.labels.items())))
        for s in samples
        if s.labels.get("backend") == "nvidia" and s.labels.get("device") == device and "uuid" in s.labels
    }


@pytest.mark.slow
def test_one_hung_gpu_of_eight_reads_down_and_the_seven_others_keep_reporting(settings):
    fake = FakeNvml([FakeGpu.h200(i) for i in range(8)])
    settings.backends = ["nvidia"]
    settings.interval, settings.health_interval, settings.sample_timeout = 1.0, 10.0, 2.0  # the defaults
    others = [str(i) for i in range(8) if i != HUNG]
    with fake.installed(), serving(settings) as daemon:
        time.sleep(3)  # a few samples: every series a GPU has is there
        baseline = {device: _series(_scrape(daemon.port), device) for device in others}
        assert all(len(series) > 10 for series in baseline.values())
        fake.gpus[HUNG].hang.set()
        hung_at = time.monotonic()
        try:
            fake.gpus[0].power_mw = 432_000  # read every sample
            down_after = None
            while time.monotonic() - hung_at < 10:
                samples = _scrape(daemon.port)
                for device in others:  # every scrape: none of the seven loses a series
                    assert baseline[device] <= _series(samples, device), device
                up = select(samples, "warptd_device_up", backend="nvidia", device=str(HUNG))
                if down_after is None and up and up[0].value == 0:
                    down_after = time.monotonic() - hung_at
                time.sleep(0.1)
            assert down_after is not None and down_after < 10
            samples = _scrape(daemon.port)
            assert value(samples, "warptd_device_up", backend="nvidia", device=str(HUNG)) == 0
            assert value(samples, "warptd_device_power_watts", backend="nvidia", device="0") == 432
            hung = {"backend": "nvidia", "device": str(HUNG)}
            assert value(samples, "warptd_sample_errors_total", kind="timeout", **hung) == 1
            assert value(samples, "warptd_sample_errors_total", kind="hung", **hung) >= 3
            assert value(samples, "warptd_backend_up", backend="nvidia") == 1
            last = value(samples, "warptd_last_sample_timestamp_seconds", backend="nvidia")
            assert time.time() - last < 2.5  # the others are read every sample
        finally:
            fake.gpus[HUNG].hang.clear()
            fake.gpus[HUNG].release.set()
        assert wait_until(
            lambda: (
                [s.value for s in select(_scrape(daemon.port), "warptd_device_up", device=str(HUNG))] == [1]
            ),
            timeout=10,
        )
    fake.close()

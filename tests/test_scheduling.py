"""Scheduled ticks hand their read to the backend's worker; a read past its deadline is given up on."""

from __future__ import annotations

import threading
import time

from tests.helpers import Rig, select, value, wait_until
from warptd.sampling.deadlines import Deadlines


def test_deadline_fires_once_at_its_time_and_a_read_in_time_costs_nothing():
    fired: list[tuple[str, float]] = []
    deadlines = Deadlines(lambda: 0.2, lambda name: fired.append((name, time.monotonic())))
    deadlines.start()
    try:
        started = time.monotonic()
        deadlines.arm("fast", started)
        assert deadlines.finish("fast") is False  # returned in time: published
        deadlines.arm("slow", started)
        assert wait_until(lambda: fired, timeout=2)
        assert fired[0][0] == "slow" and 0.2 <= fired[0][1] - started < 0.6
        assert deadlines.expired("slow")
        time.sleep(0.3)
        assert len(fired) == 1  # once, not at every wake
        assert deadlines.finish("slow") is True  # its late result is dropped
        assert not deadlines.expired("slow")
    finally:
        deadlines.stop()


def test_deadline_follows_a_reloaded_timeout():
    timeout = [1.0]
    fired = threading.Event()
    deadlines = Deadlines(lambda: timeout[0], lambda name: fired.set())
    deadlines.start()
    try:
        deadlines.arm("nvidia", time.monotonic())
        timeout[0] = 0.05
        started = time.monotonic()
        assert fired.wait(3)  # at the latest one old timeout later, then at the new deadline
        assert time.monotonic() - started < 1.5
    finally:
        deadlines.stop()


def test_scheduled_reads_publish_from_the_worker_and_a_hung_one_goes_stale(settings, fake_nvml):
    settings.backends = ["nvidia"]
    settings.interval = 0.05
    settings.sample_timeout = 0.3
    rig = Rig(settings)
    rig.sampler.start()
    try:
        assert wait_until(lambda: (rig.snapshot.get("nvidia").samples or 0) >= 3, timeout=5)
        assert wait_until(lambda: (rig.snapshot.get("nvml").samples or 0) >= 3, timeout=5)  # with nvidia's
        fake_nvml.gpus[1].hang.set()
        hung_at = time.monotonic()
        assert wait_until(lambda: not rig.snapshot.get("nvidia").healthy, timeout=5)
        assert time.monotonic() - hung_at >= 0.25  # given up on at its deadline, not before
        assert wait_until(
            lambda: value(rig.scrape(), "warptd_sample_errors_total", backend="nvidia", kind="hung") >= 1,
            timeout=5,
        )
        samples = rig.scrape()
        assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="timeout") == 1
        assert value(samples, "warptd_backend_up", backend="nvml") == 0  # its read was nvidia's
        assert not select(samples, "warptd_device_up", backend="nvidia")
        done = rig.snapshot.get("nvidia").samples
        fake_nvml.gpus[1].hang.clear()
        fake_nvml.gpus[1].release.set()
        assert wait_until(lambda: rig.snapshot.get("nvidia").healthy, timeout=5)
        assert rig.snapshot.get("nvidia").samples > done
        assert value(rig.scrape(), "warptd_sample_errors_total", backend="nvidia", kind="timeout") == 1
    finally:
        fake_nvml.gpus[1].release.set()
        rig.close()

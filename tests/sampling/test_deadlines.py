"""Scheduled ticks hand their read to the backend's worker; a read past its deadline is given up on."""

from __future__ import annotations

import threading
import time

import pytest

from tests.helpers import Rig, value, wait_until
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


@pytest.mark.slow
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


def test_scheduled_reads_publish_from_the_worker_and_a_hung_gpu_is_held_apart(settings, fake_nvml):
    """Updated by issue 39 #3: a GPU whose calls hang is held apart at the deadline (down, counted
    under its index) and the scheduled reads go on with the other GPU, the nvml companion with them."""
    for gpu in fake_nvml.gpus:
        gpu.memory_power_mw = 60_000  # a part NVML measures apart: the nvml power backend loads
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
        assert wait_until(lambda: rig.sampler.reads.workers["nvidia"].held() == {1}, timeout=5)
        assert time.monotonic() - hung_at >= 0.25  # held apart at its deadline, not before
        done = rig.snapshot.get("nvidia").samples
        assert wait_until(lambda: rig.snapshot.get("nvidia").samples >= done + 3, timeout=5)
        samples = rig.scrape()
        hung = {"backend": "nvidia", "device": "1"}
        assert value(samples, "warptd_sample_errors_total", kind="timeout", **hung) == 1
        assert value(samples, "warptd_sample_errors_total", kind="hung", **hung) >= 3
        assert value(samples, "warptd_backend_up", backend="nvidia") == 1
        assert value(samples, "warptd_backend_up", backend="nvml") == 1  # its read was nvidia's
        assert value(samples, "warptd_device_up", backend="nvidia", device="1") == 0
        assert value(samples, "warptd_device_up", backend="nvidia", device="0") == 1
        fake_nvml.gpus[1].hang.clear()
        fake_nvml.gpus[1].release.set()
        assert wait_until(lambda: not rig.sampler.reads.workers["nvidia"].held(), timeout=5)
        assert wait_until(
            lambda: value(rig.scrape(), "warptd_device_up", backend="nvidia", device="1") == 1, timeout=5
        )
        assert value(rig.scrape(), "warptd_sample_errors_total", kind="timeout", **hung) == 1
    finally:
        fake_nvml.gpus[1].release.set()
        rig.close()


def test_a_reload_reschedules_a_companion_backends_fast_job(settings, fake_nvml):
    """``nvml`` has no regular job beside ``nvidia``, but a window watching it gives it a fast one."""
    fake_nvml.gpus[0].memory_power_mw = 60_000  # a part NVML measures apart: the nvml power backend loads
    settings.backends = ["nvidia"]
    settings.interval, settings.window_interval = 0.5, 0.1
    rig = Rig(settings)
    rig.sampler.start()
    try:
        rig.sampler.watch("w1", set(), {"nvml"})
        assert rig.sampler.fast_sampling("nvml")
        rig.sampler.reconfigure(settings.model_copy(update={"window_interval": 0.25}))  # SIGHUP
        assert rig.sampler.scheduler.get_job("fast-nvml").trigger.interval.total_seconds() == 0.25
    finally:
        rig.close()


@pytest.mark.slow
def test_a_late_timeout_never_marks_a_newer_sample_stale(settings, fake_nvml):
    """The deadline thread marks a read stale before that read can be dropped, so the sample after it
    is published healthy and stays so, even when the timeout is reported slowly."""
    settings.backends = ["nvidia"]
    settings.interval, settings.sample_timeout = 0.05, 0.2
    rig = Rig(settings)
    report = rig.sampler.reads.deadlines._on_timeout
    rig.sampler.reads.deadlines._on_timeout = lambda name: (time.sleep(0.3), report(name))  # a slow report
    rig.sampler.start()
    try:
        assert wait_until(lambda: (rig.snapshot.get("nvidia").samples or 0) >= 2, timeout=5)
        fake_nvml.gpus[1].hang.set()
        time.sleep(0.25)  # past the deadline, the report under way
        fake_nvml.gpus[1].hang.clear()
        fake_nvml.gpus[1].release.set()
        done = rig.snapshot.get("nvidia").samples
        assert wait_until(lambda: rig.snapshot.get("nvidia").samples > done, timeout=3)
        time.sleep(0.4)
        assert rig.snapshot.get("nvidia").healthy
        assert value(rig.scrape(), "warptd_sample_errors_total", backend="nvidia", kind="timeout") == 1
    finally:
        fake_nvml.gpus[1].release.set()
        rig.close()


def test_halt_waits_at_most_one_timeout_and_not_for_reads_given_up_on(settings, fake_nvml):
    settings.backends = ["nvidia"]
    settings.interval, settings.sample_timeout = 0.05, 0.3
    rig = Rig(settings)
    rig.sampler.start()
    try:
        assert wait_until(lambda: (rig.snapshot.get("nvidia").samples or 0) >= 1, timeout=5)
        fake_nvml.gpus[1].hang.set()
        assert wait_until(lambda: rig.sampler.reads.workers["nvidia"].held() == {1}, timeout=5)
        started = time.monotonic()
        rig.sampler.halt()
        assert time.monotonic() - started < 0.25  # the hung read was cut: not waited for
    finally:
        fake_nvml.gpus[1].hang.clear()
        fake_nvml.gpus[1].release.set()
        rig.close()

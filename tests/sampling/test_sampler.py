"""The sampler's scheduling under races and faults: reads published in the order made, one hung device
held apart while the backend's other devices are read."""

from __future__ import annotations

import threading
import time
from typing import ClassVar

import pytest

from tests.helpers import Rig, parse, select, value, wait_until
from tests.test_device_metrics import ScriptedBackend
from warptd.exporter.exposition import Exposition
from warptd.models import DeviceReading, GPUInfo
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import Snapshot


def test_an_edge_read_is_published_before_the_read_queued_behind_it(settings, fake_nvml):
    """Issue 38 #1: the edge read (energy counter, throttle times) was published from its caller's
    thread, so a scheduled read queued behind it could publish first from the worker, and the edge's
    older sample was then dropped as late. Here the caller is slow to publish, as a busy thread is."""
    settings.backends = ["nvidia"]
    rig = Rig(settings)
    sampler = rig.sampler
    worker = sampler.reads.workers["nvidia"]
    published: list[tuple[float, int]] = []
    sampler.listeners.append(lambda name, devices, domains, at: published.append((at, len(devices or ()))))
    publish = sampler.publisher.publish

    def slow_off_the_worker(*args, **kwargs):
        if not threading.current_thread().name.startswith("warptd-nvidia"):
            time.sleep(0.3)  # the edge's caller, descheduled between its read and its publication
        publish(*args, **kwargs)

    sampler.publisher.publish = slow_off_the_worker
    sampler.tick("nvidia")
    published.clear()
    gate = threading.Event()
    worker.submit(lambda lane: gate.wait())  # busy: the edge read and the scheduled one queue up
    edge = threading.Thread(target=sampler.sample_watched, args=("nvidia", {0, 1}), kwargs={"edge": True})
    edge.start()
    assert wait_until(lambda: worker._queue.qsize() == 1, timeout=5)
    sampler.reads.hand_off("nvidia")  # the next scheduled tick, queued behind the edge read
    gate.set()
    edge.join(timeout=5)
    assert wait_until(lambda: len(published) == 2, timeout=5)
    (edge_at, edge_devices), (tick_at, tick_devices) = published
    assert edge_at < tick_at  # published in the order read
    assert edge_devices == 2 and tick_devices == 2  # neither dropped as older
    rig.close()


class GatedBackend(ScriptedBackend):
    """Three devices whose reads block while their gate is shut, and a set-up that may block too:
    any backend, not NVIDIA's, since holding a hung device apart is the sampler's."""

    name: ClassVar[str] = "gated"

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.gates = {i: threading.Event() for i in range(3)}
        self.setup = threading.Event()
        for gate in (*self.gates.values(), self.setup):
            gate.set()
        self.power = 100.0

    def begin_sample(self) -> None:
        self.setup.wait(30)

    def read_device(self, index: int) -> DeviceReading:
        self.gates[index].wait(30)
        return DeviceReading(index=index, power_watts=self.power + index)

    def get_device_count(self) -> int:
        return 3

    def list_devices(self) -> list[GPUInfo]:
        return [GPUInfo(index=i, model="Gated", uuid=f"G-{i}") for i in range(3)]


def _power(samples, device: str) -> list[float]:
    return [s.value for s in select(samples, "warptd_device_power_watts", backend="gated", device=device)]


@pytest.fixture
def gated(settings):
    settings.interval, settings.sample_timeout = 0.05, 0.3
    backend = GatedBackend(settings)
    snapshot = Snapshot(stale_after=settings.stale_after)
    sampler = Sampler(settings, snapshot, [backend], [])
    exposition = Exposition(snapshot)
    yield backend, sampler, lambda: parse(exposition.render(None, None)[0].decode())
    for gate in (*backend.gates.values(), backend.setup):
        gate.set()
    sampler.stop()


def test_a_device_whose_read_hangs_is_held_apart_and_the_others_stay_current(gated):
    """Issue 39 #3, in the sampling layer: a device's read that blocks is cut at --sample-timeout;
    the device reads down (counted under its index) while the backend's other devices are read every
    sample, and it is read again once its call returns."""
    backend, sampler, scrape = gated
    sampler.start()
    assert wait_until(lambda: (sampler.snapshot.get("gated").samples or 0) >= 2, timeout=5)
    backend.gates[1].clear()
    assert wait_until(lambda: sampler.reads.workers["gated"].held() == {1}, timeout=5)
    backend.power = 200.0  # read every sample: the others follow it
    assert wait_until(lambda: _power(scrape(), "2") == [202], timeout=5)
    samples = scrape()
    assert value(samples, "warptd_backend_up", backend="gated") == 1
    assert value(samples, "warptd_device_power_watts", backend="gated", device="0") == 200
    assert value(samples, "warptd_device_up", backend="gated", device="1") == 0
    assert not select(samples, "warptd_device_power_watts", backend="gated", device="1")
    hung = {"backend": "gated", "device": "1"}
    assert value(samples, "warptd_sample_errors_total", kind="timeout", **hung) == 1
    assert value(samples, "warptd_sample_errors_total", kind="hung", **hung) >= 1
    assert value(samples, "warptd_sample_errors_total", backend="gated", kind="timeout", device="") == 0
    backend.gates[1].set()
    assert wait_until(lambda: _power(scrape(), "1") == [201], timeout=5)
    assert value(scrape(), "warptd_sample_errors_total", kind="timeout", **hung) == 1


def test_a_backend_hung_outside_its_devices_reads_is_stale_as_a_whole(gated):
    """Where the read blocks outside any one device's read (its set-up), nothing is held apart: the
    backend is stale, its series dropped, and counted timeout, then hung per skipped sample."""
    backend, sampler, scrape = gated
    sampler.start()
    assert wait_until(lambda: (sampler.snapshot.get("gated").samples or 0) >= 2, timeout=5)
    backend.setup.clear()
    assert wait_until(lambda: value(scrape(), "warptd_backend_up", backend="gated") == 0, timeout=5)
    assert wait_until(
        lambda: value(scrape(), "warptd_sample_errors_total", backend="gated", kind="hung", device="") >= 1,
        timeout=5,
    )
    samples = scrape()
    assert not select(samples, "warptd_device_up", backend="gated")
    assert value(samples, "warptd_sample_errors_total", backend="gated", kind="timeout", device="") == 1
    assert sampler.reads.workers["gated"].held() == frozenset()
    backend.setup.set()
    assert wait_until(lambda: value(scrape(), "warptd_backend_up", backend="gated") == 1, timeout=5)

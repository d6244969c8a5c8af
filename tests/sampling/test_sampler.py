"""The sampler's scheduling under races and faults: reads published in the order made, one hung device
held apart while the backend's other devices are read."""

from __future__ import annotations

import threading
import time

from tests.helpers import Rig, wait_until


def test_an_edge_read_is_published_before_the_read_queued_behind_it(settings, fake_nvml):
    """Issue 38 #1: the edge read (energy counter, throttle times) was published from its caller's
    thread, so a scheduled read queued behind it could publish first from the worker, and the edge's
    older sample was then dropped as late. Here the caller is slow to publish, as a busy thread is."""
    settings.backends = ["nvidia"]
    rig = Rig(settings)
    sampler = rig.sampler
    worker = sampler._workers["nvidia"]
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
    worker.submit(gate.wait)  # the worker is busy: the edge read and the scheduled one queue up
    edge = threading.Thread(target=sampler.sample_watched, args=("nvidia", {0, 1}), kwargs={"edge": True})
    edge.start()
    assert wait_until(lambda: worker._queue.qsize() == 1, timeout=5)
    sampler._hand_off("nvidia")  # the next scheduled tick, queued behind the edge read
    gate.set()
    edge.join(timeout=5)
    assert wait_until(lambda: len(published) == 2, timeout=5)
    (edge_at, edge_devices), (tick_at, tick_devices) = published
    assert edge_at < tick_at  # published in the order read
    assert edge_devices == 2 and tick_devices == 2  # neither dropped as older
    rig.close()

"""The CPU each kind of read takes, charged to the reading thread and exported per backend."""

from __future__ import annotations

import threading
import time

import pytest

from tests.conftest import assert_promtool_clean
from tests.helpers import parse, value
from tests.test_device_metrics import ScriptedBackend
from warptd.backends.costs import ReadCosts, thread_time
from warptd.exporter.exposition import Exposition
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import Snapshot


def _burn(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU."""
    until = thread_time() + seconds
    while thread_time() < until:
        pass


def test_a_read_is_charged_its_own_threads_cpu_not_the_wall_clock():
    costs = ReadCosts()
    with costs.measure("energy"):
        _burn(0.02)
    with costs.measure("energy"):
        time.sleep(0.05)  # a wait is not the driver's CPU
    started = thread_time()
    _burn(0.01)
    costs.charge("power", started)
    totals = costs.totals()
    assert totals["energy"].reads == 2
    assert 0.02 <= totals["energy"].cpu_seconds < 0.04
    assert totals["power"].reads == 1 and 0.01 <= totals["power"].cpu_seconds < 0.03


def test_another_threads_cpu_is_not_charged():
    costs = ReadCosts()
    busy = threading.Thread(target=_burn, args=(0.1,))
    with costs.measure("calls"):
        busy.start()
        busy.join()  # this thread waits while the other burns 0.1 s
    assert costs.totals()["calls"].cpu_seconds < 0.05


class _PricedBackend(ScriptedBackend):
    name = "priced"

    def begin_sample(self) -> None:
        with self.read_costs.measure("energy"):
            _burn(0.003)


@pytest.mark.slow
def test_read_costs_are_exported_by_backend_and_kind(settings):
    backend = _PricedBackend(settings)
    snapshot = Snapshot(stale_after=60)
    sampler = Sampler(settings, snapshot, [backend], [])
    try:
        for _ in range(3):
            sampler.tick("priced")
        body = Exposition(snapshot).render(None, None)[0]
    finally:
        sampler.stop()
    samples = parse(body.decode())
    assert value(samples, "warptd_backend_reads_total", backend="priced", read="energy") == 3
    assert value(samples, "warptd_backend_read_cpu_seconds_total", backend="priced", read="energy") >= 0.009
    assert_promtool_clean(body)

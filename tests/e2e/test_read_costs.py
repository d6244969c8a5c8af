"""The CPU each kind of read takes, charged to the reading thread and exported per backend."""

from __future__ import annotations

import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles.sdk import burn_cpu
from tests.helpers import parse, value
from tests.sampling.test_snapshot import ScriptedBackend
from warptd.exporter.exposition import Exposition
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import Snapshot


class _PricedBackend(ScriptedBackend):
    name = "priced"

    def begin_sample(self) -> None:
        with self.read_costs.measure("energy"):
            burn_cpu(0.003)


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

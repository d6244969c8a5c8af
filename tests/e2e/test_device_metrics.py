"""The further gauges and counters any backend may report: validated, made monotonic, exported."""

from __future__ import annotations

import pytest

from tests.conftest import assert_promtool_clean
from tests.helpers import parse, select, value
from tests.sampling import test_snapshot as sampling_snapshot
from tests.sampling.test_snapshot import DEV

scripted = sampling_snapshot.scripted  # a scripted backend and a tick rendering its exposition, a fixture


@pytest.mark.slow
def test_gauges_are_exported_with_their_own_labels(scripted):
    backend, tick = scripted
    backend.gauges = {
        "warptd_device_sm_active_ratio": {(): 0.5},
        "warptd_device_pipe_active_ratio": {("tensor",): 0.25, ("fp64",): 0.0},
        "warptd_device_remapped_rows": {("correctable",): 3, ("uncorrectable",): 0},
    }
    body = tick()
    samples = parse(body.decode())
    assert value(samples, "warptd_device_sm_active_ratio", **DEV) == 0.5
    assert value(samples, "warptd_device_pipe_active_ratio", pipe="tensor", **DEV) == 0.25
    assert value(samples, "warptd_device_pipe_active_ratio", pipe="fp64", **DEV) == 0.0
    assert value(samples, "warptd_device_remapped_rows", kind="correctable", **DEV) == 3
    assert not select(samples, "warptd_device_sm_occupancy_ratio")  # not reported: absent, not 0
    assert_promtool_clean(body)

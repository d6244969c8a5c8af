"""The further gauges and counters any backend may report: validated, made monotonic, exported."""

from __future__ import annotations

from typing import ClassVar

import pytest

from tests.conftest import assert_promtool_clean
from tests.helpers import parse, select, value
from warptd.backends.base import AcceleratorBackend
from warptd.backends.device import ValueDevice
from warptd.exporter.exposition import Exposition
from warptd.models import GPUInfo, LabelledValues
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import Snapshot


class ScriptedDevice(ValueDevice):
    """The one device: its further gauges and counters are what the test set on the backend."""

    def __init__(self, backend: ScriptedBackend) -> None:
        super().__init__(0)
        self._backend = backend

    def gauges(self) -> dict[str, LabelledValues]:
        return {name: dict(values) for name, values in self._backend.gauges.items()}

    def counters(self) -> dict[str, LabelledValues]:
        return {name: dict(values) for name, values in self._backend.counters.items()}


class ScriptedBackend(AcceleratorBackend):
    """One device whose further gauges and counters the test sets before each tick."""

    name: ClassVar[str] = "scripted"
    source: ClassVar[str] = "test"

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.gauges: dict[str, LabelledValues] = {}
        self.counters: dict[str, LabelledValues] = {}
        self.devices = (ScriptedDevice(self),)

    def list_devices(self) -> list[GPUInfo]:
        return [GPUInfo(index=0, model="Scripted", uuid="S-0")]


@pytest.fixture
def scripted(settings):
    backend = ScriptedBackend(settings)
    snapshot = Snapshot(stale_after=60)
    sampler = Sampler(settings, snapshot, [backend], [])
    exposition = Exposition(snapshot)

    def tick():
        sampler.tick("scripted")
        return exposition.render(None, None)[0]

    yield backend, tick
    sampler.stop()


DEV = {"backend": "scripted", "device": "0", "uuid": "S-0"}


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

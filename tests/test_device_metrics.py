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


def test_counters_stay_monotonic_across_a_driver_reload(scripted):
    backend, tick = scripted
    totals = []
    # Volatile ECC counts: 5, 7, then the driver reloads and counts from 0 again: 1, 4.
    for raw in (5, 7, 1, 4):
        backend.counters = {"warptd_device_ecc_errors_total": {("corrected",): raw}}
        samples = parse(tick().decode())
        totals.append(value(samples, "warptd_device_ecc_errors_total", kind="corrected", **DEV))
    assert totals == [5, 7, 8, 11]


def test_impossible_or_unknown_values_are_rejected_and_counted(scripted):
    backend, tick = scripted
    backend.gauges = {
        "warptd_device_sm_active_ratio": {(): 1.7},  # a ratio over 1
        "warptd_device_dram_bandwidth_ratio": {(): float("nan")},
        "warptd_device_made_up": {(): 1.0},  # not in the catalog
        "warptd_device_pipe_active_ratio": {(): 0.5},  # missing its pipe label
        "warptd_device_sm_occupancy_ratio": {(): 0.3},
    }
    samples = parse(tick().decode())
    assert value(samples, "warptd_device_sm_occupancy_ratio", **DEV) == 0.3
    for name in ("warptd_device_sm_active_ratio", "warptd_device_dram_bandwidth_ratio"):
        assert not select(samples, name)
    assert value(samples, "warptd_sample_errors_total", backend="scripted", kind="invalid_value") == 4


def test_infinite_negative_or_non_numeric_values_are_rejected(scripted):
    backend, tick = scripted
    backend.counters = {
        "warptd_device_pcie_bytes_total": {("tx",): float("inf"), ("rx",): 10.0},
        "warptd_device_pcie_replays_total": {(): -1.0},
        "warptd_device_ecc_errors_total": {("corrected",): "3", ("uncorrected",): 2.0},  # type: ignore[dict-item]
    }
    samples = parse(tick().decode())
    assert value(samples, "warptd_device_pcie_bytes_total", direction="rx", **DEV) == 10
    assert value(samples, "warptd_device_ecc_errors_total", kind="uncorrected", **DEV) == 2
    assert not select(samples, "warptd_device_pcie_bytes_total", direction="tx")
    assert not select(samples, "warptd_device_pcie_replays_total")
    assert not select(samples, "warptd_device_ecc_errors_total", kind="corrected")
    assert value(samples, "warptd_sample_errors_total", backend="scripted", kind="invalid_value") == 3


def test_a_counter_read_unchanged_keeps_its_total_then_moves_on(scripted):
    backend, tick = scripted
    totals = []
    for raw in (4, 4, 4, 9, 9, 2):  # standing still, rising, standing still, a reset
        backend.counters = {"warptd_device_ecc_errors_total": {("corrected",): raw, ("uncorrected",): 1}}
        samples = parse(tick().decode())
        totals.append(value(samples, "warptd_device_ecc_errors_total", kind="corrected", **DEV))
    assert totals == [4, 4, 4, 9, 9, 11]


def test_a_dict_handed_over_again_is_not_checked_again_but_a_new_one_is():
    """The last reading's dicts pass by identity; a new dict, even equal to an old one, is checked."""
    from warptd.models import DeviceReading
    from warptd.sampling.validate import sanitize_device

    steady = {("correctable",): 3.0}
    first = DeviceReading(index=0, gauges={"warptd_device_remapped_rows": steady})
    first, rejected = sanitize_device(first)
    assert rejected == 0
    again = DeviceReading(index=0, gauges={"warptd_device_remapped_rows": steady})
    again, rejected = sanitize_device(again, first)
    assert rejected == 0 and again.gauges["warptd_device_remapped_rows"] is steady
    garbage = DeviceReading(index=0, gauges={"warptd_device_remapped_rows": {("correctable",): -1.0}})
    garbage, rejected = sanitize_device(garbage, first)
    assert rejected == 1 and garbage.gauges["warptd_device_remapped_rows"] == {}

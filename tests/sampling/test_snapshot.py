"""The further gauges and counters any backend may report: validated, made monotonic, exported."""

from __future__ import annotations

from typing import ClassVar

import pytest

from tests.helpers import parse, select, value
from tests.power.test_base import workload_of
from warptd.backends.base import AcceleratorBackend
from warptd.backends.device import ValueDevice
from warptd.exporter.exposition import Exposition
from warptd.models import DeviceReading, GPUInfo, LabelledValues
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import DeviceSample, Snapshot
from warptd.workloads.history import WorkloadHistory
from warptd.workloads.placement import WorkloadKey


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


def test_a_workload_split_before_its_poll_ended_records_that_share_and_its_energy():
    """The split finds a workload in a poll's first half and may give it a sample's share before the
    poll's end tells the history (after_poll): its recording starts at that sample, so the share and
    the device's energy both count from the sample before it."""
    history = WorkloadHistory(clock=lambda: 0.0)
    key = WorkloadKey("slurm_job", "9")
    workload = workload_of(key)

    def sample(joules: float) -> list[DeviceSample]:  # 100 W, read from the energy counter
        reading = DeviceReading(index=0, uuid="GPU-0", power_watts=100.0, energy_counter_joules=joules)
        return [DeviceSample(reading, energy_joules=joules)]

    history.after_sample("nvidia", sample(1000.0), None, 1.0, {})  # before the job
    workload.add_device("nvidia:0", "GPU-0", 100.0)  # the split's first delta: 1000 J -> 1100 J
    history.after_sample("nvidia", sample(1100.0), None, 2.0, {key: workload})
    history.after_poll({key: workload})
    workload.add_device("nvidia:0", "GPU-0", 100.0)
    history.after_sample("nvidia", sample(1200.0), None, 3.0, {key: workload})
    (target,) = history.recording(workload.view()).targets
    assert target.attributed_energy_joules == pytest.approx(200.0)
    assert (target.energy_joules, target.energy_source, target.samples) == (200.0, "counter", 2)
    assert target.energy_integrated_joules == pytest.approx(200.0)  # from the same baseline
    assert [p.attributed_energy_joules for p in target.points] == pytest.approx([100.0, 200.0])
    assert [p.energy_joules for p in target.points] == pytest.approx([100.0, 200.0])

"""The tpu backend against a real gRPC libtpu metrics server on loopback and fixture sysfs trees."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import grpc
import pytest
from structlog.testing import capture_logs
from tpu_info import device
from tpu_info.metrics import MetricName

from tests.doubles.tpu_runtime import (
    GIB,
    V5E_HBM,
    FakeChip,
    FakeCore,
    FakeLibtpu,
    RuntimeServer,
    free_port,
    tpu_pci_device,
)
from tests.helpers import select, value, wait_until
from warptd.backends.tpu.backend import TpuBackend
from warptd.config import load_settings
from warptd.errors import BackendUnavailableError
from warptd.registry import load_backends

V5E, V4, V3, V7X, GVNIC = "0x0063", "0x005e", "0x0027", "0x0076", "0x0042"


CHIP = [{"backend": "tpu", "device": str(i)} for i in range(3)]


UNREPORTED = (
    "warptd_device_power_watts",
    "warptd_device_power_limit_watts",
    "warptd_device_energy_joules_total",
    "warptd_device_temperature_celsius",
    "warptd_device_clock_hertz",
    "warptd_device_throttle_active",
    "warptd_device_throttle_seconds_total",
)


VALUES = (
    "warptd_device_memory_total_bytes",
    "warptd_device_memory_used_bytes",
    "warptd_device_memory_free_bytes",
    "warptd_device_utilization_ratio",
    "warptd_device_memory_utilization_ratio",
)


@pytest.fixture
def three_chips(sysfs):
    """Three v5e chips on vfio (groups 0-2), a gVNIC (Google, not a TPU) and a virtio NIC."""
    paths = [tpu_pci_device(sysfs, f"0000:00:0{4 + i}.0", V5E, iommu_group=i) for i in range(3)]
    tpu_pci_device(sysfs, "0000:00:07.0", GVNIC, driver="gvnic")
    tpu_pci_device(sysfs, "0000:00:08.0", "0x1000", vendor="0x1af4", driver="virtio-pci")
    return paths


@pytest.fixture
def libtpu() -> FakeLibtpu:
    return FakeLibtpu(
        chips=[
            FakeChip([FakeCore(used=4 * GIB)], duty_pct=35.0, hbm_bw_pct=12.0),
            FakeChip([FakeCore(used=0)], duty_pct=0.0, hbm_bw_pct=0.0),
            FakeChip([FakeCore(used=V5E_HBM)], duty_pct=100.0, hbm_bw_pct=87.5),
        ]
    )


@pytest.fixture
def runtime(libtpu, monkeypatch, settings) -> Iterator[RuntimeServer]:
    server = RuntimeServer(libtpu).start()
    monkeypatch.setattr(settings, "tpu_runtime_address", server.address)
    yield server
    server.stop()


pytestmark = pytest.mark.rig("tpu", doubles=["three_chips", "runtime"])


def errors(samples, kind: str) -> float:
    return value(samples, "warptd_sample_errors_total", backend="tpu", kind=kind)


def test_fixture_ids_are_the_chips_tpu_info_knows():
    assert device.TpuChip.from_pci_device_id(V5E, "0x0000") is device.TpuChip.V5E
    assert device.TpuChip.from_pci_device_id(V4, "0x0000") is device.TpuChip.V4
    assert device.TpuChip.from_pci_device_id(V3, "0x004f") is device.TpuChip.V3
    assert device.TpuChip.from_pci_device_id(V7X, "0x0000") is device.TpuChip.V7X
    assert device.TpuChip.from_pci_device_id(GVNIC, "0x0000") is None


def test_values_in_base_units_for_every_chip(rig, libtpu):
    samples = rig.tick()
    for index, chip in enumerate(libtpu.chips):
        labels = CHIP[index]
        assert value(samples, "warptd_device_up", **labels) == 1
        assert value(samples, "warptd_device_memory_total_bytes", **labels) == V5E_HBM
        assert value(samples, "warptd_device_memory_used_bytes", **labels) == chip.cores[0].used
        assert value(samples, "warptd_device_memory_free_bytes", **labels) == V5E_HBM - chip.cores[0].used
        assert value(samples, "warptd_device_utilization_ratio", **labels) == pytest.approx(
            chip.duty_pct / 100
        )
        assert value(samples, "warptd_device_memory_utilization_ratio", **labels) == pytest.approx(
            chip.hbm_bw_pct / 100
        )
    info = select(samples, "warptd_device_info", **CHIP[0])[0].labels
    assert info["model"] == "TPU v5e"
    assert info["pci_bus_id"] == "0000:00:04.0"
    assert info["uuid"] == "TPU-0000:00:04.0"  # PCI-address based: TPUs expose no serial
    assert info["source"] == "tpu-info"
    assert not select(samples, "warptd_device_up", device="3")  # the gVNIC and virtio NIC are skipped
    assert errors(samples, "sdk_error") == 0 and errors(samples, "timeout") == 0
    # one pass reads each metric once for all chips, not once per chip
    assert set(libtpu.requests.values()) == {1}


def test_identity_nodes_and_extras(settings, three_chips, runtime):
    backend = TpuBackend(settings)
    infos = backend.list_devices()
    assert [i.extra_metrics["device_node"] for i in infos] == ["/dev/vfio/0", "/dev/vfio/1", "/dev/vfio/2"]
    assert infos[0].extra_metrics == {
        "chip_type": "v5e",
        "device_node": "/dev/vfio/0",
        "devices_per_chip": 1,
        "driver": "vfio-pci",
    }
    assert infos[0].memory_gb == device.TpuChip.V5E.value.hbm_gib  # nominal, from tpu-info's table
    assert backend.device_identity(2) == infos[2].uuid == "TPU-0000:00:06.0"
    assert [backend.worker_device(info)[0] for info in backend.list_devices()] == ["xla:0", "xla:1", "xla:2"]
    backend.shutdown()
    backend.shutdown()  # idempotent


def test_unreported_values_are_absent_never_zero_and_no_energy(rig):
    for _ in range(3):
        samples = rig.tick()
        time.sleep(0.05)
    for metric in UNREPORTED:
        assert not select(samples, metric, backend="tpu"), metric
    assert value(samples, "warptd_device_up", **CHIP[0]) == 1


def test_idle_host_runtime_unavailable_devices_stay_up(make_rig, settings, three_chips, monkeypatch, libtpu):
    """No workload: nothing listens on the port. Values absent, not errors; then a workload starts."""
    port = free_port()
    monkeypatch.setattr(settings, "tpu_runtime_address", f"127.0.0.1:{port}")
    with capture_logs() as logs:
        rig = make_rig("tpu")
        for _ in range(2):
            samples = rig.tick()
    for labels in CHIP:
        assert value(samples, "warptd_device_up", **labels) == 1
    for metric in VALUES:
        assert not select(samples, metric, backend="tpu"), metric
    assert sum(s.value for s in select(samples, "warptd_sample_errors_total", backend="tpu")) == 0
    assert [e["event"] for e in logs].count("tpu_runtime_unavailable") == 1
    server = RuntimeServer(libtpu, port=port).start()  # a workload starts: gRPC reconnects in ≤ 5 s
    try:
        assert wait_until(lambda: select(rig.tick(), "warptd_device_memory_used_bytes", **CHIP[0]), 10, 0.1)
        assert value(rig.scrape(), "warptd_device_memory_used_bytes", **CHIP[0]) == 4 * GIB
    finally:
        server.stop()


def test_runtime_failing_mid_run(rig, runtime, libtpu):
    assert value(rig.tick(), "warptd_device_memory_used_bytes", **CHIP[0]) == 4 * GIB
    libtpu.fail = grpc.StatusCode.INTERNAL  # libtpu answers, with an error
    samples = rig.tick()
    for labels in CHIP:
        assert value(samples, "warptd_device_up", **labels) == 1
    for metric in VALUES:
        assert not select(samples, metric, backend="tpu"), metric
    assert errors(samples, "sdk_error") == 1  # the pass stops at the first failure
    runtime.stop()  # the workload exits: UNAVAILABLE, which is not an error
    samples = rig.tick()
    assert errors(samples, "sdk_error") == 1
    assert value(samples, "warptd_device_up", **CHIP[2]) == 1
    assert not select(samples, "warptd_device_utilization_ratio", backend="tpu")


def test_hung_runtime_does_not_hang_the_sampler(rig, libtpu):
    libtpu.stall = True
    started = time.monotonic()
    samples = rig.tick()
    assert time.monotonic() - started < rig.settings.sample_timeout  # the RPC deadline, not the sampler's
    assert value(samples, "warptd_backend_up", backend="tpu", kind="accelerator") == 1
    assert errors(samples, "timeout") == 1
    assert value(samples, "warptd_device_up", **CHIP[1]) == 1
    assert not select(samples, "warptd_device_memory_used_bytes", backend="tpu")
    assert libtpu.requests[MetricName.TOTAL_MEMORY.value] == 1  # nothing more asked after the deadline
    libtpu.release.set()
    libtpu.stall = False
    assert value(rig.tick(), "warptd_device_memory_used_bytes", **CHIP[0]) == 4 * GIB


def test_metric_unknown_to_this_libtpu_is_absent_and_asked_once_per_runtime(rig, libtpu):
    hbm_bw = MetricName.HBM_BW_UTIL.value
    libtpu.unknown = {hbm_bw}
    for _ in range(3):
        samples = rig.tick()
    assert not select(samples, "warptd_device_memory_utilization_ratio", backend="tpu")
    assert value(samples, "warptd_device_utilization_ratio", **CHIP[0]) == pytest.approx(0.35)
    assert libtpu.requests[hbm_bw] == 1 and libtpu.requests[MetricName.DUTY_CYCLE_PCT.value] == 3
    assert errors(samples, "sdk_error") == 0
    libtpu.fail, libtpu.unknown = grpc.StatusCode.UNAVAILABLE, set()  # the workload goes; a newer one comes
    rig.tick()
    libtpu.fail = None
    samples = rig.tick()
    assert value(samples, "warptd_device_memory_utilization_ratio", **CHIP[0]) == pytest.approx(0.12)
    assert libtpu.requests[hbm_bw] == 2


def test_chip_whose_pci_device_disappears_goes_down_others_stay_up(rig, three_chips):
    rig.tick()
    shutil.rmtree(three_chips[1])  # unbound / hot-removed: bus/pci/devices/<addr> now dangles
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **CHIP[1]) == 0
    assert not select(samples, "warptd_device_memory_used_bytes", **CHIP[1])
    assert value(samples, "warptd_device_up", **CHIP[0]) == 1
    assert value(samples, "warptd_device_memory_used_bytes", **CHIP[2]) == V5E_HBM
    assert errors(samples, "device_lost") == 1


def test_two_core_chips_sum_memory_and_map_duty_cycle(settings, sysfs, monkeypatch):
    """v3 on accel nodes: two cores per chip; libtpu reports memory per core, duty cycle per chip."""
    for i in range(2):
        tpu_pci_device(sysfs, f"0000:00:0{4 + i}.0", V3, subsystem="0x004f", accel=i, driver=None)
    v3 = FakeLibtpu(
        chips=[
            FakeChip([FakeCore(1 * GIB, 16 * GIB), FakeCore(2 * GIB, 16 * GIB)], duty_pct=50.0),
            FakeChip([FakeCore(3 * GIB, 16 * GIB), FakeCore(4 * GIB, 16 * GIB)], duty_pct=25.0),
        ]
    )
    server = RuntimeServer(v3).start()
    monkeypatch.setattr(settings, "tpu_runtime_address", server.address)
    try:
        backend = TpuBackend(settings)
        infos = backend.list_devices()
        assert [i.extra_metrics["device_node"] for i in infos] == ["/dev/accel0", "/dev/accel1"]
        assert infos[0].model == "TPU v3"
        assert infos[0].memory_total_bytes is None  # hbm_gib is per core on v3: no nominal size
        reading = backend.read_device(1)
        assert (reading.memory.total, reading.memory.used) == (32 * GIB, 7 * GIB)
        assert reading.utilization.compute == pytest.approx(0.25)
        backend.shutdown()
    finally:
        server.stop()


def test_7x_chip_with_two_functions_reports_per_core_duty_cycle(settings, sysfs, monkeypatch):
    for function in range(2):
        tpu_pci_device(sysfs, f"0000:00:04.{function}", V7X, iommu_group=function)
    fake = FakeLibtpu(
        chips=[FakeChip([FakeCore(10 * GIB, 96 * GIB, 40.0), FakeCore(20 * GIB, 96 * GIB, 60.0)])],
        duty_per_core=True,
    )
    server = RuntimeServer(fake).start()
    monkeypatch.setattr(settings, "tpu_runtime_address", server.address)
    try:
        backend = TpuBackend(settings)
        (info,) = backend.list_devices()
        assert (info.model, info.pci_bus_id, info.extra_metrics["device_node"]) == (
            "TPU7x",
            "0000:00:04.0",
            "/dev/vfio/0",
        )
        reading = backend.read_device(0)
        assert (reading.memory.total, reading.memory.used) == (192 * GIB, 30 * GIB)
        assert reading.utilization.compute == pytest.approx(0.5)
        backend.shutdown()
    finally:
        server.stop()


def test_chips_ordered_by_device_node_as_tpu_info_does(settings, sysfs):
    tpu_pci_device(sysfs, "0000:00:04.0", V5E, iommu_group=10)
    tpu_pci_device(sysfs, "0000:00:05.0", V5E, iommu_group=2)
    tpu_pci_device(sysfs, "0000:00:06.0", V5E, iommu_group=3)
    backend = TpuBackend(settings)
    infos = backend.list_devices()
    assert [i.pci_bus_id for i in infos] == ["0000:00:05.0", "0000:00:06.0", "0000:00:04.0"]
    assert [i.extra_metrics["device_node"] for i in infos] == ["/dev/vfio/2", "/dev/vfio/3", "/dev/vfio/10"]
    backend.shutdown()


def test_without_node_in_sysfs_the_node_is_tpu_infos_chip_path(settings, sysfs):
    tpu_pci_device(sysfs, "0000:00:05.0", V4, driver=None)
    tpu_pci_device(sysfs, "0000:00:04.0", V4, driver=None)
    backend = TpuBackend(settings)
    assert [i.extra_metrics["device_node"] for i in backend.list_devices()] == ["/dev/accel0", "/dev/accel1"]
    assert backend.list_devices()[0].model == "TPU v4"
    backend.shutdown()


def test_default_address_is_libtpus_metrics_port(settings, three_chips):
    backend = TpuBackend(settings)
    assert backend.address == "localhost:8431"
    backend.shutdown()


def test_no_tpu_under_sysfs_is_unavailable_and_skipped_with_a_log_line(settings, sysfs):
    tpu_pci_device(sysfs, "0000:00:07.0", GVNIC, driver="gvnic")  # a Google NIC is not a TPU
    with pytest.raises(BackendUnavailableError, match=r"no TPU chip \(PCI vendor 0x1ae0\)"):
        TpuBackend(settings)
    settings.backends = ["tpu"]
    with capture_logs() as logs:
        loaded = load_backends(settings)
    assert not loaded.accelerators
    assert "no TPU chip" in loaded.unavailable["tpu"]
    assert any(e["event"] == "backend_unavailable" and e["backend"] == "tpu" for e in logs)


def test_this_machine_has_no_tpu():
    if device.get_local_chips()[0] is not None:  # tpu-info's own look at the real /sys
        pytest.skip("this host has TPU chips")
    with pytest.raises(BackendUnavailableError):
        TpuBackend(load_settings(listen="127.0.0.1:0", sysfs="/sys"))

"""The amd and amdsmi backends against the amdsmi double (tests/doubles/amdsmi.py); no GPU or ROCm needed."""

from __future__ import annotations

import time

import pytest

from tests.doubles.amdsmi import TT, U16, U32, FakeAmdsmi, FakeGpu, amdsmi, library_error, wrapper
from tests.helpers import Rig, select, value
from tests.sysfs_tree import drm_card
from warptd.backends.amd.backend import AmdBackend
from warptd.models import GPUInfo

GIB = 2**30


DEV0 = {"backend": "amd", "device": "0"}


DEV1 = {"backend": "amd", "device": "1"}


@pytest.fixture
def fake() -> FakeAmdsmi:
    navi = FakeGpu(
        index=1,
        market_name="AMD Radeon RX 7900 XTX",
        vram_total_mb=24_560,
        vram_used_mb=1_024,
        current_socket_power=U16,  # Navi fills the average only
        average_socket_power=212,
        power_cap_uw=300_000_000,
        temperatures={TT.EDGE: 55, TT.HOTSPOT: 61, TT.VRAM: 58},
        metrics={"vcn_activity": [10, 250]},  # two VCNs, no XGMI; 250 % is out of range: "N/A"
        fan_speed=102,  # of 255
        pcie_replays=0,
        has_residency=False,  # no throttle residency accumulators: violation status NOT_SUPPORTED
    )
    # a consumer card without ECC, so without bad pages
    navi.unsupported = {
        "amdsmi_get_gpu_total_ecc_count",
        "amdsmi_get_gpu_bad_page_info",
    }
    fake = FakeAmdsmi([FakeGpu(index=0), navi])
    with fake.installed():
        yield fake
        assert fake.initialised == 0, "a backend was not shut down: the shared amdsmi session leaked"


pytestmark = pytest.mark.rig("amd", doubles=["fake"])


def test_values_in_base_units(rig, fake):
    mi300 = fake.gpus[0]
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **DEV0) == 1
    assert value(samples, "warptd_device_memory_total_bytes", **DEV0) == 196_592 * 2**20  # MB
    assert value(samples, "warptd_device_memory_used_bytes", **DEV0) == 2 * GIB
    assert value(samples, "warptd_device_memory_free_bytes", **DEV0) == (196_592 - 2048) * 2**20
    assert value(samples, "warptd_device_utilization_ratio", **DEV0) == pytest.approx(0.35)
    assert value(samples, "warptd_device_memory_utilization_ratio", **DEV0) == pytest.approx(0.12)
    assert value(samples, "warptd_device_power_watts", **DEV0) == 480  # current_socket_power, W
    assert value(samples, "warptd_device_power_limit_watts", **DEV0) == 750  # power_cap, µW
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 5000  # 5000 * 2^16 ticks of 2^-16 J
    assert value(samples, "warptd_device_temperature_celsius", sensor="edge", **DEV0) == 40
    assert value(samples, "warptd_device_temperature_celsius", sensor="junction", **DEV0) == 48
    assert value(samples, "warptd_device_temperature_celsius", sensor="memory", **DEV0) == 41
    assert value(samples, "warptd_device_clock_hertz", clock="graphics", **DEV0) == 2100e6
    assert value(samples, "warptd_device_clock_hertz", clock="memory", **DEV0) == 1300e6
    info = select(samples, "warptd_device_info", **DEV0)[0].labels
    assert info["uuid"] == mi300.uuid
    assert info["model"] == "AMD Instinct MI300X"
    assert info["driver_version"] == "6.10.5"
    assert info["compute_capability"] == "gfx942"
    assert info["pci_bus_id"] == "0000:03:00.0"
    assert all(s.labels["uuid"] == mi300.uuid for s in samples if s.labels.get("device") == "0")
    # the Navi card: average_socket_power, its own cap, its own identity
    assert value(samples, "warptd_device_power_watts", **DEV1) == 212
    assert value(samples, "warptd_device_power_limit_watts", **DEV1) == 300
    assert value(samples, "warptd_device_memory_total_bytes", **DEV1) == 24_560 * 2**20
    info1 = select(samples, "warptd_device_info", **DEV1)[0].labels
    assert info1["model"] == "AMD Radeon RX 7900 XTX" and info1["pci_bus_id"] == "0000:23:00.0"


def test_identity_and_extras(settings, fake):
    backend = AmdBackend(settings)
    try:
        devices = backend.list_devices()
        assert [d.uuid for d in devices] == [g.uuid for g in fake.gpus]
        assert devices[0].memory_gb == 192.0
        assert devices[0].extra_metrics == {
            "device_id": "0x74a1",
            "serial": "0xA1B2C3D4E5F60718",
            "compute_units": 304,
            "hip_id": 0,
        }
        assert backend.device_identity(1) == fake.gpus[1].uuid
        assert backend.get_driver_version() == "6.10.5"
    finally:
        backend.shutdown()


def test_several_gpus_each_reported(settings):
    fake = FakeAmdsmi([FakeGpu(index=i, current_socket_power=300 + i) for i in range(3)])
    settings.backends = ["amd"]
    with fake.installed():
        rig = Rig(settings)
        try:
            samples = rig.tick()
            for i in range(3):
                assert value(samples, "warptd_device_power_watts", backend="amd", device=str(i)) == 300 + i
                info = select(samples, "warptd_device_info", backend="amd", device=str(i))[0].labels
                assert info["pci_bus_id"] == fake.gpus[i].pci_bus_id
        finally:
            rig.close()


def test_init_and_handles_once_shared_with_the_power_backend(rig, fake):
    for _ in range(4):
        rig.tick()
    assert fake.calls("amdsmi_init") == 1  # amd and amdsmi share one session
    assert fake.calls("amdsmi_get_processor_handles") == 1
    assert fake.calls("amdsmi_get_gpu_metrics_info") >= 4  # power, energy and the rest from the table
    rig.close()
    assert fake.calls("amdsmi_shut_down") == 1 and fake.initialised == 0


def test_not_supported_and_na_values_are_absent_not_zero(rig, fake):
    gpu = fake.gpus[1]
    gpu.unsupported |= {"amdsmi_get_energy_count", "amdsmi_get_power_cap_info"}
    gpu.average_socket_power = U16  # "N/A" from the package
    gpu.gfx_activity, gpu.umc_activity = U16, U16
    gpu.temperatures = {TT.HOTSPOT: 61}  # edge and VRAM sensors answer NOT_SUPPORTED
    gpu.clocks_mhz[amdsmi.AmdSmiClkType.MEM] = U32  # "N/A"
    samples = rig.tick()
    for name in (
        "warptd_device_power_watts",
        "warptd_device_power_limit_watts",
        "warptd_device_utilization_ratio",
        "warptd_device_energy_joules_total",
        "warptd_device_throttle_active",
    ):
        assert not select(samples, name, **DEV1), name
        assert select(samples, name, **DEV0), name
    temps = {s.labels["sensor"] for s in select(samples, "warptd_device_temperature_celsius", **DEV1)}
    assert temps == {"junction"}
    assert {s.labels["clock"] for s in select(samples, "warptd_device_clock_hertz", **DEV1)} == {"graphics"}
    assert value(samples, "warptd_device_up", **DEV1) == 1
    assert value(samples, "warptd_sample_errors_total", backend="amd", kind="sdk_error") == 0
    # NOT_SUPPORTED is asked once, not every sample
    before = fake.calls("amdsmi_get_power_cap_info")
    rig.tick("amd")
    assert fake.calls("amdsmi_get_power_cap_info") == before + 1  # GPU 0 only
    assert fake.calls("amdsmi_get_energy_count") == 0  # from each GPU's table (GPU 1's has none)
    assert fake.calls("amdsmi_get_violation_status") == 0  # 100 ms each: throttling comes from the table


def test_power_falls_back_to_average_when_current_is_uint32_max(rig, fake):
    gpu = fake.gpus[0]
    gpu.current_socket_power, gpu.average_socket_power = U32, 455  # UINT32_MAX passes the package
    samples = rig.tick()
    assert value(samples, "warptd_device_power_watts", **DEV0) == 455


def test_gpu_lost_mid_run_drops_its_series_others_keep_updating(rig, fake):
    rig.tick()
    fake.gpus[0].lost = True  # every call answers AMDSMI_STATUS_NOT_FOUND
    fake.gpus[1].average_socket_power = 250
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **DEV0) == 0
    for name in (
        "warptd_device_power_watts",
        "warptd_device_memory_used_bytes",
        "warptd_device_energy_joules_total",
        "warptd_device_temperature_celsius",
    ):
        assert not select(samples, name, **DEV0), name
    assert value(samples, "warptd_device_power_watts", **DEV1) == 250
    assert value(samples, "warptd_device_up", **DEV1) == 1
    assert value(samples, "warptd_backend_up", backend="amd") == 1
    assert value(samples, "warptd_sample_errors_total", backend="amd", kind="device_lost") == 1
    assert value(samples, "warptd_power_domain_up", source="amdsmi", domain="gpu0") == 0
    assert value(samples, "warptd_power_domain_up", source="amdsmi", domain="gpu1") == 1
    fake.gpus[0].lost = False
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **DEV0) == 1


@pytest.mark.parametrize(
    ("raised", "kind"),
    [
        (wrapper.AMDSMI_STATUS_NO_PERM, "permission"),
        (wrapper.AMDSMI_STATUS_TIMEOUT, "timeout"),
        (wrapper.AMDSMI_STATUS_IO, "sdk_error"),
        (wrapper.AMDSMI_STATUS_DRIVER_NOT_LOADED, "device_lost"),
        (wrapper.AMDSMI_STATUS_AMDGPU_RESTART_ERR, "device_lost"),
        (RuntimeError("boom"), "unexpected"),
    ],
)
def test_sdk_errors_are_classified_and_never_escape(settings, fake, raised, kind):
    backend = AmdBackend(settings)
    try:
        fake.gpus[0].raises["amdsmi_get_power_info"] = raised
        assert backend.devices[0].power() is None
        assert backend.take_errors() == {kind: 1}
        assert backend.devices[1].power() == 212  # the other GPU answers
    finally:
        backend.shutdown()


def test_classify_error_maps_the_package_status_codes(settings, fake):
    backend = AmdBackend(settings)
    try:
        cases = {
            wrapper.AMDSMI_STATUS_NOT_SUPPORTED: "not_supported",
            wrapper.AMDSMI_STATUS_NOT_YET_IMPLEMENTED: "not_supported",
            wrapper.AMDSMI_STATUS_NO_PERM: "permission",
            wrapper.AMDSMI_STATUS_TIMEOUT: "timeout",
            wrapper.AMDSMI_STATUS_NOT_FOUND: "device_lost",
            wrapper.AMDSMI_STATUS_UNKNOWN_ERROR: "sdk_error",
        }
        for code, kind in cases.items():
            assert backend.classify_error(library_error(code)) == kind, code
        assert backend.classify_error(amdsmi.AmdSmiTimeoutException()) == "timeout"
        assert backend.classify_error(amdsmi.AmdSmiParameterException(1, int)) == "unexpected"
    finally:
        backend.shutdown()


def test_energy_counter_reset_stays_monotonic(rig, fake):
    gpu = fake.gpus[0]
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 5000
    assert value(samples, "warptd_energy_joules_total", source="amdsmi", domain="gpu0") == 5000
    gpu.energy_accumulator += 2000 * 2**16  # +2000 J in 2^-16 J ticks
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 7000
    gpu.energy_accumulator = 300 * 2**16  # driver reload: the accumulator restarts (300 J since)
    time.sleep(0.5)  # 300 J since the reload is plausible at the 750 W cap only after 0.4 s (issue 23)
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 7300
    assert value(samples, "warptd_energy_joules_total", source="amdsmi", domain="gpu0") == 7300
    gpu.energy_accumulator = 400 * 2**16  # +100 J
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 7400


def test_energy_integrated_from_power_without_a_counter(rig, fake):
    import time

    fake.gpus[1].unsupported.add("amdsmi_get_energy_count")
    fake.gpus[1].average_socket_power = 200
    rig.tick()
    time.sleep(0.25)
    samples = rig.tick()
    joules = value(samples, "warptd_device_energy_joules_total", **DEV1)
    assert 200 * 0.2 < joules < 200 * 0.6


def test_older_rocm_energy_key_was_power(settings, fake, monkeypatch):
    backend = AmdBackend(settings)
    try:
        old = {"power": 64_000_000, "counter_resolution": 15.625, "timestamp": 1}
        monkeypatch.setattr(amdsmi, "amdsmi_get_energy_count", lambda handle: old)
        assert backend.devices[0].energy() == 1000
    finally:
        backend.shutdown()


def _throttle(samples, name: str) -> dict[str, float]:
    return {s.labels["reason"]: s.value for s in select(samples, name, **DEV0)}


def test_throttle_seconds_exact_from_the_residency_accumulators(rig, fake):
    """PPT 1 s of a 2 s interval is 1 s of throttling, not a percentage of the last 100 ms."""
    gpu = fake.gpus[0]
    del gpu.residency["vr_thm_residency_acc"]  # all ones in the table: "N/A", not supported
    rig.tick()
    gpu.throttling |= {"ppt_residency_acc", "hbm_thm_residency_acc"}
    fake.advance(2.0)
    samples = rig.tick()
    active = _throttle(samples, "warptd_device_throttle_active")
    assert active == {"sw_power_cap": 1, "sw_thermal_slowdown": 0, "hw_thermal_slowdown": 0, "hbm_thermal": 1}
    seconds = _throttle(samples, "warptd_device_throttle_seconds_total")
    assert seconds == {**dict.fromkeys(active, 0), "sw_power_cap": 2.0, "hbm_thermal": 2.0}
    fake.advance(1.0)  # still at the power cap for 1 s, then PROCHOT instead for 1 s
    gpu.throttling = {"prochot_residency_acc"}
    fake.advance(1.0)
    samples = rig.tick()
    assert _throttle(samples, "warptd_device_throttle_seconds_total") == {
        "sw_power_cap": 3.0,
        "sw_thermal_slowdown": 0,
        "hw_thermal_slowdown": 1.0,
        "hbm_thermal": 3.0,
    }
    assert _throttle(samples, "warptd_device_throttle_active")["hw_thermal_slowdown"] == 1
    assert fake.calls("amdsmi_get_violation_status") == 0
    assert not select(samples, "warptd_device_throttle_active", **DEV1)  # Navi: no accumulators


def test_amdsmi_power_backend_domains(fake, make_rig):
    rig = make_rig("amdsmi")
    assert list(rig.sampler.backends) == ["amdsmi"]
    samples = rig.tick()
    assert value(samples, "warptd_power_watts", source="amdsmi", domain="gpu0") == 480
    assert value(samples, "warptd_power_watts", source="amdsmi", domain="gpu1") == 212
    assert value(samples, "warptd_energy_joules_total", source="amdsmi", domain="gpu0") == 5000
    gpus = rig.loaded.power[0].devices  # the companion's devices, read through their contract
    assert [gpus.read_device(i).power_watts for i in range(2)] == [480.0, 212.0]
    assert gpus.list_devices()[0].uuid == fake.gpus[0].uuid


def test_pytorch_device_string_and_worker_pinning(settings, fake):
    fake.gpus[0].hip_id, fake.gpus[1].hip_id = 1, 0  # HIP orders the GPUs differently from amdsmi
    backend = AmdBackend(settings)
    try:
        devices = backend.list_devices()
        assert backend.worker_device(devices[0]) == ("cuda:0", {"HIP_VISIBLE_DEVICES": "1"})
        assert backend.worker_device(devices[1]) == ("cuda:0", {"HIP_VISIBLE_DEVICES": "0"})
        unknown = GPUInfo(index=5, model="AMD GPU")
        assert backend.worker_device(unknown) == ("cuda:5", {})
    finally:
        backend.shutdown()


@pytest.mark.parametrize("why", ["not_supported", "older_amdsmi"])
def test_pytorch_device_string_without_enumeration_info(settings, fake, monkeypatch, why):
    for gpu in fake.gpus:
        gpu.unsupported.add("amdsmi_get_gpu_enumeration_info")
    if why == "older_amdsmi":
        monkeypatch.delattr(amdsmi, "amdsmi_get_gpu_enumeration_info")
    backend = AmdBackend(settings)
    try:
        devices = backend.list_devices()
        assert backend.worker_device(devices[1]) == ("cuda:1", {})
        assert devices[1].uuid == fake.gpus[1].uuid
        assert backend.take_errors() == {}
    finally:
        backend.shutdown()


def test_hwmon_releases_the_card_amdsmi_serves(fake, make_rig, sysfs):
    """One physical card, seen by amdsmi and by the amdgpu sysfs: only ``amd`` exports it."""
    drm_card(
        sysfs,
        0,
        "amdgpu",
        fake.gpus[0].pci_bus_id,
        {"device": "0x74a1", "unique_id": "a1b2c3d4e5f60718", "mem_info_vram_total": 192 * GIB},
        {"power1_input": 480_000_000, "temp1_input": 48000, "temp1_label": "junction"},
    )
    xe = drm_card(sysfs, 1, "xe", "0000:c1:00.0", {"device": "0xe20b"}, {"energy1_input": 1_000_000})
    rig = make_rig("amd", "hwmon")
    samples = rig.tick()
    hwmon = select(samples, "warptd_device_info", backend="hwmon")
    assert [s.labels["pci_bus_id"] for s in hwmon] == [xe.name]  # only the card amdsmi does not serve
    amd = select(samples, "warptd_device_info", backend="amd")
    assert [s.labels["pci_bus_id"] for s in amd] == [g.pci_bus_id for g in fake.gpus]
    assert value(samples, "warptd_device_power_watts", **DEV0) == 480


def test_hwmon_unavailable_when_amdsmi_serves_all_its_cards(fake, make_rig, sysfs):
    for number, gpu in enumerate(fake.gpus):
        drm_card(sysfs, number, "amdgpu", gpu.pci_bus_id, {"device": "0x74a1"}, {"power1_average": 1})
    rig = make_rig("amd", "hwmon")
    assert rig.loaded.unavailable["hwmon"] == "every device is served by an SDK backend"
    samples = rig.tick()
    assert not [s for s in samples if s.labels.get("backend") == "hwmon"]
    assert len(select(samples, "warptd_device_up", backend="amd")) == 2


def _by(samples, name: str, label: str, **labels: str) -> dict[str, float]:
    return {s.labels[label]: s.value for s in select(samples, name, **labels)}


def test_health_activity_and_traffic_in_base_units(rig, fake):
    samples = rig.tick()
    ecc = _by(samples, "warptd_device_ecc_errors_total", "kind", **DEV0)
    assert ecc == {"corrected": 5, "uncorrected": 0}  # the deferred count is not exported
    assert value(samples, "warptd_device_pcie_replays_total", **DEV0) == 2
    assert value(samples, "warptd_device_pcie_replays_total", **DEV1) == 0
    rx = _by(samples, "warptd_device_nvlink_link_bytes_total", "link", direction="rx", **DEV0)
    tx = _by(samples, "warptd_device_nvlink_link_bytes_total", "link", direction="tx", **DEV0)
    assert rx == {"0": 1_000 * 1024, "1": 2_000 * 1024, **dict.fromkeys("23456", 0)}  # KB; link 7: N/A
    assert tx["0"] == 4_000 * 1024 and tx["1"] == 8_000 * 1024 and len(tx) == 7
    vcn = _by(samples, "warptd_device_engine_active_ratio", "instance", engine="vcn", **DEV0)
    assert vcn == pytest.approx({"0": 0.2, "1": 0.0, "2": 0.07, "3": 0.0})
    jpeg = _by(samples, "warptd_device_engine_active_ratio", "instance", engine="jpeg", **DEV0)
    assert jpeg == pytest.approx({"0": 0.03, "1": 0.0, "2": 0.0, "3": 0.0})  # the other 28: N/A
    assert not select(samples, "warptd_device_fan_speed_ratio", **DEV0)  # passively cooled
    # the Navi card: a fan, one VCN in range, no ECC and no XGMI
    assert value(samples, "warptd_device_fan_speed_ratio", fan="0", **DEV1) == pytest.approx(102 / 255)
    assert _by(samples, "warptd_device_engine_active_ratio", "instance", **DEV1) == {"0": 0.1}
    assert not select(samples, "warptd_device_ecc_errors_total", **DEV1)
    assert not select(samples, "warptd_device_nvlink_link_bytes_total", **DEV1)
    assert value(samples, "warptd_sample_errors_total", backend="amd", kind="invalid_value") == 0


def test_retired_pages_pending_from_the_bad_pages(rig, fake):
    status = wrapper.AMDSMI_MEM_PAGE_STATUS_RESERVED, wrapper.AMDSMI_MEM_PAGE_STATUS_PENDING
    samples = rig.tick()
    assert value(samples, "warptd_device_retired_pages_pending", **DEV0) == 0  # no bad pages
    assert not select(samples, "warptd_device_retired_pages_pending", **DEV1)  # no ECC, no RAS
    fake.gpus[0].bad_pages = [status[0], status[0]]  # retired already: nothing pending
    assert value(rig.tick(), "warptd_device_retired_pages_pending", **DEV0) == 0
    fake.gpus[0].bad_pages.append(status[1])  # retired at the next driver load
    assert value(rig.tick(), "warptd_device_retired_pages_pending", **DEV0) == 1


def test_one_metrics_table_per_read_and_unsupported_asked_once(rig, fake):
    fake.gpus[1].unsupported.add("amdsmi_get_gpu_metrics_info")
    rig.tick()
    before = {name: fake.calls(name) for name in fake.mocks}
    for _ in range(3):
        samples = rig.tick("amd")
    delta = {name: fake.calls(name) - before[name] for name in before}
    assert delta["amdsmi_get_gpu_metrics_info"] == 3  # GPU 0 only, once a read
    assert delta["amdsmi_get_gpu_total_ecc_count"] == 3  # GPU 1: NOT_SUPPORTED, asked once
    assert delta["amdsmi_get_gpu_fan_speed"] == 3  # GPU 1 only
    assert delta["amdsmi_get_gpu_fan_speed_max"] == 0  # static: read at the first sample only
    assert delta["amdsmi_get_gpu_pci_replay_counter"] == 6
    assert delta["amdsmi_get_gpu_bad_page_info"] == 3  # GPU 1: NOT_SUPPORTED, asked once
    assert select(samples, "warptd_device_engine_active_ratio", **DEV0)
    assert not select(samples, "warptd_device_engine_active_ratio", **DEV1)
    assert value(samples, "warptd_device_fan_speed_ratio", fan="0", **DEV1) == pytest.approx(0.4)
    assert value(samples, "warptd_sample_errors_total", backend="amd", kind="sdk_error") == 0


def test_health_and_traffic_counters_stay_monotonic_across_a_driver_reload(rig, fake):
    gpu = fake.gpus[0]
    totals = []
    # ECC and replays count since the driver loaded, the XGMI accumulators since the firmware did:
    # a reload starts them over, and the exported totals keep growing.
    for correctable, replays, read_kb in ((5, 2, 1_000), (9, 4, 1_500), (1, 0, 200), (3, 1, 300)):
        gpu.ecc_correctable, gpu.pcie_replays = correctable, replays
        gpu.metrics["xgmi_read_data_acc"] = [read_kb]
        samples = rig.tick("amd")
        totals.append(
            (
                value(samples, "warptd_device_ecc_errors_total", kind="corrected", **DEV0),
                value(samples, "warptd_device_pcie_replays_total", **DEV0),
                value(samples, "warptd_device_nvlink_link_bytes_total", link="0", direction="rx", **DEV0),
            )
        )
    assert totals == [
        (5, 2, 1_000 * 1024),
        (9, 4, 1_500 * 1024),
        (10, 4, 1_700 * 1024),
        (12, 5, 1_800 * 1024),
    ]


def test_lost_gpu_drops_its_health_series(rig, fake):
    rig.tick()
    fake.gpus[0].lost = True
    samples = rig.tick()
    for name in ("warptd_device_ecc_errors_total", "warptd_device_nvlink_link_bytes_total"):
        assert not select(samples, name, **DEV0), name
    assert value(samples, "warptd_device_pcie_replays_total", **DEV1) == 0


def test_bad_pages_answered_as_a_sentence_read_as_none_pending(rig, fake, monkeypatch):
    """Some amdsmi releases answer "No bad pages found." instead of an empty list: nothing pending,
    and the backend keeps sampling (it once raised outside the guarded call and went stale)."""
    backend = next(b for b in rig.loaded.accelerators if b.name == "amd")
    monkeypatch.setattr(backend._sdk, "amdsmi_get_gpu_bad_page_info", lambda handle: "No bad pages found.")
    samples = rig.tick()
    assert value(samples, "warptd_backend_up", backend="amd") == 1
    assert value(samples, "warptd_device_retired_pages_pending", **DEV0) == 0


def test_counter_power_matches_socket_power(settings, fake):
    """The accumulator counts 2^-16 J: the power from its delta is the socket power the firmware
    reports, where amdsmi's rounded 15.3 µJ would read 0.27 % high."""
    backend = AmdBackend(settings)
    try:
        first = backend.devices[0].energy()
        fake.advance(10.0)
        second = backend.devices[0].energy()
        assert (second - first) / 10.0 == pytest.approx(backend.devices[0].power(), rel=1e-5)
        assert first == 5000  # 5000 * 2^16 ticks
    finally:
        backend.shutdown()


def test_health_counters_read_at_the_health_cadence_the_table_every_sample(settings, fake, make_rig):
    settings.interval, settings.health_interval = 0.2, 60.0
    rig = make_rig("amd")
    before = {name: fake.calls(name) for name in fake.mocks}
    for _ in range(3):
        samples = rig.tick("amd")
    delta = {name: fake.calls(name) - before[name] for name in before}
    assert delta["amdsmi_get_gpu_metrics_info"] == 6  # both GPUs, once a sample
    # each GPU once, at its first sample (the Navi's NOT_SUPPORTED too), not once a sample
    assert delta["amdsmi_get_gpu_total_ecc_count"] == 2
    assert delta["amdsmi_get_gpu_pci_replay_counter"] == 2
    assert delta["amdsmi_get_gpu_bad_page_info"] == 2
    assert delta["amdsmi_get_violation_status"] == 0
    assert delta["amdsmi_get_power_cap_info"] == 2  # the cap and the fan change on events too
    assert delta["amdsmi_get_gpu_fan_speed"] == 1  # the Navi's (the MI300X has none)
    assert value(samples, "warptd_device_power_limit_watts", **DEV1) == 300
    assert value(samples, "warptd_device_fan_speed_ratio", fan="0", **DEV1) == pytest.approx(0.4)
    # the values read at the first sample stay exported in between
    ecc = _by(samples, "warptd_device_ecc_errors_total", "kind", **DEV0)
    assert ecc == {"corrected": 5, "uncorrected": 0}
    assert value(samples, "warptd_device_pcie_replays_total", **DEV0) == 2
    assert value(samples, "warptd_device_retired_pages_pending", **DEV0) == 0


def test_one_metrics_table_read_a_sample_feeds_power_energy_activity_and_clocks(rig, fake):
    """amdsmi's activity, power, energy and clock getters each read the whole table again (an SMU round
    trip on MI300): a sample reads it once per GPU, the companion power domains included."""
    rig.tick()
    before = [gpu.table_reads for gpu in fake.gpus]
    for _ in range(3):
        samples = rig.tick()
    assert [gpu.table_reads - read for gpu, read in zip(fake.gpus, before, strict=True)] == [3, 3]
    for name in ("amdsmi_get_gpu_activity", "amdsmi_get_power_info", "amdsmi_get_energy_count"):
        assert fake.calls(name) == 0, name
    assert fake.calls("amdsmi_get_clock_info") == 0
    assert value(samples, "warptd_power_watts", source="amdsmi", domain="gpu0") == 480
    assert value(samples, "warptd_device_clock_hertz", clock="memory", **DEV1) == 1300e6


def test_the_power_backend_alone_reads_one_table_per_gpu(fake, make_rig):
    rig = make_rig("amdsmi")
    before = [gpu.table_reads for gpu in fake.gpus]
    samples = rig.tick()
    assert [gpu.table_reads - read for gpu, read in zip(fake.gpus, before, strict=True)] == [1, 1]
    assert value(samples, "warptd_energy_joules_total", source="amdsmi", domain="gpu0") == 5000


def test_a_gpu_without_a_table_asks_each_getter_charged_by_kind(rig, fake):
    fake.gpus[1].unsupported.add("amdsmi_get_gpu_metrics_info")
    samples = rig.tick()
    assert value(samples, "warptd_device_power_watts", **DEV1) == 212
    assert value(samples, "warptd_device_utilization_ratio", **DEV1) == pytest.approx(0.35)
    assert value(samples, "warptd_device_clock_hertz", clock="graphics", **DEV1) == 2100e6
    assert value(samples, "warptd_device_energy_joules_total", **DEV1) == 5000
    reads = {s.labels["read"]: s.value for s in select(samples, "warptd_backend_reads_total", backend="amd")}
    # GPU 0 its table; GPU 1 the getters (its table NOT_SUPPORTED, asked once); both the rest, and
    # their VRAM at the start too (the identity's total)
    assert reads == {
        "metrics_table": 2,
        "health": 2,
        "memory": 4,
        "temperatures": 2,
        "utilization": 1,
        "power": 1,
        "energy": 1,
        "clocks": 2,
    }


def test_the_table_read_s_price_is_charged_to_metrics_table(fake, make_rig):
    """The double burns a price per table read in the calling thread, as the driver's time is spent:
    exported as the amd backend's read=metrics_table CPU, not spread over the values read from it."""
    fake.table_read_cpu_s = 0.004
    rig = make_rig("amd")
    samples = rig.tick("amd")
    cpu = {
        s.labels["read"]: s.value
        for s in select(samples, "warptd_backend_read_cpu_seconds_total", backend="amd")
    }
    assert cpu["metrics_table"] >= 2 * 0.004
    assert all(seconds < 0.004 for read, seconds in cpu.items() if read != "metrics_table"), cpu


def test_sixty_four_partitions_sample_at_1_hz_without_a_stale_tick(settings):
    """8 MI300X in CPX: 64 logical GPUs, read by the real sampler within a 1 s timeout at 1 Hz; the
    violation status's 100 ms each would take 6.4 s."""
    fake = FakeAmdsmi.partitioned(sockets=8, partitions=8)
    settings.backends = ["amd"]
    settings.interval, settings.health_interval, settings.sample_timeout = 1.0, 1.0, 1.0
    with fake.installed():
        rig = Rig(settings)
        try:
            for _ in range(3):
                samples = rig.tick("amd")
                assert value(samples, "warptd_backend_up", backend="amd") == 1
                assert len(select(samples, "warptd_device_up", backend="amd")) == 64
            assert value(samples, "warptd_sample_errors_total", backend="amd", kind="timeout") == 0
            assert value(samples, "warptd_sample_errors_total", backend="amd", kind="hung") == 0
        finally:
            rig.close()


def test_each_device_keeps_its_pci_address_and_only_a_failed_one_is_asked_again(settings, fake):
    """The address lives in the device object: one that answered is not read again because another
    device's read failed (before issue 24 every address was read again until all had answered)."""
    fake.gpus[1].raises["amdsmi_get_gpu_device_bdf"] = wrapper.AMDSMI_STATUS_BUSY
    backend = AmdBackend(settings)
    try:
        first = backend.list_devices()
        assert [d.pci_bus_id for d in first] == ["0000:03:00.0", None]
        del fake.gpus[1].raises["amdsmi_get_gpu_device_bdf"]
        before = fake.calls("amdsmi_get_gpu_device_bdf")
        again = backend.list_devices()
        assert [d.pci_bus_id for d in again] == ["0000:03:00.0", "0000:23:00.0"]
        assert fake.calls("amdsmi_get_gpu_device_bdf") == before + 1  # GPU 1's only
        backend.list_devices()
        assert fake.calls("amdsmi_get_gpu_device_bdf") == before + 1  # both kept now
    finally:
        backend.shutdown()

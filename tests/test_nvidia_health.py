"""NVIDIA health, traffic and nvidia-smi values through the C NVML double and the real pynvml."""

from __future__ import annotations

import time

import pynvml
import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles.nvml import FakeNvml
from tests.helpers import select, value

DEV0 = {"backend": "nvidia", "device": "0"}
DEV1 = {"backend": "nvidia", "device": "1"}
KIB = 1024


pytestmark = pytest.mark.rig(
    "nvidia",
    doubles=["fake_nvml"],
    metrics_include=["warptd_device_ecc_lifetime_errors_total"],  # opt-in by default
)


def test_ecc_counts_are_counters_by_kind(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.ecc_volatile[0], gpu.ecc_volatile[1] = 7, 2
    gpu.ecc_aggregate[0], gpu.ecc_aggregate[1] = 120, 9
    rig.tick()
    gpu.ecc_volatile[0], gpu.ecc_volatile[1] = 10, 3
    samples = rig.tick()
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 10
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="uncorrected") == 3
    assert value(samples, "warptd_device_ecc_lifetime_errors_total", **DEV0, kind="corrected") == 120
    assert value(samples, "warptd_device_ecc_lifetime_errors_total", **DEV0, kind="uncorrected") == 9
    assert value(samples, "warptd_device_ecc_errors_total", **DEV1, kind="uncorrected") == 0


def test_ecc_counter_reset_at_a_driver_reload_stays_monotonic(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.ecc_volatile[0], gpu.pcie_replays = 40, 5
    gpu.nvlink_errors[3][2] = 11  # link 3, replay
    rig.tick()
    gpu.reload_driver()  # every volatile count restarts from 0
    gpu.ecc_volatile[0], gpu.pcie_replays = 4, 1
    gpu.nvlink_errors[3][2] = 2
    samples = rig.tick()
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 44
    assert value(samples, "warptd_device_pcie_replays_total", **DEV0) == 6
    assert value(samples, "warptd_device_nvlink_link_errors_total", **DEV0, link="3", kind="replay") == 13


def test_row_remapping_and_page_retirement(rig, fake_nvml):
    ampere, volta = fake_nvml.gpus
    ampere.remapped[0], ampere.remapped[1], ampere.remapped[2], ampere.remapped[3] = 3, 1, 1, 0
    volta.retires_pages = 1  # pre-Ampere: pages are retired, rows are not remapped
    volta.retired[0], volta.retired[1], volta.retired[2] = 4, 2, 1
    samples = rig.tick()
    assert value(samples, "warptd_device_remapped_rows", **DEV0, kind="correctable") == 3
    assert value(samples, "warptd_device_remapped_rows", **DEV0, kind="uncorrectable") == 1
    assert value(samples, "warptd_device_row_remap_pending", **DEV0) == 1
    assert value(samples, "warptd_device_row_remap_failure", **DEV0) == 0
    assert not select(samples, "warptd_device_retired_pages", **DEV0)  # Ampere+: not supported, absent
    assert value(samples, "warptd_device_retired_pages", **DEV1, cause="single_bit_ecc") == 4
    assert value(samples, "warptd_device_retired_pages", **DEV1, cause="double_bit_ecc") == 2
    assert value(samples, "warptd_device_retired_pages_pending", **DEV1) == 1
    for name in ("warptd_device_remapped_rows", "warptd_device_row_remap_pending"):
        assert not select(samples, name, **DEV1)
    # The remapped-rows call stands in only where the fields are missing, and is then not asked again
    assert fake_nvml.calls("nvmlDeviceGetRemappedRows") == 1


#: The fields of NVIDIA's table the double answers as given (tests/doubles/nvml.py FIELD_ANSWERS): field
#: id, the series it fills (its family, its label values) and its value on /metrics, the answer converted.
AS_GIVEN: list[tuple[int, str, dict[str, str], float]] = [
    (173, "warptd_device_pcie_correctable_errors_total", {}, 12),
]


@pytest.mark.parametrize("given", AS_GIVEN, ids=lambda given: str(given[0]))
def test_a_field_answered_as_given_is_its_series_and_absent_where_the_gpu_lacks_it(
    make_rig, fake_nvml, settings, given
):
    field_id, name, labels, expected = given
    settings.metrics_include = [name]  # an opt-in family too
    fake_nvml.gpus[1].unsupported_fields = {field_id}  # a driver or GPU without it: absent, never 0
    samples = make_rig("nvidia").tick()
    assert value(samples, name, **DEV0, **labels) == expected
    assert not select(samples, name, **DEV1)


def test_remapped_rows_call_where_the_driver_lacks_the_fields(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.unsupported_fields = {142, 143, 144, 145, 94}
    gpu.remapped[0], gpu.remapped[3] = 6, 1
    gpu.pcie_replays = 9
    samples = rig.tick()
    assert value(samples, "warptd_device_remapped_rows", **DEV0, kind="correctable") == 6
    assert value(samples, "warptd_device_row_remap_failure", **DEV0) == 1
    assert value(samples, "warptd_device_pcie_replays_total", **DEV0) == 9
    assert fake_nvml.calls("nvmlDeviceGetPcieReplayCounter") == 1  # only GPU 0 lacks field 94


def test_nvlink_errors_per_link_and_kind(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.nvlink_count = 12
    gpu.nvlink_errors[0][0] = 1  # link 0 CRC flit: id 32
    gpu.nvlink_errors[5][1] = 2  # link 5 CRC data: id 44
    gpu.nvlink_errors[6][2] = 3  # link 6 replay: id 108 (the second block)
    gpu.nvlink_errors[11][3] = 4  # link 11 recovery: id 119
    samples = rig.tick()
    errors = "warptd_device_nvlink_link_errors_total"
    assert value(samples, errors, **DEV0, link="0", kind="crc_flit") == 1
    assert value(samples, errors, **DEV0, link="5", kind="crc_data") == 2
    assert value(samples, errors, **DEV0, link="6", kind="replay") == 3
    assert value(samples, errors, **DEV0, link="11", kind="recovery") == 4
    assert len(select(samples, errors, **DEV0)) == 12 * 4
    assert len(select(samples, errors, **DEV1)) == 18 * 4  # 18 links: ids for 12, the call for 6 more


def test_traffic_counters_in_bytes(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.pcie_bytes[0], gpu.pcie_bytes[1] = 5_000_000, 7_000_000
    gpu.nvlink_kib[17][0], gpu.nvlink_kib[17][1] = 300, 500
    samples = rig.tick()
    assert value(samples, "warptd_device_pcie_bytes_total", **DEV0, direction="tx") == 5_000_000
    assert value(samples, "warptd_device_pcie_bytes_total", **DEV0, direction="rx") == 7_000_000
    nvlink = "warptd_device_nvlink_link_bytes_total"
    assert value(samples, nvlink, **DEV0, link="17", direction="tx") == 300 * KIB  # KiB in the field
    assert value(samples, nvlink, **DEV0, link="17", direction="rx") == 500 * KIB
    assert len(select(samples, nvlink, **DEV0)) == 18 * 2


def test_only_the_links_the_gpu_has_are_asked(rig, fake_nvml):
    fake_nvml.gpus[1].nvlink_count = 0  # a PCIe card
    samples = rig.tick()
    for name in ("warptd_device_nvlink_link_bytes_total", "warptd_device_nvlink_link_errors_total"):
        assert not select(samples, name, **DEV1)
        assert select(samples, name, **DEV0)
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0
    before = fake_nvml.calls("nvmlDeviceGetFieldValues")
    rig.tick("nvidia")
    assert fake_nvml.calls("nvmlDeviceGetFieldValues") - before == 2  # one batch per GPU, links included


def test_recovery_action_is_one_series_naming_the_action_now(rig, fake_nvml):
    """One series per GPU, not one per action: the seven others would be constant 0s (issue 39 #14)."""
    fake_nvml.gpus[0].recovery_action = 2  # NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
    fake_nvml.gpus[1].recovery_action = 99  # an action newer than warptd: absent, not a guess
    samples = rig.tick()
    actions = {s.labels["action"]: s.value for s in select(samples, "warptd_device_recovery_action", **DEV0)}
    assert actions == {"node_reboot": 1}
    assert not select(samples, "warptd_device_recovery_action", **DEV1)
    fake_nvml.gpus[0].recovery_action = 0
    samples = rig.tick()
    actions = {s.labels["action"]: s.value for s in select(samples, "warptd_device_recovery_action", **DEV0)}
    assert actions == {"none": 1}


def test_memory_temperature_fans_media_and_pstate(rig, fake_nvml):
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.memory_temperature = 61
    gpu1.fans = [45, 110]  # a PCIe board with two fans (NVML may pass 100 %); GPU 0 has none
    gpu0.encoder_util, gpu0.decoder_util, gpu0.pstate = 25, 80, 2
    gpu1.pstate = 32  # NVML_PSTATE_UNKNOWN
    samples = rig.tick()
    assert value(samples, "warptd_device_temperature_celsius", **DEV0, sensor="memory") == 61
    assert value(samples, "warptd_device_temperature_celsius", **DEV0, sensor="gpu") == 41
    assert value(samples, "warptd_device_fan_speed_ratio", **DEV1, fan="0") == pytest.approx(0.45)
    assert value(samples, "warptd_device_fan_speed_ratio", **DEV1, fan="1") == pytest.approx(1.10)
    assert not select(samples, "warptd_device_fan_speed_ratio", **DEV0)
    assert value(samples, "warptd_device_encoder_utilization_ratio", **DEV0) == pytest.approx(0.25)
    assert value(samples, "warptd_device_decoder_utilization_ratio", **DEV0) == pytest.approx(0.80)
    assert value(samples, "warptd_device_performance_state", **DEV0) == 2
    assert not select(samples, "warptd_device_performance_state", **DEV1)
    rig.tick("nvidia")
    assert fake_nvml.calls("nvmlDeviceGetNumFans") == 2  # asked once per GPU, fans or not
    assert fake_nvml.calls("nvmlDeviceGetFanSpeed_v2") == 2 * 2  # GPU 1's two fans, twice


def test_a_field_unsupported_on_one_gpu_only(rig, fake_nvml):
    fake_nvml.gpus[1].unsupported_fields = {4, 197}  # DBE volatile, PCIe TX bytes
    samples = rig.tick()
    assert not select(samples, "warptd_device_ecc_errors_total", **DEV1, kind="uncorrected")
    assert select(samples, "warptd_device_ecc_errors_total", **DEV1, kind="corrected")
    assert not select(samples, "warptd_device_pcie_bytes_total", **DEV1, direction="tx")
    assert select(samples, "warptd_device_ecc_errors_total", **DEV0, kind="uncorrected")
    assert select(samples, "warptd_device_pcie_bytes_total", **DEV0, direction="tx")
    fake_nvml.gpus[1].unsupported_fields = set()  # answered once NOT_SUPPORTED: not asked again
    samples = rig.tick()
    assert not select(samples, "warptd_device_ecc_errors_total", **DEV1, kind="uncorrected")
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


def test_a_failing_field_is_counted_and_asked_again(rig, fake_nvml):
    fake_nvml.gpus[0].raises["nvmlDeviceGetFieldValues"] = 999  # NVML_ERROR_UNKNOWN: the whole batch
    samples = rig.tick()
    assert not select(samples, "warptd_device_ecc_errors_total", **DEV0)
    assert select(samples, "warptd_device_ecc_errors_total", **DEV1)
    del fake_nvml.gpus[0].raises["nvmlDeviceGetFieldValues"]
    samples = rig.tick()
    assert select(samples, "warptd_device_ecc_errors_total", **DEV0)
    assert select(samples, "warptd_device_nvlink_link_bytes_total", **DEV0, link="17")


def test_r470_driver_lacks_the_newer_fields(make_rig):
    fake = FakeNvml(gpus=1, driver="r470", driver_version="470.256.02")
    with fake.installed():
        rig = make_rig("nvidia")
        samples = rig.tick()
        for name in ("warptd_device_recovery_action", "warptd_device_pcie_bytes_total"):
            assert not select(samples, name, **DEV0), name
        for name in (
            "warptd_device_ecc_errors_total",
            "warptd_device_remapped_rows",
            "warptd_device_pcie_replays_total",
            "warptd_device_nvlink_link_bytes_total",
        ):
            assert select(samples, name, **DEV0), name
        assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0
        rig.close()
    fake.close()


@pytest.mark.slow
def test_exposition_is_promtool_clean(rig, fake_nvml):
    fake_nvml.gpus[1].fans = [30]
    fake_nvml.gpus[0].ecc_volatile[0] = 1
    rig.tick()
    body = rig.exposition.render(None, None)[0]
    assert b"warptd_device_nvlink_link_bytes_total{" in body
    assert_promtool_clean(body)


def test_answers_read_from_bytes_match_pynvml_attributes():
    """The byte reader agrees with pynvml's own struct attributes for every nvmlValueType_t."""
    import pynvml

    from warptd.backends.nvidia import fields as nvidia_fields

    assert nvidia_fields.unpacker(pynvml.c_nvmlFieldValue_t) is nvidia_fields._unpack  # layout as expected
    members = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
    samples = (2.5, 4_000_000_000, 2**40 + 3, 2**63 + 5, -(2**40), -7, 65_000)
    answers = (pynvml.c_nvmlFieldValue_t * (len(samples) + 1))()
    for value_type, (slot, sample) in enumerate(zip(answers, samples, strict=False)):
        slot.fieldId, slot.scopeId, slot.valueType, slot.nvmlReturn = (
            100 + value_type,
            value_type,
            value_type,
            0,
        )
        setattr(slot.value, members[value_type], sample)
    answers[-1].fieldId, answers[-1].valueType, answers[-1].nvmlReturn = 7, 1, pynvml.NVML_ERROR_NOT_SUPPORTED
    fast = list(nvidia_fields._unpack(answers))
    assert fast == list(nvidia_fields._attributes(answers))
    assert [value for _, _, _, value in fast[:-1]] == list(samples)
    assert fast[-1][:3] == ((7, 0), pynvml.NVML_ERROR_NOT_SUPPORTED, 1)


def test_a_field_failing_after_steady_reads_drops_only_its_series(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    for errors in (1, 2, 3):  # reads after the first take the one-unpack path
        gpu.ecc_volatile[0] = errors
        samples = rig.tick()
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 3
    gpu.unsupported_fields = {143}  # the GPU stops answering one field
    gpu.ecc_volatile[0], gpu.nvlink_kib[4][1] = 5, 77
    samples = rig.tick()
    assert not select(samples, "warptd_device_remapped_rows", **DEV0, kind="uncorrectable")
    assert select(samples, "warptd_device_remapped_rows", **DEV0, kind="correctable")
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 5
    link4 = {"link": "4", "direction": "rx", **DEV0}
    assert value(samples, "warptd_device_nvlink_link_bytes_total", **link4) == 77 * KIB
    gpu.nvlink_kib[4][1] = 78
    samples = rig.tick()  # steady again without the field
    assert value(samples, "warptd_device_nvlink_link_bytes_total", **link4) == 78 * KIB
    assert not select(samples, "warptd_device_remapped_rows", **DEV0, kind="uncorrectable")


def test_field_ids_are_those_of_the_installed_pynvml():
    """The ids warptd fixes (the driver's ABI) are the installed nvidia-ml-py's constants."""
    import pynvml

    from warptd.backends.nvidia import fields as f
    from warptd.metrics import nvidia

    expected = {
        "ECC_SBE_VOL_TOTAL": 3,
        "ECC_DBE_VOL_TOTAL": 4,
        "ECC_SBE_AGG_TOTAL": 5,
        "ECC_DBE_AGG_TOTAL": 6,
        "RETIRED_SBE": 29,
        "RETIRED_DBE": 30,
        "RETIRED_PENDING": 31,
        "MEMORY_TEMP": f.FI_MEMORY_TEMP,
        "NVLINK_LINK_COUNT": f.FI_NVLINK_LINK_COUNT,
        "PCIE_REPLAY_COUNTER": f.FI_PCIE_REPLAY_COUNTER,
        "NVLINK_THROUGHPUT_DATA_TX": 138,
        "NVLINK_THROUGHPUT_DATA_RX": 139,
        "REMAPPED_COR": f.FI_REMAPPED_ROWS[0],
        "REMAPPED_UNC": f.FI_REMAPPED_ROWS[1],
        "REMAPPED_PENDING": f.FI_REMAPPED_ROWS[2],
        "REMAPPED_FAILURE": f.FI_REMAPPED_ROWS[3],
        "PCIE_COUNT_TX_BYTES": 197,
        "PCIE_COUNT_RX_BYTES": 198,
        "GET_GPU_RECOVERY_ACTION": f.FI_GPU_RECOVERY_ACTION,
        "RESET_STATUS": f.FI_RESET_STATUS,
        "DRAIN_AND_RESET_STATUS": f.FI_DRAIN_AND_RESET_STATUS,
    }
    for kind, name in (
        ("crc_flit", "CRC_FLIT"),
        ("crc_data", "CRC_DATA"),
        ("replay", "REPLAY"),
        ("recovery", "RECOVERY"),
    ):
        for link in range(nvidia.NVLINK_ERROR_LINKS):
            expected[f"NVLINK_{name}_ERROR_COUNT_L{link}"] = next(
                s.source.id for s in f.nvlink(nvidia.NVLINK_ERROR_LINKS) if s.labels == (str(link), kind)
            )
    for name, field_id in expected.items():
        assert getattr(pynvml, f"NVML_FI_DEV_{name}") == field_id, name
    # every field read beside NVIDIA's table is checked above (each row of the table is held to
    # nvidia-ml-py by its own name: tests/metrics/test_nvidia.py)
    other = {key[0] for numbering in f.NUMBERINGS for key in f.FieldSet(numbering).other}
    assert other <= set(expected.values())
    for code, action in enumerate(f.RECOVERY_ACTIONS):
        assert getattr(pynvml, f"NVML_GPU_RECOVERY_ACTION_{action.upper()}") == code


def test_slow_values_are_read_every_health_interval_and_reported_between(settings, fake_nvml, make_rig):
    """Sampled faster than --health-interval, a GPU's health batch, power limit, fans and media
    engines are read that often; the samples between carry their last values, and power, clocks and
    throttling are read every sample. A GPU that comes back reads them all at once."""
    settings.interval, settings.health_interval = 0.05, 0.4
    rig = make_rig("nvidia")
    gpu = fake_nvml.gpus[0]
    gpu.ecc_volatile[0], gpu.encoder_util = 5, 30
    rig.tick()
    slow = (
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetEncoderUtilization",
        "nvmlDeviceGetDecoderUtilization",
    )
    calls = [fake_nvml.calls(name) for name in slow]
    gpu.ecc_volatile[0], gpu.encoder_util, gpu.power_limit_mw = 9, 60, 400_000
    gpu.power_mw = 250_000
    fake_nvml.next_refresh()
    samples = rig.tick()
    assert [fake_nvml.calls(name) for name in slow] == calls  # not due yet
    assert value(samples, "warptd_device_power_watts", **DEV0) == 250  # read every sample
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 5  # the last read
    assert value(samples, "warptd_device_encoder_utilization_ratio", **DEV0) == 0.3
    assert value(samples, "warptd_device_power_limit_watts", **DEV0) == 700
    assert select(samples, "warptd_device_nvlink_link_bytes_total", **DEV0)  # still there between reads

    slow_reads = rig.sampler.backends["nvidia"].gpus[0].cadence
    time.sleep(0.4)  # the health interval
    samples = rig.tick()
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 9
    assert value(samples, "warptd_device_encoder_utilization_ratio", **DEV0) == 0.6
    assert value(samples, "warptd_device_power_limit_watts", **DEV0) == 400
    assert slow_reads.due() is False  # that read counted as the last one

    gpu.lost = True
    rig.tick()
    gpu.lost = False
    gpu.ecc_volatile[0] = 12
    samples = rig.tick()  # back: everything read at once, not a health interval later
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 12


def test_a_reload_changes_the_health_interval_live(settings, fake_nvml, make_rig):
    settings.interval, settings.health_interval = 0.05, 60.0
    fake_nvml.gpus[0].memory_power_mw = 60_000  # nvml loads beside nvidia: its reader gets the reload too
    rig = make_rig("nvidia")
    gpu = fake_nvml.gpus[0]
    rig.tick()
    gpu.ecc_volatile[0] = 3
    assert value(rig.tick(), "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 0  # a minute away
    rig.sampler.reconfigure(settings.model_copy(update={"health_interval": 0.05, "node": "node-b"}))  # SIGHUP
    assert value(rig.tick(), "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 3  # every sample
    nvidia, nvml = rig.sampler.backends["nvidia"], rig.sampler.backends["nvml"]
    assert nvml.devices.settings.health_interval == 0.05  # the power backend's own reader too
    assert nvidia.settings.node == "node-a"  # what needs a restart is not handed over


def test_a_failed_read_of_the_slow_values_is_retried_at_the_next_health_read(settings, fake_nvml, make_rig):
    """A failure at a health read costs those series until the next health read, which asks them
    again; the samples between stay cheap (issue 38 #2: before, every sample read them again)."""
    settings.interval, settings.health_interval = 0.05, 30.0
    rig = make_rig("nvidia")
    gpu = fake_nvml.gpus[0]
    gpu.ecc_volatile[0] = 5
    assert select(rig.tick(), "warptd_device_ecc_errors_total", **DEV0)
    rig.sampler.backends["nvidia"].gpus[0].cadence.forget()  # as if 30 s had passed
    gpu.raises["nvmlDeviceGetFieldValues"] = pynvml.NVML_ERROR_UNKNOWN
    gpu.raises["nvmlDeviceGetEnforcedPowerLimit"] = pynvml.NVML_ERROR_UNKNOWN
    samples = rig.tick()
    assert not select(samples, "warptd_device_ecc_errors_total", **DEV0)  # failed now: absent now
    del gpu.raises["nvmlDeviceGetFieldValues"]
    del gpu.raises["nvmlDeviceGetEnforcedPowerLimit"]
    gpu.ecc_volatile[0] = 6
    calls = fake_nvml.calls("nvmlDeviceGetEnforcedPowerLimit")
    samples = rig.tick()  # not read again before its cadence
    assert not select(samples, "warptd_device_ecc_errors_total", **DEV0)
    assert fake_nvml.calls("nvmlDeviceGetEnforcedPowerLimit") == calls
    rig.sampler.backends["nvidia"].gpus[0].cadence.forget()  # as if 30 s had passed
    samples = rig.tick()
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 6
    assert value(samples, "warptd_device_power_limit_watts", **DEV0) == 700
    calls = fake_nvml.calls("nvmlDeviceGetEnforcedPowerLimit")
    rig.tick()
    assert fake_nvml.calls("nvmlDeviceGetEnforcedPowerLimit") == calls  # and then every 30 s again

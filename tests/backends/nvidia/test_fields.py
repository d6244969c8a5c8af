"""NVML field values on each driver branch: the ids the branch numbers, the NVLink error counters of
every link, the health cadence and the driver's own latency, through the C NVML double and the real
nvidia-ml-py."""

from __future__ import annotations

import time
from itertools import pairwise

import pynvml
import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import select, value

DEV0 = {"backend": "nvidia", "device": "0"}


DEV1 = {"backend": "nvidia", "device": "1"}


SECONDS = "warptd_device_throttle_seconds_total"


DURATIONS = {
    "sw_thermal_slowdown": 2_500_000_000,
    "hw_thermal_slowdown": 1_000_000_000,
    "hw_power_brake_slowdown": 250_000_000,
}


def _seconds(samples, **labels) -> dict[str, float]:
    return {s.labels["reason"]: s.value for s in select(samples, SECONDS, **labels)}


def _fields(fake: FakeNvml, ids: list[int | tuple[int, int]]) -> list:
    pynvml.nvmlInit()
    try:
        return pynvml.nvmlDeviceGetFieldValues(pynvml.nvmlDeviceGetHandleByIndex(0), ids)
    finally:
        pynvml.nvmlShutdown()


@pytest.mark.parametrize(
    ("driver_version", "durations", "smoothing"),
    [
        ("580.65.06", 251, 256),
        ("580.82.07", 269, 251),
        ("580.159.04", 269, 251),
        ("590.44.01", 269, 251),
        ("575.51.03", 251, 256),
    ],
)
def test_the_double_numbers_durations_and_power_smoothing_by_branch(driver_version, durations, smoothing):
    """As NVIDIA's NVML known issues say: fields 251-273 changed between CUDA 13.0 (580.65) and 13.0
    Update 1 (580.82); on a GPU with power smoothing both ranges answer, only the durations 64-bit."""
    fake = FakeNvml(gpus=1, driver_version=driver_version)
    fake.gpus[0].clock_event_ns.update(DURATIONS)
    fake.gpus[0].power_smoothing = 1
    with fake.installed():
        answers = _fields(fake, [durations, durations + 1, durations + 2, smoothing, 75])
    fake.close()
    assert [a.nvmlReturn for a in answers] == [pynvml.NVML_SUCCESS] * 5
    assert [a.value.ullVal for a in answers[:3]] == list(DURATIONS.values())
    assert answers[0].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    assert answers[3].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT  # NVML_FI_PWR_SMOOTHING_ENABLED
    assert answers[3].value.uiVal == 1
    assert answers[4].value.ullVal == DURATIONS["sw_thermal_slowdown"]  # 75: the same counter


def test_an_h200_on_580_159_answers_269_to_271_and_refuses_251_to_268_as_uint():
    """What the real H200 answered (driver 580.159.04, no power smoothing): the durations at 269-271,
    64-bit; 251-268 NOT_SUPPORTED with value type 1; 272-273 NOT_SUPPORTED; 274 on INVALID_ARGUMENT."""
    fake = FakeNvml(gpus=1, driver_version="580.159.04")
    fake.gpus[0].clock_event_ns.update(DURATIONS)
    with fake.installed():
        answers = _fields(fake, [269, 270, 271, 251, 252, 253, 268, 274])
    fake.close()
    codes = [a.nvmlReturn for a in answers]
    assert codes == [0, 0, 0, *[pynvml.NVML_ERROR_NOT_SUPPORTED] * 4, pynvml.NVML_ERROR_INVALID_ARGUMENT]
    assert {a.valueType for a in answers[:3]} == {pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG}
    assert {a.valueType for a in answers[3:7]} == {pynvml.NVML_VALUE_TYPE_UNSIGNED_INT}
    assert [a.value.ullVal for a in answers[:3]] == list(DURATIONS.values())


@pytest.mark.parametrize(
    ("driver_version", "unknown"),
    [("525.147.05", [185, 186, 197, 226, 230]), ("550.144.03", [230, 251]), ("570.86.15", [251, 269])],
)
def test_ids_past_a_branch_header_answer_invalid_argument_in_the_value(driver_version, unknown):
    fake = FakeNvml(gpus=1, driver_version=driver_version)
    with fake.installed():
        answers = _fields(fake, [*unknown, 83])
    fake.close()
    assert [a.nvmlReturn for a in answers] == [pynvml.NVML_ERROR_INVALID_ARGUMENT] * len(unknown) + [0]


def test_each_field_value_carries_the_latency_the_driver_spent_on_it():
    fake = FakeNvml(gpus=1)
    with fake.installed():
        quick = _fields(fake, [186, (32, 0), 3])
        fake.gpus[0].field_latency_us = 2_000  # a slow driver
        started = time.monotonic()
        slow = _fields(fake, [186, (32, 0), 3])
        spent = time.monotonic() - started
    fake.close()
    # as a real H200 reported them: a cached sensor 0, an InfoROM count 1.7 ms; a link's, modelled
    assert 0 == quick[0].latencyUsec < quick[1].latencyUsec < quick[2].latencyUsec == 1_700
    assert [a.latencyUsec - b.latencyUsec for a, b in zip(slow, quick, strict=True)] == [2_000] * 3
    assert spent >= 0.006  # the call takes the time its latencies say


def _cpu_of(call, repeat: int = 20) -> float:
    """The median CPU seconds of this thread that ``call`` takes."""
    spent = []
    for _ in range(repeat):
        started = time.thread_time()
        call()
        spent.append(time.thread_time() - started)
    return sorted(spent)[repeat // 2]


def test_each_read_burns_the_cpu_a_real_h200_charged_for_it():
    """Energy 2.9 ms, a throttle-time group 0.58 ms, once per batch however many of its fields are
    asked; power and the cheap calls a few µs. CPU in the calling thread, not a wait."""
    fake = FakeNvml(gpus=1, driver_version="580.159.04")
    with fake.installed():
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        energy = _cpu_of(lambda: pynvml.nvmlDeviceGetFieldValues(handle, [83]))
        energy_call = _cpu_of(lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        policy = _cpu_of(lambda: pynvml.nvmlDeviceGetFieldValues(handle, [74, 75, 76]))
        policy_one = _cpu_of(lambda: pynvml.nvmlDeviceGetFieldValues(handle, [74]))
        power = _cpu_of(lambda: pynvml.nvmlDeviceGetFieldValues(handle, [185, 186]))
        memory = _cpu_of(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2))
        pynvml.nvmlShutdown()
    fake.close()
    assert 0.0029 <= energy < 0.0045 and 0.0029 <= energy_call < 0.0045
    assert 0.00058 <= policy < 0.0012 and 0.00058 <= policy_one < 0.0012  # one firmware query
    assert power < 0.0005 and memory < 0.0005


@pytest.mark.slow
def test_power_and_energy_refresh_every_100_ms():
    """A read between two refreshes sees the last refresh, as the H200's counter changed every 100 ms."""
    fake = FakeNvml(gpus=[FakeGpu(power_mw=300_000, live=True)], driver_version="580.159.04")
    with fake.installed():
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        seen, deadline = [], time.monotonic() + 0.6
        while time.monotonic() < deadline:
            seen.append((time.monotonic(), pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)))
        pynvml.nvmlShutdown()
    fake.close()
    changes = [t for (_, before), (t, value) in pairwise(seen) if value != before]
    gaps = [later - earlier for earlier, later in pairwise(changes)]
    assert 4 <= len(changes) <= 7
    assert all(0.09 <= gap <= 0.11 for gap in gaps)
    steps = [later - earlier for (_, earlier), (_, later) in pairwise(seen) if later != earlier]
    assert all(abs(step - 30_000) <= 1 for step in steps[1:])  # 100 ms at 300 W (the first: partial)


def test_from_r575_the_nvlink_error_fields_take_the_link_in_scope_id():
    fake = FakeNvml(gpus=1, driver_version="580.65.06")
    fake.gpus[0].nvlink_errors[7][2] = 5  # link 7, replay
    fake.gpus[0].nvlink_errors[16][0] = 9  # link 16, CRC flit
    with fake.installed():
        answers = _fields(fake, [(109, 7), (109, 0), (32, 16)])  # REPLAY_ERROR_COUNT_L7; L0 id, link 16
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        by_call = pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, 16, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)
        pynvml.nvmlShutdown()
    fake.close()
    assert [a.value.ullVal for a in answers] == [5, 0, 9]
    assert by_call == 9


def test_the_newest_numbering_is_the_installed_nvidia_ml_py_one():
    """nvidia-ml-py 13.x follows the R590 header: its duration and power-smoothing constants are
    those of the newest numbering, and its NVLink error counter kinds those warptd asks."""
    from warptd.backends.nvidia import fields as f
    from warptd.metrics import nvidia

    newest = f.NUMBERINGS[-1].throttle
    assert newest["sw_thermal_slowdown"] == (pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,)
    assert newest["hw_thermal_slowdown"] == (pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,)
    brake = pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN
    assert newest["hw_power_brake_slowdown"] == (brake,)
    assert pynvml.NVML_FI_PWR_SMOOTHING_ENABLED == 251  # what an R580 driver answers durations at
    assert f.NUMBERINGS[0].throttle["sw_thermal_slowdown"] == (pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL,)
    assert nvidia.NVLINK_ERROR_COUNTERS == {
        "crc_flit": pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
        "crc_data": pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
        "replay": pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
        "recovery": pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
    }


@pytest.mark.parametrize("driver_version", ["580.65.06", "590.44.01"])
def test_the_durations_are_the_driver_counters_at_the_branch_ids(branch_rig, driver_version):
    """R575/R580 number the durations 251-253 (256-273 are power smoothing), R590 269-271 (251-268
    are): the driver's counters, not sampled reason bits while the reason is active, and never a
    power-smoothing setting read as ns."""
    gpu = FakeGpu(index=0, current_reasons=pynvml.nvmlClocksEventReasonSwThermalSlowdown)
    gpu.clock_event_ns.update(DURATIONS)
    rig, _ = branch_rig(driver_version, [gpu])
    rig.tick()
    time.sleep(0.1)
    samples = rig.tick()
    assert _seconds(samples, **DEV0) == {
        "sw_power_cap": 0.0,
        "sync_boost": 0.0,
        "hw_slowdown": 0.0,  # no counter on any branch: sampled, and not active
        **{reason: ns / 1e9 for reason, ns in DURATIONS.items()},
    }
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


def test_an_r570_driver_gives_sw_thermal_at_75(branch_rig):
    """Before R575 there is no duration field for HW thermal or HW power brake; SW thermal is the
    perf-policy counter 75, never a power-smoothing value."""
    gpu = FakeGpu(index=0, current_reasons=pynvml.nvmlClocksEventReasonHwThermalSlowdown)
    gpu.clock_event_ns.update(DURATIONS)
    rig, _ = branch_rig("570.86.15", [gpu])
    rig.tick()
    time.sleep(0.1)
    samples = rig.tick()
    seconds = _seconds(samples, **DEV0)
    assert seconds["sw_thermal_slowdown"] == 2.5  # the driver's counter through field 75
    assert 0.05 < seconds["hw_thermal_slowdown"] < 1.0  # sampled: the driver keeps no counter of it
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


@pytest.mark.parametrize("driver_version", ["580.65.06", "570.86.15"])
def test_nvlink_errors_of_all_18_links(branch_rig, driver_version):
    """An H100/H200 has 18 links; the per-link ids number 12 (the link in the id before R575, in
    scopeId from R575), and nvmlDeviceGetNvLinkErrorCounter reads links 12-17."""
    gpu = FakeGpu(index=0)
    gpu.nvlink_errors[7][2] = 3  # link 7 replay
    gpu.nvlink_errors[11][1] = 4  # link 11 CRC data
    gpu.nvlink_errors[15][1] = 5  # link 15 CRC data
    gpu.nvlink_errors[17][3] = 6  # link 17 recovery
    rig, fake = branch_rig(driver_version, [gpu])
    samples = rig.tick()
    errors = "warptd_device_nvlink_link_errors_total"
    assert value(samples, errors, **DEV0, link="7", kind="replay") == 3
    assert value(samples, errors, **DEV0, link="11", kind="crc_data") == 4
    assert value(samples, errors, **DEV0, link="15", kind="crc_data") == 5
    assert value(samples, errors, **DEV0, link="17", kind="recovery") == 6
    assert value(samples, errors, **DEV0, link="0", kind="replay") == 0
    assert len(select(samples, errors, **DEV0)) == 18 * 4
    assert fake.calls("nvmlDeviceGetNvLinkErrorCounter") == 6 * 4  # links 12-17 only
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


def test_the_gpus_nvlink_totals_sum_every_link_and_never_drop_when_a_link_misses_a_read(settings, branch_rig):
    """Issue 39 #14: the GPU's totals (the default's) are every link's summed, links 12-17 (read by a
    call of their own) included; a link whose call fails for one read keeps its last total in the sum,
    so the sum never goes down (a drop would read as a counter reset: increase() would add it all)."""
    settings.interval = settings.health_interval = 0.05
    gpu = FakeGpu(index=0)
    gpu.nvlink_errors[3][2] = 3  # link 3 replay: a per-link field
    gpu.nvlink_errors[14][2] = 5  # link 14 replay: nvmlDeviceGetNvLinkErrorCounter
    gpu.nvlink_errors[15][0] = 40  # link 15 CRC flit
    gpu.nvlink_kib[2][0], gpu.nvlink_kib[16][1] = 10, 7  # link 2 tx, link 16 rx
    rig, _ = branch_rig("580.65.06", [gpu])
    totals, bytes_ = "warptd_device_nvlink_errors_total", "warptd_device_nvlink_bytes_total"
    samples = rig.tick("nvidia")
    assert value(samples, totals, **DEV0, kind="replay") == 8
    assert value(samples, totals, **DEV0, kind="crc_flit") == 40
    assert value(samples, totals, **DEV0, kind="recovery") == 0
    assert value(samples, bytes_, **DEV0, direction="tx") == 10 * 1024
    assert value(samples, bytes_, **DEV0, direction="rx") == 7 * 1024
    labels = {frozenset(s.labels) for s in select(samples, totals, **DEV0)}
    assert labels == {frozenset({*DEV0, "uuid", "kind"})}
    gpu.nvlink_error_code[14] = pynvml.NVML_ERROR_UNKNOWN  # link 14's call fails this read
    gpu.nvlink_errors[3][2] = 4
    samples = rig.tick("nvidia")
    assert not select(samples, "warptd_device_nvlink_link_errors_total", **DEV0, link="14")
    assert value(samples, totals, **DEV0, kind="replay") == 9  # link 14's 5 kept, link 3's new one added
    gpu.nvlink_error_code[14] = 0
    gpu.nvlink_errors[14][2] = 0  # one link's counters reset (nvmlDeviceResetNvLinkErrorCounters)
    samples = rig.tick("nvidia")
    assert value(samples, totals, **DEV0, kind="replay") == 9  # that link's reset adds nothing
    gpu.nvlink_errors[14][2] = 2
    samples = rig.tick("nvidia")
    assert value(samples, totals, **DEV0, kind="replay") == 11


def test_nvlink_error_calls_follow_the_health_interval(settings, branch_rig):
    settings.interval, settings.health_interval = 0.05, 60.0
    rig, fake = branch_rig("580.65.06")
    for _ in range(4):
        samples = rig.tick("nvidia")
    assert fake.calls("nvmlDeviceGetNvLinkErrorCounter") == 6 * 4  # the one health read
    links = "warptd_device_nvlink_link_errors_total"
    assert len(select(samples, links, **DEV0)) == 18 * 4  # reported between


def test_an_nvlink_error_counter_one_link_does_not_support_leaves_the_other_links(settings, branch_rig):
    """Link 14 answers NOT_SUPPORTED (an inactive link), link 16 INVALID_ARGUMENT once: 14's series
    are absent and it is not asked again; the other links of 12-17 stay, read after read, and link
    16 is back at the next read."""
    settings.interval = settings.health_interval = 0.05
    gpu = FakeGpu(index=0)
    gpu.nvlink_errors[13][2] = 3  # link 13 replay
    gpu.nvlink_errors[17][3] = 6  # link 17 recovery
    gpu.nvlink_error_code[14] = pynvml.NVML_ERROR_NOT_SUPPORTED
    gpu.nvlink_error_code[16] = pynvml.NVML_ERROR_INVALID_ARGUMENT
    rig, fake = branch_rig("580.65.06", [gpu])
    errors = "warptd_device_nvlink_link_errors_total"
    samples = rig.tick("nvidia")
    assert not select(samples, errors, **DEV0, link="14")
    assert not select(samples, errors, **DEV0, link="16")
    assert value(samples, errors, **DEV0, link="13", kind="replay") == 3
    assert len(select(samples, errors, **DEV0)) == 16 * 4
    assert fake.calls("nvmlDeviceGetNvLinkErrorCounter") == 6 * 4
    gpu.nvlink_error_code[16] = 0
    for reads in (2, 3):
        samples = rig.tick("nvidia")
        assert value(samples, errors, **DEV0, link="13", kind="replay") == 3
        assert value(samples, errors, **DEV0, link="17", kind="recovery") == 6
        assert value(samples, errors, **DEV0, link="16", kind="crc_flit") == 0
        assert not select(samples, errors, **DEV0, link="14")
        assert len(select(samples, errors, **DEV0)) == 17 * 4
        assert fake.calls("nvmlDeviceGetNvLinkErrorCounter") == 6 * 4 + (reads - 1) * 5 * 4  # 14 not asked


def test_the_driver_time_on_field_values_is_a_counter_in_seconds(branch_rig):
    rig, fake = branch_rig("580.65.06", 2)
    first = rig.tick()
    spent = value(first, "warptd_device_nvml_field_latency_seconds_total", **DEV0)
    assert 0 < spent < 0.03  # the driver's µs of one full batch (5.6 ms for the energy counter …)
    fake.gpus[0].field_latency_us = 1_000  # the driver slows down on GPU 0
    second = rig.tick()
    slow = value(second, "warptd_device_nvml_field_latency_seconds_total", **DEV0) - spent
    steady = value(second, "warptd_device_nvml_field_latency_seconds_total", **DEV1) - value(
        first, "warptd_device_nvml_field_latency_seconds_total", **DEV1
    )
    assert slow >= 0.1  # over a hundred fields at 1 ms more each
    assert 0 < steady < 0.03


def test_r525_power_usage_is_the_average_on_ampere_and_newer(branch_rig):
    """R525/R530 headers stop short of 185/186: nvmlDeviceGetPowerUsage is what is left, a 1 s
    average on an H100 (exported as the average, never as the instant power) and instantaneous on a
    V100. The H100 has no instantaneous reading: its power series is absent (the sampler derives
    one from an energy counter only for a device with neither power reading)."""
    hopper, volta = FakeGpu(index=0), FakeGpu(index=1, name="Tesla V100-SXM2-32GB", compute_capability=(7, 0))
    rig, _ = branch_rig("525.147.05", [hopper, volta])
    rig.tick()
    hopper.power_mw = volta.power_mw = 700_000  # a spike, read right away
    samples = rig.tick()
    assert not select(samples, "warptd_device_power_watts", **DEV0)  # not the PowerUsage average
    assert select(samples, "warptd_device_energy_joules_total", **DEV0)  # the counter still counts
    assert 120 <= value(samples, "warptd_device_power_average_watts", **DEV0) < 200  # mostly the 120 W
    assert select(samples, "warptd_device_power_watts", **DEV1)
    assert not select(samples, "warptd_device_power_average_watts", **DEV1)
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


def test_recovery_action_before_r570_comes_from_the_status_fields(branch_rig):
    rig, fake = branch_rig("550.144.03", 2)
    fake.gpus[0].recovery_action = 4  # NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET: 227 says 1
    fake.gpus[1].recovery_action = 1  # GPU_RESET: 226 says 1
    samples = rig.tick()
    drained = {s.labels["action"]: s.value for s in select(samples, "warptd_device_recovery_action", **DEV0)}
    reset = {s.labels["action"]: s.value for s in select(samples, "warptd_device_recovery_action", **DEV1)}
    assert drained == {"drain_and_reset": 1}
    assert reset == {"gpu_reset": 1}
    fake.gpus[0].recovery_action = 0
    samples = rig.tick()
    assert value(samples, "warptd_device_recovery_action", **DEV0, action="none") == 1
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
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


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
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

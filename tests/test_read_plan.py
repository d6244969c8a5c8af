"""What an NVIDIA GPU is asked, and how often (issues 32 and 33): each value read as often as it
changes, the expensive ones at their own cadence and at the edges of what measures them; the
field numbering of the driver found; and nothing exported of hardware the GPU lacks. Through the C
NVML double, priced and refreshing like a real H200, under the real nvidia-ml-py."""

from __future__ import annotations

import time
from itertools import pairwise

import pynvml
import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import Rig, select, value

DEV0 = {"backend": "nvidia", "device": "0"}
#: Every GPM metric id warptd asks of a GPU with every engine and link.
ENGINE_IDS = {("nvdec", i): getattr(pynvml, f"NVML_GPM_METRIC_NVDEC_{i}_UTIL") for i in range(8)} | {
    ("nvjpg", i): getattr(pynvml, f"NVML_GPM_METRIC_NVJPG_{i}_UTIL") for i in range(8)
}


@pytest.fixture
def h200_rig(branch_rig):
    """``h200_rig(driver_version, gpus, **settings)``: a nvidia rig over H200 doubles."""

    def make(driver_version: str = "580.159.04", gpus: int = 1, **changes: object) -> tuple[Rig, FakeNvml]:
        return branch_rig(driver_version, [FakeGpu.h200(i) for i in range(gpus)], **changes)

    return make


def _energy_reads(fake: FakeNvml) -> int:
    return len(fake.gpus[0].energy_answers())


# -- the read plan -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_energy_counter_is_read_at_its_cadence_at_10_hz_and_bridged_between(h200_rig):
    rig, fake = h200_rig(interval=0.1, health_interval=10.0, energy_interval=1.0)
    gpu = fake.gpus[0]
    gpu.live, gpu.power_mw = True, 300_000
    totals, deadline = [], time.monotonic() + 2.05
    while time.monotonic() < deadline:
        totals.append(value(rig.tick(), "warptd_device_energy_joules_total", **DEV0))
        time.sleep(0.1)
    assert len(totals) >= 15
    assert 2 <= _energy_reads(fake) <= 3  # at the start, then once a second; not 20 times
    assert all(later >= earlier for earlier, later in pairwise(totals))
    assert totals[-1] - totals[0] == pytest.approx(300 * 2.0, rel=0.15)  # the bridge ran between
    power = select(rig.scrape(), "warptd_device_power_watts", **DEV0)
    assert power[0].value == 300  # the instant power, every sample


def test_an_edge_reads_the_energy_counter_and_the_throttle_times_whatever_their_cadence(h200_rig):
    rig, fake = h200_rig(interval=0.1, health_interval=10.0)
    rig.tick()
    energy, policy = _energy_reads(fake), fake.calls("nvmlDeviceGetFieldValues")
    rig.tick()  # neither due: the cheap batch only
    assert _energy_reads(fake) == energy
    rig.sampler.sample_watched("nvidia", {0}, edge=True)  # a window opens here
    assert _energy_reads(fake) == energy + 1
    assert fake.calls("nvmlDeviceGetFieldValues") == policy + 2  # the cheap batch, then the edge's one
    backend = rig.loaded.accelerators[0]
    assert backend.gpus[0].edges.throttle_seconds()  # the edge's batch held the duration fields


def test_throttle_times_are_read_at_the_health_cadence_and_the_flags_every_sample(h200_rig):
    rig, fake = h200_rig(interval=0.1, health_interval=0.5)
    gpu = fake.gpus[0]
    gpu.clock_event_ns.update({"hw_thermal_slowdown": 2_000_000_000})
    first = rig.tick()
    assert value(first, "warptd_device_throttle_seconds_total", reason="hw_thermal_slowdown", **DEV0) == 2
    gpu.clock_event_ns.update({"hw_thermal_slowdown": 5_000_000_000})  # 3 s more, from the driver
    gpu.current_reasons = pynvml.nvmlClocksEventReasonHwThermalSlowdown
    between = rig.tick()  # the bitmask every sample, the counter not yet: the time seen active bridges
    assert value(between, "warptd_device_throttle_active", reason="hw_thermal_slowdown", **DEV0) == 1
    bridged = value(between, "warptd_device_throttle_seconds_total", reason="hw_thermal_slowdown", **DEV0)
    assert 2 < bridged < 2.5  # the interval since the last reading, not the counter's 3 s yet
    time.sleep(0.5)
    due = rig.tick()
    assert value(due, "warptd_device_throttle_seconds_total", reason="hw_thermal_slowdown", **DEV0) == 5


@pytest.mark.slow
def test_gpm_outside_windows_samples_at_most_once_a_second(h200_rig):
    rig, fake = h200_rig(interval=0.1, health_interval=10.0)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        rig.tick()
        time.sleep(0.1)
    assert 2 <= fake.calls("nvmlGpmSampleGet") <= 3
    rig.sampler.watch("window", {("nvidia", 0)}, set())  # a window follows it at --interval
    before, deadline = fake.calls("nvmlGpmSampleGet"), time.monotonic() + 1.0
    while time.monotonic() < deadline:
        rig.tick()
        time.sleep(0.1)
    assert fake.calls("nvmlGpmSampleGet") - before >= 4


def test_each_kind_of_read_is_charged_the_cpu_the_driver_took(h200_rig):
    rig, _ = h200_rig(interval=0.1, health_interval=10.0)
    for _ in range(4):
        samples = rig.tick()
        time.sleep(0.05)
    reads = {
        s.labels["read"]: s.value for s in select(samples, "warptd_backend_reads_total", backend="nvidia")
    }
    cpu = {
        s.labels["read"]: s.value
        for s in select(samples, "warptd_backend_read_cpu_seconds_total", backend="nvidia")
    }
    assert reads["health"] == 1 and reads["power"] >= 2  # the first read is a full one
    assert cpu["health"] >= 0.0029 + 3 * 0.00058  # the energy counter and three throttle queries
    assert cpu["power"] / reads["power"] < 0.0005  # the cheap batch: µs


# -- the numbering of the driver found ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("driver_version", "asked", "not_asked"),
    [
        ("580.159.04", (269, 270, 271), (251, 252, 253)),  # the real H200's driver
        ("575.57.08", (251, 252, 253), (269, 270, 271)),
        ("580.65.06", (251, 252, 253), (269, 270, 271)),
    ],
)
def test_the_throttle_durations_come_from_the_ids_the_driver_numbers(
    h200_rig, driver_version, asked, not_asked
):
    rig, fake = h200_rig(driver_version, interval=1.0, health_interval=1.0)
    fake.gpus[0].clock_event_ns.update(
        {
            "sw_thermal_slowdown": 1_000_000_000,
            "hw_thermal_slowdown": 2_000_000_000,
            "hw_power_brake_slowdown": 0,
        }
    )
    samples = rig.tick()
    for reason, seconds in (
        ("sw_thermal_slowdown", 1),
        ("hw_thermal_slowdown", 2),
        ("hw_power_brake_slowdown", 0),
    ):
        assert value(samples, "warptd_device_throttle_seconds_total", reason=reason, **DEV0) == seconds
    batch = rig.loaded.accelerators[0].gpus[0].batch
    asked_now = {key[0] for request in batch._requests.values() for key in request.keys}
    assert set(asked) <= asked_now and not set(not_asked) & asked_now


def test_an_r580_between_the_numberings_asks_both_once_and_keeps_the_64_bit_durations(h200_rig):
    """580.76: which header the build took is not known; on a GPU with power smoothing both ranges
    answer SUCCESS, and only the durations are 64-bit. Never a smoothing setting as nanoseconds."""
    rig, fake = h200_rig("580.76.05", interval=1.0, health_interval=1.0)
    gpu = fake.gpus[0]
    gpu.power_smoothing = 1
    gpu.clock_event_ns.update({"sw_thermal_slowdown": 4_000_000_000, "hw_thermal_slowdown": 5_000_000_000})
    first = rig.tick()
    second = rig.tick()
    for samples in (first, second):
        assert (
            value(samples, "warptd_device_throttle_seconds_total", reason="sw_thermal_slowdown", **DEV0) == 4
        )
        assert (
            value(samples, "warptd_device_throttle_seconds_total", reason="hw_thermal_slowdown", **DEV0) == 5
        )
    batch = rig.loaded.accelerators[0].gpus[0].batch
    assert {(269, 0), (270, 0), (271, 0)} <= batch.unsupported  # the smoothing range: not asked again


# -- hardware the GPU lacks --------------------------------------------------------------------------
@pytest.mark.slow
def test_an_h200_without_nvlink_exports_no_link_series_and_no_absent_engine(h200_rig):
    """As the real H200 answered: NVLink NOT_SUPPORTED yet GPM answering 0 for 18 links' rates and for
    the engines it lacks (no NVENC, an 8th NVDEC/NVJPG, a second OFA)."""
    rig, fake = h200_rig(interval=0.1, health_interval=0.1, metrics_include=["*"])
    gpu = fake.gpus[0]
    rig.tick()
    gpu.advance_gpm(activity={ENGINE_IDS[("nvdec", 2)]: 0.5, pynvml.NVML_GPM_METRIC_SM_UTIL: 0.3})
    samples = rig.tick_gpm()
    assert not select(samples, "warptd_device_nvlink_link_bytes_total")
    assert not select(samples, "warptd_device_nvlink_link_errors_total")
    engines = {
        (s.labels["engine"], s.labels["instance"])
        for s in select(samples, "warptd_device_engine_active_ratio")
    }
    assert engines == {("nvdec", "2")}  # the one that showed activity; no count from NVML with MIG off
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.3)
    assert not select(samples, "warptd_device_encoder_utilization_ratio")  # 0 from a GPU without NVENC


@pytest.mark.slow
def test_with_mig_on_the_whole_gpu_profile_counts_the_engines_and_absent_ones_are_not_asked(h200_rig):
    rig, fake = h200_rig(interval=0.1, health_interval=0.1, metrics_include=["*"])
    gpu = fake.gpus[0]
    gpu.mig_uuids = ["MIG-aaaaaaaa-1111-5222-8333-444444444444"]  # MIG on: the profiles answer
    rig.tick()
    gpu.advance_gpm(activity={ENGINE_IDS[("nvdec", 2)]: 0.5})
    samples = rig.tick_gpm()
    engines = {
        (s.labels["engine"], s.labels["instance"]): s.value
        for s in select(samples, "warptd_device_engine_active_ratio", **DEV0)
    }
    assert set(engines) == {("nvdec", str(i)) for i in range(7)} | {("nvjpg", str(i)) for i in range(7)} | {
        ("ofa", "0")
    }
    assert engines[("nvdec", "2")] == pytest.approx(0.5) and engines[("nvdec", "0")] == 0  # present, idle
    source = rig.loaded.accelerators[0].gpus[0].activity.source
    asked = {metric.id for metric in source.metrics}
    assert ENGINE_IDS[("nvdec", 7)] not in asked and pynvml.NVML_GPM_METRIC_NVENC_0_UTIL not in asked


@pytest.mark.slow
def test_a_gpu_with_nvlink_exports_each_of_its_links(settings, make_rig):
    fake = FakeNvml([FakeGpu()], driver_version="580.159.04")
    fake.gpus[0].nvlink_count = 4  # of 18: field 91 says so
    with fake.installed():
        rig = make_rig("nvidia")
        settings.interval = settings.health_interval = 0.1
        rig.tick()
        fake.gpus[0].advance_gpm(nvlink={1: (1000, 2000)})
        samples = rig.tick_gpm()
    fake.close()
    links = {s.labels["link"] for s in select(samples, "warptd_device_nvlink_link_errors_total")}
    assert links == {"0", "1", "2", "3"}


# -- families left out are not read -------------------------------------------------------------------
@pytest.mark.slow
def test_without_the_gpm_families_no_gpm_sample_and_without_throttle_seconds_no_duration_field(h200_rig):
    gpm = [
        "warptd_device_sm_*",
        "warptd_device_pipe_active_ratio",
        "warptd_device_dram_bandwidth_ratio",
        "warptd_device_graphics_engine_active_ratio",
        "warptd_device_pcie_bytes_total",
        "warptd_device_nvlink_*bytes_total",  # the GPU's total is made of each link's
        "warptd_device_throttle_seconds_total",
    ]
    rig, fake = h200_rig(interval=0.1, health_interval=0.1, metrics_exclude=gpm)
    for _ in range(3):
        samples = rig.tick_gpm()
    assert fake.calls("nvmlGpmSampleGet") == 0 and fake.calls("nvmlGpmMetricsGet") == 0
    batch = rig.loaded.accelerators[0].gpus[0].batch
    asked = {key[0] for request in batch._requests.values() for key in request.keys}
    assert not {74, 75, 76, 269, 270, 271} & asked
    assert value(samples, "warptd_device_power_watts", **DEV0) > 0  # the rest as ever


@pytest.mark.slow
def test_the_default_asks_gpm_no_engine_and_no_occupancy(h200_rig):
    rig, _ = h200_rig(interval=0.1, health_interval=0.1)
    rig.tick()
    rig.tick_gpm()
    source = rig.loaded.accelerators[0].gpus[0].activity.source
    asked = {metric.metric for metric in source.metrics}
    assert "warptd_device_sm_active_ratio" in asked
    assert not {"warptd_device_engine_active_ratio", "warptd_device_sm_occupancy_ratio"} & asked


@pytest.mark.slow
def test_a_watched_gpu_at_the_default_interval_reads_the_counter_once_a_second_not_at_10_hz(h200_rig):
    """--interval 1 and --energy-interval 1 read the counter every regular sample; a window's 0.1 s
    reads of the same GPU do not read it each time."""
    rig, fake = h200_rig(interval=1.0, health_interval=10.0)
    rig.tick()
    rig.sampler.watch("window", {("nvidia", 0)}, set())
    before, deadline = _energy_reads(fake), time.monotonic() + 1.5
    while time.monotonic() < deadline:
        rig.sampler.sample_watched("nvidia", {0})
        time.sleep(0.1)
    assert _energy_reads(fake) - before <= 2


def test_a_tick_at_an_edge_reads_the_counter_whatever_its_cadence(h200_rig):
    """What warptd profile --local does at its start and end (its own sampler, no daemon)."""
    rig, fake = h200_rig(interval=0.1, health_interval=10.0)
    rig.tick()
    rig.tick()
    before = _energy_reads(fake)
    rig.sampler.sample_all(edge=True)
    assert _energy_reads(fake) == before + 1


@pytest.mark.slow
def test_a_mig_gpu_instance_has_no_nvlink_series_of_its_own(settings, make_rig):
    from tests.doubles.nvml import FakeMig

    fake = FakeNvml([FakeGpu.h200(0)], driver_version="580.159.04")
    fake.gpus[0].mig_devices = [FakeMig("MIG-aaaaaaaa-1111-5222-8333-444444444444", gpu_instance=1)]
    settings.interval = settings.health_interval = 0.1
    with fake.installed():
        rig = make_rig("nvidia", "nvidia_mig")
        rig.tick()
        fake.gpus[0].advance_gpm(activity={pynvml.NVML_GPM_METRIC_SM_UTIL: 0.5}, mig=0)
        samples = rig.tick_gpm()
    fake.close()
    assert select(samples, "warptd_device_sm_active_ratio", backend="nvidia_mig")
    assert not select(samples, "warptd_device_nvlink_link_bytes_total")

"""GPM activity and traffic through the real pynvml over the C NVML double (tests/doubles/nvml_double.c)."""

from __future__ import annotations

import math
import time

import pynvml
import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import Rig, select, value
from warptd.backends.nvidia.gpm import sample_gap

DEV0 = {"backend": "nvidia", "device": "0"}
DEV1 = {"backend": "nvidia", "device": "1"}
MIB = 2**20
ACTIVITY_SERIES = (
    "warptd_device_sm_active_ratio",
    "warptd_device_sm_occupancy_ratio",
    "warptd_device_dram_bandwidth_ratio",
    "warptd_device_pipe_active_ratio",
    "warptd_device_engine_active_ratio",
)
# Traffic from GPM stands in only where the driver keeps no byte counter field (see the traffic test).
TRAFFIC_SERIES = ("warptd_device_pcie_bytes_total", "warptd_device_nvlink_link_bytes_total")
# NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES and NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX: the driver's counters.
TRAFFIC_FIELDS = {197, 198, 138, 139}


def without_traffic_fields(fake) -> None:
    """A driver without the byte counter fields (before R550): GPM's throughputs are the traffic."""
    for gpu in fake.gpus:
        gpu.unsupported_fields = TRAFFIC_FIELDS


ACTIVITY = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: 0.5,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 0.25,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 0.75,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 0.4,
    pynvml.NVML_GPM_METRIC_FP64_UTIL: 0.05,
    pynvml.NVML_GPM_METRIC_FP32_UTIL: 0.125,
    pynvml.NVML_GPM_METRIC_FP16_UTIL: 0.3,
    pynvml.NVML_GPM_METRIC_INTEGER_UTIL: 0.2,
    pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL: 0.6,
    pynvml.NVML_GPM_METRIC_NVDEC_3_UTIL: 0.1,
    pynvml.NVML_GPM_METRIC_NVJPG_1_UTIL: 0.15,
    pynvml.NVML_GPM_METRIC_NVOFA_0_UTIL: 0.35,
    pynvml.NVML_GPM_METRIC_NVENC_2_UTIL: 0.45,
}


pytestmark = pytest.mark.rig(
    "nvidia",
    doubles=["fake_nvml"],
    interval=0.1,  # GPM samples 0.11 s apart (the driver's rule)
    health_interval=0.1,
    metrics_include=["*"],  # the media engines and SM occupancy too (opt-in by default)
)


@pytest.mark.slow
def test_every_activity_series_is_the_ratio_over_the_last_period(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    first = rig.tick()
    assert not select(first, "warptd_device_sm_active_ratio")  # one sample: no period yet
    gpu.advance_gpm(activity=ACTIVITY)
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.5)
    assert value(samples, "warptd_device_sm_occupancy_ratio", **DEV0) == pytest.approx(0.25)
    assert value(samples, "warptd_device_dram_bandwidth_ratio", **DEV0) == pytest.approx(0.75)
    pipes = {s.labels["pipe"]: s.value for s in select(samples, "warptd_device_pipe_active_ratio", **DEV0)}
    assert pipes == pytest.approx({"tensor": 0.4, "fp64": 0.05, "fp32": 0.125, "fp16": 0.3, "integer": 0.2})
    engines = {
        (s.labels["engine"], s.labels["instance"]): s.value
        for s in select(samples, "warptd_device_engine_active_ratio", **DEV0)
    }
    assert engines[("nvdec", "0")] == pytest.approx(0.6)
    assert engines[("nvdec", "3")] == pytest.approx(0.1)
    assert ("nvdec", "1") not in engines  # idle since the start, and no count from NVML (MIG off)
    assert engines[("nvjpg", "1")] == pytest.approx(0.15)
    assert engines[("ofa", "0")] == pytest.approx(0.35)
    assert engines[("nvenc", "2")] == pytest.approx(0.45)
    # the next period alone, not the average since the start
    gpu.advance_gpm(cycles=3_000_000, activity={pynvml.NVML_GPM_METRIC_SM_UTIL: 0.1})
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.1)
    assert value(samples, "warptd_device_pipe_active_ratio", pipe="tensor", **DEV0) == 0


@pytest.mark.slow
def test_graphics_engine_activity_is_gpm_graphics_util_as_a_ratio(rig, fake_nvml):
    """DCGM_FI_PROF_GR_ENGINE_ACTIVE's source: GPM's graphics/compute activity over the last period,
    its own series beside SM activity (a GPU busy 80 % of the time with half its SMs idle)."""
    gpu = fake_nvml.gpus[0]
    rig.tick()
    graphics, sm = pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, pynvml.NVML_GPM_METRIC_SM_UTIL
    gpu.advance_gpm(activity={graphics: 0.8, sm: 0.4})
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_graphics_engine_active_ratio", **DEV0) == pytest.approx(0.8)
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.4)
    assert value(samples, "warptd_device_graphics_engine_active_ratio", **DEV1) == 0  # idle, not absent
    gpu.advance_gpm(cycles=2_000_000, activity={graphics: 0.25})
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_graphics_engine_active_ratio", **DEV0) == pytest.approx(0.25)


@pytest.mark.slow
def test_answers_as_last_period_keep_the_gauges_whole_and_a_change_is_read(rig, fake_nvml):
    """An idle GPU's metrics (the same answers each period) hand over last period's gauges whole;
    the next change is read at once, throughputs still integrate each period."""
    gpu, backend = fake_nvml.gpus[0], rig.loaded.accelerators[0]
    rig.tick()
    gpu.advance_gpm(activity=ACTIVITY)
    rig.tick_gpm()
    gpu.advance_gpm(activity=ACTIVITY)
    rig.tick_gpm()
    kept = backend.gpus[0].activity.source.gauges
    gpu.advance_gpm(activity=ACTIVITY)
    samples = rig.tick_gpm()
    assert backend.gpus[0].activity.source.gauges is kept
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.5)
    gpu.advance_gpm(activity={**ACTIVITY, pynvml.NVML_GPM_METRIC_SM_UTIL: 0.2})
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.2)
    assert value(samples, "warptd_device_pipe_active_ratio", pipe="tensor", **DEV0) == pytest.approx(0.4)


@pytest.mark.slow
def test_a_metric_failing_once_comes_back_though_the_answers_stand_still(rig, fake_nvml):
    """A metric that answers an error one period (not "unsupported") is absent then, and back at the
    next period even when every answer equals the last clean period's."""
    gpu = fake_nvml.gpus[0]
    rig.tick()
    gpu.advance_gpm(activity=ACTIVITY)
    rig.tick_gpm()
    gpu.fail_gpm_metric(pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_ERROR_TIMEOUT)
    gpu.advance_gpm(activity=ACTIVITY)
    samples = rig.tick_gpm()
    assert not select(samples, "warptd_device_sm_active_ratio", **DEV0)
    assert value(samples, "warptd_device_sm_occupancy_ratio", **DEV0) == pytest.approx(0.25)
    gpu.fail_gpm_metric(pynvml.NVML_GPM_METRIC_SM_UTIL, None)
    for _ in range(2):
        gpu.advance_gpm(activity=ACTIVITY)
        samples = rig.tick_gpm()
        assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.5)


@pytest.mark.slow
def test_one_gpm_sample_and_one_metrics_get_per_gpu_per_tick(rig, fake_nvml):
    ticks = 6
    for _ in range(ticks):
        rig.tick_gpm()
    gpus = len(fake_nvml.gpus)
    assert fake_nvml.calls("nvmlGpmSampleGet") == ticks * gpus
    assert fake_nvml.calls("nvmlGpmMetricsGet") == (ticks - 1) * gpus  # none before the second sample
    assert fake_nvml.calls("nvmlGpmSampleAlloc") == 2 * gpus  # two per GPU, reused tick after tick
    assert fake_nvml.calls("nvmlGpmQueryDeviceSupport") == gpus


@pytest.mark.slow
def test_a_gpu_without_gpm_has_no_activity_series_and_is_asked_once(settings):
    fake = FakeNvml(
        [FakeGpu(index=0), FakeGpu(index=1, name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0))]
    )
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        try:
            for _ in range(4):
                fake.gpus[0].advance_gpm(activity=ACTIVITY)
                samples = rig.tick_gpm()
            assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.5)
            for name in ACTIVITY_SERIES:
                assert not select(samples, name, **DEV1), name  # absent, never 0
            assert value(samples, "warptd_device_power_watts", **DEV1) == 120  # the rest as usual
            assert fake.calls("nvmlGpmQueryDeviceSupport") == 2  # once per GPU, over four ticks
            assert fake.calls("nvmlGpmSampleGet") == 4  # the Hopper GPU's only
            assert fake.calls("nvmlGpmSampleAlloc") == 2
            assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0
        finally:
            rig.close()
        fake.close()


def test_a_driver_without_gpm_reads_as_before(settings):
    fake = FakeNvml(gpus=2, driver="r470")
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        try:
            for _ in range(3):
                samples = rig.tick()
            for name in ACTIVITY_SERIES:
                assert not select(samples, name), name
            assert value(samples, "warptd_device_up", **DEV0) == 1
            assert value(samples, "warptd_backend_up", backend="nvidia") == 1
        finally:
            rig.close()
        fake.close()


@pytest.mark.slow
def test_metrics_a_gpu_lacks_are_absent_and_dropped_from_its_request(rig, fake_nvml):
    without_traffic_fields(fake_nvml)
    gpu = fake_nvml.gpus[1]
    nvdec = [getattr(pynvml, f"NVML_GPM_METRIC_NVDEC_{i}_UTIL") for i in range(4, 8)]
    gpu.gpm_unsupported = {*nvdec, pynvml.NVML_GPM_METRIC_NVLINK_L17_RX_PER_SEC}
    busy = {**ACTIVITY, pynvml.NVML_GPM_METRIC_NVDEC_5_UTIL: 0.5}
    for _ in range(3):
        for each in fake_nvml.gpus:
            each.advance_gpm(activity=busy)
        samples = rig.tick_gpm()

    def nvdec_instances(device: dict[str, str]) -> set[str]:
        return {
            s.labels["instance"]
            for s in select(samples, "warptd_device_engine_active_ratio", engine="nvdec", **device)
        }

    assert nvdec_instances(DEV1) == {"0", "3"}  # 5 answers NOT_SUPPORTED there; 1, 2 idle: not shown
    assert nvdec_instances(DEV0) == {"0", "3", "5"}  # GPU 0 has 5
    assert not select(samples, "warptd_device_nvlink_link_bytes_total", link="17", direction="rx", **DEV1)
    assert select(samples, "warptd_device_nvlink_link_bytes_total", link="17", direction="tx", **DEV1)
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


@pytest.mark.slow
def test_a_driver_with_an_older_gpm_header_gets_the_first_headers_metrics(rig, fake_nvml):
    gpu = fake_nvml.gpus[1]
    gpu.gpm_metric_max = 98  # an R525 driver: NVENC (166-169) unknown, and the whole request refused
    for _ in range(4):
        for each in fake_nvml.gpus:
            each.advance_gpm(activity=ACTIVITY)
        samples = rig.tick_gpm()
    assert value(samples, "warptd_device_sm_active_ratio", **DEV1) == pytest.approx(0.5)
    assert value(samples, "warptd_device_engine_active_ratio", engine="nvdec", instance="0", **DEV1) == 0.6
    assert not select(samples, "warptd_device_engine_active_ratio", engine="nvenc", **DEV1)
    assert value(samples, "warptd_device_engine_active_ratio", engine="nvenc", instance="2", **DEV0) == 0.45
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 1  # once


@pytest.mark.slow
def test_traffic_counters_grow_by_rate_times_period(rig, fake_nvml):
    without_traffic_fields(fake_nvml)
    gpu = fake_nvml.gpus[0]
    rig.tick()
    rig.tick_gpm()
    before = rig.scrape()
    moved = {"tx": 300 * MIB, "rx": 120 * MIB}
    link_moved = {"rx": 2_000 * MIB, "tx": 900 * MIB}
    for _ in range(3):  # three periods of different lengths
        gpu.advance_gpm(pcie=(moved["tx"], moved["rx"]), nvlink={5: (link_moved["rx"], link_moved["tx"])})
        time.sleep(0.15)
        samples = rig.tick()
    for direction, nbytes in moved.items():
        grown = value(samples, "warptd_device_pcie_bytes_total", direction=direction, **DEV0) - value(
            before, "warptd_device_pcie_bytes_total", direction=direction, **DEV0
        )
        assert grown == pytest.approx(3 * nbytes, rel=0.01)
    for direction, nbytes in link_moved.items():
        grown = value(samples, "warptd_device_nvlink_link_bytes_total", link="5", direction=direction, **DEV0)
        grown -= value(before, "warptd_device_nvlink_link_bytes_total", link="5", direction=direction, **DEV0)
        assert grown == pytest.approx(3 * nbytes, rel=0.01)
    assert value(samples, "warptd_device_nvlink_link_bytes_total", link="4", direction="rx", **DEV0) == 0
    assert value(samples, "warptd_device_pcie_bytes_total", direction="tx", **DEV1) == 0  # idle GPU 1


@pytest.mark.slow
def test_samples_are_freed_at_shutdown_and_at_an_nvml_reopen(settings, monkeypatch):
    from warptd.sampling import sampler

    monkeypatch.setattr(sampler, "REDISCOVER_EVERY_S", 0.0)
    fake = FakeNvml(gpus=3)
    settings.backends = ["nvidia"]
    with fake.installed():
        live_before = fake.gpm_samples_live
        rig = Rig(settings)
        for _ in range(3):
            rig.tick()
        assert fake.gpm_samples_live - live_before == 6
        pynvml.nvmlShutdown()  # NVML reset under the daemon: the backend reopens it
        rig.tick("nvidia")
        fake.gpus[0].advance_gpm(activity=ACTIVITY)
        rig.tick_gpm("nvidia")
        fake.gpus[0].advance_gpm(activity=ACTIVITY)
        samples = rig.tick_gpm("nvidia")
        assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.5)
        assert fake.gpm_samples_live - live_before == 6  # the old ones freed, two new per GPU
        rig.close()
        assert fake.gpm_samples_live == live_before
        assert fake.calls("nvmlGpmSampleAlloc") == 12  # two per GPU, before and after the reopen
    fake.close()


@pytest.mark.slow
def test_promtool_clean(rig, fake_nvml):
    for _ in range(3):
        for gpu in fake_nvml.gpus:
            gpu.advance_gpm(activity=ACTIVITY, pcie=(MIB, MIB), nvlink={0: (MIB, MIB)})
        rig.tick_gpm()
    body = rig.exposition.render(None, None)[0]
    assert b"warptd_device_sm_active_ratio" in body and b"warptd_device_nvlink_link_bytes_total" in body
    assert_promtool_clean(body)


@pytest.mark.slow
def test_the_driver_s_byte_counters_win_over_gpm_throughput(rig, fake_nvml):
    """Where the driver keeps a byte counter field, that is the series; GPM's integral is not added."""
    gpu = fake_nvml.gpus[0]
    rig.tick()
    for step in range(1, 4):
        gpu.pcie_bytes[0], gpu.pcie_bytes[1] = step * 1_000_000, step * 500_000  # the field counters
        gpu.advance_gpm(pcie=(300 * MIB, 120 * MIB))  # GPM saw far more: not used
        samples = rig.tick_gpm()
    assert value(samples, "warptd_device_pcie_bytes_total", direction="tx", **DEV0) == 3_000_000
    assert value(samples, "warptd_device_pcie_bytes_total", direction="rx", **DEV0) == 1_500_000
    # ... and GPM is no longer asked for throughputs the driver counts: only the ratios are left.
    backend = next(b for b in rig.loaded.accelerators if b.name == "nvidia")
    asked = backend.gpus[0].activity.source.metrics
    assert asked and not [metric for metric in asked if metric.rate]


def metrics_between(first, second, *metric_ids: int) -> list[tuple[int, float]]:
    """(nvmlReturn, value) of each metric over two samples, through pynvml's own struct and call."""
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics, request.sample1, request.sample2 = len(metric_ids), first, second
    for slot, metric_id in enumerate(metric_ids):
        request.metrics[slot].metricId = metric_id
    pynvml.nvmlGpmMetricsGet(request)
    return [(request.metrics[i].nvmlReturn, request.metrics[i].value) for i in range(len(metric_ids))]


def test_the_double_answers_samples_under_100_ms_apart_as_the_driver_does(fake_nvml):
    """nvml.h: two samples "should be greater than 100ms" apart, the driver's counter refresh rate.
    Closer, the second sees the first's counters: NaN utilization (0 of 0 cycles) and no bytes, with
    SUCCESS; a pair over 100 ms apart holds what happened between them, as a rate over that time."""
    pynvml.nvmlInit()
    try:
        gpu, handle = fake_nvml.gpus[0], pynvml.nvmlDeviceGetHandleByIndex(0)
        samples = [pynvml.nvmlGpmSampleAlloc() for _ in range(3)]
        sm, pcie_tx = pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC
        before = time.monotonic()
        pynvml.nvmlGpmSampleGet(handle, samples[0])
        gpu.advance_gpm(activity={sm: 0.5}, pcie=(100 * MIB, 0))
        pynvml.nvmlGpmSampleGet(handle, samples[1])
        (code, ratio), (rate_code, rate) = metrics_between(samples[0], samples[1], sm, pcie_tx)
        assert (code, rate_code, rate) == (pynvml.NVML_SUCCESS, pynvml.NVML_SUCCESS, 0.0)
        assert math.isnan(ratio)
        assert gpu.gpm_close_pairs == 1
        time.sleep(0.1)
        pynvml.nvmlGpmSampleGet(handle, samples[2])
        after = time.monotonic()
        (_, ratio), (_, rate) = metrics_between(samples[0], samples[2], sm, pcie_tx)
        assert ratio == pytest.approx(50.0)  # percent
        assert 100 / (after - before) <= rate <= 100 / 0.1  # MiB/s over the time between the calls
        assert gpu.gpm_close_pairs == 1
        for sample in samples:
            pynvml.nvmlGpmSampleFree(sample)
    finally:
        pynvml.nvmlShutdown()


@pytest.mark.slow
def test_reads_sooner_than_the_gap_keep_the_last_period_and_sample_nothing(make_rig, fake_nvml, settings):
    """A read before the gap has passed (another job's, or a quick second tick) takes no GPM sample:
    the driver would pair one refresh of its counters with itself. The last period's values stand."""
    settings.interval = settings.health_interval = 0.5  # a gap of 0.45 s: a tick here takes ~0.07 s
    rig = make_rig("nvidia")
    without_traffic_fields(fake_nvml)
    gpu, backend = fake_nvml.gpus[0], rig.loaded.accelerators[0]
    rig.tick()
    gpu.advance_gpm(activity=ACTIVITY, pcie=(300 * MIB, 120 * MIB))
    rig.tick_gpm()
    gauges, taken, quick = backend.gpus[0].activity.source.gauges, fake_nvml.calls("nvmlGpmSampleGet"), 0
    started = time.monotonic()
    while quick < 3 and (quick == 0 or time.monotonic() - started < 0.2):  # well within the gap
        gpu.advance_gpm(activity={pynvml.NVML_GPM_METRIC_SM_UTIL: 0.9}, pcie=(MIB, MIB))
        samples, quick = rig.tick(), quick + 1
    assert fake_nvml.calls("nvmlGpmSampleGet") == taken and gpu.gpm_close_pairs == 0
    assert backend.gpus[0].activity.source.gauges is gauges
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.5)
    tx = value(samples, "warptd_device_pcie_bytes_total", direction="tx", **DEV0)
    assert tx == pytest.approx(300 * MIB, rel=1e-3)  # the period timed in Python, the rate in the driver
    samples = rig.tick_gpm()  # the next period holds what the quick reads did not sample
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.9)
    moved = (300 + quick) * MIB
    assert value(samples, "warptd_device_pcie_bytes_total", direction="tx", **DEV0) == pytest.approx(
        moved, rel=1e-3
    )
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="invalid_value") == 0


@pytest.mark.slow
def test_a_window_beside_the_regular_job_pairs_no_samples_under_100_ms(settings):
    """The window's 0.1 s job and the regular job read one GPU: GPM samples stay over 100 ms apart
    (at --interval), no read reports a pair's NaN, and the bytes integrated over the time between the
    samples are what the GPU moved, whatever the reads in between."""
    settings.backends, settings.interval = ["nvidia"], 0.3
    fake = FakeNvml(gpus=1)
    without_traffic_fields(fake)
    gpu = fake.gpus[0]
    rates = {"tx": 1.5 * 2**30, "rx": 0.25 * 2**30}  # bytes/s, for exactly one second
    gpu.gpm_traffic(pcie=(rates["tx"], rates["rx"]), nvlink={3: (2**30, 0.5 * 2**30)}, after=0.4, seconds=1.0)
    checked: list[bool] = []  # per reading after the first GPM period: it has SM activity
    with fake.installed():
        rig = Rig(settings)

        def listener(name, devices, domains, at) -> None:
            for sample in devices or ():
                gauges, counters = sample.reading.gauges, sample.reading.counters
                if "warptd_device_pcie_bytes_total" in counters:  # GPM totals: a period has passed
                    checked.append("warptd_device_sm_active_ratio" in gauges)

        rig.sampler.listeners.append(listener)
        try:
            rig.sampler.start()
            rig.sampler.watch("window", {("nvidia", 0)}, set())
            time.sleep(2.2)  # traffic from 0.4 s to 1.4 s, then a few periods more
            rig.sampler.halt()
            samples = rig.scrape()
        finally:
            rig.close()
    fake.close()
    assert gpu.gpm_close_pairs == 0
    # at --interval for a watched GPU, not at the window's 0.1 s
    assert fake.calls("nvmlGpmSampleGet") <= 2.2 / sample_gap(settings, watched=True) + 1
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="invalid_value") == 0
    assert len(checked) > 15 and all(checked)  # the window's reads and the regular ones
    # exact but for the few µs between timing a sample in Python and in the driver (1e-5 seen)
    for direction, rate in rates.items():
        moved = value(samples, "warptd_device_pcie_bytes_total", direction=direction, **DEV0)
        assert moved == pytest.approx(rate * 1.0, rel=0.005)
    assert value(
        samples, "warptd_device_nvlink_link_bytes_total", link="3", direction="rx", **DEV0
    ) == pytest.approx(2**30, rel=0.005)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("garbage", "sm_fails"), [(math.nan, False), (-5_000.0, False), (math.inf, False), (math.nan, True)]
)
def test_a_nan_or_negative_throughput_leaves_the_byte_totals_counting(rig, fake_nvml, garbage, sm_fails):
    """A throughput the driver answers as NaN, infinite or negative is skipped (DCGM blanks NaN) and
    counted as an invalid value: the byte totals keep what they had and go on counting afterwards
    (``sm_fails``: beside a metric answering an error, the answers are sorted one by one)."""
    without_traffic_fields(fake_nvml)
    gpu, tx_rate = fake_nvml.gpus[0], pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC
    rig.tick()
    gpu.advance_gpm(pcie=(300 * MIB, 100 * MIB), nvlink={2: (50 * MIB, 0)})
    before = rig.tick_gpm()
    gpu.answer_gpm_metric(tx_rate, garbage)
    if sm_fails:
        gpu.fail_gpm_metric(pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_ERROR_TIMEOUT)
    gpu.advance_gpm(pcie=(300 * MIB, 100 * MIB), nvlink={2: (50 * MIB, 0)})
    during = rig.tick_gpm()
    tx = {"direction": "tx", **DEV0}
    assert value(during, "warptd_device_pcie_bytes_total", **tx) == value(
        before, "warptd_device_pcie_bytes_total", **tx
    )
    assert value(during, "warptd_device_pcie_bytes_total", direction="rx", **DEV0) == pytest.approx(
        200 * MIB, rel=1e-3
    )
    assert value(during, "warptd_sample_errors_total", backend="nvidia", kind="invalid_value") == 1
    gpu.answer_gpm_metric(tx_rate, None)
    gpu.fail_gpm_metric(pynvml.NVML_GPM_METRIC_SM_UTIL, None)
    gpu.advance_gpm(pcie=(300 * MIB, 100 * MIB), nvlink={2: (50 * MIB, 0)})
    after = rig.tick_gpm()
    assert value(after, "warptd_device_pcie_bytes_total", **tx) == pytest.approx(600 * MIB, rel=1e-3)
    links = {"link": "2", "direction": "rx", **DEV0}
    link_bytes = value(after, "warptd_device_nvlink_link_bytes_total", **links)
    assert link_bytes == pytest.approx(150 * MIB, rel=1e-3)
    assert value(after, "warptd_sample_errors_total", backend="nvidia", kind="invalid_value") == 1

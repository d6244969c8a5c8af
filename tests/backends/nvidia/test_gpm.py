"""GPM activity and traffic through the real pynvml over the C NVML double (tests/doubles/nvml_double.c)."""

from __future__ import annotations

import math
import time

import pynvml
import pytest

from tests.backends.nvidia.test_backend import without_traffic_fields
from tests.doubles.nvml import FakeNvml
from tests.helpers import Rig, value
from warptd.backends.nvidia.gpm import sample_gap

DEV0 = {"backend": "nvidia", "device": "0"}


MIB = 2**20


pytestmark = pytest.mark.rig(
    "nvidia",
    doubles=["fake_nvml"],
    interval=0.1,  # GPM samples 0.11 s apart (the driver's rule)
    health_interval=0.1,
    metrics_include=["*"],  # the media engines and SM occupancy too (opt-in by default)
)


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

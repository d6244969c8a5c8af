"""Media engines with MIG off (issue 38 #5): NVML gives no engine count, so the engines exported one by
one are those that have been busy, and only the driver's average per kind covers every engine."""

from __future__ import annotations

import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import select, value

DEV0 = {"backend": "nvidia", "device": "0"}
ENGINES = "warptd_device_engine_active_ratio"
#: Each kind's average over every engine of it, as the driver reports it.
AVERAGE = {
    "nvdec": "warptd_device_decoder_utilization_ratio",
    "nvjpg": "warptd_device_jpeg_utilization_ratio",
    "ofa": "warptd_device_ofa_utilization_ratio",
    "nvenc": "warptd_device_encoder_utilization_ratio",
}


@pytest.fixture
def h100(make_rig, settings):
    """An H100 (7 NVDEC, 7 NVJPG, 1 OFA, no NVENC) with MIG off, the engines one by one exported too."""
    settings.interval = settings.health_interval = 0.1  # GPM samples 0.11 s apart (the driver's rule)
    settings.metrics_include = [ENGINES]
    fake = FakeNvml([FakeGpu(index=0)])
    with fake.installed():
        rig = make_rig("nvidia")
        yield rig, fake.gpus[0]
        rig.close()
    fake.close()


def _engines(samples, engine: str) -> dict[str, float]:
    return {s.labels["instance"]: s.value for s in select(samples, ENGINES, engine=engine, **DEV0)}


@pytest.mark.slow
def test_two_of_seven_busy_nvdecs_read_two_sevenths_where_the_gpu_s_average_is_exported(h100):
    rig, gpu = h100
    assert gpu.media_engines == {"nvdec": 7, "nvjpg": 7, "ofa": 1, "nvenc": 0}
    rig.tick()
    gpu.busy_engines({"nvdec": 2})
    samples = rig.tick_gpm()
    # one by one: the two busy engines, the five idle ones unknown (no count with MIG off), so absent
    assert _engines(samples, "nvdec") == {"0": 1.0, "1": 1.0}
    # the GPU's NVDEC average is the driver's, over all seven: 2/7 in whole percent, not 100 %
    assert value(samples, AVERAGE["nvdec"], **DEV0) == pytest.approx(0.29)
    # idle kinds NVML would answer 0 for even where the GPU lacks them: not shown before they are busy
    assert not select(samples, AVERAGE["nvjpg"], **DEV0) and not select(samples, AVERAGE["ofa"], **DEV0)
    gpu.busy_engines({"nvdec": 7, "nvjpg": 3, "ofa": 1})
    samples = rig.tick_gpm()
    assert value(samples, AVERAGE["nvdec"], **DEV0) == 1.0
    assert value(samples, AVERAGE["nvjpg"], **DEV0) == pytest.approx(0.43)  # 3 of 7
    assert value(samples, AVERAGE["ofa"], **DEV0) == 1.0
    assert len(_engines(samples, "nvdec")) == 7
    gpu.busy_engines({})
    samples = rig.tick_gpm()
    assert value(samples, AVERAGE["nvjpg"], **DEV0) == 0  # once seen, kept: idle is 0, not absent
    assert not select(samples, AVERAGE["nvenc"], **DEV0)  # no NVENC: never busy, never shown
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


def test_with_mig_on_the_driver_has_no_averages_and_none_is_exported(make_rig, settings):
    """nvml.h: the four utilization calls are not supported on a MIG-enabled GPU; they are asked once."""
    settings.interval = settings.health_interval = 0.1
    gpu = FakeGpu(index=0, mig_uuids=["MIG-a"])
    fake = FakeNvml([gpu])
    with fake.installed():
        rig = make_rig("nvidia")
        gpu.busy_engines({"nvdec": 2, "nvjpg": 1})
        for _ in range(3):
            samples = rig.tick()
        rig.close()
    for name in AVERAGE.values():
        assert not select(samples, name)
    assert fake.calls("nvmlDeviceGetJpgUtilization") == 1
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0
    fake.close()

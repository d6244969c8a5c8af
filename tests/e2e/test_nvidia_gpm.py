"""GPM activity and traffic through the real pynvml over the C NVML double (tests/doubles/nvml_double.c)."""

from __future__ import annotations

import pynvml
import pytest

from tests.conftest import assert_promtool_clean

MIB = 2**20


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
def test_promtool_clean(rig, fake_nvml):
    for _ in range(3):
        for gpu in fake_nvml.gpus:
            gpu.advance_gpm(activity=ACTIVITY, pcie=(MIB, MIB), nvlink={0: (MIB, MIB)})
        rig.tick_gpm()
    body = rig.exposition.render(None, None)[0]
    assert b"warptd_device_sm_active_ratio" in body and b"warptd_device_nvlink_link_bytes_total" in body
    assert_promtool_clean(body)

"""NVIDIA health, traffic and nvidia-smi values through the C NVML double and the real pynvml."""

from __future__ import annotations

import pytest

from tests.conftest import assert_promtool_clean

pytestmark = pytest.mark.rig(
    "nvidia",
    doubles=["fake_nvml"],
    metrics_include=["warptd_device_ecc_lifetime_errors_total"],  # opt-in by default
)


@pytest.mark.slow
def test_exposition_is_promtool_clean(rig, fake_nvml):
    fake_nvml.gpus[1].fans = [30]
    fake_nvml.gpus[0].ecc_volatile[0] = 1
    rig.tick()
    body = rig.exposition.render(None, None)[0]
    assert b"warptd_device_nvlink_link_bytes_total{" in body
    assert_promtool_clean(body)

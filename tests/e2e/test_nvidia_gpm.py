"""GPM activity and traffic through the real pynvml over the C NVML double (tests/doubles/nvml_double.c)."""

from __future__ import annotations

import pytest

from tests.backends.nvidia import test_gpm
from tests.backends.nvidia.test_backend import ACTIVITY
from tests.conftest import assert_promtool_clean

MIB = test_gpm.MIB
pytestmark = test_gpm.pytestmark  # the GPM unit tests' rig: GPM samples 0.11 s apart, every family


@pytest.mark.slow
def test_promtool_clean(rig, fake_nvml):
    for _ in range(3):
        for gpu in fake_nvml.gpus:
            gpu.advance_gpm(activity=ACTIVITY, pcie=(MIB, MIB), nvlink={0: (MIB, MIB)})
        rig.tick_gpm()
    body = rig.exposition.render(None, None)[0]
    assert b"warptd_device_sm_active_ratio" in body and b"warptd_device_nvlink_link_bytes_total" in body
    assert_promtool_clean(body)

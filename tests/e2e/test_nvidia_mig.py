"""MIG devices as devices of their own (backend nvidia_mig), through the real pynvml over the NVML double."""

from __future__ import annotations

import pynvml
import pytest

from tests.backends.nvidia import test_backend as nvidia_backend
from tests.conftest import assert_promtool_clean

SM = pynvml.NVML_GPM_METRIC_SM_UTIL


fake = nvidia_backend.fake  # the NVML double: GPU 0 with MIG slices, GPU 1 without, a fixture


pytestmark = pytest.mark.rig("nvidia", "nvidia_mig", doubles=["fake"])


@pytest.mark.slow
def test_promtool_clean(rig, fake):
    for _ in range(3):
        fake.gpus[0].advance_gpm(activity={SM: 0.2}, mig=0)
        rig.tick()
    body = rig.exposition.render(None, None)[0]
    assert b"warptd_device_mig_info" in body
    assert_promtool_clean(body)

"""MIG devices as devices of their own (backend nvidia_mig), through the real pynvml over the NVML double."""

from __future__ import annotations

import pynvml
import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles.nvml import GIB, FakeMig, FakeNvml

H100_MIG = "NVIDIA H100 80GB HBM3 MIG"


SLICES = [
    FakeMig("MIG-aaaaaaaa-1111-5222-8333-444444444444", gpu_instance=1, name=f"{H100_MIG} 3g.40gb",
            memory_total=40 * GIB, memory_used=3 * GIB),
    FakeMig("MIG-bbbbbbbb-1111-5222-8333-444444444444", gpu_instance=2, name=f"{H100_MIG} 1g.10gb",
            memory_total=10 * GIB, memory_used=1 * GIB),
]  # fmt: skip


SM = pynvml.NVML_GPM_METRIC_SM_UTIL


@pytest.fixture
def fake():
    """GPU 0 with MIG on (two slices), GPU 1 with MIG off."""
    fake = FakeNvml(gpus=2)
    fake.gpus[0].mig_devices = SLICES
    with fake.installed():
        yield fake
    fake.close()


pytestmark = pytest.mark.rig("nvidia", "nvidia_mig", doubles=["fake"])


@pytest.mark.slow
def test_promtool_clean(rig, fake):
    for _ in range(3):
        fake.gpus[0].advance_gpm(activity={SM: 0.2}, mig=0)
        rig.tick()
    body = rig.exposition.render(None, None)[0]
    assert b"warptd_device_mig_info" in body
    assert_promtool_clean(body)

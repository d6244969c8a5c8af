"""The amdsmi double (tests/doubles/amdsmi.py) under the real package: no GPU or ROCm needed."""

from __future__ import annotations

import pytest

from tests.doubles.amdsmi import FakeAmdsmi, FakeGpu, FakeProcess, wrapper
from tests.e2e.test_processes import GIB


@pytest.fixture
def fake():
    fake = FakeAmdsmi([FakeGpu(index=0)])
    with fake.installed():
        yield fake
        assert fake.initialised == 0, "the amdsmi session leaked"


def test_the_double_answers_like_the_library(fake):
    """The package's own conversion over the double: bytes, cumulative ns, "N/A" occupancy."""
    import amdsmi

    amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
    try:
        handle = amdsmi.amdsmi_get_processor_handles()[0]
        assert amdsmi.amdsmi_get_gpu_process_list(handle) == []
        fake.gpus[0].processes = [FakeProcess(42, vram_bytes=5 * GIB, gfx_busy=0.25)]
        amdsmi.amdsmi_get_gpu_process_list(handle)
        fake.advance(4.0)
        (entry,) = amdsmi.amdsmi_get_gpu_process_list(handle)
        assert (entry["pid"], entry["memory_usage"]["vram_mem"]) == (42, 5 * GIB)
        assert entry["engine_usage"]["gfx"] == 1_000_000_000  # 1 s of GFX time in 4 s
        assert entry["cu_occupancy"] == "N/A"
        fake.gpus[0].processes[0].readable = False
        with pytest.raises(amdsmi.AmdSmiLibraryException) as refused:
            amdsmi.amdsmi_get_gpu_process_list(handle)
        assert refused.value.err_code == wrapper.AMDSMI_STATUS_NO_PERM
    finally:
        amdsmi.amdsmi_shut_down()

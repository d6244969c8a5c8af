"""The nvidia and nvml backends against the NVML double (tests/doubles/nvml.py); no GPU needed."""

from __future__ import annotations

import pynvml
import pytest

from tests.doubles.nvml import FakeNvml

pytestmark = pytest.mark.rig("nvidia", doubles=["fake_nvml"])


def test_without_a_scope_the_nvml_power_backend_does_not_load_and_says_why(settings, fake_nvml):
    from warptd.registry import load_backends

    settings.backends = ["nvidia"]
    loaded = load_backends(settings)
    try:
        assert [b.name for b in loaded.power] == []  # the GPUs' power: the device series alone
        assert "module or memory power scope" in loaded.unavailable["nvml"]
    finally:
        loaded.shutdown()


def test_double_runs_under_the_real_pynvml(settings):
    """pynvml's own wrappers call the stand-in library: a wrong call fails in pynvml, a function the
    driver lacks is NVML's FUNCTION_NOT_FOUND, and the R470 build lacks what arrived since."""
    fake = FakeNvml(gpus=1)
    with fake.installed():
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(TypeError):
            pynvml.nvmlDeviceGetPowerUsage(handle, 1)  # one argument too many
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetFanSpeed(handle)
        assert pynvml.nvmlDeviceGetPowerUsage(handle) == 120_000
        assert fake.calls("nvmlDeviceGetPowerUsage") == 1  # the rejected call never reached the driver
        pynvml.nvmlShutdown()
    old = FakeNvml(gpus=1, driver="r470")
    with old.installed():
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        assert pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle) == pynvml.nvmlClocksEventReasonGpuIdle
        pynvml.nvmlShutdown()
    fake.close()
    old.close()


# -- what the driver really does (issue: right numbers on a real node) ---------------------------------

"""The NVML double (tests/doubles/nvml.py, nvml_double.c) under the real pynvml: no GPU needed."""

from __future__ import annotations

import pynvml
import pytest

from tests.doubles.nvml import FakeNvml


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

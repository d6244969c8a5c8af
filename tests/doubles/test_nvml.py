"""The NVML double (tests/doubles/nvml.py, nvml_double.c) under the real pynvml: no GPU needed. What its
per-process utilization reads cost, as it charges them (the CPU a real H200 charged, burned in the
calling thread: ``shared/notes/real-h200.md``)."""

from __future__ import annotations

import contextlib
import statistics
import time

import pynvml
import pytest

from tests.doubles.nvml import FakeNvml, ProcessSample


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


PRICE_S = 2.1e-3  # nvmlDeviceGetProcessUtilization on the H200, NOT_FOUND: median of 100 calls


def _cpu_of(call) -> float:
    """The median thread CPU of ``call`` over 9 calls."""
    spent = []
    for _ in range(9):
        started = time.thread_time()
        with contextlib.suppress(pynvml.NVMLError_NotFound):
            call()
        spent.append(time.thread_time() - started)
    return statistics.median(spent)


@pytest.mark.parametrize(
    "function", ["nvmlDeviceGetProcessUtilization", "nvmlDeviceGetProcessesUtilizationInfo"]
)
def test_each_per_process_utilization_call_costs_what_the_h200_charged(fake_nvml, function):
    """NOT_FOUND (nobody used the GPU since): one C call, 2.1 ms as timed on the H200; with samples
    nvidia-ml-py's wrapper makes two (the count, then the samples), each a round trip. The R550
    function was not timed alone there and is modelled at the same price."""
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        read = getattr(pynvml, function)
        assert PRICE_S <= _cpu_of(lambda: read(handle, 0)) < 2 * PRICE_S
        fake_nvml.gpus[0].process_samples = [ProcessSample(1_000, 1001, 50)]
        assert 2 * PRICE_S <= _cpu_of(lambda: read(handle, 0)) < 3 * PRICE_S
    finally:
        pynvml.nvmlShutdown()


def test_the_process_list_costs_what_the_h200_charged(fake_nvml):
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        fake_nvml.gpus[0].processes = [(1001, 2**30)]
        assert _cpu_of(lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle)) < 1e-3  # 2 x 10 µs
    finally:
        pynvml.nvmlShutdown()

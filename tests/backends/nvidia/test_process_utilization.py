"""What NVML's per-process utilization reads cost, as the double charges them (the CPU a real H200
charged, burned in the calling thread: ``shared/notes/real-h200.md``), under the real pynvml."""

from __future__ import annotations

import contextlib
import statistics
import time

import pynvml
import pytest

from tests.doubles.nvml import ProcessSample

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

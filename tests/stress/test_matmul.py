"""Stress pieces without a worker: discovery, parameter checks, telemetry summaries, GPU plumbing."""

from __future__ import annotations

import pytest

from warptd.stress.matmul import MatmulTest


def test_matmul_flop_count_is_exact():
    assert MatmulTest.flop_per_product(2) == 12  # 4 outputs x (2 mul + 1 add)
    assert MatmulTest.flop_per_product(8192) == 8192**2 * (2 * 8192 - 1)


def test_real_gpu_matmul_when_cuda_exists():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    from warptd.stress.base import DeviceRef

    result = MatmulTest(DeviceRef("nvidia", 0, "cuda:0", True), dtype="bfloat16", size=4096).run(1.0)
    assert result.unit == "FLOP/s" and result.throughput > 1e12

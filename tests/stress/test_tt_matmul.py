"""The tenstorrent backend against the pyluwen double (tests/doubles/pyluwen.py); no chip needed."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.rig("tenstorrent", doubles=["fake_luwen"])


@pytest.fixture
def fake_ttnn(monkeypatch):
    pytest.importorskip("torch")

    from tests.doubles.ttnn import FakeTtnn

    fake = FakeTtnn(chips=2)
    monkeypatch.setitem(sys.modules, "ttnn", fake.module())
    return fake


def _tt_ref(index: int = 1):
    from warptd.stress.base import DeviceRef

    return DeviceRef(backend="tenstorrent", index=index, torch_device=f"tt:{index}", is_accelerator=True)


def test_tt_matmul_runs_on_the_chip_and_counts_flop_exactly(fake_ttnn):
    from warptd.stress.tt_matmul import TtnnMatmulTest

    started = []
    test = TtnnMatmulTest(_tt_ref(1), size=64)
    test.on_start = lambda: started.append(True)
    result = test.run(duration=0.2)
    assert started and result.unit == "FLOP/s" and result.dtype == "bfloat16"
    assert result.work == result.iterations * 64 * 64 * (2 * 64 - 1)
    assert result.throughput == pytest.approx(result.work / result.elapsed_s)
    assert fake_ttnn.calls["matmul"] == result.iterations + 3  # 3 warm-up products compile the kernels
    assert [d.device_id for d in fake_ttnn.devices] == [1] and not fake_ttnn.devices[0].open
    assert fake_ttnn.live == []  # every device tensor released
    assert fake_ttnn.calls["synchronize_device"] >= 2  # each timed batch waits for the chip


def test_tt_matmul_parameters_are_checked_before_anything_starts(fake_ttnn):
    from warptd.stress.base import DeviceRef
    from warptd.stress.tt_matmul import TtnnMatmulTest

    gpu = DeviceRef(backend="nvidia", index=0, torch_device="cuda:0", is_accelerator=True)
    with pytest.raises(ValueError, match="multiple of 32"):
        TtnnMatmulTest.check_parameters(_tt_ref(0), "bfloat16", 100)
    with pytest.raises(
        ValueError, match=r"^tt_matmul runs on Tenstorrent chips; nvidia:0 is a CUDA or ROCm GPU$"
    ):
        TtnnMatmulTest.resolve_parameters(gpu, None, 64)
    from warptd.stress.matmul import MatmulTest

    with pytest.raises(
        ValueError, match=r"^matmul runs on CPUs, CUDA and ROCm GPUs, .* tenstorrent:0 is a Tenstorrent chip$"
    ):
        MatmulTest.resolve_parameters(_tt_ref(0), None, 64)  # a 422 before any worker starts
    with pytest.raises(ValueError, match="dtype"):
        TtnnMatmulTest.check_parameters(_tt_ref(0), "float16", 64)
    assert TtnnMatmulTest.resolve_parameters(_tt_ref(0), None, None) == ("bfloat16", 4096)
    assert fake_ttnn.calls == {}


def test_tt_matmul_unavailable_without_ttnn_or_off_tenstorrent(monkeypatch):

    from warptd.stress.base import DeviceRef
    from warptd.stress.tt_matmul import TtnnMatmulTest

    monkeypatch.setitem(sys.modules, "ttnn", None)  # as when tt-metal is not installed
    assert not TtnnMatmulTest(_tt_ref(0)).is_available()
    cpu = DeviceRef(backend="cpu", index=0, torch_device="cpu", is_accelerator=False)
    assert not TtnnMatmulTest(cpu).is_available()


def test_tt_matmul_closes_the_device_when_the_chip_is_absent(fake_ttnn):
    from warptd.stress.tt_matmul import TtnnMatmulTest

    with pytest.raises(RuntimeError, match="not available"):
        TtnnMatmulTest(_tt_ref(5), size=32).run(duration=0.1)
    assert fake_ttnn.live == [] and fake_ttnn.devices == []

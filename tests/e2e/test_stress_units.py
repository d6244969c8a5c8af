"""Stress pieces without a worker: discovery, parameter checks, telemetry summaries, GPU plumbing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import http
from warptd.daemon import Daemon
from warptd.stress.matmul import MatmulTest
from warptd.stress.registry import discover_tests


@pytest.mark.slow
def test_discovery_finds_the_workloads_without_importing_torch():
    code = (
        "import sys; from warptd.stress.registry import discover_tests; t = discover_tests();"
        "assert {'matmul', 'memory'} <= set(t), t; assert 'torch' not in sys.modules; print('ok')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.stdout.strip() == "ok", result.stderr
    assert discover_tests()["matmul"] == "warptd.stress.matmul:MatmulTest"


@pytest.mark.slow
def test_gpu_devices_map_to_cuda_and_default_first(settings, fake_nvml):
    settings.backends = ["nvidia", "cpu"]
    d = Daemon(settings)
    d.start()
    try:
        refs = list(d.stress.catalog.devices.values())
        assert [(r.key, r.torch_device) for r in refs] == [
            ("nvidia:0", "cuda:0"),
            ("nvidia:1", "cuda:0"),
            ("cpu:0", "cpu"),
        ]
        # each worker sees only its own GPU, by UUID, whatever CUDA's device order would be
        assert refs[1].environment == {
            "CUDA_VISIBLE_DEVICES": fake_nvml.gpus[1].uuid,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }
        assert refs[2].environment == {}
        assert d.stress.catalog.default_device() == "nvidia:0"
        payload = json.dumps({"dtype": "tf32", "duration_s": 1}).encode()
        status, _, raw = http(d.port, "POST", "/stress", payload, {"Content-Type": "application/json"})
        body = json.loads(raw)
        assert status == 202 and body["params"]["device"] == "nvidia:0"  # tf32 is valid on cuda
        assert d.stress.jobs.get(body["id"]).done.wait(timeout=60)
        finished = d.stress.jobs.get(body["id"]).view()
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            assert finished.status == "failed" and "cuda:0" in (finished.error or "")
    finally:
        d.stop()


@pytest.mark.slow
def test_stress_devices_follow_a_rediscovery(settings, fake_nvml):
    settings.backends = ["nvidia"]
    d = Daemon(settings)
    old = fake_nvml.gpus[1].uuid
    assert d.stress.parameters("matmul", "nvidia:1", 1, None, None).device == "nvidia:1"
    assert d.stress.catalog.devices["nvidia:1"].environment["CUDA_VISIBLE_DEVICES"] == old
    infos = d.snapshot.get("nvidia").devices_info
    d.snapshot.update("nvidia", devices_info=[infos[0].model_copy(update={"uuid": "GPU-new"}), infos[1]])
    d.stress.parameters("matmul", None, 1, None, None)
    assert d.stress.catalog.devices["nvidia:0"].environment["CUDA_VISIBLE_DEVICES"] == "GPU-new"
    d.server.server_close()
    d.sampler.stop()


@pytest.mark.slow
def test_defaults_are_resolved_in_the_daemon_without_torch():
    """bfloat16 from NVIDIA compute capability 8.0 and on ROCm, float16 before, float32 on the CPU."""
    from warptd.stress.base import DeviceRef
    from warptd.stress.memory import MemoryBandwidthTest

    def gpu(capability: str | None) -> DeviceRef:
        return DeviceRef("nvidia", 0, "cuda:0", True, compute_capability=capability)

    cpu = DeviceRef("cpu", 0, "cpu", False)
    assert MatmulTest.resolve_parameters(gpu("9.0"), None, None) == ("bfloat16", 8192)
    assert MatmulTest.resolve_parameters(gpu("7.0"), None, None) == ("float16", 8192)
    assert MatmulTest.resolve_parameters(gpu("gfx90a"), None, None) == ("bfloat16", 8192)
    assert MatmulTest.resolve_parameters(cpu, None, None) == ("float32", 2048)
    assert MatmulTest.resolve_parameters(cpu, "bfloat16", 64) == ("bfloat16", 64)
    assert MemoryBandwidthTest.resolve_parameters(cpu, None, None) == ("float32", 256)
    assert MemoryBandwidthTest.resolve_parameters(gpu("8.0"), None, None) == ("float32", 2048)
    probe = (
        "import sys; from warptd.stress.base import DeviceRef; from warptd.stress.matmul import MatmulTest;"
        "MatmulTest.resolve_parameters(DeviceRef('nvidia', 0, 'cuda:0', True, compute_capability='8.0'),"
        " None, None); assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)  # the daemon never imports torch

"""Stress pieces without a worker: discovery, parameter checks, telemetry summaries, GPU plumbing."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.helpers import http
from warptd.daemon import Daemon
from warptd.http.app import HttpError, Request, Router
from warptd.http.protection import is_loopback
from warptd.http.stress_routes import StressApi
from warptd.models import DeviceReading, Utilization
from warptd.power.base import DomainPower, PowerSource
from warptd.sampling.snapshot import DeviceSample
from warptd.stress.jobs import JobManager
from warptd.stress.matmul import MatmulTest
from warptd.stress.registry import discover_tests
from warptd.stress.telemetry import TelemetryRecorder


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


def test_matmul_flop_count_is_exact():
    assert MatmulTest.flop_per_product(2) == 12  # 4 outputs x (2 mul + 1 add)
    assert MatmulTest.flop_per_product(8192) == 8192**2 * (2 * 8192 - 1)


def _sample(  # noqa: PLR0917 - a compact fixture builder
    t_power: float | None,
    energy: float | None,
    counter: float | None,
    util: float,
    temp: float,
    throttle: dict[str, float] | None = None,
    active: dict[str, bool] | None = None,
) -> DeviceSample:
    reading = DeviceReading(
        index=0,
        power_watts=t_power,
        energy_counter_joules=counter,
        utilization=Utilization(compute=util),
        temperatures_celsius={"gpu": temp},
        throttle_active=active or {},
    )
    return DeviceSample(reading=reading, energy_joules=energy, throttle_seconds=throttle or {})


def test_summary_from_device_counter():
    rec = TelemetryRecorder(recording=True)
    rec.add_device(_sample(300, 1000.0, 1000.0, 0.9, 60, {"sw_power_cap": 1.0}))
    rec.add_device(_sample(500, 1400.0, 1400.0, 1.0, 71, {"sw_power_cap": 2.5}, {"sw_power_cap": True}))
    s = rec.summary()
    assert s.samples == 2 and s.power_mean_watts == 400 and s.power_peak_watts == 500
    assert s.energy_joules == 400 and s.energy_source == "counter"
    assert s.temperature_peak_celsius == 71 and s.utilization_mean_ratio == pytest.approx(0.95)
    assert s.throttle_seconds == {"sw_power_cap": 1.5}


def test_summary_from_rapl_packages_for_the_cpu():
    rec = TelemetryRecorder(recording=True)
    rec.add_device(_sample(None, None, None, 0.9, 50))
    for energy, power in ((100.0, 50.0), (160.0, 60.0)):
        rec.add_domains(
            [
                DomainPower("package-0", PowerSource.RAPL, power, energy),
                DomainPower(
                    "core-0", PowerSource.RAPL, power / 2, energy / 2
                ),  # inside the package: not added
                DomainPower("psys", PowerSource.RAPL, power * 2, energy * 2),  # contains it: not added
            ]
        )
    s = rec.summary()
    assert s.energy_joules == 60 and s.energy_source == "rapl"
    assert s.power_mean_watts == 55 and s.power_peak_watts == 60


def test_idle_and_clock_settings_are_not_throttling_in_the_summary():
    rec = TelemetryRecorder(recording=True)
    idle = {"gpu_idle": True, "applications_clocks_setting": True, "display_clock_setting": True}
    rec.add_device(_sample(100, 10.0, 10.0, 0.0, 40, active=idle))
    rec.add_device(_sample(100, 20.0, 20.0, 0.0, 40, active={**idle, "sw_power_cap": False}))
    assert rec.summary().throttle_seconds == {}


def _record_gpu0(rig) -> TelemetryRecorder:
    """A recorder fed by the rig's sampler with GPU 0's samples, as a stress job is."""
    rec = TelemetryRecorder(recording=True)

    def listener(backend, devices, domains, at):
        for sample in devices or ():
            if sample.reading.index == 0:
                rec.add_device(sample, at)

    rig.sampler.listeners.append(listener)
    return rec


def test_a_run_on_an_idle_gpu_records_no_throttling(make_rig, fake_nvml):
    """Through the sampler, as the stress jobs get their samples: gpu_idle accumulates nothing."""
    rig = make_rig("nvidia")
    rec = _record_gpu0(rig)
    for _ in range(3):
        rig.tick("nvidia")
        time.sleep(0.05)
    summary = rec.summary()
    assert summary.samples == 3
    assert summary.throttle_seconds == {}


@pytest.mark.slow
def test_peak_power_is_the_peak_of_instant_readings_not_of_one_second_averages(make_rig, fake_nvml):
    """On Ampere and newer nvmlDeviceGetPowerUsage averages a second: a short spike barely shows there."""
    rig = make_rig("nvidia")
    rec = _record_gpu0(rig)
    gpu = fake_nvml.gpus[0]
    time.sleep(1.0)  # a second at 120 W
    rig.tick("nvidia")
    gpu.power_mw = 650_000  # a spike the sample lands in (after the driver's next refresh)
    fake_nvml.next_refresh()
    rig.tick("nvidia")
    gpu.power_mw = 120_000
    fake_nvml.next_refresh()
    rig.tick("nvidia")
    assert rec.summary().power_peak_watts == 650  # the 1 s average at that instant was under 200 W


def test_recorder_ignores_samples_outside_the_run():
    rec = TelemetryRecorder()
    rec.add_device(_sample(100, 1.0, 1.0, 0.1, 40))
    assert rec.summary().samples == 0 and rec.summary().energy_joules is None


@pytest.mark.parametrize(
    ("headers", "body", "status", "message"),
    [
        ({"origin": "http://evil.example", "host": "127.0.0.1:9465"}, b"{}", 403, "cross-origin"),
        ({"host": "rebind.evil.example:9465", "content-type": "application/json"}, b"{}", 403, "Host"),
        ({"host": "localhost:9465", "content-type": "text/plain"}, b"{}", 415, "application/json"),
    ],
)
def test_browser_and_dns_rebinding_requests_are_refused(headers, body, status, message):
    router = Router()
    StressApi.add(router, JobManager([], {}), token=lambda: None)
    with pytest.raises(HttpError) as info:
        router.dispatch(Request("POST", "/stress", {}, headers, body, client="127.0.0.1"))
    assert info.value.status == status and message in info.value.message


def test_loopback_host_names():
    from warptd.http.protection import is_loopback_host

    for host in ("localhost:9465", "127.0.0.1", "127.0.0.1:9465", "[::1]:9465", "::1", "LOCALHOST"):
        assert is_loopback_host(host), host
    for host in ("evil.example", "10.0.0.1:9465", "[fe80::1]:9465", "localhost.evil.example"):
        assert not is_loopback_host(host), host


def test_remote_clients_need_a_token():
    router = Router()
    StressApi.add(router, JobManager([], {}), token=lambda: None)
    request = Request("POST", "/stress", {}, {}, b"{}", client="10.1.2.3")
    with pytest.raises(HttpError) as info:
        router.dispatch(request)
    assert info.value.status == 403 and "loopback" in info.value.message
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("10.1.2.3") and not is_loopback("::ffff:10.0.0.1")


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


def test_real_gpu_matmul_when_cuda_exists():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    from warptd.stress.base import DeviceRef

    result = MatmulTest(DeviceRef("nvidia", 0, "cuda:0", True), dtype="bfloat16", size=4096).run(1.0)
    assert result.unit == "FLOP/s" and result.throughput > 1e12


def test_token_in_x_stress_token_when_authorization_carries_basic_auth():
    router = Router()
    StressApi.add(router, JobManager([], {}), token=lambda: "tok")
    headers = {"authorization": "Basic cHJvbWV0aGV1czp4", "x-stress-token": "tok"}
    with pytest.raises(HttpError) as info:
        router.dispatch(Request("POST", "/stress", {}, headers, b"", client="10.0.0.9"))
    assert info.value.status == 422  # past authentication: no such device in this empty manager
    headers["x-stress-token"] = "nope"
    with pytest.raises(HttpError) as info:
        router.dispatch(Request("POST", "/stress", {}, headers, b"", client="10.0.0.9"))
    assert info.value.status == 401


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


def test_a_device_torch_does_not_know_is_unavailable_not_a_crash():
    """Tenstorrent's ``tt:N`` and TPU's ``xla:N`` without torch_xla: the workload says unavailable."""
    pytest.importorskip("torch")
    from warptd.stress import torch_device

    assert not torch_device.available("tt:0")
    assert torch_device.available("cpu")


def test_the_default_test_is_the_one_that_runs_on_the_device():
    """An empty POST /stress on a Tenstorrent chip runs tt_matmul (Path B), elsewhere matmul."""
    from warptd.stress.base import DeviceRef

    refs = [
        DeviceRef(backend="tenstorrent", index=0, torch_device="tt:0", is_accelerator=True),
        DeviceRef(backend="cpu", index=0, torch_device="cpu", is_accelerator=False),
    ]
    manager = JobManager(refs, {})
    assert manager.parameters(None, None, 1.0, None, None).test == "tt_matmul"  # first accelerator
    assert manager.parameters(None, "cpu:0", 1.0, None, None).test == "matmul"
    assert manager.parameters("memory", "cpu:0", 1.0, None, None).test == "memory"  # as asked


@pytest.mark.slow
def test_defaults_are_resolved_in_the_daemon_without_torch():
    """bfloat16 from NVIDIA compute capability 8.0 and on ROCm, float16 before, float32 on the CPU."""
    from warptd.stress.base import DeviceRef
    from warptd.stress.matmul import MatmulTest
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


def test_only_workloads_a_device_runs_are_offered():
    from warptd.stress.base import DeviceRef

    cpu = DeviceRef("cpu", 0, "cpu", False)
    tt = DeviceRef("tenstorrent", 0, "tt:0", True)
    assert "tt_matmul" not in JobManager([cpu], {}).catalog.usable_tests()
    both = JobManager([cpu, tt], {})
    assert both.catalog.tests_for(tt) == ["tt_matmul"] and "tt_matmul" not in both.catalog.tests_for(cpu)
    assert {"matmul", "memory", "tt_matmul"} <= set(both.catalog.usable_tests())

"""The nvidia and nvml backends against the NVML double (tests/doubles/nvml.py); no GPU needed."""

from __future__ import annotations

import time

import pynvml
import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles.nvml import FakeGpu, FakeNvml, nvml_error
from tests.helpers import Rig, select, value, wait_until
from warptd.backends.nvidia.backend import NvidiaBackend
from warptd.errors import ErrorKind
from warptd.models import GPUInfo

DEV0 = {"backend": "nvidia", "device": "0"}
DEV1 = {"backend": "nvidia", "device": "1"}


pytestmark = pytest.mark.rig("nvidia", doubles=["fake_nvml"])


def test_values_in_base_units(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **DEV0) == 1
    assert value(samples, "warptd_device_memory_total_bytes", **DEV0) == gpu.memory_total
    assert value(samples, "warptd_device_memory_used_bytes", **DEV0) == gpu.memory_used
    free = gpu.memory_total - gpu.memory_reserved - gpu.memory_used  # as nvidia-smi shows them
    assert value(samples, "warptd_device_memory_free_bytes", **DEV0) == free
    assert value(samples, "warptd_device_memory_reserved_bytes", **DEV0) == gpu.memory_reserved
    assert value(samples, "warptd_device_utilization_ratio", **DEV0) == pytest.approx(0.35)
    assert value(samples, "warptd_device_memory_utilization_ratio", **DEV0) == pytest.approx(0.12)
    assert value(samples, "warptd_device_power_watts", **DEV0) == pytest.approx(120.0)  # from 120000 mW
    assert value(samples, "warptd_device_power_limit_watts", **DEV0) == pytest.approx(700.0)
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == pytest.approx(5000.0)  # 5e6 mJ
    assert value(samples, "warptd_device_temperature_celsius", sensor="gpu", **DEV0) == 41
    assert value(samples, "warptd_device_clock_hertz", clock="sm", **DEV0) == 1980e6
    assert value(samples, "warptd_device_clock_hertz", clock="memory", **DEV0) == 2619e6
    assert value(samples, "warptd_device_clock_event_active", reason="gpu_idle", **DEV0) == 1
    assert value(samples, "warptd_device_throttle_active", reason="hw_thermal_slowdown", **DEV0) == 0
    info = select(samples, "warptd_device_info", **DEV0)[0].labels
    assert info["uuid"] == gpu.uuid
    assert info["model"] == "NVIDIA H100 80GB HBM3"
    assert info["driver_version"] == "580.65.06"
    assert info["compute_capability"] == "9.0"
    assert info["pci_bus_id"] == "00000000:18:00.0"
    assert info["node"] == "node-a"
    # every device series carries the uuid label
    assert all(s.labels["uuid"] == gpu.uuid for s in samples if s.labels.get("device") == "0")


def test_several_gpus_each_reported(settings):
    fake = FakeNvml([FakeGpu(index=i, power_mw=100_000 + 1000 * i) for i in range(4)])
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        samples = rig.tick()
        for i in range(4):
            assert value(samples, "warptd_device_power_watts", backend="nvidia", device=str(i)) == 100 + i
        rig.close()


def test_handles_are_cached_not_looked_up_per_sample(rig, fake_nvml):
    for _ in range(5):
        rig.tick()
    assert fake_nvml.calls("nvmlDeviceGetHandleByIndex_v2") == len(fake_nvml.gpus)
    assert fake_nvml.calls("nvmlInitWithFlags") == 1  # nvidia and nvml power share one session
    assert fake_nvml.calls("nvmlDeviceGetFieldValues") >= 5
    assert fake_nvml.calls("nvmlDeviceGetPowerUsage") == 0  # the instant field serves power


def test_not_supported_fields_are_absent_not_zero(rig, fake_nvml):
    gpu = fake_nvml.gpus[1]
    gpu.unsupported = {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperature"}
    gpu.unsupported_fields = {
        pynvml.NVML_FI_DEV_POWER_INSTANT,
        pynvml.NVML_FI_DEV_POWER_AVERAGE,
        pynvml.NVML_FI_DEV_MEMORY_TEMP,
    }
    gpu.energy_mj = None
    gpu.supported_reasons = 0
    gpu.current_reasons = 0
    samples = rig.tick()
    for name in (
        "warptd_device_power_watts",
        "warptd_device_power_average_watts",
        "warptd_device_utilization_ratio",
        "warptd_device_temperature_celsius",
        "warptd_device_energy_joules_total",
        "warptd_device_throttle_active",
        "warptd_device_clock_event_active",
    ):
        assert not select(samples, name, **DEV1), name
        assert select(samples, name, **DEV0), name
    assert value(samples, "warptd_device_up", **DEV1) == 1
    # NOT_SUPPORTED is not an error, and is asked once, not every sample
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0
    before = fake_nvml.calls("nvmlDeviceGetPowerUsage")
    rig.tick("nvidia")
    assert fake_nvml.calls("nvmlDeviceGetPowerUsage") == before  # asked once on GPU 1; GPU 0 has the field


def test_gpu_lost_mid_run_drops_its_series_others_keep_updating(rig, fake_nvml):
    rig.tick()
    fake_nvml.gpus[0].lost = True
    fake_nvml.gpus[1].power_mw = 250_000
    fake_nvml.next_refresh()
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **DEV0) == 0
    assert not select(samples, "warptd_device_power_watts", **DEV0)
    assert not select(samples, "warptd_device_memory_used_bytes", **DEV0)
    assert not select(samples, "warptd_device_energy_joules_total", **DEV0)
    assert value(samples, "warptd_device_power_watts", **DEV1) == 250
    assert value(samples, "warptd_device_up", **DEV1) == 1
    assert value(samples, "warptd_backend_up", backend="nvidia") == 1
    # one lost error per sample, not one per skipped call
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="device_lost") == 1
    fake_nvml.gpus[0].lost = False
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **DEV0) == 1


def test_a_gpu_lost_at_a_call_after_its_batches_reads_down(rig, fake_nvml):
    """GPU_IS_LOST from a call of the sample's pass (after its field batch answered) makes the reading
    down, as a loss at the batch does; the other GPU reads on."""
    rig.tick()
    rig.tick()  # the calls are looked up: the next sample makes them in one pass
    gpu = fake_nvml.gpus[0]
    gpu.raises["nvmlDeviceGetMemoryInfo_v2"] = pynvml.NVML_ERROR_GPU_IS_LOST
    samples = rig.tick("nvidia")
    assert value(samples, "warptd_device_up", **DEV0) == 0
    assert not select(samples, "warptd_device_power_watts", **DEV0)
    assert value(samples, "warptd_device_up", **DEV1) == 1
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="device_lost") == 1


def test_a_hung_gpu_reads_down_without_blocking_the_other_gpu_or_backends(settings, fake_nvml, sysfs):
    """Issue 39 #3: one GPU's hung calls no longer make the backend stale; the GPU is held apart
    (down, counted under its index) while the other GPU and the other backends read on."""
    sysfs.rapl_zone("intel-rapl:0", "package-0", 1_000_000)
    settings.backends = ["nvidia", "rapl"]
    settings.sample_timeout = 0.3
    rig = Rig(settings)
    rig.tick()
    gpu = fake_nvml.gpus[1]
    gpu.hang.set()
    try:
        started = time.monotonic()
        rig.sampler.tick("nvidia")
        assert time.monotonic() - started < 1.0  # gave up at the timeout
        started = time.monotonic()
        rig.sampler.tick("rapl")
        assert time.monotonic() - started < 0.2  # other backends are not delayed
        samples = rig.tick("nvidia")  # GPU 1's call is still hung: held apart, not asked (no 2nd timeout)
        assert value(samples, "warptd_backend_up", backend="nvidia") == 1
        assert value(samples, "warptd_backend_up", backend="rapl") == 1
        assert value(samples, "warptd_device_up", **DEV0) == 1
        assert value(samples, "warptd_device_power_watts", **DEV0) == 120
        assert value(samples, "warptd_device_up", **DEV1) == 0
        assert not select(samples, "warptd_device_power_watts", **DEV1)
        errors = {"backend": "nvidia", "device": "1"}
        assert value(samples, "warptd_sample_errors_total", kind="timeout", **errors) == 1
        assert value(samples, "warptd_sample_errors_total", kind="hung", **errors) == 1
        assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="timeout", device="") == 0
        assert select(samples, "warptd_energy_joules_total", source="rapl", domain="package-0")
    finally:
        gpu.hang.clear()
        gpu.release.set()
    assert wait_until(lambda: not rig.sampler.reads.workers["nvidia"].held(), timeout=5)
    samples = rig.tick("nvidia")
    assert value(samples, "warptd_device_up", **DEV1) == 1
    assert value(samples, "warptd_device_power_watts", **DEV1) > 0
    rig.close()


def test_energy_counter_reset_stays_monotonic(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 5000
    gpu.energy_mj += 2_000_000
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 7000
    gpu.energy_mj = 300_000  # driver reload: the counter restarts from 0
    time.sleep(0.5)  # 300 J since the reload is plausible at the 700 W limit only after 0.43 s (issue 23)
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 7300
    gpu.energy_mj = 400_000
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 7400


def test_energy_integrated_from_power_without_a_counter(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.energy_mj = None
    gpu.power_mw = 200_000
    rig.tick()
    time.sleep(0.25)
    samples = rig.tick()
    joules = value(samples, "warptd_device_energy_joules_total", **DEV0)
    assert 200 * 0.2 < joules < 200 * 0.6


def test_throttle_seconds_from_violation_counters_and_samples(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.violation_ns[pynvml.NVML_PERF_POLICY_POWER] = 1_500_000_000
    gpu.current_reasons = pynvml.nvmlClocksEventReasonHwSlowdown
    rig.tick()
    time.sleep(0.1)
    gpu.violation_ns[pynvml.NVML_PERF_POLICY_POWER] = 4_000_000_000
    samples = rig.tick()
    assert value(samples, "warptd_device_throttle_seconds_total", reason="sw_power_cap", **DEV0) == 4.0
    sampled = value(samples, "warptd_device_throttle_seconds_total", reason="hw_slowdown", **DEV0)
    assert 0.05 < sampled < 1.0
    assert value(samples, "warptd_device_throttle_active", reason="hw_slowdown", **DEV0) == 1


CLOCK_EVENTS = ("gpu_idle", "applications_clocks_setting", "display_clock_setting")
THROTTLING = (
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)


def by_reason(samples, name: str, device: dict[str, str]) -> dict[str, float]:
    return {s.labels["reason"]: s.value for s in select(samples, name, **device)}


@pytest.mark.slow
def test_an_idle_gpu_is_a_clock_event_not_throttling(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.current_reasons = pynvml.nvmlClocksEventReasonGpuIdle
    rig.tick()
    time.sleep(0.1)
    samples = rig.tick()
    assert value(samples, "warptd_device_clock_event_active", reason="gpu_idle", **DEV0) == 1
    for reason in ("applications_clocks_setting", "display_clock_setting"):
        assert value(samples, "warptd_device_clock_event_active", reason=reason, **DEV0) == 0
    for reason in CLOCK_EVENTS:  # neither a throttle series nor sampled throttle time
        assert not select(samples, "warptd_device_throttle_active", reason=reason), reason
        assert not select(samples, "warptd_device_throttle_seconds_total", reason=reason), reason
    active = by_reason(samples, "warptd_device_throttle_active", DEV0)
    assert active == dict.fromkeys(THROTTLING, 0)
    throttled = select(samples, "warptd_device_throttle_seconds_total", **DEV0)
    assert throttled and all(s.value == 0 for s in throttled)
    assert_promtool_clean(rig.exposition.render(None, None)[0])


def test_clock_events_beside_real_throttling(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.current_reasons = (
        pynvml.nvmlClocksEventReasonApplicationsClocksSetting | pynvml.nvmlClocksEventReasonHwSlowdown
    )
    rig.tick()
    time.sleep(0.1)
    samples = rig.tick()
    events = by_reason(samples, "warptd_device_clock_event_active", DEV0)
    assert events == {"gpu_idle": 0, "applications_clocks_setting": 1, "display_clock_setting": 0}
    assert value(samples, "warptd_device_throttle_active", reason="hw_slowdown", **DEV0) == 1
    assert value(samples, "warptd_device_throttle_seconds_total", reason="hw_slowdown", **DEV0) > 0.05
    assert not select(samples, "warptd_device_throttle_seconds_total", reason="applications_clocks_setting")


def test_clock_events_only_where_supported(rig, fake_nvml):
    gpu = fake_nvml.gpus[1]
    gpu.supported_reasons = pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonGpuIdle
    gpu.current_reasons = pynvml.nvmlClocksEventReasonGpuIdle
    samples = rig.tick()
    events = by_reason(samples, "warptd_device_clock_event_active", DEV1)
    assert events == {"gpu_idle": 1}
    active = by_reason(samples, "warptd_device_throttle_active", DEV1)
    assert active == {"sw_power_cap": 0}


def test_nvml_power_backend_domains_are_the_parts_nvml_measures_apart(settings, fake_nvml):
    """A Grace Hopper module's power (CPU included) and the memory's: domains of their own, never a
    repeat of the GPU's power, which is the nvidia backend's device series (issue 33 #9)."""
    fake_nvml.gpus[0].module_power_mw, fake_nvml.gpus[0].memory_power_mw = 450_000, 60_000
    fake_nvml.gpus[1].memory_power_mw = 55_000  # an x86 host: no module scope
    settings.backends = ["nvml"]
    rig = Rig(settings)
    assert list(rig.sampler.backends) == ["nvml"]
    samples = rig.tick()
    domains = {s.labels["domain"]: s.value for s in select(samples, "warptd_power_watts", source="nvml")}
    assert domains == {"gpu0-module": 450, "gpu0-memory": 60, "gpu1-memory": 55}
    assert value(samples, "warptd_power_domain_up", source="nvml", domain="gpu1-memory") == 1
    time.sleep(0.2)
    samples = rig.tick()  # the sampler integrates each part's power into its energy
    assert 0 < value(samples, "warptd_energy_joules_total", source="nvml", domain="gpu0-module") < 450
    rig.close()


def test_without_a_scope_the_nvml_power_backend_does_not_load_and_says_why(settings, fake_nvml):
    from warptd.registry import load_backends

    settings.backends = ["nvidia"]
    loaded = load_backends(settings)
    try:
        assert [b.name for b in loaded.power] == []  # the GPUs' power: the device series alone
        assert "module or memory power scope" in loaded.unavailable["nvml"]
    finally:
        loaded.shutdown()


def test_nvml_domains_come_from_the_nvidia_read_when_both_are_loaded(settings, fake_nvml):
    """One SDK read per GPU per tick serves the device and the power domains: the scoped fields ride
    in the device's own batch, and nvml is stale whenever nvidia's read failed."""
    for gpu in fake_nvml.gpus:
        gpu.memory_power_mw = 60_000
    rig = Rig(settings)
    assert "nvml" in rig.sampler.backends and "nvml" not in rig.sampler.scheduled()
    samples = rig.tick()
    batches = fake_nvml.calls("nvmlDeviceGetFieldValues")
    samples = rig.tick()
    assert fake_nvml.calls("nvmlDeviceGetFieldValues") - batches == 2  # one batch per GPU, not two
    for index in range(2):
        assert value(samples, "warptd_power_watts", source="nvml", domain=f"gpu{index}-memory") == 60
    assert not select(samples, "warptd_power_watts", source="nvml", domain="gpu0")  # no repeat of it
    assert value(samples, "warptd_samples_total", backend="nvml") == 2

    fake_nvml.gpus[0].lost = True
    samples = rig.tick()
    assert value(samples, "warptd_power_domain_up", source="nvml", domain="gpu0-memory") == 0
    assert value(samples, "warptd_power_domain_up", source="nvml", domain="gpu1-memory") == 1

    # what a read past --sample-timeout does
    rig.sampler.reads.publisher.fail("nvidia", ErrorKind.TIMEOUT, "timeout")
    samples = rig.scrape()
    assert value(samples, "warptd_backend_up", backend="nvml") == 0
    assert value(samples, "warptd_sample_errors_total", backend="nvml", kind="timeout") == 1
    rig.close()


def test_pytorch_device_string_and_errors_never_escape(settings, fake_nvml):
    backend = NvidiaBackend(settings)
    assert backend.worker_device(GPUInfo(index=1, model="NVIDIA GPU"))[0] == "cuda:1"  # without a UUID
    fake_nvml.gpus[0].raises["nvmlDeviceGetMemoryInfo_v2"] = nvml_error(pynvml.NVML_ERROR_UNKNOWN)
    fake_nvml.gpus[0].raises["nvmlDeviceGetUtilizationRates"] = pynvml.NVML_ERROR_NO_PERMISSION
    assert backend.gpus[0].memory() is None  # a failing v2 is an error, not a reason to use v1
    assert backend.gpus[0].utilization() is None
    errors = backend.take_errors()
    assert errors["sdk_error"] == 1 and errors["permission"] == 1
    assert fake_nvml.calls("nvmlDeviceGetMemoryInfo") == 0
    backend.shutdown()


def test_missing_driver_is_a_log_line_not_an_error(settings):
    fake = FakeNvml(gpus=1)
    fake.library_missing = True
    settings.backends = ["nvidia", "cpu"]
    with fake.installed():
        rig = Rig(settings)
        assert [b.name for b in rig.loaded.accelerators] == ["cpu"]
        assert "libnvidia-ml.so.1 not found" in rig.loaded.unavailable["nvidia"]
        rig.close()


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


@pytest.mark.parametrize(
    ("field", "garbage", "metric", "labels"),
    [
        ("power_mw", -5000, "warptd_device_power_watts", {}),
        ("util_gpu", 180, "warptd_device_utilization_ratio", {}),
        ("temperature", 4_000_000_000, "warptd_device_temperature_celsius", {"sensor": "gpu"}),
        ("memory_used", 200 * 2**30, "warptd_device_memory_used_bytes", {}),  # more than the total
    ],
)
def test_garbage_values_are_rejected_and_counted(rig, fake_nvml, field, garbage, *, metric, labels):
    """Every sample that reads the garbage drops it and counts it, kept by the backend or not."""
    setattr(fake_nvml.gpus[0], field, garbage)
    fake_nvml.next_refresh()
    samples = rig.tick()
    assert not select(samples, metric, **DEV0, **labels)  # never exported
    assert select(samples, metric, **DEV1, **labels)  # the sane GPU still is
    assert value(samples, "warptd_device_up", **DEV0) == 1
    rejected = value(samples, "warptd_sample_errors_total", backend="nvidia", kind="invalid_value")
    assert rejected >= 1
    samples = rig.tick()  # the same answers again: the backend hands over the same object
    if field != "power_mw":  # power then comes from the energy counter's rise instead
        assert not select(samples, metric, **DEV0, **labels)
    assert (
        value(samples, "warptd_sample_errors_total", backend="nvidia", kind="invalid_value") >= 2 * rejected
    )


def test_nan_power_from_a_plugin_is_rejected(settings):
    import math

    from warptd.models import DeviceReading
    from warptd.sampling.validate import sanitize_device

    reading = DeviceReading(index=0, power_watts=math.nan, temperatures_celsius={"a": 40.0, "b": math.inf})
    reading, rejected = sanitize_device(reading)
    assert rejected == 2
    assert reading.power_watts is None and reading.temperatures_celsius == {"a": 40.0}


@pytest.mark.parametrize(
    ("field", "garbage"),
    [
        ("power_watts", -1.0),
        ("power_average_watts", float("inf")),
        ("power_limit_watts", 20_000.0),
        ("energy_counter_joules", float("nan")),
        ("energy_counter_joules", float("inf")),
        ("power_watts", "400"),
    ],
)
def test_each_impossible_power_value_is_dropped_alone(field, garbage):
    """The power values pass in one expression when sane; one that is not is dropped and counted,
    the others kept."""
    from warptd.models import DeviceReading
    from warptd.sampling.validate import sanitize_device

    sane = {
        "power_watts": 400.0,
        "power_average_watts": 390.0,
        "power_limit_watts": 700,
        "energy_counter_joules": 5e6,
    }
    reading, rejected = sanitize_device(DeviceReading(index=0, **{**sane, field: garbage}))
    assert rejected == 1
    assert getattr(reading, field) is None
    assert all(getattr(reading, name) == value for name, value in sane.items() if name != field)
    clean, rejected = sanitize_device(DeviceReading(index=0, **sane))
    assert rejected == 0 and clean.power_limit_watts == 700


@pytest.fixture
def rediscover_now(monkeypatch):
    from warptd.sampling import sampler

    monkeypatch.setattr(sampler, "REDISCOVER_EVERY_S", 0.0)


def test_nvml_shut_down_under_the_daemon_recovers(rig, fake_nvml, rediscover_now):
    rig.tick()
    pynvml.nvmlShutdown()  # other code in the process drops NVML's last reference
    samples = rig.tick("nvidia")
    assert value(samples, "warptd_device_up", **DEV0) == 0  # unreadable, not frozen or zero
    assert not select(samples, "warptd_device_power_watts", **DEV0)
    samples = rig.tick("nvidia")  # reopened NVML before reading
    assert value(samples, "warptd_device_up", **DEV0) == 1
    assert value(samples, "warptd_device_power_watts", **DEV1) == 120
    assert value(samples, "warptd_backend_up", backend="nvidia") == 1


def test_a_reopen_opens_each_gpu_afresh_keeping_only_its_totals_and_identity(rig, fake_nvml, rediscover_now):
    """A reopened NVML gets new device objects in one go: a call one GPU lacked under the old NVML is
    asked again (a reload may bring it), the other GPU is not disturbed by it; the field latency total
    (warptd's own) and the identity last listed carry over."""
    backend, encoder = rig.loaded.accelerators[0], "nvmlDeviceGetEncoderUtilization"
    for gpu in fake_nvml.gpus:
        gpu.encoder_util = 20  # encoding: an encoder NVML gives no count of shows once active
    fake_nvml.gpus[1].unsupported.add(encoder)
    samples = rig.tick("nvidia")
    assert not select(samples, "warptd_device_encoder_utilization_ratio", **DEV1)
    assert select(samples, "warptd_device_encoder_utilization_ratio", **DEV0)
    before = backend.gpus
    assert "warptd_device_encoder_utilization_ratio" in before[1].guard.unsupported
    assert "warptd_device_encoder_utilization_ratio" not in before[0].guard.unsupported
    totals, latency = (
        before[0].batch.totals,
        value(samples, "warptd_device_nvml_field_latency_seconds_total", **DEV0),
    )
    fake_nvml.gpus[1].unsupported.discard(encoder)  # the driver reloaded with it
    pynvml.nvmlShutdown()
    rig.tick("nvidia")
    samples = rig.tick("nvidia")  # reopened NVML before reading
    assert all(new is not old for new, old in zip(backend.gpus, before, strict=True))
    assert backend.gpus[0].batch.totals is totals
    assert backend.gpus[1].identity.known == before[1].identity.known
    assert value(samples, "warptd_device_encoder_utilization_ratio", **DEV1) >= 0
    assert value(samples, "warptd_device_nvml_field_latency_seconds_total", **DEV0) >= latency


def test_gpu_disappears_and_comes_back_with_a_new_uuid(rig, fake_nvml, rediscover_now):
    first = rig.tick("nvidia")
    old_uuid = fake_nvml.gpus[1].uuid
    replaced = fake_nvml.gpus.pop(1)  # falls off the bus
    samples = rig.tick("nvidia")
    assert value(samples, "warptd_device_up", backend="nvidia", device="1", uuid=old_uuid) == 0
    samples = rig.tick("nvidia")  # re-enumerated: one GPU left; the gone one stays down (issue 39 #3)
    assert value(samples, "warptd_device_up", backend="nvidia", device="1", uuid=old_uuid) == 0
    assert value(samples, "warptd_device_up", **DEV0) == 1
    replaced.uuid = "GPU-replacement-0000"
    fake_nvml.gpus.append(replaced)  # a replacement board in the same slot
    pynvml.nvmlShutdown()  # e.g. the driver was reloaded for it
    rig.tick("nvidia")
    samples = rig.tick("nvidia")
    assert value(samples, "warptd_device_up", backend="nvidia", device="1", uuid="GPU-replacement-0000") == 1
    assert not select(samples, "warptd_device_up", uuid=old_uuid)
    energy = value(samples, "warptd_device_energy_joules_total", backend="nvidia", device="1")
    assert energy == 5000  # a new device's counter starts at its own raw value
    assert select(first, "warptd_device_info", uuid=old_uuid)
    info = select(samples, "warptd_device_info", backend="nvidia", device="1")[0].labels
    assert info["uuid"] == "GPU-replacement-0000"


def test_one_lost_gpu_does_not_drop_the_others_and_is_retried(settings, rediscover_now):
    fake = FakeNvml(gpus=3)
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        rig.tick()
        uuids = [g.uuid for g in fake.gpus]
        fake.gpus[2].energy_mj += 1_000_000
        fake.gpus[1].lost = True
        rig.tick("nvidia")  # GPU 1 lost: suspect
        samples = rig.tick()  # reopened: GPU 1 has no handle, GPUs 0 and 2 stay readable
        up = {s.labels["uuid"]: s.value for s in select(samples, "warptd_device_up", backend="nvidia")}
        assert up == {uuids[0]: 1, uuids[1]: 0, uuids[2]: 1}  # the lost GPU stays visible as down
        assert value(samples, "warptd_device_energy_joules_total", backend="nvidia", uuid=uuids[2]) == 6000
        fake.gpus[1].lost = False  # back on the bus: the next rediscovery finds it
        rig.tick("nvidia")
        samples = rig.tick("nvidia")
        up = {s.labels["uuid"]: s.value for s in select(samples, "warptd_device_up", backend="nvidia")}
        assert up == {u: 1 for u in uuids}
        rig.close()


# -- what the driver really does (issue: right numbers on a real node) ---------------------------------
def test_a_refused_handle_reads_as_down_and_the_others_export(settings, rediscover_now):
    """nvmlDeviceGetCount counts a GPU whose handle is then refused: that GPU is down, not the backend."""
    fake = FakeNvml(gpus=3)
    fake.gpus[1].handle_error = pynvml.NVML_ERROR_NO_PERMISSION
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        assert [b.name for b in rig.loaded.accelerators] == ["nvidia"]
        samples = rig.tick()
        up = {s.labels["device"]: s.value for s in select(samples, "warptd_device_up", backend="nvidia")}
        assert up == {"0": 1, "1": 0, "2": 1}
        assert value(samples, "warptd_device_power_watts", backend="nvidia", device="2") == 120
        assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="permission") >= 1
        fake.gpus[1].handle_error = 0  # e.g. the device node's permissions were fixed
        rig.tick("nvidia")  # asked again for the refused handle only: no reopen
        samples = rig.tick("nvidia")
        assert value(samples, "warptd_device_up", backend="nvidia", device="1", uuid=fake.gpus[1].uuid) == 1
        assert fake.calls("nvmlInitWithFlags") == 1
        rig.close()
    fake.close()


def test_xid_and_processes_survive_a_refused_handle(settings, tmp_path):
    from warptd.events.xid import open_xid_monitor
    from warptd.processes.nvml import open_process_monitor

    fake = FakeNvml(gpus=2)
    fake.gpus[0].handle_error = pynvml.NVML_ERROR_UNKNOWN
    with fake.installed():
        fake.gpus[1].processes = [(4242, 2**30)]
        xid = open_xid_monitor(timeout_ms=100)
        processes = open_process_monitor(tmp_path)
        assert xid is not None and [d.index for d in xid.devices()] == [1]
        assert processes is not None
        processes.poll()
        assert [(p.index, p.pid) for p in processes.processes()] == [(1, 4242)]
        xid.stop()
        processes.stop()
    fake.close()


def test_memory_used_excludes_driver_reserved_memory_and_v1_on_old_drivers(settings):
    """v1 "used" is reserved + allocated: an idle H100 shows ~500 MiB used where nvidia-smi shows 0."""
    for driver, used, reserved in (("current", 0, 534 * 2**20), ("r470", 534 * 2**20, None)):
        fake = FakeNvml([FakeGpu(index=0, memory_used=0)], driver=driver)
        settings.backends = ["nvidia"]
        with fake.installed():
            rig = Rig(settings)
            samples = rig.tick()
            assert value(samples, "warptd_device_memory_used_bytes", **DEV0) == used, driver
            if reserved is None:  # v1 cannot tell: no reserved series rather than a wrong one
                assert not select(samples, "warptd_device_memory_reserved_bytes", **DEV0)
            else:
                assert value(samples, "warptd_device_memory_reserved_bytes", **DEV0) == reserved
            errors = select(samples, "warptd_sample_errors_total", backend="nvidia")
            assert all(s.value == 0 for s in errors), driver  # the missing _v2 is not an error
            rig.close()
        fake.close()


@pytest.mark.slow
def test_power_is_the_instant_reading_and_the_driver_average_its_own_series(rig, fake_nvml):
    """nvmlDeviceGetPowerUsage averages the last second (Ampere+): a spike shows there as a fraction."""
    gpu = fake_nvml.gpus[0]
    time.sleep(1.0)  # a second at 120 W
    gpu.power_mw = 700_000  # a spike, read at the driver's next refresh
    fake_nvml.next_refresh()
    samples = rig.tick()
    assert value(samples, "warptd_device_power_watts", **DEV0) == 700
    average = value(samples, "warptd_device_power_average_watts", **DEV0)
    assert 120 <= average < 200  # still mostly the last second's 120 W


def test_power_falls_back_to_power_usage_without_the_instant_field(make_rig, fake_nvml):
    """On a GPU that does not average (an A100: GA100), nvmlDeviceGetPowerUsage is instantaneous."""
    for gpu in fake_nvml.gpus:
        gpu.compute_capability = (8, 0)
        gpu.unsupported_fields = {pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_FI_DEV_POWER_AVERAGE}
    rig = make_rig("nvidia")
    samples = rig.tick()
    assert value(samples, "warptd_device_power_watts", **DEV0) == 120  # from nvmlDeviceGetPowerUsage
    assert not select(samples, "warptd_device_power_average_watts", **DEV0)
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


def test_the_1_s_average_never_stands_in_for_the_instant_power(rig, fake_nvml):
    """Issue 38, finding 8: on an H100 (averaging over 1 s) without field 186 (here for good; a read
    where it failed once goes the same way), nvmlDeviceGetPowerUsage is the average: it is exported
    as the average, the instant power is absent, and the energy follows the average, not as instant."""
    gpu = fake_nvml.gpus[0]
    gpu.unsupported_fields = {pynvml.NVML_FI_DEV_POWER_INSTANT}
    samples = rig.tick()
    assert not select(samples, "warptd_device_power_watts", **DEV0)
    assert value(samples, "warptd_device_power_average_watts", **DEV0) == 120
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


def test_thermal_throttle_seconds_come_from_the_clock_event_fields(rig, fake_nvml):
    """SW thermal slowdown is its own duration field (ns); NVML_PERF_POLICY_THERMAL counts another thing."""
    for each in fake_nvml.gpus:  # a GPU that keeps every counter, sync boost included
        each.violation_ns[pynvml.NVML_PERF_POLICY_SYNC_BOOST] = 0
    gpu = fake_nvml.gpus[0]
    gpu.violation_ns[pynvml.NVML_PERF_POLICY_THERMAL] = 9_000_000_000  # must not be read as SW thermal
    gpu.clock_event_ns.update(
        {
            "sw_thermal_slowdown": 2_500_000_000,
            "hw_thermal_slowdown": 1_000_000_000,
            "hw_power_brake_slowdown": 250_000_000,
        }
    )
    samples = rig.tick()
    seconds = {
        s.labels["reason"]: s.value for s in select(samples, "warptd_device_throttle_seconds_total", **DEV0)
    }
    assert seconds["sw_thermal_slowdown"] == 2.5
    assert seconds["hw_thermal_slowdown"] == 1.0
    assert seconds["hw_power_brake_slowdown"] == 0.25
    assert seconds["sw_power_cap"] == 0.0  # field 74, the same counter as NVML_PERF_POLICY_POWER
    assert fake_nvml.calls("nvmlDeviceGetViolationStatus") == 0  # the fields answered every reason


def test_deprecated_violation_status_is_asked_once_then_absent(rig, fake_nvml):
    """CUDA 13 deprecates nvmlDeviceGetViolationStatus; where removed it answers DEPRECATED (26)."""
    for gpu in fake_nvml.gpus:
        gpu.unsupported_fields = {74, 76, 251, 252, 253}  # an R580 GPU without the duration fields
        gpu.raises["nvmlDeviceGetViolationStatus"] = pynvml.NVML_ERROR_DEPRECATED
    for _ in range(3):
        samples = rig.tick()
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0
    # once per GPU and reason it counts (sw_power_cap, sync_boost), then never again
    assert fake_nvml.calls("nvmlDeviceGetViolationStatus") == 2 * 2
    assert select(samples, "warptd_device_throttle_active", reason="sw_power_cap", **DEV0)


def test_drivers_before_r535_keep_throttle_reasons(settings):
    """Before R535 only the ...ClocksThrottleReasons names exist; they carry the same bits."""
    fake = FakeNvml(
        [FakeGpu(index=0, current_reasons=pynvml.nvmlClocksEventReasonSwThermalSlowdown)], driver="r470"
    )
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        rig.tick()
        samples = rig.tick()
        assert value(samples, "warptd_device_throttle_active", reason="sw_thermal_slowdown", **DEV0) == 1
        assert value(samples, "warptd_device_throttle_active", reason="hw_slowdown", **DEV0) == 0
        assert fake.calls("nvmlDeviceGetCurrentClocksThrottleReasons") == 2
        assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0
        rig.close()
    fake.close()


def test_a_failed_reopen_keeps_the_gpus_down_and_is_retried(rig, fake_nvml, rediscover_now):
    """A driver that does not come back at once: GPUs read down (not gone), and NVML is reopened later."""
    rig.tick()
    fake_nvml.state.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    pynvml.nvmlShutdown()  # e.g. the driver is being reloaded
    for _ in range(3):  # unreadable, then reopens that fail
        samples = rig.tick("nvidia")
        up = {s.labels["device"]: s.value for s in select(samples, "warptd_device_up", backend="nvidia")}
        assert up == {"0": 0, "1": 0}
    fake_nvml.state.init_error = 0  # the driver is back
    rig.tick("nvidia")
    samples = rig.tick("nvidia")
    assert value(samples, "warptd_device_up", **DEV0) == 1
    assert value(samples, "warptd_device_power_watts", **DEV1) == 120


def test_a_pynvml_without_the_deprecated_wrappers_still_reads(make_rig, fake_nvml, monkeypatch):
    """nvidia-ml-py drops …ClocksThrottleReasons and nvmlDeviceGetViolationStatus with CUDA 14."""
    for name in (
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetSupportedClocksThrottleReasons",
        "nvmlDeviceGetViolationStatus",
    ):
        monkeypatch.delattr(pynvml, name)
    rig = make_rig("nvidia")  # loaded with that nvidia-ml-py
    for gpu in fake_nvml.gpus:
        gpu.unsupported_fields = {74, 76}  # so the violation-status fallback would be asked
    samples = rig.tick()
    assert value(samples, "warptd_backend_up", backend="nvidia") == 1
    assert value(samples, "warptd_device_throttle_active", reason="sw_power_cap", **DEV0) == 0
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="unexpected") == 0


def test_field_ids_an_old_driver_does_not_know_fall_back_quietly(settings):
    """An R470 NVML answers INVALID_ARGUMENT for ids past its NVML_FI_MAX: power comes from
    nvmlDeviceGetPowerUsage, the fields are not asked again, and nothing counts as an error."""
    fake = FakeNvml(gpus=1, driver="r470")
    fake.gpus[0].compute_capability = (8, 0)  # an A100, which R470 drives: it does not average
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        for _ in range(3):
            samples = rig.tick()
        assert value(samples, "warptd_device_power_watts", **DEV0) == 120
        assert not select(samples, "warptd_device_power_average_watts", **DEV0)
        assert value(samples, "warptd_device_throttle_seconds_total", reason="sw_power_cap", **DEV0) == 0
        assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0
        assert fake.calls("nvmlDeviceGetPowerUsage") == 3  # once a tick
        rig.close()
    fake.close()


def test_a_memory_struct_version_the_driver_refuses_falls_back_to_v1(rig, fake_nvml):
    for gpu in fake_nvml.gpus:
        gpu.raises["nvmlDeviceGetMemoryInfo_v2"] = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    rig.tick()
    samples = rig.tick()
    gpu = fake_nvml.gpus[0]
    assert value(samples, "warptd_device_memory_used_bytes", **DEV0) == gpu.memory_used + gpu.memory_reserved
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


def test_mig_instances_created_after_start_are_listed(make_rig, fake_nvml, rediscover_now):
    """With MIG on, instances come and go (mig-manager): every rediscovery re-reads their UUIDs."""
    gpu = fake_nvml.gpus[0]
    gpu.mig_uuids = ["MIG-11111111-2222-5333-8444-555555555555"]
    rig = make_rig("nvidia")
    rig.tick()
    assert rig.snapshot.get("nvidia").devices_info[0].aliases == gpu.mig_uuids
    assert rig.snapshot.get("nvidia").devices_info[1].aliases is None  # MIG off there
    gpu.mig_uuids = [*gpu.mig_uuids, "MIG-66666666-7777-5888-9999-000000000000"]
    rig.tick("nvidia")
    assert rig.snapshot.get("nvidia").devices_info[0].aliases == gpu.mig_uuids
    assert fake_nvml.calls("nvmlInitWithFlags") == 1  # re-listed, never reopened


def test_energy_comes_from_the_field_batch_and_the_call_only_without_the_field(rig, fake_nvml):
    new, old = fake_nvml.gpus
    old.unsupported_fields = {83}  # a driver without NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
    new.energy_mj, old.energy_mj = 9_000_000, 4_000_000
    rig.tick()
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 9000
    assert value(samples, "warptd_device_energy_joules_total", **DEV1) == 4000
    assert fake_nvml.calls("nvmlDeviceGetTotalEnergyConsumption") == 2  # the old GPU's, each tick

    new.raises["nvmlDeviceGetTotalEnergyConsumption"] = pynvml.NVML_ERROR_UNKNOWN  # the field fails too
    samples = rig.tick()
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 1  # once
    assert fake_nvml.calls("nvmlDeviceGetTotalEnergyConsumption") == 3  # no stand-in call for a failure
    del new.raises["nvmlDeviceGetTotalEnergyConsumption"]
    new.energy_mj = 9_500_000
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 9500


def test_a_steady_sample_makes_its_calls_in_one_pass_read_as_the_getters_read_them(make_rig, fake_nvml):
    """After the first read, a sample's calls (memory, utilization, temperature, clock events, pstate,
    clocks) go in one unchecked pass, each once; its values are those the guarded getters give."""
    rig = make_rig("nvidia")
    backend = rig.loaded.accelerators[0]
    rig.tick()
    before = fake_nvml.calls("nvmlDeviceGetTemperature")
    gpu = backend.gpus[0]
    gpu.begin()
    one_pass = gpu.reading()
    assert fake_nvml.calls("nvmlDeviceGetTemperature") == before + 1
    assert gpu.calls.one_pass() is not None  # every call answered: no getter was asked
    getters = gpu.reading([gpu.calls.answer(slot) for slot in range(len(gpu.calls.slots))])  # call by call
    assert one_pass == getters  # the same batch
    assert one_pass.memory is not None and one_pass.memory.reserved is not None  # nvmlMemory_v2
    assert one_pass.clocks_hertz and one_pass.temperatures_celsius["gpu"] > 0


def test_a_call_failing_in_the_one_pass_is_sorted_out_by_the_guarded_getters(make_rig, fake_nvml):
    """A failure found by the one pass is counted as the guard counts it, once, that value absent;
    the calls after it go through the guard, each made once; the next sample is one pass again."""
    rig = make_rig("nvidia")
    rig.tick()
    gpu = fake_nvml.gpus[0]
    gpu.raises["nvmlDeviceGetTemperature"] = pynvml.NVML_ERROR_UNKNOWN
    temperatures, clocks = (
        fake_nvml.calls("nvmlDeviceGetTemperature"),
        fake_nvml.calls("nvmlDeviceGetClockInfo"),
    )
    samples = rig.tick()
    gpus = len(fake_nvml.gpus)
    assert fake_nvml.calls("nvmlDeviceGetTemperature") == temperatures + gpus  # not asked again
    assert fake_nvml.calls("nvmlDeviceGetClockInfo") == clocks + 3 * gpus  # nor the calls after it
    assert select(samples, "warptd_device_temperature_celsius", sensor="gpu", **DEV0) == []
    assert value(samples, "warptd_device_clock_hertz", clock="sm", **DEV0) > 0
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 1
    del gpu.raises["nvmlDeviceGetTemperature"]
    calls = fake_nvml.calls("nvmlDeviceGetClockInfo")
    samples = rig.tick()
    assert value(samples, "warptd_device_temperature_celsius", sensor="gpu", **DEV0) > 0
    assert fake_nvml.calls("nvmlDeviceGetClockInfo") == calls + 3 * len(fake_nvml.gpus)


def test_a_supported_mask_of_bits_warptd_does_not_know_reports_the_active_reasons(settings):
    """A driver whose supported mask holds only bits newer than warptd's reasons: the reasons active
    now are reported (as throttling or clock events), as where it reports no mask at all."""
    fake = FakeNvml(
        [FakeGpu(index=0, supported_reasons=1 << 40, current_reasons=pynvml.nvmlClocksEventReasonSwPowerCap)]
    )
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        for _ in range(2):  # the first sample through the getters, the second in one pass
            samples = rig.tick()
            assert value(samples, "warptd_device_throttle_active", reason="sw_power_cap", **DEV0) == 1
        rig.close()
    fake.close()

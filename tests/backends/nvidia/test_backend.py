"""The nvidia and nvml backends against the NVML double (tests/doubles/nvml.py); no GPU needed."""

from __future__ import annotations

import math
import time

import pynvml
import pytest

from tests.doubles.nvml import GIB, FakeGpu, FakeMig, FakeNvml, nvml_error
from tests.helpers import Rig, select, value, wait_until
from warptd.backends.nvidia.backend import NvidiaBackend
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


def by_reason(samples, name: str, device: dict[str, str]) -> dict[str, float]:
    return {s.labels["reason"]: s.value for s in select(samples, name, **device)}


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


MIB = 2**20


ACTIVITY_SERIES = (
    "warptd_device_sm_active_ratio",
    "warptd_device_sm_occupancy_ratio",
    "warptd_device_dram_bandwidth_ratio",
    "warptd_device_pipe_active_ratio",
    "warptd_device_engine_active_ratio",
)


TRAFFIC_FIELDS = {197, 198, 138, 139}


def without_traffic_fields(fake) -> None:
    """A driver without the byte counter fields (before R550): GPM's throughputs are the traffic."""
    for gpu in fake.gpus:
        gpu.unsupported_fields = TRAFFIC_FIELDS


ACTIVITY = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: 0.5,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 0.25,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 0.75,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 0.4,
    pynvml.NVML_GPM_METRIC_FP64_UTIL: 0.05,
    pynvml.NVML_GPM_METRIC_FP32_UTIL: 0.125,
    pynvml.NVML_GPM_METRIC_FP16_UTIL: 0.3,
    pynvml.NVML_GPM_METRIC_INTEGER_UTIL: 0.2,
    pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL: 0.6,
    pynvml.NVML_GPM_METRIC_NVDEC_3_UTIL: 0.1,
    pynvml.NVML_GPM_METRIC_NVJPG_1_UTIL: 0.15,
    pynvml.NVML_GPM_METRIC_NVOFA_0_UTIL: 0.35,
    pynvml.NVML_GPM_METRIC_NVENC_2_UTIL: 0.45,
}


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
def test_every_activity_series_is_the_ratio_over_the_last_period(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    first = rig.tick()
    assert not select(first, "warptd_device_sm_active_ratio")  # one sample: no period yet
    gpu.advance_gpm(activity=ACTIVITY)
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.5)
    assert value(samples, "warptd_device_sm_occupancy_ratio", **DEV0) == pytest.approx(0.25)
    assert value(samples, "warptd_device_dram_bandwidth_ratio", **DEV0) == pytest.approx(0.75)
    pipes = {s.labels["pipe"]: s.value for s in select(samples, "warptd_device_pipe_active_ratio", **DEV0)}
    assert pipes == pytest.approx({"tensor": 0.4, "fp64": 0.05, "fp32": 0.125, "fp16": 0.3, "integer": 0.2})
    engines = {
        (s.labels["engine"], s.labels["instance"]): s.value
        for s in select(samples, "warptd_device_engine_active_ratio", **DEV0)
    }
    assert engines[("nvdec", "0")] == pytest.approx(0.6)
    assert engines[("nvdec", "3")] == pytest.approx(0.1)
    assert ("nvdec", "1") not in engines  # idle since the start, and no count from NVML (MIG off)
    assert engines[("nvjpg", "1")] == pytest.approx(0.15)
    assert engines[("ofa", "0")] == pytest.approx(0.35)
    assert engines[("nvenc", "2")] == pytest.approx(0.45)
    # the next period alone, not the average since the start
    gpu.advance_gpm(cycles=3_000_000, activity={pynvml.NVML_GPM_METRIC_SM_UTIL: 0.1})
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.1)
    assert value(samples, "warptd_device_pipe_active_ratio", pipe="tensor", **DEV0) == 0


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
def test_graphics_engine_activity_is_gpm_graphics_util_as_a_ratio(rig, fake_nvml):
    """DCGM_FI_PROF_GR_ENGINE_ACTIVE's source: GPM's graphics/compute activity over the last period,
    its own series beside SM activity (a GPU busy 80 % of the time with half its SMs idle)."""
    gpu = fake_nvml.gpus[0]
    rig.tick()
    graphics, sm = pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, pynvml.NVML_GPM_METRIC_SM_UTIL
    gpu.advance_gpm(activity={graphics: 0.8, sm: 0.4})
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_graphics_engine_active_ratio", **DEV0) == pytest.approx(0.8)
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.4)
    assert value(samples, "warptd_device_graphics_engine_active_ratio", **DEV1) == 0  # idle, not absent
    gpu.advance_gpm(cycles=2_000_000, activity={graphics: 0.25})
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_graphics_engine_active_ratio", **DEV0) == pytest.approx(0.25)


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
def test_answers_as_last_period_keep_the_gauges_whole_and_a_change_is_read(rig, fake_nvml):
    """An idle GPU's metrics (the same answers each period) hand over last period's gauges whole;
    the next change is read at once, throughputs still integrate each period."""
    gpu, backend = fake_nvml.gpus[0], rig.loaded.accelerators[0]
    rig.tick()
    gpu.advance_gpm(activity=ACTIVITY)
    rig.tick_gpm()
    gpu.advance_gpm(activity=ACTIVITY)
    rig.tick_gpm()
    kept = backend.gpus[0].activity.source.gauges
    gpu.advance_gpm(activity=ACTIVITY)
    samples = rig.tick_gpm()
    assert backend.gpus[0].activity.source.gauges is kept
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.5)
    gpu.advance_gpm(activity={**ACTIVITY, pynvml.NVML_GPM_METRIC_SM_UTIL: 0.2})
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.2)
    assert value(samples, "warptd_device_pipe_active_ratio", pipe="tensor", **DEV0) == pytest.approx(0.4)


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
def test_a_metric_failing_once_comes_back_though_the_answers_stand_still(rig, fake_nvml):
    """A metric that answers an error one period (not "unsupported") is absent then, and back at the
    next period even when every answer equals the last clean period's."""
    gpu = fake_nvml.gpus[0]
    rig.tick()
    gpu.advance_gpm(activity=ACTIVITY)
    rig.tick_gpm()
    gpu.fail_gpm_metric(pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_ERROR_TIMEOUT)
    gpu.advance_gpm(activity=ACTIVITY)
    samples = rig.tick_gpm()
    assert not select(samples, "warptd_device_sm_active_ratio", **DEV0)
    assert value(samples, "warptd_device_sm_occupancy_ratio", **DEV0) == pytest.approx(0.25)
    gpu.fail_gpm_metric(pynvml.NVML_GPM_METRIC_SM_UTIL, None)
    for _ in range(2):
        gpu.advance_gpm(activity=ACTIVITY)
        samples = rig.tick_gpm()
        assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.5)


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
def test_one_gpm_sample_and_one_metrics_get_per_gpu_per_tick(rig, fake_nvml):
    ticks = 6
    for _ in range(ticks):
        rig.tick_gpm()
    gpus = len(fake_nvml.gpus)
    assert fake_nvml.calls("nvmlGpmSampleGet") == ticks * gpus
    assert fake_nvml.calls("nvmlGpmMetricsGet") == (ticks - 1) * gpus  # none before the second sample
    assert fake_nvml.calls("nvmlGpmSampleAlloc") == 2 * gpus  # two per GPU, reused tick after tick
    assert fake_nvml.calls("nvmlGpmQueryDeviceSupport") == gpus


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
def test_a_gpu_without_gpm_has_no_activity_series_and_is_asked_once(settings):
    fake = FakeNvml(
        [FakeGpu(index=0), FakeGpu(index=1, name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0))]
    )
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        try:
            for _ in range(4):
                fake.gpus[0].advance_gpm(activity=ACTIVITY)
                samples = rig.tick_gpm()
            assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.5)
            for name in ACTIVITY_SERIES:
                assert not select(samples, name, **DEV1), name  # absent, never 0
            assert value(samples, "warptd_device_power_watts", **DEV1) == 120  # the rest as usual
            assert fake.calls("nvmlGpmQueryDeviceSupport") == 2  # once per GPU, over four ticks
            assert fake.calls("nvmlGpmSampleGet") == 4  # the Hopper GPU's only
            assert fake.calls("nvmlGpmSampleAlloc") == 2
            assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0
        finally:
            rig.close()
        fake.close()


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
def test_a_driver_without_gpm_reads_as_before(settings):
    fake = FakeNvml(gpus=2, driver="r470")
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        try:
            for _ in range(3):
                samples = rig.tick()
            for name in ACTIVITY_SERIES:
                assert not select(samples, name), name
            assert value(samples, "warptd_device_up", **DEV0) == 1
            assert value(samples, "warptd_backend_up", backend="nvidia") == 1
        finally:
            rig.close()
        fake.close()


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
def test_metrics_a_gpu_lacks_are_absent_and_dropped_from_its_request(rig, fake_nvml):
    without_traffic_fields(fake_nvml)
    gpu = fake_nvml.gpus[1]
    nvdec = [getattr(pynvml, f"NVML_GPM_METRIC_NVDEC_{i}_UTIL") for i in range(4, 8)]
    gpu.gpm_unsupported = {*nvdec, pynvml.NVML_GPM_METRIC_NVLINK_L17_RX_PER_SEC}
    busy = {**ACTIVITY, pynvml.NVML_GPM_METRIC_NVDEC_5_UTIL: 0.5}
    for _ in range(3):
        for each in fake_nvml.gpus:
            each.advance_gpm(activity=busy)
        samples = rig.tick_gpm()

    def nvdec_instances(device: dict[str, str]) -> set[str]:
        return {
            s.labels["instance"]
            for s in select(samples, "warptd_device_engine_active_ratio", engine="nvdec", **device)
        }

    assert nvdec_instances(DEV1) == {"0", "3"}  # 5 answers NOT_SUPPORTED there; 1, 2 idle: not shown
    assert nvdec_instances(DEV0) == {"0", "3", "5"}  # GPU 0 has 5
    assert not select(samples, "warptd_device_nvlink_link_bytes_total", link="17", direction="rx", **DEV1)
    assert select(samples, "warptd_device_nvlink_link_bytes_total", link="17", direction="tx", **DEV1)
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
def test_a_driver_with_an_older_gpm_header_gets_the_first_headers_metrics(rig, fake_nvml):
    gpu = fake_nvml.gpus[1]
    gpu.gpm_metric_max = 98  # an R525 driver: NVENC (166-169) unknown, and the whole request refused
    for _ in range(4):
        for each in fake_nvml.gpus:
            each.advance_gpm(activity=ACTIVITY)
        samples = rig.tick_gpm()
    assert value(samples, "warptd_device_sm_active_ratio", **DEV1) == pytest.approx(0.5)
    assert value(samples, "warptd_device_engine_active_ratio", engine="nvdec", instance="0", **DEV1) == 0.6
    assert not select(samples, "warptd_device_engine_active_ratio", engine="nvenc", **DEV1)
    assert value(samples, "warptd_device_engine_active_ratio", engine="nvenc", instance="2", **DEV0) == 0.45
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 1  # once


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
def test_traffic_counters_grow_by_rate_times_period(rig, fake_nvml):
    without_traffic_fields(fake_nvml)
    gpu = fake_nvml.gpus[0]
    rig.tick()
    rig.tick_gpm()
    before = rig.scrape()
    moved = {"tx": 300 * MIB, "rx": 120 * MIB}
    link_moved = {"rx": 2_000 * MIB, "tx": 900 * MIB}
    for _ in range(3):  # three periods of different lengths
        gpu.advance_gpm(pcie=(moved["tx"], moved["rx"]), nvlink={5: (link_moved["rx"], link_moved["tx"])})
        time.sleep(0.15)
        samples = rig.tick()
    for direction, nbytes in moved.items():
        grown = value(samples, "warptd_device_pcie_bytes_total", direction=direction, **DEV0) - value(
            before, "warptd_device_pcie_bytes_total", direction=direction, **DEV0
        )
        assert grown == pytest.approx(3 * nbytes, rel=0.01)
    for direction, nbytes in link_moved.items():
        grown = value(samples, "warptd_device_nvlink_link_bytes_total", link="5", direction=direction, **DEV0)
        grown -= value(before, "warptd_device_nvlink_link_bytes_total", link="5", direction=direction, **DEV0)
        assert grown == pytest.approx(3 * nbytes, rel=0.01)
    assert value(samples, "warptd_device_nvlink_link_bytes_total", link="4", direction="rx", **DEV0) == 0
    assert value(samples, "warptd_device_pcie_bytes_total", direction="tx", **DEV1) == 0  # idle GPU 1


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
def test_the_driver_s_byte_counters_win_over_gpm_throughput(rig, fake_nvml):
    """Where the driver keeps a byte counter field, that is the series; GPM's integral is not added."""
    gpu = fake_nvml.gpus[0]
    rig.tick()
    for step in range(1, 4):
        gpu.pcie_bytes[0], gpu.pcie_bytes[1] = step * 1_000_000, step * 500_000  # the field counters
        gpu.advance_gpm(pcie=(300 * MIB, 120 * MIB))  # GPM saw far more: not used
        samples = rig.tick_gpm()
    assert value(samples, "warptd_device_pcie_bytes_total", direction="tx", **DEV0) == 3_000_000
    assert value(samples, "warptd_device_pcie_bytes_total", direction="rx", **DEV0) == 1_500_000
    # ... and GPM is no longer asked for throughputs the driver counts: only the ratios are left.
    backend = next(b for b in rig.loaded.accelerators if b.name == "nvidia")
    asked = backend.gpus[0].activity.source.metrics
    assert asked and not [metric for metric in asked if metric.rate]


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
def test_reads_sooner_than_the_gap_keep_the_last_period_and_sample_nothing(make_rig, fake_nvml, settings):
    """A read before the gap has passed (another job's, or a quick second tick) takes no GPM sample:
    the driver would pair one refresh of its counters with itself. The last period's values stand."""
    settings.interval = settings.health_interval = 0.5  # a gap of 0.45 s: a tick here takes ~0.07 s
    rig = make_rig("nvidia")
    without_traffic_fields(fake_nvml)
    gpu, backend = fake_nvml.gpus[0], rig.loaded.accelerators[0]
    rig.tick()
    gpu.advance_gpm(activity=ACTIVITY, pcie=(300 * MIB, 120 * MIB))
    rig.tick_gpm()
    gauges, taken, quick = backend.gpus[0].activity.source.gauges, fake_nvml.calls("nvmlGpmSampleGet"), 0
    started = time.monotonic()
    while quick < 3 and (quick == 0 or time.monotonic() - started < 0.2):  # well within the gap
        gpu.advance_gpm(activity={pynvml.NVML_GPM_METRIC_SM_UTIL: 0.9}, pcie=(MIB, MIB))
        samples, quick = rig.tick(), quick + 1
    assert fake_nvml.calls("nvmlGpmSampleGet") == taken and gpu.gpm_close_pairs == 0
    assert backend.gpus[0].activity.source.gauges is gauges
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.5)
    tx = value(samples, "warptd_device_pcie_bytes_total", direction="tx", **DEV0)
    assert tx == pytest.approx(300 * MIB, rel=1e-3)  # the period timed in Python, the rate in the driver
    samples = rig.tick_gpm()  # the next period holds what the quick reads did not sample
    assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.9)
    moved = (300 + quick) * MIB
    assert value(samples, "warptd_device_pcie_bytes_total", direction="tx", **DEV0) == pytest.approx(
        moved, rel=1e-3
    )
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="invalid_value") == 0


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
@pytest.mark.parametrize(
    ("garbage", "sm_fails"), [(math.nan, False), (-5_000.0, False), (math.inf, False), (math.nan, True)]
)
def test_a_nan_or_negative_throughput_leaves_the_byte_totals_counting(rig, fake_nvml, garbage, sm_fails):
    """A throughput the driver answers as NaN, infinite or negative is skipped (DCGM blanks NaN) and
    counted as an invalid value: the byte totals keep what they had and go on counting afterwards
    (``sm_fails``: beside a metric answering an error, the answers are sorted one by one)."""
    without_traffic_fields(fake_nvml)
    gpu, tx_rate = fake_nvml.gpus[0], pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC
    rig.tick()
    gpu.advance_gpm(pcie=(300 * MIB, 100 * MIB), nvlink={2: (50 * MIB, 0)})
    before = rig.tick_gpm()
    gpu.answer_gpm_metric(tx_rate, garbage)
    if sm_fails:
        gpu.fail_gpm_metric(pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_ERROR_TIMEOUT)
    gpu.advance_gpm(pcie=(300 * MIB, 100 * MIB), nvlink={2: (50 * MIB, 0)})
    during = rig.tick_gpm()
    tx = {"direction": "tx", **DEV0}
    assert value(during, "warptd_device_pcie_bytes_total", **tx) == value(
        before, "warptd_device_pcie_bytes_total", **tx
    )
    assert value(during, "warptd_device_pcie_bytes_total", direction="rx", **DEV0) == pytest.approx(
        200 * MIB, rel=1e-3
    )
    assert value(during, "warptd_sample_errors_total", backend="nvidia", kind="invalid_value") == 1
    gpu.answer_gpm_metric(tx_rate, None)
    gpu.fail_gpm_metric(pynvml.NVML_GPM_METRIC_SM_UTIL, None)
    gpu.advance_gpm(pcie=(300 * MIB, 100 * MIB), nvlink={2: (50 * MIB, 0)})
    after = rig.tick_gpm()
    assert value(after, "warptd_device_pcie_bytes_total", **tx) == pytest.approx(600 * MIB, rel=1e-3)
    links = {"link": "2", "direction": "rx", **DEV0}
    link_bytes = value(after, "warptd_device_nvlink_link_bytes_total", **links)
    assert link_bytes == pytest.approx(150 * MIB, rel=1e-3)
    assert value(after, "warptd_sample_errors_total", backend="nvidia", kind="invalid_value") == 1


KIB = 1024


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_ecc_counts_are_counters_by_kind(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.ecc_volatile[0], gpu.ecc_volatile[1] = 7, 2
    gpu.ecc_aggregate[0], gpu.ecc_aggregate[1] = 120, 9
    rig.tick()
    gpu.ecc_volatile[0], gpu.ecc_volatile[1] = 10, 3
    samples = rig.tick()
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 10
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="uncorrected") == 3
    assert value(samples, "warptd_device_ecc_lifetime_errors_total", **DEV0, kind="corrected") == 120
    assert value(samples, "warptd_device_ecc_lifetime_errors_total", **DEV0, kind="uncorrected") == 9
    assert value(samples, "warptd_device_ecc_errors_total", **DEV1, kind="uncorrected") == 0


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_ecc_counter_reset_at_a_driver_reload_stays_monotonic(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.ecc_volatile[0], gpu.pcie_replays = 40, 5
    gpu.nvlink_errors[3][2] = 11  # link 3, replay
    rig.tick()
    gpu.reload_driver()  # every volatile count restarts from 0
    gpu.ecc_volatile[0], gpu.pcie_replays = 4, 1
    gpu.nvlink_errors[3][2] = 2
    samples = rig.tick()
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 44
    assert value(samples, "warptd_device_pcie_replays_total", **DEV0) == 6
    assert value(samples, "warptd_device_nvlink_link_errors_total", **DEV0, link="3", kind="replay") == 13


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_row_remapping_and_page_retirement(rig, fake_nvml):
    ampere, volta = fake_nvml.gpus
    ampere.remapped[0], ampere.remapped[1], ampere.remapped[2], ampere.remapped[3] = 3, 1, 1, 0
    volta.retires_pages = 1  # pre-Ampere: pages are retired, rows are not remapped
    volta.retired[0], volta.retired[1], volta.retired[2] = 4, 2, 1
    samples = rig.tick()
    assert value(samples, "warptd_device_remapped_rows", **DEV0, kind="correctable") == 3
    assert value(samples, "warptd_device_remapped_rows", **DEV0, kind="uncorrectable") == 1
    assert value(samples, "warptd_device_row_remap_pending", **DEV0) == 1
    assert value(samples, "warptd_device_row_remap_failure", **DEV0) == 0
    assert not select(samples, "warptd_device_retired_pages", **DEV0)  # Ampere+: not supported, absent
    assert value(samples, "warptd_device_retired_pages", **DEV1, cause="single_bit_ecc") == 4
    assert value(samples, "warptd_device_retired_pages", **DEV1, cause="double_bit_ecc") == 2
    assert value(samples, "warptd_device_retired_pages_pending", **DEV1) == 1
    for name in ("warptd_device_remapped_rows", "warptd_device_row_remap_pending"):
        assert not select(samples, name, **DEV1)
    # The remapped-rows call stands in only where the fields are missing, and is then not asked again
    assert fake_nvml.calls("nvmlDeviceGetRemappedRows") == 1


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_remapped_rows_call_where_the_driver_lacks_the_fields(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.unsupported_fields = {142, 143, 144, 145, 94}
    gpu.remapped[0], gpu.remapped[3] = 6, 1
    gpu.pcie_replays = 9
    samples = rig.tick()
    assert value(samples, "warptd_device_remapped_rows", **DEV0, kind="correctable") == 6
    assert value(samples, "warptd_device_row_remap_failure", **DEV0) == 1
    assert value(samples, "warptd_device_pcie_replays_total", **DEV0) == 9
    assert fake_nvml.calls("nvmlDeviceGetPcieReplayCounter") == 1  # only GPU 0 lacks field 94


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_nvlink_errors_per_link_and_kind(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.nvlink_count = 12
    gpu.nvlink_errors[0][0] = 1  # link 0 CRC flit: id 32
    gpu.nvlink_errors[5][1] = 2  # link 5 CRC data: id 44
    gpu.nvlink_errors[6][2] = 3  # link 6 replay: id 108 (the second block)
    gpu.nvlink_errors[11][3] = 4  # link 11 recovery: id 119
    samples = rig.tick()
    errors = "warptd_device_nvlink_link_errors_total"
    assert value(samples, errors, **DEV0, link="0", kind="crc_flit") == 1
    assert value(samples, errors, **DEV0, link="5", kind="crc_data") == 2
    assert value(samples, errors, **DEV0, link="6", kind="replay") == 3
    assert value(samples, errors, **DEV0, link="11", kind="recovery") == 4
    assert len(select(samples, errors, **DEV0)) == 12 * 4
    assert len(select(samples, errors, **DEV1)) == 18 * 4  # 18 links: ids for 12, the call for 6 more


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_traffic_counters_in_bytes(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.pcie_bytes[0], gpu.pcie_bytes[1] = 5_000_000, 7_000_000
    gpu.nvlink_kib[17][0], gpu.nvlink_kib[17][1] = 300, 500
    samples = rig.tick()
    assert value(samples, "warptd_device_pcie_bytes_total", **DEV0, direction="tx") == 5_000_000
    assert value(samples, "warptd_device_pcie_bytes_total", **DEV0, direction="rx") == 7_000_000
    nvlink = "warptd_device_nvlink_link_bytes_total"
    assert value(samples, nvlink, **DEV0, link="17", direction="tx") == 300 * KIB  # KiB in the field
    assert value(samples, nvlink, **DEV0, link="17", direction="rx") == 500 * KIB
    assert len(select(samples, nvlink, **DEV0)) == 18 * 2


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_only_the_links_the_gpu_has_are_asked(rig, fake_nvml):
    fake_nvml.gpus[1].nvlink_count = 0  # a PCIe card
    samples = rig.tick()
    for name in ("warptd_device_nvlink_link_bytes_total", "warptd_device_nvlink_link_errors_total"):
        assert not select(samples, name, **DEV1)
        assert select(samples, name, **DEV0)
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0
    before = fake_nvml.calls("nvmlDeviceGetFieldValues")
    rig.tick("nvidia")
    assert fake_nvml.calls("nvmlDeviceGetFieldValues") - before == 2  # one batch per GPU, links included


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_recovery_action_is_one_series_naming_the_action_now(rig, fake_nvml):
    """One series per GPU, not one per action: the seven others would be constant 0s (issue 39 #14)."""
    fake_nvml.gpus[0].recovery_action = 2  # NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
    fake_nvml.gpus[1].recovery_action = 99  # an action newer than warptd: absent, not a guess
    samples = rig.tick()
    actions = {s.labels["action"]: s.value for s in select(samples, "warptd_device_recovery_action", **DEV0)}
    assert actions == {"node_reboot": 1}
    assert not select(samples, "warptd_device_recovery_action", **DEV1)
    fake_nvml.gpus[0].recovery_action = 0
    samples = rig.tick()
    actions = {s.labels["action"]: s.value for s in select(samples, "warptd_device_recovery_action", **DEV0)}
    assert actions == {"none": 1}


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_memory_temperature_fans_media_and_pstate(rig, fake_nvml):
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.memory_temperature = 61
    gpu1.fans = [45, 110]  # a PCIe board with two fans (NVML may pass 100 %); GPU 0 has none
    gpu0.encoder_util, gpu0.decoder_util, gpu0.pstate = 25, 80, 2
    gpu1.pstate = 32  # NVML_PSTATE_UNKNOWN
    samples = rig.tick()
    assert value(samples, "warptd_device_temperature_celsius", **DEV0, sensor="memory") == 61
    assert value(samples, "warptd_device_temperature_celsius", **DEV0, sensor="gpu") == 41
    assert value(samples, "warptd_device_fan_speed_ratio", **DEV1, fan="0") == pytest.approx(0.45)
    assert value(samples, "warptd_device_fan_speed_ratio", **DEV1, fan="1") == pytest.approx(1.10)
    assert not select(samples, "warptd_device_fan_speed_ratio", **DEV0)
    assert value(samples, "warptd_device_encoder_utilization_ratio", **DEV0) == pytest.approx(0.25)
    assert value(samples, "warptd_device_decoder_utilization_ratio", **DEV0) == pytest.approx(0.80)
    assert value(samples, "warptd_device_performance_state", **DEV0) == 2
    assert not select(samples, "warptd_device_performance_state", **DEV1)
    rig.tick("nvidia")
    assert fake_nvml.calls("nvmlDeviceGetNumFans") == 2  # asked once per GPU, fans or not
    assert fake_nvml.calls("nvmlDeviceGetFanSpeed_v2") == 2 * 2  # GPU 1's two fans, twice


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_a_field_unsupported_on_one_gpu_only(rig, fake_nvml):
    fake_nvml.gpus[1].unsupported_fields = {4, 197}  # DBE volatile, PCIe TX bytes
    samples = rig.tick()
    assert not select(samples, "warptd_device_ecc_errors_total", **DEV1, kind="uncorrected")
    assert select(samples, "warptd_device_ecc_errors_total", **DEV1, kind="corrected")
    assert not select(samples, "warptd_device_pcie_bytes_total", **DEV1, direction="tx")
    assert select(samples, "warptd_device_ecc_errors_total", **DEV0, kind="uncorrected")
    assert select(samples, "warptd_device_pcie_bytes_total", **DEV0, direction="tx")
    fake_nvml.gpus[1].unsupported_fields = set()  # answered once NOT_SUPPORTED: not asked again
    samples = rig.tick()
    assert not select(samples, "warptd_device_ecc_errors_total", **DEV1, kind="uncorrected")
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_a_failing_field_is_counted_and_asked_again(rig, fake_nvml):
    fake_nvml.gpus[0].raises["nvmlDeviceGetFieldValues"] = 999  # NVML_ERROR_UNKNOWN: the whole batch
    samples = rig.tick()
    assert not select(samples, "warptd_device_ecc_errors_total", **DEV0)
    assert select(samples, "warptd_device_ecc_errors_total", **DEV1)
    del fake_nvml.gpus[0].raises["nvmlDeviceGetFieldValues"]
    samples = rig.tick()
    assert select(samples, "warptd_device_ecc_errors_total", **DEV0)
    assert select(samples, "warptd_device_nvlink_link_bytes_total", **DEV0, link="17")


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_r470_driver_lacks_the_newer_fields(make_rig):
    fake = FakeNvml(gpus=1, driver="r470", driver_version="470.256.02")
    with fake.installed():
        rig = make_rig("nvidia")
        samples = rig.tick()
        for name in ("warptd_device_recovery_action", "warptd_device_pcie_bytes_total"):
            assert not select(samples, name, **DEV0), name
        for name in (
            "warptd_device_ecc_errors_total",
            "warptd_device_remapped_rows",
            "warptd_device_pcie_replays_total",
            "warptd_device_nvlink_link_bytes_total",
        ):
            assert select(samples, name, **DEV0), name
        assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="sdk_error") == 0
        rig.close()
    fake.close()


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_a_field_failing_after_steady_reads_drops_only_its_series(rig, fake_nvml):
    gpu = fake_nvml.gpus[0]
    for errors in (1, 2, 3):  # reads after the first take the one-unpack path
        gpu.ecc_volatile[0] = errors
        samples = rig.tick()
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 3
    gpu.unsupported_fields = {143}  # the GPU stops answering one field
    gpu.ecc_volatile[0], gpu.nvlink_kib[4][1] = 5, 77
    samples = rig.tick()
    assert not select(samples, "warptd_device_remapped_rows", **DEV0, kind="uncorrectable")
    assert select(samples, "warptd_device_remapped_rows", **DEV0, kind="correctable")
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 5
    link4 = {"link": "4", "direction": "rx", **DEV0}
    assert value(samples, "warptd_device_nvlink_link_bytes_total", **link4) == 77 * KIB
    gpu.nvlink_kib[4][1] = 78
    samples = rig.tick()  # steady again without the field
    assert value(samples, "warptd_device_nvlink_link_bytes_total", **link4) == 78 * KIB
    assert not select(samples, "warptd_device_remapped_rows", **DEV0, kind="uncorrectable")


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_slow_values_are_read_every_health_interval_and_reported_between(settings, fake_nvml, make_rig):
    """Sampled faster than --health-interval, a GPU's health batch, power limit, fans and media
    engines are read that often; the samples between carry their last values, and power, clocks and
    throttling are read every sample. A GPU that comes back reads them all at once."""
    settings.interval, settings.health_interval = 0.05, 0.4
    rig = make_rig("nvidia")
    gpu = fake_nvml.gpus[0]
    gpu.ecc_volatile[0], gpu.encoder_util = 5, 30
    rig.tick()
    slow = (
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetEncoderUtilization",
        "nvmlDeviceGetDecoderUtilization",
    )
    calls = [fake_nvml.calls(name) for name in slow]
    gpu.ecc_volatile[0], gpu.encoder_util, gpu.power_limit_mw = 9, 60, 400_000
    gpu.power_mw = 250_000
    fake_nvml.next_refresh()
    samples = rig.tick()
    assert [fake_nvml.calls(name) for name in slow] == calls  # not due yet
    assert value(samples, "warptd_device_power_watts", **DEV0) == 250  # read every sample
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 5  # the last read
    assert value(samples, "warptd_device_encoder_utilization_ratio", **DEV0) == 0.3
    assert value(samples, "warptd_device_power_limit_watts", **DEV0) == 700
    assert select(samples, "warptd_device_nvlink_link_bytes_total", **DEV0)  # still there between reads

    slow_reads = rig.sampler.backends["nvidia"].gpus[0].cadence
    time.sleep(0.4)  # the health interval
    samples = rig.tick()
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 9
    assert value(samples, "warptd_device_encoder_utilization_ratio", **DEV0) == 0.6
    assert value(samples, "warptd_device_power_limit_watts", **DEV0) == 400
    assert slow_reads.due() is False  # that read counted as the last one

    gpu.lost = True
    rig.tick()
    gpu.lost = False
    gpu.ecc_volatile[0] = 12
    samples = rig.tick()  # back: everything read at once, not a health interval later
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 12


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], metrics_include=["warptd_device_ecc_lifetime_errors_total"])
def test_a_failed_read_of_the_slow_values_is_retried_at_the_next_health_read(settings, fake_nvml, make_rig):
    """A failure at a health read costs those series until the next health read, which asks them
    again; the samples between stay cheap (issue 38 #2: before, every sample read them again)."""
    settings.interval, settings.health_interval = 0.05, 30.0
    rig = make_rig("nvidia")
    gpu = fake_nvml.gpus[0]
    gpu.ecc_volatile[0] = 5
    assert select(rig.tick(), "warptd_device_ecc_errors_total", **DEV0)
    rig.sampler.backends["nvidia"].gpus[0].cadence.forget()  # as if 30 s had passed
    gpu.raises["nvmlDeviceGetFieldValues"] = pynvml.NVML_ERROR_UNKNOWN
    gpu.raises["nvmlDeviceGetEnforcedPowerLimit"] = pynvml.NVML_ERROR_UNKNOWN
    samples = rig.tick()
    assert not select(samples, "warptd_device_ecc_errors_total", **DEV0)  # failed now: absent now
    del gpu.raises["nvmlDeviceGetFieldValues"]
    del gpu.raises["nvmlDeviceGetEnforcedPowerLimit"]
    gpu.ecc_volatile[0] = 6
    calls = fake_nvml.calls("nvmlDeviceGetEnforcedPowerLimit")
    samples = rig.tick()  # not read again before its cadence
    assert not select(samples, "warptd_device_ecc_errors_total", **DEV0)
    assert fake_nvml.calls("nvmlDeviceGetEnforcedPowerLimit") == calls
    rig.sampler.backends["nvidia"].gpus[0].cadence.forget()  # as if 30 s had passed
    samples = rig.tick()
    assert value(samples, "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 6
    assert value(samples, "warptd_device_power_limit_watts", **DEV0) == 700
    calls = fake_nvml.calls("nvmlDeviceGetEnforcedPowerLimit")
    rig.tick()
    assert fake_nvml.calls("nvmlDeviceGetEnforcedPowerLimit") == calls  # and then every 30 s again


H100_MIG = "NVIDIA H100 80GB HBM3 MIG"


SLICES = [
    FakeMig("MIG-aaaaaaaa-1111-5222-8333-444444444444", gpu_instance=1, name=f"{H100_MIG} 3g.40gb",
            memory_total=40 * GIB, memory_used=3 * GIB),
    FakeMig("MIG-bbbbbbbb-1111-5222-8333-444444444444", gpu_instance=2, name=f"{H100_MIG} 1g.10gb",
            memory_total=10 * GIB, memory_used=1 * GIB),
]  # fmt: skip


SM = pynvml.NVML_GPM_METRIC_SM_UTIL


TENSOR = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL


def mig(index: int) -> dict[str, str]:
    return {"backend": "nvidia_mig", "device": str(index)}


@pytest.fixture
def fake():
    """GPU 0 with MIG on (two slices), GPU 1 with MIG off."""
    fake = FakeNvml(gpus=2)
    fake.gpus[0].mig_devices = SLICES
    with fake.installed():
        yield fake
    fake.close()


@pytest.mark.rig("nvidia", "nvidia_mig", doubles=["fake"])
def test_mig_devices_of_the_mig_gpu_only_with_their_parent_identity(rig, fake):
    samples = rig.tick()
    parent = fake.gpus[0]
    infos = {s.labels["uuid"]: s.labels for s in select(samples, "warptd_device_mig_info")}
    assert set(infos) == {s.uuid for s in SLICES}  # none of GPU 1, whose MIG is off
    first = infos[SLICES[0].uuid]
    assert (first["parent_uuid"], first["gpu_instance"], first["compute_instance"]) == (parent.uuid, "1", "0")
    assert first["profile"] == "3g.40gb" and infos[SLICES[1].uuid]["profile"] == "1g.10gb"
    info = select(samples, "warptd_device_info", uuid=SLICES[0].uuid)[0].labels
    assert info["model"] == "NVIDIA H100 80GB HBM3 MIG 3g.40gb" and info["source"] == "nvml"
    assert info["backend"] == "nvidia_mig"
    # each slice's own memory, through its MIG handle
    assert value(samples, "warptd_device_memory_total_bytes", **mig(0)) == 40 * GIB
    assert value(samples, "warptd_device_memory_used_bytes", **mig(1)) == 1 * GIB
    # no power sensor per slice: absent, never 0 or the parent's
    for name in (
        "warptd_device_power_watts",
        "warptd_device_energy_joules_total",
        "warptd_device_utilization_ratio",
    ):
        assert not select(samples, name, backend="nvidia_mig"), name
    assert value(samples, "warptd_device_power_watts", backend="nvidia", device="0") == 120
    # the parent GPU keeps its own series and lists the slices as aliases, as before
    assert rig.snapshot.get("nvidia").devices_info[0].aliases == [s.uuid for s in SLICES]


@pytest.mark.rig("nvidia", "nvidia_mig", doubles=["fake"])
@pytest.mark.slow
def test_gpm_activity_per_gpu_instance_over_the_last_period(rig, fake):
    gpu = fake.gpus[0]
    rig.tick()
    gpu.advance_gpm(activity={SM: 0.3, TENSOR: 0.1}, mig=0)
    gpu.advance_gpm(activity={SM: 0.7}, mig=1)
    gpu.advance_gpm(activity={SM: 0.5})  # the whole GPU, read by the nvidia backend
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_sm_active_ratio", **mig(0)) == pytest.approx(0.3)
    assert value(samples, "warptd_device_pipe_active_ratio", pipe="tensor", **mig(0)) == pytest.approx(0.1)
    assert value(samples, "warptd_device_sm_active_ratio", **mig(1)) == pytest.approx(0.7)
    assert value(samples, "warptd_device_sm_active_ratio", backend="nvidia", device="0") == pytest.approx(0.5)
    gpu.advance_gpm(activity={SM: 0.05}, mig=0)
    gpu.advance_gpm(mig=1)
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_sm_active_ratio", **mig(0)) == pytest.approx(0.05)
    assert value(samples, "warptd_device_sm_active_ratio", **mig(1)) == 0
    assert fake.calls("nvmlGpmMigSampleGet") == 3 * len(SLICES)  # one per GPU instance per tick
    rig.settings.interval = 1.0  # a GPM gap of 0.95 s from here (read live): the next tick is sooner
    rig.tick()  # no GPU instance is sampled, the values stand
    assert fake.calls("nvmlGpmMigSampleGet") == 3 * len(SLICES) and gpu.gpm_close_pairs == 0
    assert value(rig.scrape(), "warptd_device_sm_active_ratio", **mig(0)) == pytest.approx(0.05)


@pytest.mark.rig("nvidia", "nvidia_mig", doubles=["fake"])
@pytest.mark.slow
def test_compute_instances_of_one_gpu_instance_share_one_sample(make_rig, fake):
    gpu = fake.gpus[0]
    shared = [
        FakeMig("MIG-cccccccc-1111-5222-8333-444444444444", gpu_instance=3, compute_instance=0),
        FakeMig("MIG-dddddddd-1111-5222-8333-444444444444", gpu_instance=3, compute_instance=1),
    ]
    gpu.mig_devices = shared
    rig = make_rig("nvidia_mig")
    rig.tick()
    gpu.advance_gpm(activity={SM: 0.4}, mig=0)  # the GPU instance's counters (the first slot holding it)
    samples = rig.tick_gpm()
    assert fake.calls("nvmlGpmMigSampleGet") == 2  # one per tick for the one GPU instance
    assert value(samples, "warptd_device_sm_active_ratio", **mig(0)) == pytest.approx(0.4)
    assert value(samples, "warptd_device_sm_active_ratio", **mig(1)) == pytest.approx(0.4)
    assert value(samples, "warptd_device_mig_info", compute_instance="1", **mig(1)) == 1


@pytest.mark.rig("nvidia", "nvidia_mig", doubles=["fake"])
def test_mig_on_a_driver_without_gpm_lists_the_devices_without_activity(settings):
    fake = FakeNvml(gpus=1, driver="r470")
    fake.gpus[0].mig_devices = SLICES
    settings.backends = ["nvidia_mig"]
    with fake.installed():
        rig = Rig(settings)
        try:
            for _ in range(3):
                fake.gpus[0].advance_gpm(activity={SM: 0.3}, mig=0)
                samples = rig.tick()
            assert len(select(samples, "warptd_device_mig_info")) == 2
            assert not select(samples, "warptd_device_sm_active_ratio")
            assert value(samples, "warptd_device_memory_total_bytes", **mig(0)) == 40 * GIB
        finally:
            rig.close()
    fake.close()


@pytest.mark.rig("nvidia", "nvidia_mig", doubles=["fake"])
def test_samples_freed_at_shutdown(settings):
    fake = FakeNvml([FakeGpu(index=0)])
    fake.gpus[0].mig_devices = SLICES
    settings.backends = ["nvidia", "nvidia_mig"]
    with fake.installed():
        live_before = fake.gpm_samples_live
        rig = Rig(settings)
        for _ in range(3):
            rig.tick()
        assert fake.gpm_samples_live - live_before == 2 * 3  # the GPU and its two instances
        rig.close()
        assert fake.gpm_samples_live == live_before
    fake.close()

"""The recorder, under the real pynvml over the NVML double: each C call with the handle it was made on
(a GPU, a MIG device), its inputs, its return code by name, what it wrote and the thread CPU of the C
call alone; a field batch field by field, GPM metrics per GPU instance; functions the library lacks."""

from __future__ import annotations

import time

import pynvml
import pytest

from tests.doubles.nvml import GIB, FakeGpu, FakeMig, FakeNvml, without
from warptd.capture import schema
from warptd.capture.recorder import Recorder


@pytest.fixture
def recorded():
    """``start(gpus, driver=...)``: the double installed, the recorder in its lookup, recording idle."""
    made = []

    def start(gpus, driver="current"):
        fake = FakeNvml(gpus, "580.159.04", driver=driver)
        installed = fake.installed()
        installed.__enter__()
        recorder = Recorder(pynvml)
        recording = recorder.installed()
        recording.__enter__()
        made.append((fake, installed, recording))
        recorder.begin(schema.IDLE)
        pynvml.nvmlInit()
        return recorder

    yield start
    for fake, installed, recording in made:
        pynvml.nvmlShutdown()
        recording.__exit__(None, None, None)
        installed.__exit__(None, None, None)
        fake.close()


def _entries(recorder: Recorder, gpu: int | None) -> dict:
    return recorder.books[schema.IDLE].entries[gpu]


def test_each_call_is_kept_with_its_inputs_code_value_and_cpu(recorded):
    gpu = FakeGpu.h200(0, live=True)
    gpu.clocks_mhz[pynvml.NVML_CLOCK_VIDEO] = 0  # answers NOT_SUPPORTED
    recorder = recorded([gpu])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_VIDEO)
    pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    pynvml.nvmlDeviceGetName(handle)
    first = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    time.sleep(0.25)
    last = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    entries = _entries(recorder, 0)
    sm = entries["call", "gpu", "nvmlDeviceGetClockInfo", (pynvml.NVML_CLOCK_SM,)]
    assert (sm.ret, sm.value, sm.type, sm.count) == (schema.SUCCESS, 1980, "c_uint", 1)
    video = entries["call", "gpu", "nvmlDeviceGetClockInfo", (pynvml.NVML_CLOCK_VIDEO,)]
    assert (video.ret, video.value) == ("NVML_ERROR_NOT_SUPPORTED", None)
    memory = entries["call", "gpu", "nvmlDeviceGetMemoryInfo_v2", ()]
    assert memory.value["total"] == gpu.memory_total and memory.value["reserved"] == gpu.memory_reserved
    assert memory.type == "c_nvmlMemory_v2_t"
    name = entries["call", "gpu", "nvmlDeviceGetName", ()]  # the buffer's length is no input
    assert (name.value, name.type) == ("NVIDIA H200", "char[]")
    energy = entries["call", "gpu", "nvmlDeviceGetTotalEnergyConsumption", ()]
    assert energy.count == 2 and energy.value == last
    observed, rate = energy.motion()
    assert observed is not None and observed.value == first and rate > 0  # mJ/s: a counter's rate
    assert min(energy.cpu) >= 2.9e-3  # the H200's price, burned in this thread, timed alone
    assert ("call", "gpu", "nvmlDeviceGetHandleByIndex_v2", ()) in entries
    node = _entries(recorder, None)
    assert node["call", "gpu", "nvmlInitWithFlags", (0,)].ret == schema.SUCCESS


def test_a_field_batch_is_kept_field_by_field_with_type_and_latency(recorded):
    gpu = FakeGpu.h200(0)
    gpu.unsupported_fields = {82}
    recorder = recorded([gpu])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceGetFieldValues(handle, [83, 82, 186, (138, 3), 400])
    entries = _entries(recorder, 0)
    energy = entries["field", "gpu", 83, 0]
    assert energy.ret == schema.SUCCESS and energy.type == "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG"
    assert energy.value == 5_000_000 and energy.latency_us == 5600  # the driver's latencyUsec
    assert entries["field", "gpu", 186, 0].value == 120_000
    assert entries["field", "gpu", 82, 0].ret == "NVML_ERROR_NOT_SUPPORTED"
    assert entries["field", "gpu", 138, 3].ret == "NVML_ERROR_INVALID_ARGUMENT"  # no NVLink on an H200
    assert entries["field", "gpu", 400, 0].ret == "NVML_ERROR_INVALID_ARGUMENT"  # past NVML_FI_MAX
    assert not any(key[0] == "call" and key[2] == "nvmlDeviceGetFieldValues" for key in entries)


def test_mig_devices_and_gpm_metrics_are_kept_by_device_and_gpu_instance(recorded):
    gpu = FakeGpu(0)
    gpu.mig_devices = [
        FakeMig("MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", 3, 0, "H100 MIG 3g.40gb", 40 * GIB)
    ]
    gpu.advance_gpm(activity={pynvml.NVML_GPM_METRIC_SM_UTIL: 0.5}, mig=0)
    recorder = recorded([gpu])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
    pynvml.nvmlDeviceGetUUID(mig)
    samples = [pynvml.nvmlGpmSampleAlloc() for _ in range(2)]
    pynvml.nvmlGpmMigSampleGet(handle, 3, samples[0])
    time.sleep(0.11)
    gpu.advance_gpm(activity={pynvml.NVML_GPM_METRIC_SM_UTIL: 0.5}, mig=0)
    time.sleep(0.11)
    pynvml.nvmlGpmMigSampleGet(handle, 3, samples[1])
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version, request.numMetrics = pynvml.NVML_GPM_METRICS_GET_VERSION, 2
    request.sample1, request.sample2 = samples
    request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    request.metrics[1].metricId = 479
    pynvml.nvmlGpmMetricsGet(request)
    for sample in samples:
        pynvml.nvmlGpmSampleFree(sample)
    entries = _entries(recorder, 0)
    assert (
        entries["call", "mig:0", "nvmlDeviceGetUUID", ()].value == "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    )
    assert entries["call", "gpu", "nvmlDeviceGetMigDeviceHandleByIndex", (0,)].ret == schema.SUCCESS
    assert entries["call", "gpu", "nvmlGpmMigSampleGet", (3,)].count == 2
    sm = entries["gpm", 3, pynvml.NVML_GPM_METRIC_SM_UTIL]
    assert (sm.ret, sm.value, sm.unit) == (schema.SUCCESS, 50.0, "%")
    assert entries["gpm", 3, 479].ret == "NVML_ERROR_NOT_SUPPORTED"
    assert entries["gpm_request", 3].value == 2  # metrics asked
    assert ("call", "gpu", "nvmlGpmSampleAlloc", ()) in _entries(recorder, None)


def test_a_function_the_library_lacks_is_absent_and_nothing_is_kept_outside_a_state(recorded):
    recorder = recorded([FakeGpu(0)], driver=without(["nvmlDeviceGetGpuUptime_v1"]))
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuUptime_v1")
    assert recorder.absent == {"nvmlDeviceGetGpuUptime_v1"}
    with recorder.paused():
        pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
    assert ("call", "gpu", "nvmlDeviceGetTemperature", (0,)) not in _entries(recorder, 0)
    pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)  # recording again
    assert _entries(recorder, 0)["call", "gpu", "nvmlDeviceGetTemperature", (0,)].value == 41

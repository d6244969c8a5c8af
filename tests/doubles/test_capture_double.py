"""The double answering from a capture written by hand, as a converter from nvidia-smi would write one:
each answer as captured, counters at their rates, captured codes and value types for what the GPU
lacks, functions the driver lacks missing, each call's price and each value's refresh period, and
what it answers from its own model instead listed."""

from __future__ import annotations

import time

import pynvml
import pytest

from tests.doubles.capture_double import fake_nvml, modelled
from warptd.capture import schema

UINT, ULL = "NVML_VALUE_TYPE_UNSIGNED_INT", "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG"


def _call(function: str, value=None, *args, ret: str = schema.SUCCESS, **extra) -> schema.Call:
    return schema.Call(function=function, args=args, ret=ret, value=value, **extra)


def _capture() -> schema.Capture:
    idle = schema.GpuState(
        seconds=10,
        calls=(
            _call("nvmlDeviceGetName", "NVIDIA L40S"),
            _call(
                "nvmlDeviceGetMemoryInfo_v2",
                {"version": 1, "total": 48 * 2**30, "reserved": 2**29, "free": 0, "used": 2**30},
            ),
            _call("nvmlDeviceGetClockInfo", 2100, 1),
            _call("nvmlDeviceGetClockInfo", None, 3, ret=schema.NOT_SUPPORTED),
            _call("nvmlDeviceGetPowerUsage", 81_000),
            _call("nvmlDeviceGetNumFans", 1),
            _call("nvmlDeviceGetFanSpeed_v2", 30, 0),
            _call("nvmlDeviceGetNvLinkState", None, 0, ret=schema.NOT_SUPPORTED),
            _call("nvmlGpmQueryDeviceSupport", {"version": 1, "isSupportedDevice": 0}),
            _call("nvmlDeviceGetTemperature", None, 0, ret=schema.UNKNOWN, count=0),
            _call("nvmlDeviceGetViolationStatus", None, 0, ret=schema.NOT_SUPPORTED),
        ),
        fields=(
            schema.FieldValue(id=83, ret=schema.SUCCESS, value=9_000_000, type=ULL, rate=80_000.0),
            schema.FieldValue(id=186, ret=schema.SUCCESS, value=80_000, type=UINT),
            schema.FieldValue(id=197, ret=schema.SUCCESS, value=10**9, type=ULL, rate=5e8, latency_us=300),
            schema.FieldValue(id=82, ret=schema.NOT_SUPPORTED, type=UINT),
            schema.FieldValue(id=91, ret=schema.NOT_SUPPORTED, type=UINT),
            schema.FieldValue(id=142, ret=schema.UNKNOWN),
        ),
    )
    gpu = schema.Gpu(
        index=0,
        states={"idle": idle},
        prices=(
            schema.Price(function="nvmlDeviceGetPowerUsage", cpu_seconds=1.5e-3, source="h200"),
            schema.Price(function="nvmlDeviceGetFieldValues", field=197, cpu_seconds=2e-3, source="h200"),
        ),
        refresh=(schema.Refresh(value="power_usage", seconds=0.2, source="h200"),),
    )
    return schema.Capture(
        header=schema.Header(
            format=schema.FORMAT,
            version=schema.VERSION,
            created="2026-12-05T00:00:00+00:00",
            tool="test",
            source="smi",
            sources=(
                schema.Source(id="smi", kind="nvidia-smi", detail="nvidia-smi -q of an L40S"),
                schema.Source(id="h200", kind="notes", detail="shared/notes/real-h200.md"),
            ),
        ),
        node=schema.Node(
            driver_version="595.80",
            nvml_version="13.595.80",
            cuda_driver_version="13.1",
            absent=("nvmlDeviceGetGpuUptime_v1", "nvmlGpmSampleGet"),
        ),
        gpus=(gpu,),
    )


@pytest.fixture
def replayed():
    fake, said = fake_nvml(_capture())
    with fake.installed():
        pynvml.nvmlInit()
        yield fake, said, pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlShutdown()
    fake.close()


def _fields(handle, *ids):
    return {v.fieldId: v for v in pynvml.nvmlDeviceGetFieldValues(handle, list(ids))}


def test_each_answer_is_as_captured(replayed):
    _fake, _said, handle = replayed
    assert pynvml.nvmlSystemGetDriverVersion() == "595.80"
    assert pynvml.nvmlSystemGetNVMLVersion() == "13.595.80"
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 13010
    assert pynvml.nvmlDeviceGetName(handle) == "NVIDIA L40S"
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert (memory.total, memory.reserved, memory.used) == (48 * 2**30, 2**29, 2**30)
    assert pynvml.nvmlDeviceGetClockInfo(handle, 1) == 2100
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetClockInfo(handle, 3)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetViolationStatus(handle, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetNvLinkState(handle, 0)
    assert pynvml.nvmlDeviceGetFanSpeed_v2(handle, 0) == 30
    assert pynvml.nvmlDeviceGetPowerUsage(handle) == 81_000
    fields = _fields(handle, 186, 82, 91)
    assert fields[186].value.uiVal == 80_000
    assert (fields[82].nvmlReturn, fields[82].valueType) == (pynvml.NVML_ERROR_NOT_SUPPORTED, 1)
    assert fields[91].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED


@pytest.mark.slow
def test_counters_move_at_their_captured_rates(replayed):
    _fake, _said, handle = replayed
    began = _fields(handle, 83, 197)
    time.sleep(1.0)
    ended = _fields(handle, 83, 197)
    energy = (ended[83].value.ullVal - began[83].value.ullVal) / 1.0
    assert energy == pytest.approx(80_000, rel=0.15)  # mJ/s, read through 100 ms refreshes
    assert began[83].value.ullVal >= 9_000_000 - 80_000 * 0.1  # from the captured value (one refresh)
    traffic = ended[197].value.ullVal - began[197].value.ullVal
    assert traffic == pytest.approx(5e8, rel=0.05)
    assert ended[197].latencyUsec == 300


def test_what_the_driver_lacks_is_missing_and_what_the_capture_lacks_is_the_models(replayed):
    fake, said, handle = replayed
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuUptime_v1")
    assert not pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice
    assert said.unknown == ["GPU 0: nvmlDeviceGetTemperature(0)", "GPU 0: field 142"]
    assert said.not_reproduced == []
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 41  # the model's (unknown in the capture)
    pynvml.nvmlDeviceGetPerformanceState(handle)  # not in the capture at all
    _fields(handle, 142, 230)
    assert modelled(fake, _capture()) == [
        "nvmlDeviceGetPerformanceState (1 calls)",
        "GPU 0: fields 230",  # 142 is the capture's, unknown: said apart
    ]


def test_each_call_costs_its_captured_price_and_refreshes_at_its_period(replayed):
    fake, _said, handle = replayed
    started = time.thread_time()
    pynvml.nvmlDeviceGetPowerUsage(handle)
    assert time.thread_time() - started >= 1.5e-3
    started = time.thread_time()
    _fields(handle, 197)
    assert time.thread_time() - started >= 2e-3
    gpu = fake.gpus[0]
    assert gpu.refresh_ns["power_usage"] == 200_000_000
    assert gpu.refresh_ns["energy"] == 100_000_000  # not captured: the H200's


def test_mig_mode_on_without_instances_stays_on():
    idle = schema.GpuState(seconds=1, calls=(_call("nvmlDeviceGetMigMode", [1, 1]),))
    capture = _capture().model_copy(update={"gpus": (schema.Gpu(index=0, states={"idle": idle}),)})
    fake, _ = fake_nvml(capture)
    with fake.installed():
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 1]
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
        pynvml.nvmlShutdown()
    fake.close()

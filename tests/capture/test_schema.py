"""The capture format: what a file must say (its sources, GPUs in order, an idle state), what unknown
means, and that a file reads back as it was written, NaN and 64-bit values included."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from warptd.capture import schema


def _header(**changes) -> schema.Header:
    fields = {
        "format": schema.FORMAT,
        "version": schema.VERSION,
        "created": "2026-12-05T00:00:00+00:00",
        "tool": "test",
        "source": "smi",
        "sources": [
            {"id": "smi", "kind": "nvidia-smi", "detail": "nvidia-smi -q of an L40S"},
            {"id": "h200-notes", "kind": "notes", "detail": "shared/notes/real-h200.md"},
        ],
    }
    return schema.Header.model_validate({**fields, **changes})


def _capture(**gpu_states) -> schema.Capture:
    states = gpu_states or {"idle": schema.GpuState(seconds=1.0)}
    return schema.Capture(header=_header(), gpus=(schema.Gpu(index=0, states=states),))


def test_a_file_reads_back_as_written_nan_and_64_bit_values_kept(tmp_path):
    state = schema.GpuState(
        seconds=10.0,
        calls=(
            schema.Call(
                function="nvmlDeviceGetClockInfo", args=(1,), ret=schema.SUCCESS, value=1980, type="c_uint"
            ),
            schema.Call(
                function="nvmlDeviceGetName", device="mig:2", ret=schema.SUCCESS, value="MIG 1g.18gb"
            ),
        ),
        fields=(
            schema.FieldValue(
                id=270, ret=schema.SUCCESS, value=2**64 - 2, type="NVML_VALUE_TYPE_UNSIGNED_LONG_LONG"
            ),
            schema.FieldValue(id=138, scope=3, ret=schema.NOT_SUPPORTED, type="NVML_VALUE_TYPE_UNSIGNED_INT"),
        ),
        gpm=(schema.GpmMetric(id=1, instance=3, ret=schema.SUCCESS, value=float("nan"), unit="%"),),
    )
    capture = _capture(idle=state)
    path = tmp_path / "capture.json"
    capture.write(path)
    text = path.read_text()
    json.loads(text)  # standard JSON: NaN is written as a string
    assert '"NaN"' in text
    again = schema.Capture.read(path)
    assert again.gpus[0].states["idle"].field(270).value == 2**64 - 2
    assert again.gpus[0].states["idle"].call("nvmlDeviceGetName", device="mig:2").value == "MIG 1g.18gb"
    metric = again.gpus[0].states["idle"].gpm[0]
    assert metric.value != metric.value and metric.instance == 3  # NaN
    assert again.dumps() == capture.dumps()
    # what names an answer comes first, for a person reading the file
    call = json.loads(text)["gpus"][0]["states"]["idle"]["calls"][0]
    assert list(call)[:3] == ["function", "args", "ret"]


def test_unknown_is_an_answer_without_value_and_is_listed_for_the_golden_file():
    state = schema.GpuState(
        seconds=0.0,
        calls=(schema.Call(function="nvmlDeviceGetFanSpeed_v2", args=(0,), ret=schema.UNKNOWN, count=0),),
        fields=(
            schema.FieldValue(id=83, ret=schema.UNKNOWN),
            schema.FieldValue(id=138, scope=2, ret=schema.UNKNOWN),
        ),
        gpm=(schema.GpmMetric(id=1, instance=3, ret=schema.UNKNOWN),),
    )
    capture = _capture(idle=state)
    assert capture.unknowns() == [
        "GPU 0: nvmlDeviceGetFanSpeed_v2(0)",
        "GPU 0: field 83",
        "GPU 0: field 138/2",
        "GPU 0: GPM 1 on GI 3",
    ]
    assert not state.fields[0].known
    with pytest.raises(ValidationError, match="unknown answer carries no value"):
        schema.FieldValue(id=83, ret=schema.UNKNOWN, value=5)


def test_every_source_an_answer_names_is_in_the_header():
    price = schema.Price(
        function="nvmlDeviceGetTotalEnergyConsumption", cpu_seconds=2.9e-3, source="h200-notes"
    )
    gpu = schema.Gpu(index=0, states={"idle": schema.GpuState(seconds=0)}, prices=(price,))
    capture = schema.Capture(header=_header(), gpus=(gpu,))
    assert capture.source_of(price).kind == "notes"
    assert capture.source_of(schema.Refresh(value="energy", seconds=0.1)).kind == "nvidia-smi"
    stray = price.model_copy(update={"source": "elsewhere"})
    with pytest.raises(ValidationError, match="names source 'elsewhere'"):
        schema.Capture(header=_header(), gpus=(gpu.model_copy(update={"prices": (stray,)}),))
    with pytest.raises(ValidationError, match="is not among the sources"):
        _header(source="capture")
    with pytest.raises(ValidationError, match="unique"):
        _header(sources=[{"id": "smi", "kind": "nvidia-smi"}, {"id": "smi", "kind": "notes"}])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gpus": [{"index": 1, "states": {"idle": {"seconds": 0}}}]}, "NVML's order"),
        ({"gpus": [{"index": 0, "states": {"loaded": {"seconds": 0}}}]}, "no 'idle' state"),
        ({"header": {"version": 2}}, "version"),
        (
            {
                "gpus": [
                    {
                        "index": 0,
                        "states": {
                            "idle": {
                                "seconds": 0,
                                "calls": [{"function": "f", "ret": "NVML_SUCCESS", "device": "gpu1"}],
                            }
                        },
                    }
                ]
            },
            "device",
        ),
        ({"gpus": [{"index": 0, "states": {"idle": {"seconds": 0, "calsl": []}}}]}, "calsl"),
    ],
)
def test_a_malformed_file_is_refused_saying_what_is_wrong(change, message):
    good = json.loads(_capture().dumps())
    for key, value in change.items():
        good[key] = {**good[key], **value} if isinstance(value, dict) else value
    with pytest.raises(ValidationError, match=message):
        schema.Capture.model_validate(good)


def test_states_are_those_every_gpu_has_idle_first():
    loaded = {"idle": schema.GpuState(seconds=1), "loaded": schema.GpuState(seconds=1, load="matmul")}
    gpus = (schema.Gpu(index=0, states=loaded), schema.Gpu(index=1, states=dict(loaded)))
    assert schema.Capture(header=_header(), gpus=gpus).states == ("idle", "loaded")
    partly = (gpus[0], schema.Gpu(index=1, states={"idle": schema.GpuState(seconds=1)}))
    assert schema.Capture(header=_header(), gpus=partly).states == ("idle",)

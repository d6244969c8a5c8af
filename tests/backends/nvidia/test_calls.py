"""The NVIDIA backend without nvidia-ml-py's private lookup: the prepared calls, field batches and GPM
samples fall back to its public wrappers, through the real pynvml over the NVML double."""

from __future__ import annotations

import types

import pynvml
import pytest

from tests.helpers import Rig
from warptd.backends.nvidia import calls

PRIVATE = ("_nvmlGetFunctionPointer", "_nvmlCheckReturn")
SM_UTIL = pynvml.NVML_GPM_METRIC_SM_UTIL


def rename_private_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a release renaming pynvml's private lookup would leave it: the module no longer has the
    names, while every public function still finds them (each is rebound to globals that hold them
    and read through to the module for everything else)."""
    module = vars(pynvml)
    hidden = {name: module[name] for name in PRIVATE}

    class Globals(dict):  # type: ignore[type-arg]
        def __missing__(self, key: str) -> object:
            return module[key]

    scope = Globals(hidden)

    def rebound(function: types.FunctionType) -> types.FunctionType:
        """``function`` over ``scope``, and so the functions it wraps (``convertStrBytes``)."""
        cells = function.__closure__ and tuple(
            types.CellType(
                rebound(cell.cell_contents) if is_public(cell.cell_contents) else cell.cell_contents
            )
            for cell in function.__closure__
        )
        twin = types.FunctionType(function.__code__, scope, function.__name__, function.__defaults__, cells)
        twin.__kwdefaults__ = function.__kwdefaults__
        return twin

    def is_public(value: object) -> bool:
        return isinstance(value, types.FunctionType) and value.__globals__ is module

    for name, value in list(module.items()):
        if is_public(value) and name not in hidden:
            monkeypatch.setattr(pynvml, name, rebound(value))  # type: ignore[arg-type]
    for name in PRIVATE:
        monkeypatch.delattr(pynvml, name)


def device_series(rig: Rig, fake_nvml) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every device series of two samples (the second a full one, GPM over one period), but the time of
    the energy counter's read (when each rig read it)."""
    rig.tick()
    for gpu in fake_nvml.gpus:
        gpu.advance_gpm(activity={SM_UTIL: 0.4})
    samples = rig.tick_gpm()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for s in samples
        if s.name.startswith("warptd_device_") and not s.name.endswith("_timestamp_seconds")
    }


def test_without_the_private_lookup_the_backend_reads_every_value_through_the_public_wrappers(
    make_rig, fake_nvml, monkeypatch
):
    """A renamed ``_nvmlGetFunctionPointer``/``_nvmlCheckReturn`` costs speed, not the backend: the
    same series with the same values, every prepared call made through its public wrapper."""
    direct = make_rig("nvidia")
    expected = device_series(direct, fake_nvml)
    direct.close()
    assert any(name == "warptd_device_sm_active_ratio" for name, _ in expected)

    rename_private_lookup(monkeypatch)
    rig = make_rig("nvidia")
    assert device_series(rig, fake_nvml) == expected
    backend = rig.loaded.accelerators[0]
    for gpu in backend.gpus:
        prepared = [
            call for versions in gpu.calls.slots for _, call, _ in versions if call.function is not None
        ]
        assert prepared and all(call.function is calls.PUBLIC for call in prepared)
        gpm = gpu.activity.source
        assert gpm is not None and all(take.function is calls.PUBLIC for take in gpm.takes)
    assert rig.tick()  # and again, now that every call is known to go through the wrappers


def test_the_public_wrapper_stands_in_only_where_the_private_lookup_fails_other_than_nvml_fails():
    """Renamed, or changed so that it raises (a new signature), the lookup gives way to the public
    wrapper; an NVML error from it (this driver lacks the function) stays the driver's answer."""
    nvml = types.SimpleNamespace(NVMLError=pynvml.NVMLError)
    assert calls.pointer(nvml, "nvmlDeviceGetTemperature") is None  # renamed away
    nvml._nvmlGetFunctionPointer = lambda name, cache: None  # type: ignore[attr-defined]
    assert calls.pointer(nvml, "nvmlDeviceGetTemperature") is None  # TypeError: a changed signature

    def lacking(name: str) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    nvml._nvmlGetFunctionPointer = lacking  # type: ignore[attr-defined]
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        calls.pointer(nvml, "nvmlDeviceGetTemperature")

"""NVIDIA health, traffic and nvidia-smi values through the C NVML double and the real pynvml."""

from __future__ import annotations

import pytest

from tests.helpers import value

DEV0 = {"backend": "nvidia", "device": "0"}


pytestmark = pytest.mark.rig(
    "nvidia",
    doubles=["fake_nvml"],
    metrics_include=["warptd_device_ecc_lifetime_errors_total"],  # opt-in by default
)


#: The fields of NVIDIA's table the double answers as given (tests/doubles/nvml.py FIELD_ANSWERS): field
#: id, the series it fills (its family, its label values) and its value on /metrics, the answer converted.


def test_a_reload_changes_the_health_interval_live(settings, fake_nvml, make_rig):
    settings.interval, settings.health_interval = 0.05, 60.0
    fake_nvml.gpus[0].memory_power_mw = 60_000  # nvml loads beside nvidia: its reader gets the reload too
    rig = make_rig("nvidia")
    gpu = fake_nvml.gpus[0]
    rig.tick()
    gpu.ecc_volatile[0] = 3
    assert value(rig.tick(), "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 0  # a minute away
    rig.sampler.reconfigure(settings.model_copy(update={"health_interval": 0.05, "node": "node-b"}))  # SIGHUP
    assert value(rig.tick(), "warptd_device_ecc_errors_total", **DEV0, kind="corrected") == 3  # every sample
    nvidia, nvml = rig.sampler.backends["nvidia"], rig.sampler.backends["nvml"]
    assert nvml.devices.settings.health_interval == 0.05  # the power backend's own reader too
    assert nvidia.settings.node == "node-a"  # what needs a restart is not handed over

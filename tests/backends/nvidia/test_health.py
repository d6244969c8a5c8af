"""NVIDIA health, traffic and nvidia-smi values through the C NVML double and the real pynvml."""

from __future__ import annotations

import pytest

from tests.helpers import select, value

DEV0 = {"backend": "nvidia", "device": "0"}


DEV1 = {"backend": "nvidia", "device": "1"}


pytestmark = pytest.mark.rig(
    "nvidia",
    doubles=["fake_nvml"],
    metrics_include=["warptd_device_ecc_lifetime_errors_total"],  # opt-in by default
)


AS_GIVEN: list[tuple[int, str, dict[str, str], float]] = [
    (173, "warptd_device_pcie_correctable_errors_total", {}, 12),
]


@pytest.mark.parametrize("given", AS_GIVEN, ids=lambda given: str(given[0]))
def test_a_field_answered_as_given_is_its_series_and_absent_where_the_gpu_lacks_it(
    make_rig, fake_nvml, settings, given
):
    field_id, name, labels, expected = given
    settings.metrics_include = [name]  # an opt-in family too
    fake_nvml.gpus[1].unsupported_fields = {field_id}  # a driver or GPU without it: absent, never 0
    samples = make_rig("nvidia").tick()
    assert value(samples, name, **DEV0, **labels) == expected
    assert not select(samples, name, **DEV1)


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

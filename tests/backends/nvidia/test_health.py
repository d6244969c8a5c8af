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

"""One GPU's read plan under faults: a value that keeps failing is retried at its own cadence."""

from __future__ import annotations

import pynvml
import pytest

from tests.doubles.nvml import FakeGpu
from tests.helpers import value

DEV0 = {"backend": "nvidia", "device": "0"}
KINDS = {
    pynvml.NVML_ERROR_UNKNOWN: "sdk_error",
    pynvml.NVML_ERROR_NO_PERMISSION: "permission",
    pynvml.NVML_ERROR_TIMEOUT: "timeout",
}


def _reads(samples, kind: str) -> float:
    found = [s for s in samples if s.name == "warptd_backend_reads_total" and s.labels["read"] == kind]
    return found[0].value if found else 0.0


@pytest.mark.parametrize("code", list(KINDS))
@pytest.mark.parametrize(
    "failing",
    [
        "nvmlDeviceGetTotalEnergyConsumption",  # field 83 in every batch that asks it answers this too
        "nvmlDeviceGetEnforcedPowerLimit",  # a slow value's call
    ],
)
def test_a_value_that_keeps_failing_is_retried_at_its_cadence_not_every_sample(branch_rig, failing, code):
    """Issue 38 #2: a field or call failing with UNKNOWN, NO_PERMISSION or TIMEOUT is absent from the
    sample, counted, and asked again at the next health read; the samples between stay cheap (the
    health batch is 5 ms of CPU on an H200, the energy counter 2.9 ms)."""
    rig, fake = branch_rig("580.159.04", [FakeGpu.h200(0)], interval=0.1, health_interval=30.0)
    rig.settings.energy_interval = 30.0
    gpu = rig.loaded.accelerators[0].gpus[0]
    fake.gpus[0].raises[failing] = code
    first = rig.tick()  # the first sample reads everything
    assert _reads(first, "health") == 1
    answers = len(fake.gpus[0].energy_answers())
    for _ in range(4):  # within one health and one energy interval
        samples = rig.tick()
    assert _reads(samples, "health") == 1  # not once a sample
    assert _reads(samples, "energy") == 0
    assert _reads(samples, "power") == 4
    assert len(fake.gpus[0].energy_answers()) == answers
    reading = rig.snapshot.get("nvidia").devices[0].reading
    if failing == "nvmlDeviceGetEnforcedPowerLimit":
        assert reading.power_limit_watts is None  # absent, not 0
    else:
        assert reading.energy_counter_joules is None
    assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind=KINDS[code], device="") >= 1
    gpu.cadence.forget()  # as if the health interval had passed
    samples = rig.tick()  # the next health read asks it again
    assert _reads(samples, "health") == 2
    del fake.gpus[0].raises[failing]
    gpu.cadence.forget()
    samples = rig.tick()
    assert value(samples, "warptd_device_power_limit_watts", **DEV0) > 0
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) > 0
    assert len(fake.gpus[0].energy_answers()) > answers

"""The gaudi and hlml backends against the HLML double (tests/doubles/hlml.py); no Habana device needed."""

from __future__ import annotations

import pytest

from tests.backends.gaudi import test_backend as gaudi_backend
from tests.doubles.hlml import (
    RC,
    hlml_err,
)
from tests.helpers import Rig, select, value, wait_until
from warptd.errors import ErrorKind

fake_hlml = gaudi_backend.fake_hlml  # the HLML double with three Gaudis, a fixture
gaudi = gaudi_backend.gaudi  # the Gaudi backend over that double, a fixture


pytestmark = pytest.mark.rig("gaudi", doubles=["fake_hlml"])  # and its companion power backend, hlml


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (RC.HLML_ERROR_NOT_SUPPORTED, ErrorKind.NOT_SUPPORTED),
        (RC.HLML_ERROR_TIMEOUT, ErrorKind.TIMEOUT),
        (RC.HLML_ERROR_AIP_IS_LOST, ErrorKind.DEVICE_LOST),
        (RC.HLML_ERROR_DRIVER_NOT_LOADED, ErrorKind.DEVICE_LOST),
        (RC.HLML_ERROR_UNINITIALIZED, ErrorKind.SDK_ERROR),
        (RC.HLML_ERROR_INVALID_ARGUMENT, ErrorKind.SDK_ERROR),
        (RC.HLML_ERROR_UNKNOWN, ErrorKind.SDK_ERROR),
    ],
)
def test_error_codes_map_onto_kinds(gaudi, code, kind):
    assert gaudi.classify_error(hlml_err(code)) is kind
    assert gaudi.classify_error(ValueError("not HLML")) is ErrorKind.UNEXPECTED


@pytest.mark.rig("nvidia", doubles=["fake_nvml"])
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


def test_a_tick_read_that_timed_out_in_a_gpu_counts_it_hung_at_the_scheduled_ticks(settings, fake_nvml):
    settings.backends = ["nvidia"]
    settings.interval, settings.sample_timeout = 0.05, 0.2
    rig = Rig(settings)
    fake_nvml.gpus[1].hang.set()
    try:
        rig.sampler.tick("nvidia")  # gives up after the timeout, holding GPU 1 apart; its call goes on
        rig.sampler.start()
        hung = {"backend": "nvidia", "kind": "hung", "device": "1"}
        assert wait_until(lambda: select(rig.scrape(), "warptd_sample_errors_total", **hung), timeout=3)
        assert rig.snapshot.get("nvidia").device_errors[1, ErrorKind.TIMEOUT] == 1
        assert rig.snapshot.get("nvidia").errors[ErrorKind.TIMEOUT] == 0
    finally:
        fake_nvml.gpus[1].hang.clear()
        fake_nvml.gpus[1].release.set()
        rig.close()

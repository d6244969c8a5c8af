"""One NVML session under the GPUs' faults: each GPU keeps its index (its ``device`` label) across a
change of NVML's count, and a reopen never waits for ever on a read that hangs."""

from __future__ import annotations

import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import Rig, select, value


@pytest.fixture
def rediscover_now(monkeypatch):
    from warptd.sampling import sampler

    monkeypatch.setattr(sampler, "REDISCOVER_EVERY_S", 0.0)


def _by_device(samples, name: str) -> dict[str, tuple[str, float]]:
    return {s.labels["device"]: (s.labels["uuid"], s.value) for s in select(samples, name, backend="nvidia")}


def test_a_gpu_gone_from_nvmls_count_reads_down_and_no_other_gpu_takes_its_labels(settings, rediscover_now):
    """Issue 39 #3: NVML's count dropping from 8 to 7 made device="5" carry GPU 6 (NVML renumbers the
    GPUs after the one gone), and GPU 5's series vanished without a warptd_device_up 0."""
    fake = FakeNvml([FakeGpu(index=i, power_mw=100_000 + 10_000 * i) for i in range(8)])
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        uuids = [gpu.uuid for gpu in fake.gpus]
        before = _by_device(rig.tick(), "warptd_device_power_watts")
        assert before == {str(i): (uuids[i], 100 + 10 * i) for i in range(8)}
        fake.gpus.pop(5)  # off the bus: NVML now counts 7, GPU 6 at its index 5
        rig.tick()  # GPU 5's handle answers GPU_IS_LOST: down, NVML to be reopened
        samples = rig.tick()  # reopened, re-enumerated
        up = _by_device(samples, "warptd_device_up")
        assert up == {str(i): (uuids[i], 0 if i == 5 else 1) for i in range(8)}
        power = _by_device(samples, "warptd_device_power_watts")
        assert power == {str(i): (uuids[i], 100 + 10 * i) for i in range(8) if i != 5}
        info = {s.labels["device"]: s.labels["uuid"] for s in select(samples, "warptd_device_info")}
        assert info == {str(i): uuids[i] for i in range(8)}
        assert value(samples, "warptd_backend_up", backend="nvidia") == 1
        samples = rig.tick()  # and stays so
        assert _by_device(samples, "warptd_device_up")["5"] == (uuids[5], 0)
        assert _by_device(samples, "warptd_device_power_watts")["6"] == (uuids[6], 160)
        rig.close()
    fake.close()

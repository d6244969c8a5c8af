"""MIG devices as devices of their own (backend nvidia_mig), through the real pynvml over the NVML double."""

from __future__ import annotations

import pynvml
import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles.nvml import GIB, FakeGpu, FakeMig, FakeNvml
from tests.helpers import Rig, select, value
from warptd.backends.registry import load_backends

H100_MIG = "NVIDIA H100 80GB HBM3 MIG"
SLICES = [
    FakeMig("MIG-aaaaaaaa-1111-5222-8333-444444444444", gpu_instance=1, name=f"{H100_MIG} 3g.40gb",
            memory_total=40 * GIB, memory_used=3 * GIB),
    FakeMig("MIG-bbbbbbbb-1111-5222-8333-444444444444", gpu_instance=2, name=f"{H100_MIG} 1g.10gb",
            memory_total=10 * GIB, memory_used=1 * GIB),
]  # fmt: skip
SM = pynvml.NVML_GPM_METRIC_SM_UTIL
TENSOR = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL


def mig(index: int) -> dict[str, str]:
    return {"backend": "nvidia_mig", "device": str(index)}


@pytest.fixture
def rediscover_now(monkeypatch):
    from warptd.sampling import sampler

    monkeypatch.setattr(sampler, "REDISCOVER_EVERY_S", 0.0)


@pytest.fixture
def fake():
    """GPU 0 with MIG on (two slices), GPU 1 with MIG off."""
    fake = FakeNvml(gpus=2)
    fake.gpus[0].mig_devices = SLICES
    with fake.installed():
        yield fake
    fake.close()


@pytest.fixture
def rig(make_rig, fake):
    return make_rig("nvidia", "nvidia_mig")


def test_mig_devices_of_the_mig_gpu_only_with_their_parent_identity(rig, fake):
    samples = rig.tick()
    parent = fake.gpus[0]
    infos = {s.labels["uuid"]: s.labels for s in select(samples, "warptd_device_mig_info")}
    assert set(infos) == {s.uuid for s in SLICES}  # none of GPU 1, whose MIG is off
    first = infos[SLICES[0].uuid]
    assert (first["parent_uuid"], first["gpu_instance"], first["compute_instance"]) == (parent.uuid, "1", "0")
    assert first["profile"] == "3g.40gb" and infos[SLICES[1].uuid]["profile"] == "1g.10gb"
    info = select(samples, "warptd_device_info", uuid=SLICES[0].uuid)[0].labels
    assert info["model"] == "NVIDIA H100 80GB HBM3 MIG 3g.40gb" and info["source"] == "nvml"
    assert info["backend"] == "nvidia_mig"
    # each slice's own memory, through its MIG handle
    assert value(samples, "warptd_device_memory_total_bytes", **mig(0)) == 40 * GIB
    assert value(samples, "warptd_device_memory_used_bytes", **mig(1)) == 1 * GIB
    # no power sensor per slice: absent, never 0 or the parent's
    for name in (
        "warptd_device_power_watts",
        "warptd_device_energy_joules_total",
        "warptd_device_utilization_ratio",
    ):
        assert not select(samples, name, backend="nvidia_mig"), name
    assert value(samples, "warptd_device_power_watts", backend="nvidia", device="0") == 120
    # the parent GPU keeps its own series and lists the slices as aliases, as before
    assert rig.snapshot.get("nvidia").devices_info[0].aliases == [s.uuid for s in SLICES]


def test_gpm_activity_per_gpu_instance_over_the_last_period(rig, fake):
    gpu = fake.gpus[0]
    rig.tick()
    gpu.advance_gpm(activity={SM: 0.3, TENSOR: 0.1}, mig=0)
    gpu.advance_gpm(activity={SM: 0.7}, mig=1)
    gpu.advance_gpm(activity={SM: 0.5})  # the whole GPU, read by the nvidia backend
    samples = rig.tick()
    assert value(samples, "warptd_device_sm_active_ratio", **mig(0)) == pytest.approx(0.3)
    assert value(samples, "warptd_device_pipe_active_ratio", pipe="tensor", **mig(0)) == pytest.approx(0.1)
    assert value(samples, "warptd_device_sm_active_ratio", **mig(1)) == pytest.approx(0.7)
    assert value(samples, "warptd_device_sm_active_ratio", backend="nvidia", device="0") == pytest.approx(0.5)
    gpu.advance_gpm(activity={SM: 0.05}, mig=0)
    gpu.advance_gpm(mig=1)
    samples = rig.tick()
    assert value(samples, "warptd_device_sm_active_ratio", **mig(0)) == pytest.approx(0.05)
    assert value(samples, "warptd_device_sm_active_ratio", **mig(1)) == 0
    assert fake.calls("nvmlGpmMigSampleGet") == 3 * len(SLICES)  # one per GPU instance per tick


def test_compute_instances_of_one_gpu_instance_share_one_sample(make_rig, fake):
    gpu = fake.gpus[0]
    shared = [
        FakeMig("MIG-cccccccc-1111-5222-8333-444444444444", gpu_instance=3, compute_instance=0),
        FakeMig("MIG-dddddddd-1111-5222-8333-444444444444", gpu_instance=3, compute_instance=1),
    ]
    gpu.mig_devices = shared
    rig = make_rig("nvidia_mig")
    rig.tick()
    gpu.advance_gpm(activity={SM: 0.4}, mig=0)  # the GPU instance's counters (the first slot holding it)
    samples = rig.tick()
    assert fake.calls("nvmlGpmMigSampleGet") == 2  # one per tick for the one GPU instance
    assert value(samples, "warptd_device_sm_active_ratio", **mig(0)) == pytest.approx(0.4)
    assert value(samples, "warptd_device_sm_active_ratio", **mig(1)) == pytest.approx(0.4)
    assert value(samples, "warptd_device_mig_info", compute_instance="1", **mig(1)) == 1


def test_instances_appearing_and_disappearing_at_rediscovery(rig, fake, rediscover_now):
    gpu = fake.gpus[0]
    live_before = fake.gpm_samples_live
    rig.tick()
    rig.tick()
    third = FakeMig(
        "MIG-eeeeeeee-1111-5222-8333-444444444444", gpu_instance=5, name="NVIDIA H100 80GB HBM3 MIG 2g.20gb"
    )
    gpu.mig_devices = [*SLICES, third]  # mig-manager creates an instance
    samples = rig.tick()
    assert {s.labels["uuid"] for s in select(samples, "warptd_device_mig_info")} == {
        *(s.uuid for s in SLICES),
        third.uuid,
    }
    assert value(samples, "warptd_device_mig_info", uuid=third.uuid, profile="2g.20gb") == 1
    gpu.mig_devices = [third]  # and destroys the first two
    samples = rig.tick()
    assert [s.labels["uuid"] for s in select(samples, "warptd_device_mig_info")] == [third.uuid]
    assert value(samples, "warptd_device_memory_total_bytes", uuid=third.uuid, **mig(0)) == 10 * GIB
    assert fake.gpm_samples_live - live_before == 2 * (2 + 1)  # the two GPUs' and the one instance's
    gpu.mig_devices = []  # MIG devices all gone: no series left, the backend stays up
    samples = rig.tick()
    assert not select(samples, "warptd_device_mig_info")
    assert value(samples, "warptd_backend_up", backend="nvidia_mig") == 1


def test_without_mig_on_anywhere_the_backend_does_not_load(settings, fake_nvml):
    settings.backends = ["nvidia", "nvidia_mig"]
    loaded = load_backends(settings)
    try:
        assert [b.name for b in loaded.accelerators] == ["nvidia"]
        assert "nvidia_mig" in loaded.unavailable
    finally:
        loaded.shutdown()


def test_mig_on_a_driver_without_gpm_lists_the_devices_without_activity(settings):
    fake = FakeNvml(gpus=1, driver="r470")
    fake.gpus[0].mig_devices = SLICES
    settings.backends = ["nvidia_mig"]
    with fake.installed():
        rig = Rig(settings)
        try:
            for _ in range(3):
                fake.gpus[0].advance_gpm(activity={SM: 0.3}, mig=0)
                samples = rig.tick()
            assert len(select(samples, "warptd_device_mig_info")) == 2
            assert not select(samples, "warptd_device_sm_active_ratio")
            assert value(samples, "warptd_device_memory_total_bytes", **mig(0)) == 40 * GIB
        finally:
            rig.close()
    fake.close()


def test_samples_freed_at_shutdown(settings):
    fake = FakeNvml([FakeGpu(index=0)])
    fake.gpus[0].mig_devices = SLICES
    settings.backends = ["nvidia", "nvidia_mig"]
    with fake.installed():
        live_before = fake.gpm_samples_live
        rig = Rig(settings)
        for _ in range(3):
            rig.tick()
        assert fake.gpm_samples_live - live_before == 2 * 3  # the GPU and its two instances
        rig.close()
        assert fake.gpm_samples_live == live_before
    fake.close()


def test_promtool_clean(rig, fake):
    for _ in range(3):
        fake.gpus[0].advance_gpm(activity={SM: 0.2}, mig=0)
        rig.tick()
    body = rig.exposition.render(None, None)[0]
    assert b"warptd_device_mig_info" in body
    assert_promtool_clean(body)

"""MIG devices as devices of their own (backend nvidia_mig), through the real pynvml over the NVML double."""

from __future__ import annotations

import pynvml
import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles.nvml import GIB, FakeGpu, FakeMig, FakeNvml
from tests.helpers import Rig, select, value
from warptd.registry import load_backends

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


pytestmark = pytest.mark.rig("nvidia", "nvidia_mig", doubles=["fake"])


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


@pytest.mark.slow
def test_gpm_activity_per_gpu_instance_over_the_last_period(rig, fake):
    gpu = fake.gpus[0]
    rig.tick()
    gpu.advance_gpm(activity={SM: 0.3, TENSOR: 0.1}, mig=0)
    gpu.advance_gpm(activity={SM: 0.7}, mig=1)
    gpu.advance_gpm(activity={SM: 0.5})  # the whole GPU, read by the nvidia backend
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_sm_active_ratio", **mig(0)) == pytest.approx(0.3)
    assert value(samples, "warptd_device_pipe_active_ratio", pipe="tensor", **mig(0)) == pytest.approx(0.1)
    assert value(samples, "warptd_device_sm_active_ratio", **mig(1)) == pytest.approx(0.7)
    assert value(samples, "warptd_device_sm_active_ratio", backend="nvidia", device="0") == pytest.approx(0.5)
    gpu.advance_gpm(activity={SM: 0.05}, mig=0)
    gpu.advance_gpm(mig=1)
    samples = rig.tick_gpm()
    assert value(samples, "warptd_device_sm_active_ratio", **mig(0)) == pytest.approx(0.05)
    assert value(samples, "warptd_device_sm_active_ratio", **mig(1)) == 0
    assert fake.calls("nvmlGpmMigSampleGet") == 3 * len(SLICES)  # one per GPU instance per tick
    rig.settings.interval = 1.0  # a GPM gap of 0.95 s from here (read live): the next tick is sooner
    rig.tick()  # no GPU instance is sampled, the values stand
    assert fake.calls("nvmlGpmMigSampleGet") == 3 * len(SLICES) and gpu.gpm_close_pairs == 0
    assert value(rig.scrape(), "warptd_device_sm_active_ratio", **mig(0)) == pytest.approx(0.05)


@pytest.mark.slow
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
    samples = rig.tick_gpm()
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


@pytest.mark.slow
def test_promtool_clean(rig, fake):
    for _ in range(3):
        fake.gpus[0].advance_gpm(activity={SM: 0.2}, mig=0)
        rig.tick()
    body = rig.exposition.render(None, None)[0]
    assert b"warptd_device_mig_info" in body
    assert_promtool_clean(body)


@pytest.mark.slow
def test_pod_energy_of_a_mig_gpu_split_by_slice_activity(settings, tmp_path):
    """Pods on MIG slices: their own allocation series on the MIG device, and the GPU's energy split by
    each slice's SM activity times its compute slices (3g: 3, 1g: 1), by slice size when all idle."""
    from tests.kubelet import FakeKubelet, mig_device
    from warptd.k8s.attribution import PodAttribution
    from warptd.k8s.collector import KubernetesCollector
    from warptd.k8s.energy import PodEnergy
    from warptd.k8s.podresources import PodResourcesClient

    fake = FakeNvml(gpus=1)
    gpu = fake.gpus[0]
    gpu.mig_devices = SLICES
    kubelet = FakeKubelet(tmp_path / "kubelet.sock").start()
    kubelet.pods = {
        ("ml", "big", "main"): {"nvidia.com/mig-3g.40gb": [mig_device(SLICES[0].uuid.removeprefix("MIG-"))]},
        ("ml", "small", "main"): {
            "nvidia.com/mig-1g.10gb": [mig_device(SLICES[1].uuid.removeprefix("MIG-"))]
        },
    }
    settings.backends = ["nvidia", "nvidia_mig"]
    with fake.installed():
        rig = Rig(settings)
        pods = PodAttribution(PodResourcesClient(kubelet.socket, timeout=1.0), interval=10)
        energy = PodEnergy(pods, rig.snapshot)
        rig.sampler.listeners.append(energy.on_sample)
        rig.exposition.registry.register(KubernetesCollector(pods, energy, rig.snapshot))
        try:
            pods.poll_once()
            rig.tick("nvidia_mig", "nvidia")
            samples = rig.tick("nvidia_mig", "nvidia")
            allocated = {(s.labels["backend"], s.labels["uuid"], s.labels["pod"]) for s in
                         select(samples, "warptd_device_allocation_info")}  # fmt: skip
            assert {
                ("nvidia_mig", SLICES[0].uuid, "big"),
                ("nvidia_mig", SLICES[1].uuid, "small"),
            } <= allocated
            timeline = [  # (SM activity of the 3g slice, of the 1g slice, joules the GPU draws)
                (0.5, 0.5, 100.0),  # weights 1.5 : 0.5
                (0.1, 1.0, 130.0),  # weights 0.3 : 1.0
                (0.0, 0.0, 40.0),  # idle: by slice size, 3 : 1
            ]
            expected = {"big": 0.0, "small": 0.0}
            for big, small, joules in timeline:
                gpu.advance_gpm(activity={SM: big}, mig=0)
                gpu.advance_gpm(activity={SM: small}, mig=1)
                gpu.energy_mj += int(joules * 1000)
                samples = rig.tick_gpm("nvidia_mig", "nvidia")
                weights = (3 * big, 1 * small) if big + small else (3.0, 1.0)
                expected["big"] += joules * weights[0] / sum(weights)
                expected["small"] += joules * weights[1] / sum(weights)
                got = {s.labels["pod"]: s.value for s in select(samples, "warptd_pod_energy_joules_total")}
                assert got == pytest.approx(expected, rel=0.01)
            split = {
                s.labels["method"]: s.value for s in select(samples, "warptd_pod_energy_split_joules_total")
            }
            assert split == pytest.approx({"mig_sm_activity": 230.0, "mig_slice_size": 40.0}, rel=0.01)
        finally:
            pods.stop()
            rig.close()
            kubelet.stop()
    fake.close()


def test_nvml_reset_under_the_daemon_is_reopened_once_and_the_slices_come_back(rig, fake, rediscover_now):
    rig.tick()
    pynvml.nvmlShutdown()  # other code in the process drops NVML's last reference
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **mig(0)) == 0  # unreadable, not frozen
    assert not select(samples, "warptd_device_memory_total_bytes", **mig(0))
    for _ in range(2):
        samples = rig.tick()
    assert value(samples, "warptd_device_up", **mig(0)) == 1
    assert value(samples, "warptd_device_memory_total_bytes", **mig(0)) == 40 * GIB
    assert len(select(samples, "warptd_device_mig_info")) == 2
    assert fake.calls("nvmlInitWithFlags") == 2  # one reopen, shared by nvidia and nvidia_mig


def test_gpus_keep_their_identity_while_nvml_is_reset_under_the_daemon(rig, fake, rediscover_now):
    """With MIG on, the GPUs are listed again at every rediscovery; when that listing meets an NVML
    shut down under the daemon, the GPUs keep the UUIDs known from before rather than losing them."""
    samples = rig.tick()
    uuids = {
        s.labels["device"]: s.labels["uuid"] for s in select(samples, "warptd_device_info", backend="nvidia")
    }
    assert all(uuids.values())
    pynvml.nvmlShutdown()
    for _ in range(3):
        samples = rig.tick()
        infos = select(samples, "warptd_device_info", backend="nvidia")
        assert {s.labels["device"]: s.labels["uuid"] for s in infos} == uuids

"""Pod attribution against a real gRPC kubelet double on a unix socket, per-pod energy, the daemon wiring."""

from __future__ import annotations

import pytest

from tests.doubles.nvml import FakeNvml
from tests.helpers import Rig, select
from tests.kubelet import FakeKubelet, legacy_mig_device, mig_device, replica
from warptd.config import load_settings
from warptd.k8s.attribution import PodAttribution, from_settings
from warptd.k8s.collector import KubernetesCollector
from warptd.k8s.energy import PodEnergy
from warptd.k8s.podresources import PodResourcesClient

GPU = "nvidia.com/gpu"


@pytest.fixture
def kubelet(tmp_path):
    fake = FakeKubelet(tmp_path / "kubelet.sock").start()
    yield fake
    fake.stop()


class PodRig:
    """The NVML double's GPUs sampled by hand, with attribution polled by hand (no threads)."""

    def __init__(self, settings, kubelet: FakeKubelet) -> None:
        settings.backends = ["nvidia"]
        self.rig = Rig(settings)
        self.pods = PodAttribution(PodResourcesClient(kubelet.socket, timeout=1.0), interval=10)
        self.energy = PodEnergy(self.pods, self.rig.snapshot)
        self.rig.sampler.listeners.append(self.energy.on_sample)
        self.rig.exposition.registry.register(KubernetesCollector(self.pods, self.energy, self.rig.snapshot))
        self.pods.on_change = self.rig.snapshot.touch

    def poll_and_tick(self):
        self.pods.poll_once()
        return self.rig.tick()

    def close(self) -> None:
        self.pods.stop()
        self.rig.close()


def allocations(samples):
    return sorted(
        (s.labels["device"], s.labels["namespace"], s.labels["pod"], s.labels["container"])
        for s in select(samples, "warptd_device_allocation_info")
    )


def test_time_sliced_and_mig_devices_match_their_gpu(settings, kubelet):
    """Replicas ``GPU-<uuid>::<n>`` and legacy ``MIG-GPU-<uuid>/<gi>/<ci>`` IDs count as their GPU; a
    ``MIG-<uuid>`` matches the GPU whose MIG devices NVML lists it among (``GPUInfo.aliases``). Parts of
    one GPU held by several containers share the GPU: allocation_info for each, its energy split evenly."""
    mig_uuid = "7b3c2a10-5d4e-5f6a-8b9c-0d1e2f3a4b5c"
    fake = FakeNvml(gpus=3)
    fake.gpus[1].mig_uuids = [mig_device(mig_uuid), mig_device("0e1f2a3b-4c5d-5e6f-8a9b-0c1d2e3f4a5b")]
    gpu0, gpu1, gpu2 = (g.uuid for g in fake.gpus)
    kubelet.pods = {
        ("ml", "a", "main"): {GPU: [replica(gpu0, 0)]},
        ("ml", "b", "main"): {GPU: [replica(gpu0, 3), replica(gpu0, 4)]},  # two replicas, one owner
        ("ml", "c", "main"): {"nvidia.com/mig-1g.10gb": [mig_device(mig_uuid)]},
        ("ml", "d", "main"): {"nvidia.com/mig-3g.40gb": [legacy_mig_device(gpu2, 1, 0)]},
        ("ml", "e", "main"): {"nvidia.com/mig-3g.40gb": [legacy_mig_device(gpu2, 2, 0)]},
    }
    with fake.installed():
        rig = PodRig(settings, kubelet)
        try:
            samples = rig.poll_and_tick()
            assert allocations(samples) == [
                ("0", "ml", "a", "main"),
                ("0", "ml", "b", "main"),
                ("1", "ml", "c", "main"),
                ("2", "ml", "d", "main"),
                ("2", "ml", "e", "main"),
            ]
            mig = select(samples, "warptd_device_allocation_info", pod="c")
            assert [s.labels["uuid"] for s in mig] == [gpu1]
            for gpu, joules in zip(fake.gpus, (100.0, 30.0, 60.0), strict=True):
                gpu.energy_mj += int(joules * 1000)
            samples = rig.rig.tick()
        finally:
            rig.close()
    energy = {s.labels["pod"]: s.value for s in select(samples, "warptd_pod_energy_joules_total")}
    assert energy == pytest.approx({"a": 50.0, "b": 50.0, "c": 30.0, "d": 30.0, "e": 30.0}, rel=0.01)


def test_no_socket_means_attribution_off_with_one_log_line(tmp_path, capsys):
    settings = load_settings(listen="127.0.0.1:0", kubelet_socket=tmp_path / "absent.sock", backends=["cpu"])
    assert from_settings(settings) is None
    assert capsys.readouterr().out.count("pod_attribution_off") == 1
    settings.kubelet_socket.write_text("")
    settings.pod_attribution = False
    assert from_settings(settings) is None


def test_device_ids_normalise_to_the_device_they_name():
    from warptd.k8s.attribution import _normalise, device_keys
    from warptd.models import GPUInfo

    uuid = "GPU-8f3c0a2e-1b2c-3d4e-5f60-718293a4b5c6"
    assert _normalise(f"{uuid}::3") == _normalise(f"{uuid.upper()}::12") == uuid.lower()
    assert _normalise(f"MIG-{uuid}/7/0") == uuid.lower()
    assert _normalise("0000:C1:00.0::1") == "0000:c1:00.0"
    mig = "MIG-4a1d2e3f-0000-5111-8222-333344445555"
    assert _normalise(mig) == mig.lower()  # does not name its GPU: matched through aliases
    assert _normalise("weird::name") == "weird::name"  # only a numeric suffix is a replica
    info = GPUInfo(index=0, model="A100", uuid=uuid, aliases=["MIG-4A1D", "MIG-5b2e"])
    assert device_keys(info) == {uuid.lower(), "mig-4a1d", "mig-5b2e"}
    assert device_keys(GPUInfo(index=0, model="A100", uuid=uuid)) == {uuid.lower()}

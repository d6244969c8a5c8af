"""Pod attribution against a real gRPC kubelet double on a unix socket, per-pod energy, the daemon wiring."""

from __future__ import annotations

import pytest

from tests.helpers import Rig
from tests.kubelet import FakeKubelet
from warptd.k8s.attribution import PodAttribution
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


@pytest.fixture
def pod_rig(settings, kubelet, fake_nvml):
    rig = PodRig(settings, kubelet)
    yield rig
    rig.close()


def test_an_older_read_published_late_is_not_counted_twice(pod_rig, kubelet, fake_nvml):
    """A window's fast reads and the regular tick may publish one GPU out of order: the energy total
    it carries is monotonic, so a lower one is an older read and changes nothing."""
    from warptd.models import DeviceReading
    from warptd.sampling.snapshot import DeviceSample

    gpu0 = fake_nvml.gpus[0]
    kubelet.pods = {("ml", "a", "main"): {GPU: [gpu0.uuid]}}
    pod_rig.poll_and_tick()
    energy = PodEnergy(pod_rig.pods, pod_rig.rig.snapshot)
    for joules in (90.0, 110.0, 100.0, 120.0):  # 100 J is the read before 110 J, published after it
        sample = DeviceSample(DeviceReading(index=0, uuid=gpu0.uuid), energy_joules=joules)
        energy.on_sample("nvidia", [sample], None)
    assert energy.totals() == {("ml", "a", "main", "nvidia"): pytest.approx(30.0)}

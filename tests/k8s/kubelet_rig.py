"""Pod attribution over the kubelet double: the NVML double's GPUs sampled by hand, pods polled by hand,
and the allocation series they give."""

from __future__ import annotations

import pytest

from tests.helpers import Rig, select
from tests.kubelet import FakeKubelet
from warptd.k8s.attribution import PodAttribution
from warptd.k8s.collector import KubernetesCollector
from warptd.k8s.energy import PodEnergy
from warptd.k8s.podresources import PodResourcesClient

GPU = "nvidia.com/gpu"  # the NVIDIA device plugin's resource


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


def allocations(samples):
    return sorted(
        (s.labels["device"], s.labels["namespace"], s.labels["pod"], s.labels["container"])
        for s in select(samples, "warptd_device_allocation_info")
    )

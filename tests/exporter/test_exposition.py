"""Pod attribution against a real gRPC kubelet double on a unix socket, per-pod energy, the daemon wiring."""

from __future__ import annotations

import pytest

from tests.helpers import Rig, parse, select
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


def test_pod_labels_put_the_owners_on_device_series(settings, kubelet, fake_nvml):
    """--pod-labels: one series per device still; a shared device lists its owners joined by commas."""
    from warptd.exporter.exposition import Exposition

    gpu0, gpu1 = (g.uuid for g in fake_nvml.gpus)
    kubelet.pods = {
        ("ml", "train-0", "trainer"): {GPU: [gpu0]},
        ("ml", "infer-a", "server"): {GPU: [gpu1]},
        ("dev", "notebook", "jupyter"): {GPU: [gpu1]},
    }
    rig = PodRig(settings, kubelet)
    try:
        rig.pods.poll_once()
        rig.rig.tick()
        labelled = Exposition(rig.rig.snapshot, node="node-a", pod_labels=rig.pods.pod_labels)
        samples = parse(labelled.render(None, None)[0].decode())
        power = {s.labels["device"]: s.labels for s in select(samples, "warptd_device_power_watts")}
        assert (power["0"]["namespace"], power["0"]["pod"], power["0"]["container"]) == (
            "ml",
            "train-0",
            "trainer",
        )
        assert (power["1"]["namespace"], power["1"]["pod"], power["1"]["container"]) == (
            "dev,ml",
            "notebook,infer-a",
            "jupyter,server",
        )
        temps = select(samples, "warptd_device_temperature_celsius", device="0")
        assert temps and all(s.labels["pod"] == "train-0" for s in temps)
        assert {s.labels["sensor"] for s in temps} == {"gpu", "memory"}
        assert all("pod" not in s.labels for s in select(samples, "warptd_backend_up"))
        unlabelled = select(rig.rig.scrape(), "warptd_device_power_watts")  # off by default
        assert unlabelled and all("pod" not in s.labels for s in unlabelled)
    finally:
        rig.close()

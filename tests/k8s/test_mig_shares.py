"""A MIG GPU's pod energy split by its slices' activity, through the real pynvml over the NVML double."""

from __future__ import annotations

import pynvml
import pytest

from tests.backends.nvidia.test_backend import SLICES
from tests.doubles.nvml import FakeNvml
from tests.helpers import Rig, select

SM = pynvml.NVML_GPM_METRIC_SM_UTIL


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

"""Pod attribution against a real gRPC kubelet double on a unix socket, per-pod energy, the daemon wiring."""

from __future__ import annotations

import pytest

from tests.doubles.nvml import FakeNvml
from tests.helpers import select, value
from tests.k8s import kubelet_rig
from tests.k8s.kubelet_rig import GPU, PodRig, allocations
from tests.kubelet import legacy_mig_device, mig_device, replica
from warptd.k8s.energy import PodEnergy, split
from warptd.k8s.podresources import Owner

kubelet = kubelet_rig.kubelet  # the kubelet double, serving, a fixture
pod_rig = kubelet_rig.pod_rig  # a PodRig, closed after the test, a fixture

ENERGY = "warptd_pod_energy_joules_total"
SPLIT = "warptd_pod_energy_split_joules_total"


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


def test_split_fractions_sum_to_one_and_say_how():
    a, b, c = Owner("ml", "a", "main"), Owner("ml", "b", "main"), Owner("ml", "c", "main")
    assert split((a, b), {a: 3.0, b: 1.0}) == ({a: 0.75, b: 0.25}, "sm_share")
    assert split((a, b), {a: 2.0}) == ({a: 1.0, b: 0.0}, "sm_share")
    assert split((a, b), None) == ({a: 0.5, b: 0.5}, "even")
    assert split((a, b), {}) == ({a: 0.5, b: 0.5}, "even")  # nobody used the SMs
    assert split((a, b), {a: 1.0, c: 1.0}) == ({a: 0.5, b: 0.5}, "even")  # a pod not holding the GPU
    assert split((a, b, c), {a: 1.0, b: 1.0, c: 1.0})[1] == "sm_share"


def test_sm_use_outside_any_pod_is_an_unattributed_share():
    """``None`` in the SM use is processes outside any pod: a share of no container, even of a device
    one container holds; SM use by a pod not holding the device still means even."""
    a, b, c = Owner("ml", "a", "main"), Owner("ml", "b", "main"), Owner("ml", "c", "main")
    assert split((a, b), {a: 2.0, b: 1.0, None: 1.0}) == ({a: 0.5, b: 0.25, None: 0.25}, "sm_share")
    assert split((a,), {a: 0.3, None: 0.7}) == ({a: 0.3, None: 0.7}, "sm_share")
    assert split((a,), {None: 1.0}) == ({a: 0.0, None: 1.0}, "sm_share")
    assert split((a,), {a: 1.0}) == ({a: 1.0}, "sm_share")
    assert split((a,), None) == ({a: 1.0}, "even")
    assert split((a, b), {a: 1.0, None: 1.0, c: 1.0}) == ({a: 0.5, b: 0.5}, "even")


def test_without_the_process_monitor_the_split_is_even(settings, kubelet, fake_nvml):
    rig = PodRig(settings, kubelet)
    try:
        gpu0 = fake_nvml.gpus[0]
        kubelet.pods = {
            (ns, pod, "main"): {GPU: [replica(gpu0.uuid, n)]}
            for n, (ns, pod) in enumerate([("ml", "a"), ("ml", "b")])
        }
        rig.poll_and_tick()
        gpu0.energy_mj += 10_000
        samples = rig.rig.tick()
        assert value(samples, ENERGY, pod="a") == value(samples, ENERGY, pod="b") == pytest.approx(5.0)
        assert value(samples, SPLIT, method="even", device="0") == pytest.approx(10.0)
    finally:
        rig.close()

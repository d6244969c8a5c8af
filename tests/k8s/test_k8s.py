"""Pod attribution against a real gRPC kubelet double on a unix socket, per-pod energy, the daemon wiring."""

from __future__ import annotations

import time

import pytest

from tests.helpers import select, value
from tests.k8s import kubelet_rig
from tests.k8s.kubelet_rig import GPU, allocations

kubelet = kubelet_rig.kubelet  # the kubelet double, serving, a fixture
pod_rig = kubelet_rig.pod_rig  # a PodRig, closed after the test, a fixture


def test_devices_map_to_their_containers_by_uuid(pod_rig, kubelet, fake_nvml):
    gpu0, gpu1 = (g.uuid for g in fake_nvml.gpus)
    kubelet.pods = {
        ("ml", "train-0", "trainer"): {GPU: [gpu0]},
        ("ml", "infer-a", "server"): {GPU: [gpu1.lower()]},  # plugins' spelling may differ in case
        ("ml", "infer-b", "server"): {GPU: [gpu1]},  # time-sliced: one GPU, two pods
        ("web", "nginx", "nginx"): {"cpu": ["0"]},  # not a device of ours
    }
    samples = pod_rig.poll_and_tick()
    assert allocations(samples) == [
        ("0", "ml", "train-0", "trainer"),
        ("1", "ml", "infer-a", "server"),
        ("1", "ml", "infer-b", "server"),
    ]
    info = select(samples, "warptd_device_allocation_info", pod="train-0")[0]
    assert info.value == 1 and info.labels["backend"] == "nvidia" and info.labels["uuid"] == gpu0
    assert value(samples, "warptd_podresources_up") == 1
    assert value(samples, "warptd_podresources_last_success_timestamp_seconds") > time.time() - 60


def test_a_pod_going_away_drops_its_allocation(pod_rig, kubelet, fake_nvml):
    kubelet.pods = {("ml", "train-0", "trainer"): {GPU: [fake_nvml.gpus[0].uuid]}}
    assert allocations(pod_rig.poll_and_tick()) == [("0", "ml", "train-0", "trainer")]
    kubelet.pods = {}
    assert allocations(pod_rig.poll_and_tick()) == []


def test_socket_gone_keeps_the_last_mapping_and_counts_then_recovers(pod_rig, kubelet, fake_nvml):
    kubelet.pods = {("ml", "train-0", "trainer"): {GPU: [fake_nvml.gpus[0].uuid]}}
    pod_rig.poll_and_tick()
    kubelet.stop()  # the kubelet restarts: its socket is removed
    samples = pod_rig.poll_and_tick()
    assert allocations(samples) == [("0", "ml", "train-0", "trainer")]  # the last good mapping
    assert value(samples, "warptd_podresources_up") == 0
    assert value(samples, "warptd_podresources_errors_total", kind="unavailable") == 1
    kubelet.pods = {("ml", "train-1", "trainer"): {GPU: [fake_nvml.gpus[1].uuid]}}
    kubelet.start()  # back, on the same path
    samples = pod_rig.poll_and_tick()
    assert value(samples, "warptd_podresources_up") == 1
    assert allocations(samples) == [("1", "ml", "train-1", "trainer")]
    assert value(samples, "warptd_podresources_errors_total", kind="unavailable") == 1


@pytest.mark.slow
def test_a_refusing_socket_and_a_slow_kubelet_are_counted_by_kind(pod_rig, kubelet, tmp_path):
    kubelet.delay = 1.5  # over the client's 1 s timeout
    pod_rig.pods.poll_once()
    assert pod_rig.pods.state.errors == {"timeout": 1}
    kubelet.delay = 0
    kubelet.stop()
    kubelet.socket.write_text("")  # a stale file where the socket was: connection refused
    pod_rig.pods.poll_once()
    assert pod_rig.pods.state.errors == {"timeout": 1, "unavailable": 1}


def test_per_pod_energy_follows_a_scripted_allocation_timeline(pod_rig, kubelet, fake_nvml):
    """GPU 0 alone for pod A, then shared by A and B (split evenly), then B's alone; GPU 1 idle."""
    gpu0 = fake_nvml.gpus[0]
    timeline = [  # (owners of GPU 0, joules GPU 0 uses in the next interval)
        ([("ml", "a", "main")], 120.0),
        ([("ml", "a", "main"), ("ml", "b", "main")], 80.0),
        ([("ml", "b", "main")], 50.0),
    ]
    expected = {"a": 0.0, "b": 0.0}
    for owners, joules in timeline:
        kubelet.pods = {owner: {GPU: [gpu0.uuid]} for owner in owners}
        pod_rig.poll_and_tick()  # the allocation is known before the energy is used
        gpu0.energy_mj += int(joules * 1000)
        fake_nvml.gpus[1].energy_mj += 999_000  # an unallocated GPU's energy is nobody's
        for _, pod, _ in owners:
            expected[pod] += joules / len(owners)
        samples = pod_rig.rig.tick()
    for pod, joules in expected.items():
        got = value(samples, "warptd_pod_energy_joules_total", namespace="ml", pod=pod, container="main")
        assert got == pytest.approx(joules, rel=0.01)
    assert expected == {"a": 160.0, "b": 90.0}
    assert len(select(samples, "warptd_pod_energy_joules_total")) == 2

"""The SM-share split of pod energy: each container's share of a GPU's SM use, through the NVML
double (real pynvml structs), a fixture /proc tree with runtime bundles, and the gRPC kubelet double."""

from __future__ import annotations

import pytest

from tests.doubles.nvml import ProcessSample
from tests.e2e import test_processes as e2e_processes
from tests.e2e.test_processes import CID, GIB, HOST, SYSTEMD_V2, UID
from tests.helpers import value
from tests.k8s import kubelet_rig
from tests.k8s.kubelet_rig import GPU, PodRig
from tests.k8s.test_containers import containerd_bundle
from tests.k8s.test_energy import ENERGY, SPLIT
from tests.kubelet import replica
from tests.processes.test_collector import CGROUPFS_V1, CID2, UID2
from warptd.k8s.containers import ContainerOwners
from warptd.k8s.podresources import Owner
from warptd.k8s.shares import SmShares
from warptd.processes.cgroup import Attribution
from warptd.processes.nvml import ProcessMonitor

proc = e2e_processes.proc  # an empty procfs to add processes to, a fixture

kubelet = kubelet_rig.kubelet  # the kubelet double, serving, a fixture

UNATTRIBUTED = "warptd_pod_energy_unattributed_joules_total"


@pytest.fixture
def shared(settings, kubelet, fake_nvml, proc):
    """GPU 0 time-sliced between pods a (pid 1001) and b (pid 1002), energy split by SM use."""
    rig = PodRig(settings, kubelet)
    monitor = ProcessMonitor(proc.root)
    rig.energy.sm_use = SmShares(monitor, ContainerOwners((proc.root / "1" / "root",))).by_owner
    gpu0 = fake_nvml.gpus[0]
    kubelet.pods = {
        ("ml", "a", "main"): {GPU: [replica(gpu0.uuid, 0)]},
        ("ml", "b", "main"): {GPU: [replica(gpu0.uuid, 1)]},
    }
    proc.add(1001, SYSTEMD_V2)
    proc.add(1002, CGROUPFS_V1)
    gpu0.processes = [(1001, GIB), (1002, GIB)]
    rig.poll_and_tick()
    yield rig, monitor, gpu0
    monitor.stop()
    rig.close()


class Timeline:
    """Driver samples and energy for one interval at a time, then the poll and sample that read them."""

    def __init__(self, rig: PodRig, monitor: ProcessMonitor, gpu) -> None:
        self.rig, self.monitor, self.gpu = rig, monitor, gpu
        self.t_us = 1_000_000

    def interval(self, joules: float, sm: dict[int, list[int]]):
        samples = []
        for window in range(max((len(v) for v in sm.values()), default=0)):
            self.t_us += 166_667  # the driver samples every 1/6 s
            samples += [ProcessSample(self.t_us, pid, s[window]) for pid, s in sm.items() if window < len(s)]
        self.gpu.process_samples = samples
        self.gpu.energy_mj += int(joules * 1000)
        self.monitor.poll()
        return self.rig.rig.tick()


def test_even_split_where_the_gpu_cannot_tell(shared, proc, fake_nvml):
    rig, monitor, gpu0 = shared
    containerd_bundle(proc, Attribution(UID, CID), Owner("ml", "a", "main"))
    timeline = Timeline(rig, monitor, gpu0)
    # b's container has no bundle: its SM use cannot be named, so neither share can be trusted
    timeline.interval(100.0, {1001: [80], 1002: [20]})
    containerd_bundle(proc, Attribution(UID2, CID2), Owner("ml", "b", "main"))
    timeline.interval(40.0, {})  # nobody used the SMs (NOT_FOUND): even
    samples = timeline.interval(30.0, {1001: [60], 1002: [30]})  # named now: by SM use, a 20 J, b 10 J
    gpu0.unsupported = {"nvmlDeviceGetProcessesUtilizationInfo"}
    samples = timeline.interval(10.0, {1001: [100]})  # per-process utilization not supported: even
    a = value(samples, ENERGY, namespace="ml", pod="a", container="main")
    b = value(samples, ENERGY, namespace="ml", pod="b", container="main")
    assert a == pytest.approx(50 + 20 + 20 + 5, rel=0.01)
    assert b == pytest.approx(50 + 20 + 10 + 5, rel=0.01)
    gpu = {"backend": "nvidia", "device": "0", "uuid": gpu0.uuid}
    assert value(samples, SPLIT, method="even", **gpu) == pytest.approx(150.0)
    assert value(samples, SPLIT, method="sm_share", **gpu) == pytest.approx(30.0)
    assert a + b == pytest.approx(180.0, rel=1e-9)


def test_sm_use_of_processes_that_cannot_be_resolved_is_not_unattributed(shared, proc, kubelet):
    """Pod a's pid 1001 exits before the poll resolves it, then GPU 0 is a's alone and its pid 1004
    runs outside warptd's pid namespace (no /proc entry): SM use of a process whose cgroup cannot be
    read tells nothing, so the split falls back to even (a's whole part), none of it unattributed;
    a host process whose cgroup is read stays unattributed."""
    rig, monitor, gpu0 = shared
    containerd_bundle(proc, Attribution(UID, CID), Owner("ml", "a", "main"))
    containerd_bundle(proc, Attribution(UID2, CID2), Owner("ml", "b", "main"))
    timeline = Timeline(rig, monitor, gpu0)
    proc.remove(1001)  # exited since NVML listed it
    timeline.interval(100.0, {1001: [80], 1002: [20]})
    kubelet.pods = {("ml", "a", "main"): {GPU: [replica(gpu0.uuid, 0)]}}
    rig.pods.poll_once()
    gpu0.processes = [(1004, GIB)]
    timeline.interval(40.0, {1004: [90]})
    proc.add(1003, HOST)
    gpu0.processes = [(1003, GIB)]
    samples = timeline.interval(10.0, {1003: [50]})
    a = value(samples, ENERGY, namespace="ml", pod="a", container="main")
    b = value(samples, ENERGY, namespace="ml", pod="b", container="main")
    assert a == pytest.approx(50 + 40, rel=0.01)
    assert b == pytest.approx(50, rel=0.01)
    gpu = {"backend": "nvidia", "device": "0", "uuid": gpu0.uuid}
    assert value(samples, UNATTRIBUTED, **gpu) == pytest.approx(10.0, rel=0.01)  # the host's alone
    assert value(samples, SPLIT, method="even", **gpu) == pytest.approx(100.0)
    assert a + b + 10.0 == pytest.approx(150.0, rel=0.01)

"""Per-process utilization (--processes) and the SM-share split of pod energy, through the NVML double
(real pynvml structs), a fixture /proc tree with runtime bundles, and the gRPC kubelet double."""

from __future__ import annotations

import json

import pynvml
import pytest

from tests.doubles.nvml import FakeNvml, ProcessSample
from tests.e2e.test_k8s import GPU, PodRig
from tests.e2e.test_processes import CID, GIB, HOST, SYSTEMD_V2, UID, Proc
from tests.helpers import select, value
from tests.kubelet import FakeKubelet, replica
from tests.processes.test_cgroup import CGROUPFS_V1, CID2, UID2
from tests.processes.test_collector import scrape
from warptd.k8s.containers import ContainerOwners, read_owner
from warptd.k8s.energy import split
from warptd.k8s.podresources import Owner
from warptd.k8s.shares import SmShares
from warptd.processes.cgroup import NONE, UNRESOLVED, Attribution, CgroupResolver
from warptd.processes.nvml import ProcessMonitor

METRIC = "warptd_device_process_utilization_ratio"
ENERGY = "warptd_pod_energy_joules_total"
SPLIT = "warptd_pod_energy_split_joules_total"
UNATTRIBUTED = "warptd_pod_energy_unattributed_joules_total"
INFO = "nvmlDeviceGetProcessesUtilizationInfo"
OLD = "nvmlDeviceGetProcessUtilization"
CONTAINERD = "run/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json"
CRIO = "run/containers/storage/overlay-containers/{id}/userdata/config.json"


@pytest.fixture
def proc(tmp_path):
    return Proc(tmp_path / "proc")


@pytest.fixture
def kubelet(tmp_path):
    fake = FakeKubelet(tmp_path / "kubelet.sock").start()
    yield fake
    fake.stop()


@pytest.fixture
def monitor(fake_nvml, proc):
    monitor = ProcessMonitor(proc.root)
    yield monitor
    monitor.stop()


def bundle(proc: Proc, layout: str, container_id: str, annotations: dict[str, str]) -> None:
    """A runtime bundle's config.json under the host root (``<procfs>/1/root``)."""
    path = proc.root / "1" / "root" / layout.format(id=container_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"ociVersion": "1.1.0", "annotations": annotations}))


def containerd_bundle(proc: Proc, where: Attribution, owner: Owner) -> None:
    bundle(
        proc,
        CONTAINERD,
        where.container_id,
        {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.sandbox-namespace": owner.namespace,
            "io.kubernetes.cri.sandbox-name": owner.pod,
            "io.kubernetes.cri.container-name": owner.container,
            "io.kubernetes.cri.sandbox-uid": where.pod_uid,
        },
    )


# -- per-process series --------------------------------------------------------------------------


def test_each_poll_reads_only_the_samples_since_the_last(monitor, fake_nvml, proc):
    gpu0 = fake_nvml.gpus[0]
    gpu0.processes = [(1003, GIB)]
    proc.add(1003, HOST)
    gpu0.process_samples = [ProcessSample(1_000, 1003, 90), ProcessSample(2_000, 1003, 70)]
    monitor.poll()
    assert value(scrape(monitor), METRIC, engine="sm", pid="1003") == pytest.approx(0.8)
    monitor.poll()  # nothing newer: the driver says NOT_FOUND, the process used nothing
    assert value(scrape(monitor), METRIC, engine="sm", pid="1003") == 0
    gpu0.process_samples = [*gpu0.process_samples, ProcessSample(3_000, 1003, 10)]
    monitor.poll()
    assert value(scrape(monitor), METRIC, engine="sm", pid="1003") == pytest.approx(0.1)
    # one call per read, samples or none (into a buffer sized for the driver's); GPU 1 lists no
    # process: nobody to attribute a sample to, never read
    assert fake_nvml.calls(INFO) == 3
    assert fake_nvml.calls(OLD) == 0


def test_a_driver_without_the_info_function_falls_back_to_process_utilization(proc):
    fake = FakeNvml(gpus=2, driver="r470")
    fake.gpus[1].processes = [(1003, GIB)]
    fake.gpus[1].process_samples = [ProcessSample(5_000, 1003, 40, 8)]
    proc.add(1003, HOST)
    with fake.installed():
        monitor = ProcessMonitor(proc.root)
        try:
            monitor.poll()
            monitor.poll()
            samples = scrape(monitor)
            assert value(samples, METRIC, engine="sm", device="1", pid="1003") == 0  # no newer sample
            assert fake.calls(INFO) == 0
            # GPU 1 once a poll (GPU 0 lists no process: never read)
            assert fake.calls(OLD) == 2
            fake.gpus[1].process_samples = [ProcessSample(6_000, 1003, 40, 8)]
            monitor.poll()
            assert value(scrape(monitor), METRIC, engine="memory", device="1", pid="1003") == 0.08
        finally:
            monitor.stop()
    fake.close()


def test_a_struct_version_the_driver_refuses_falls_back_to_process_utilization(monitor, fake_nvml, proc):
    gpu0 = fake_nvml.gpus[0]
    gpu0.raises[INFO] = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    gpu0.processes, gpu0.process_samples = [(1003, GIB)], [ProcessSample(1_000, 1003, 25)]
    proc.add(1003, HOST)
    monitor.poll()
    monitor.poll()
    assert value(scrape(monitor), METRIC, engine="sm", pid="1003") == 0  # read at the first poll
    assert fake_nvml.calls(INFO) == 1  # refused once, then the older function for good
    assert fake_nvml.calls(OLD) == 2  # GPU 0 once a poll; GPU 1 lists no process: never read


def test_a_failing_read_keeps_the_processes_for_the_poll(monitor, fake_nvml, proc):
    gpu0 = fake_nvml.gpus[0]
    gpu0.raises[INFO] = pynvml.NVML_ERROR_UNKNOWN
    gpu0.processes, gpu0.process_samples = [(1003, GIB)], [ProcessSample(1_000, 1003, 25)]
    proc.add(1003, HOST)
    monitor.poll()
    samples = scrape(monitor)
    assert value(samples, "warptd_device_process_memory_bytes", pid="1003") == GIB
    assert not select(samples, METRIC, device="0")  # nothing to tell this poll
    del gpu0.raises[INFO]
    monitor.poll()  # asked again: a failure is not "unsupported"
    assert value(scrape(monitor), METRIC, engine="sm", pid="1003") == 0.25


def test_a_gpu_that_cannot_tell_is_asked_once_and_has_no_utilization_series(monitor, fake_nvml, proc):
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.unsupported = {INFO}
    gpu0.processes, gpu1.processes = [(1003, GIB)], [(1004, GIB)]
    gpu0.process_samples = gpu1.process_samples = [
        ProcessSample(1_000, 1003, 50),
        ProcessSample(1_000, 1004, 50),
    ]
    proc.add(1003, HOST)
    proc.add(1004, HOST)
    for _ in range(3):
        monitor.poll()
    samples = scrape(monitor)
    assert value(samples, "warptd_device_process_memory_bytes", pid="1003") == GIB  # memory still
    assert not select(samples, METRIC, device="0")
    assert value(samples, METRIC, engine="sm", device="1", pid="1004") == 0  # read once, then nothing new
    assert monitor.sm_usage(gpu0.uuid) is None
    assert fake_nvml.calls(INFO) == 1 + 3  # GPU 0 once; GPU 1 once a poll


def test_a_process_that_exits_drops_out(monitor, fake_nvml, proc):
    gpu0 = fake_nvml.gpus[0]
    proc.add(1001, SYSTEMD_V2)
    proc.add(1003, HOST)
    gpu0.processes = [(1001, GIB), (1003, GIB)]
    gpu0.process_samples = [ProcessSample(1_000, 1001, 50), ProcessSample(1_000, 1003, 20)]
    monitor.poll()
    assert {s.labels["pid"] for s in select(scrape(monitor), METRIC)} == {"1001", "1003"}
    gpu0.processes = [(1003, GIB)]
    gpu0.process_samples = [*gpu0.process_samples, ProcessSample(2_000, 1001, 50)]  # its last window
    proc.remove(1001)
    monitor.poll()
    assert {s.labels["pid"] for s in select(scrape(monitor), METRIC)} == {"1003"}


# -- container names from the runtime ------------------------------------------------------------
def test_container_owner_from_containerd_and_cri_o_bundles(proc):
    host = (proc.root / "1" / "root",)
    containerd_bundle(proc, Attribution(UID, CID), Owner("ml", "train-0", "trainer"))
    bundle(
        proc,
        CRIO,
        CID2,
        {
            "io.kubernetes.pod.namespace": "ml",
            "io.kubernetes.pod.name": "serve-1",
            "io.kubernetes.container.name": "server",
            "io.kubernetes.pod.uid": UID2,
        },
    )
    assert read_owner(host, Attribution(UID, CID)) == Owner("ml", "train-0", "trainer")
    assert read_owner(host, Attribution(UID2, CID2)) == Owner("ml", "serve-1", "server")
    assert read_owner(host, Attribution(UID2, CID)) is None  # the bundle names another pod
    assert read_owner(host, Attribution(UID, "c" * 64)) is None  # no bundle
    assert read_owner(host, Attribution(UID, "")) is None
    (host[0] / CONTAINERD.format(id=CID)).write_text("{not json")
    assert read_owner(host, Attribution(UID, CID)) is None
    owners = ContainerOwners(host, max_cached=2)
    for n in range(5):
        containerd_bundle(proc, Attribution(UID, f"{n:064x}"), Owner("ml", "a", f"c{n}"))
        assert owners.owner(Attribution(UID, f"{n:064x}")) == Owner("ml", "a", f"c{n}")
    assert owners.owner(Attribution(UID, "d" * 64)) is None
    assert len(owners) == 2  # bounded, and a miss is not kept


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


# -- SM-share pod energy -------------------------------------------------------------------------
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


def test_the_resolver_tells_outside_any_pod_from_unresolved(proc):
    """A readable cgroup naming no pod is outside any pod; a gone or unreadable process is unresolved."""
    proc.add(1003, HOST)
    proc.add(1001, SYSTEMD_V2)
    resolver = CgroupResolver(proc.root)
    assert resolver.resolve(1003) == NONE and resolver.resolve(1003).resolved
    assert resolver.resolve(1001) == Attribution(UID, CID)
    assert resolver.resolve(1009) == UNRESOLVED and not resolver.resolve(1009).resolved
    proc.add(1003, HOST, started=5000)  # the pid reused by a new process whose cgroup is unreadable
    (proc.root / "1003" / "cgroup").unlink()
    assert resolver.resolve(1003) == UNRESOLVED


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


def test_helm_mounts_the_runtime_bundles_read_only_with_processes_and_pods():
    from tests.e2e.test_deploy import by_kind, render

    bundles = "/run/containerd/io.containerd.runtime.v2.task/k8s.io"
    pod = by_kind(render({"processes.enabled": "true"}), "DaemonSet")["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts[bundles]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts[bundles]["name"]]["hostPath"]["path"] == bundles
    for off in ({}, {"processes.enabled": "true", "podAttribution.enabled": "false"}):
        pod = by_kind(render(off), "DaemonSet")["spec"]["template"]["spec"]
        assert bundles not in json.dumps(pod)

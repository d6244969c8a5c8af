"""Per-process utilization (--processes) and the SM-share split of pod energy, through the NVML double
(real pynvml structs), a fixture /proc tree with runtime bundles, and the gRPC kubelet double."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import assert_promtool_clean
from tests.doubles.nvml import ProcessSample
from tests.e2e import test_processes as e2e_processes
from tests.e2e.test_processes import CID, GIB, HOST, SYSTEMD_V2, UID
from tests.helpers import http, parse, select, value
from tests.k8s import kubelet_rig
from tests.k8s import test_shares as k8s_shares
from tests.k8s.kubelet_rig import GPU
from tests.k8s.test_containers import containerd_bundle
from tests.k8s.test_energy import ENERGY, SPLIT
from tests.k8s.test_shares import UNATTRIBUTED, Timeline
from tests.kubelet import replica
from tests.processes.test_collector import CGROUPFS_V1, CID2, UID2, scrape
from tests.processes.test_utilization import METRIC
from warptd.config import load_settings
from warptd.daemon import Daemon
from warptd.exporter.text import render_text
from warptd.k8s.podresources import Owner
from warptd.processes.cgroup import Attribution
from warptd.processes.collector import ProcessesCollector

shared = k8s_shares.shared  # GPU 0 time-sliced between pods a and b, split by SM use, a fixture

monitor = e2e_processes.monitor  # the NVML process monitor over the fixture procfs, a fixture
proc = e2e_processes.proc  # an empty procfs to add processes to, a fixture

kubelet = kubelet_rig.kubelet  # the kubelet double, serving, a fixture


@pytest.mark.slow
def test_processes_have_their_utilization_by_engine_with_pod_labels(monitor, fake_nvml, proc):
    proc.add(1001, SYSTEMD_V2)
    proc.add(1002, CGROUPFS_V1)
    proc.add(1003, HOST)
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.processes = [(1001, 2 * GIB), (1003, GIB)]
    gpu1.processes = [(1002, GIB), (1005, None)]  # memory unknown: no memory series, utilization still
    gpu0.process_samples = [
        ProcessSample(1_000, 1001, sm=60, mem=10, enc=0, dec=4),
        ProcessSample(2_000, 1001, sm=80, mem=20, enc=0, dec=6),
    ]
    gpu1.process_samples = [
        ProcessSample(1_500, 1002, sm=33, mem=5, enc=7, dec=0),
        ProcessSample(1_600, 1005, 12),
    ]
    monitor.poll()
    samples = scrape(monitor)
    dev0 = {"backend": "nvidia", "device": "0", "uuid": gpu0.uuid}
    a = {"pid": "1001", "pod_uid": UID, "container_id": CID, **dev0}
    assert value(samples, METRIC, engine="sm", **a) == pytest.approx(0.70)
    assert value(samples, METRIC, engine="memory", **a) == pytest.approx(0.15)
    assert value(samples, METRIC, engine="encoder", **a) == 0
    assert value(samples, METRIC, engine="decoder", **a) == pytest.approx(0.05)
    # a running process without a sample in the period used nothing: 0, not absent
    assert value(samples, METRIC, engine="sm", pid="1003", pod_uid="", container_id="", **dev0) == 0
    assert (
        value(samples, METRIC, engine="sm", pid="1002", pod_uid=UID2, container_id=CID2, device="1") == 0.33
    )
    assert value(samples, METRIC, engine="encoder", pid="1002", device="1") == 0.07
    assert value(samples, METRIC, engine="sm", pid="1005", device="1") == 0.12
    assert not select(samples, "warptd_device_process_memory_bytes", pid="1005")
    assert len(select(samples, METRIC)) == 4 * 4
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProcessesCollector(monitor))
    assert_promtool_clean(render_text(registry.collect()))


@pytest.mark.slow
def test_shared_gpu_energy_follows_the_containers_sm_shares(shared, proc):
    """75/25 SM for three intervals at 100 J, then 10/90 for three at 60 J: a 243 J, b 237 J."""
    rig, monitor, gpu0 = shared
    containerd_bundle(proc, Attribution(UID, CID), Owner("ml", "a", "main"))
    containerd_bundle(proc, Attribution(UID2, CID2), Owner("ml", "b", "main"))
    timeline = Timeline(rig, monitor, gpu0)
    for _ in range(3):  # six windows a second; shares vary window by window around 75/25
        samples = timeline.interval(100.0, {1001: [70, 80, 75, 75, 72, 78], 1002: [25, 25, 20, 30, 25, 25]})
    for _ in range(3):
        samples = timeline.interval(60.0, {1001: [10, 5, 15, 10, 10, 10], 1002: [90, 95, 85, 90, 90, 90]})
    a = value(samples, ENERGY, namespace="ml", pod="a", container="main")
    b = value(samples, ENERGY, namespace="ml", pod="b", container="main")
    assert a == pytest.approx(3 * 100 * 0.75 + 3 * 60 * 0.10, rel=0.01)
    assert b == pytest.approx(3 * 100 * 0.25 + 3 * 60 * 0.90, rel=0.01)
    assert a + b == pytest.approx(480.0, rel=1e-9)  # the pods' parts sum to the GPU's energy
    gpu = {"backend": "nvidia", "device": "0", "uuid": gpu0.uuid}
    assert value(samples, SPLIT, method="sm_share", **gpu) == pytest.approx(480.0)
    assert not select(samples, SPLIT, method="even")
    assert_promtool_clean(rig.rig.exposition.render(None, None)[0])


@pytest.mark.slow
def test_sm_use_outside_any_pod_is_unattributed_and_the_parts_sum_to_the_gpus_energy(shared, proc, kubelet):
    """A host process (pid 1003, no pod) uses GPU 0's SMs beside pods a and b: a 50 %, b 25 %, host
    25 % over 100 J, then b's pod goes and GPU 0 is a's alone, a 30 % and host 70 % over 50 J. The pods
    get only their shares; the host's is unattributed; the parts sum to the GPU's 150 J."""
    rig, monitor, gpu0 = shared
    containerd_bundle(proc, Attribution(UID, CID), Owner("ml", "a", "main"))
    containerd_bundle(proc, Attribution(UID2, CID2), Owner("ml", "b", "main"))
    proc.add(1003, HOST)
    gpu0.processes = [(1001, GIB), (1002, GIB), (1003, GIB)]
    timeline = Timeline(rig, monitor, gpu0)
    timeline.interval(100.0, {1001: [50, 50], 1002: [25, 25], 1003: [25, 25]})
    kubelet.pods = {("ml", "a", "main"): {GPU: [replica(gpu0.uuid, 0)]}}
    rig.pods.poll_once()
    gpu0.processes = [(1001, GIB), (1003, GIB)]
    samples = timeline.interval(50.0, {1001: [30, 30], 1003: [70, 70]})
    a = value(samples, ENERGY, namespace="ml", pod="a", container="main")
    b = value(samples, ENERGY, namespace="ml", pod="b", container="main")
    assert a == pytest.approx(100 * 0.50 + 50 * 0.30, rel=0.01)
    assert b == pytest.approx(100 * 0.25, rel=0.01)
    gpu = {"backend": "nvidia", "device": "0", "uuid": gpu0.uuid}
    unattributed = value(samples, UNATTRIBUTED, **gpu)
    assert unattributed == pytest.approx(100 * 0.25 + 50 * 0.70, rel=0.01)
    assert a + b + unattributed == pytest.approx(150.0, rel=0.01)  # the parts sum to the GPU's energy
    assert value(samples, SPLIT, method="sm_share", **gpu) == pytest.approx(150.0)  # one pod + host: split
    assert_promtool_clean(rig.rig.exposition.render(None, None)[0])


@pytest.mark.slow
def test_the_daemon_splits_by_sm_share_with_processes(tmp_path, fake_nvml, kubelet, proc):
    """End to end: --processes and a kubelet on a real daemon; its threads poll, sample and serve."""
    gpu0 = fake_nvml.gpus[0]
    kubelet.pods = {
        (ns, pod, "main"): {GPU: [replica(gpu0.uuid, n)]}
        for n, (ns, pod) in enumerate([("ml", "a"), ("ml", "b")])
    }
    proc.add(1001, SYSTEMD_V2)
    proc.add(1002, CGROUPFS_V1)
    containerd_bundle(proc, Attribution(UID, CID), Owner("ml", "a", "main"))
    containerd_bundle(proc, Attribution(UID2, CID2), Owner("ml", "b", "main"))
    gpu0.processes = [(1001, GIB), (1002, GIB)]
    settings = load_settings(
        listen="127.0.0.1:0", backends=["nvidia"], interval=0.1, kubelet_socket=kubelet.socket,
        pod_resources_interval=1, procfs=proc.root, processes=True, sysfs=tmp_path,
    )  # fmt: skip
    daemon = Daemon(settings)
    daemon.start()
    try:
        t_us, deadline, samples = 0, time.monotonic() + 5.0, []
        while time.monotonic() < deadline:  # bounded: ~5 s of 50 ms steps at most
            t_us += 50_000
            gpu0.process_samples = [ProcessSample(t_us, 1001, 90), ProcessSample(t_us, 1002, 10)]
            gpu0.energy_mj += 1000
            time.sleep(0.05)
            samples = parse(http(daemon.port, "GET", "/metrics")[2].decode())
            # A read that found no new driver sample (this loop starved under load) rightly shows 0:
            # wait for a scrape after a read that saw pid 1001's samples, not for the series alone.
            mine = select(samples, METRIC, engine="sm", pid="1001", pod_uid=UID, container_id=CID)
            if select(samples, SPLIT, method="sm_share") and mine and mine[0].value > 0:
                break
        assert value(samples, SPLIT, method="sm_share", device="0") > 0
        assert value(samples, METRIC, engine="sm", pid="1001", pod_uid=UID, container_id=CID) > 0
    finally:
        stopper = threading.Thread(target=daemon.stop)
        stopper.start()
        stopper.join(timeout=10)
        assert not stopper.is_alive()

"""Per-process device memory through the NVML double, attributed through a fixture /proc tree."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tests.e2e import test_processes as e2e_processes
from tests.e2e.test_processes import CID, GIB, HOST, SYSTEMD_V2, UID
from tests.helpers import parse, select, value
from warptd.exporter.text import render_text
from warptd.processes.collector import ProcessesCollector

monitor = e2e_processes.monitor  # the NVML process monitor over the fixture procfs, a fixture
proc = e2e_processes.proc  # an empty procfs to add processes to, a fixture


UID2 = "11111111-2222-3333-4444-555555555555"


CID2 = "b" * 64


CGROUPFS_V1 = "".join(
    f"{n}:{controller}:/kubepods/besteffort/pod{UID2}/{CID2}\n"
    for n, controller in ((12, "memory"), (11, "cpu,cpuacct"), (1, "name=systemd"))
)


METRIC = "warptd_device_process_memory_bytes"


def scrape(monitor) -> list:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProcessesCollector(monitor))
    return parse(render_text(registry.collect()).decode())


def test_processes_attributed_to_pods_and_containers(monitor, fake_nvml, proc):
    proc.add(1001, SYSTEMD_V2)
    proc.add(1002, CGROUPFS_V1)
    proc.add(1003, HOST)
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.processes = [(1001, 2 * GIB), (1003, GIB)]
    gpu1.processes = [(1002, 3 * GIB), (1004, GIB // 2), (1005, None)]  # 1004 gone; 1005 memory unknown
    monitor.poll()
    samples = scrape(monitor)
    dev0 = {"backend": "nvidia", "device": "0", "uuid": gpu0.uuid}
    dev1 = {"backend": "nvidia", "device": "1", "uuid": gpu1.uuid}
    assert value(samples, METRIC, pid="1001", pod_uid=UID, container_id=CID, **dev0) == 2 * GIB
    assert value(samples, METRIC, pid="1003", pod_uid="", container_id="", **dev0) == GIB
    assert value(samples, METRIC, pid="1002", pod_uid=UID2, container_id=CID2, **dev1) == 3 * GIB
    assert value(samples, METRIC, pid="1004", pod_uid="", container_id="", **dev1) == GIB // 2
    assert not select(samples, METRIC, pid="1005")  # usedGpuMemory not available: absent, not 0
    assert len(select(samples, METRIC)) == 4


def test_an_ended_process_loses_its_series(monitor, fake_nvml, proc):
    proc.add(1001, SYSTEMD_V2)
    proc.add(1003, HOST)
    fake_nvml.gpus[0].processes = [(1001, GIB), (1003, GIB)]
    monitor.poll()
    assert len(select(scrape(monitor), METRIC)) == 2
    fake_nvml.gpus[0].processes = [(1003, GIB)]
    proc.remove(1001)
    monitor.poll()
    assert [s.labels["pid"] for s in select(scrape(monitor), METRIC)] == ["1003"]
    assert len(monitor._resolver) == 1  # the cache holds the latest poll's pids only


def test_cgroup_cached_per_process_and_read_again_for_a_reused_pid(monitor, fake_nvml, proc):
    proc.add(1001, SYSTEMD_V2, started=100)
    fake_nvml.gpus[0].processes = [(1001, GIB)]
    monitor.poll()
    (proc.root / "1001" / "cgroup").write_text(CGROUPFS_V1)  # same process: the cached answer holds
    monitor.poll()
    assert value(scrape(monitor), METRIC, pid="1001", pod_uid=UID) == GIB
    proc.add(1001, CGROUPFS_V1, started=200)  # the pid now names another process
    monitor.poll()
    assert value(scrape(monitor), METRIC, pid="1001", pod_uid=UID2, container_id=CID2) == GIB


def test_unsupported_device_asked_once_and_lost_device_skipped(monitor, fake_nvml, proc):
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.unsupported = {"nvmlDeviceGetComputeRunningProcesses_v3"}
    gpu1.processes = [(1003, GIB)]
    proc.add(1003, HOST)
    monitor.poll()
    monitor.poll()
    # GPU 0 asked once; GPU 1 once a poll (into an array sized for its list)
    assert fake_nvml.calls("nvmlDeviceGetComputeRunningProcesses_v3") == 3
    assert [s.labels["device"] for s in select(scrape(monitor), METRIC)] == ["1"]
    gpu1.lost = True  # its processes drop out while it does not answer
    monitor.poll()
    assert not select(scrape(monitor), METRIC)

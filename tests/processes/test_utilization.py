"""Per-process utilization (--processes): each poll's read of the samples NVML took since the last,
through the NVML double (real pynvml structs) and a fixture /proc tree."""

from __future__ import annotations

import pynvml
import pytest

from tests.doubles.nvml import FakeNvml, ProcessSample
from tests.e2e import test_processes as e2e_processes
from tests.e2e.test_processes import GIB, HOST, SYSTEMD_V2
from tests.helpers import select, value
from tests.processes.test_collector import scrape
from tests.processes.test_nvml import INFO
from warptd.processes.nvml import ProcessMonitor

monitor = e2e_processes.monitor  # a fixture

proc = e2e_processes.proc  # a fixture

METRIC = "warptd_device_process_utilization_ratio"
OLD = "nvmlDeviceGetProcessUtilization"


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

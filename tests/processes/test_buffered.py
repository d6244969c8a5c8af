"""NVML calls made in one call into a kept array, through the real pynvml over the NVML double, and
through nvidia-ml-py's public wrappers where its private lookup is gone."""

from __future__ import annotations

from tests.backends.nvidia.test_calls import rename_private_lookup
from tests.doubles.nvml import ProcessSample
from tests.e2e import test_processes as e2e_processes
from tests.e2e.test_processes import GIB, HOST
from tests.processes.test_nvml import INFO
from warptd.processes.nvml import ProcessMonitor

proc = e2e_processes.proc  # a fixture

LIST = "nvmlDeviceGetComputeRunningProcesses_v3"


def _answers(fake_nvml, proc) -> tuple[list, dict[str, int]]:
    gpu0 = fake_nvml.gpus[0]
    proc.add(1001, HOST)
    proc.add(1002, HOST)
    gpu0.processes = [(1001, GIB), (1002, None)]
    gpu0.process_samples = [ProcessSample(1_000, 1001, 60, 10, 2, 300), ProcessSample(2_000, 1002, 20)]
    monitor = ProcessMonitor(proc.root)
    try:
        monitor.poll()
        found = [(p.pid, p.memory_bytes, p.utilization) for p in monitor.processes()]
        monitor.poll()  # nothing newer: NOT_FOUND
        return found, {name: fake_nvml.calls(name) for name in (INFO, LIST)}
    finally:
        monitor.stop()


def test_without_nvidia_ml_pys_private_lookup_the_public_wrappers_give_the_same(fake_nvml, proc, monkeypatch):
    fast, calls = _answers(fake_nvml, proc)
    assert fast == [
        (1001, GIB, {"sm": 0.6, "memory": 0.1, "encoder": 0.02, "decoder": 1.0}),  # a wild 300 % capped
        (1002, None, {"sm": 0.2, "memory": 0.0, "encoder": 0.0, "decoder": 0.0}),
    ]
    assert calls == {INFO: 2, LIST: 2 + 2}  # one call per read and list (GPU 1 lists none: unread)
    rename_private_lookup(monkeypatch)
    slow, after = _answers(fake_nvml, proc)
    assert slow == fast
    # the wrappers ask the count first: two calls where there is something, one where not
    assert {name: after[name] - calls[name] for name in calls} == {INFO: 2 + 1, LIST: 2 * 2 + 1 * 2}

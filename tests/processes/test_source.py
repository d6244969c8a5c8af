"""What the vendors' process monitors share (warptd/processes/source.py, ``ProcessPoller``): a device
answering "not supported" is asked once, and again once the SDK session was reopened; the lists
are read without calling the SDK; stopping gives the session back."""

from __future__ import annotations

from tests.e2e.test_processes import GIB
from tests.processes import test_amd as processes_amd
from warptd.processes.nvml import ProcessMonitor

proc = processes_amd.proc  # a fixture

NVML_LIST = "nvmlDeviceGetComputeRunningProcesses_v3"


def test_nvml_a_refused_device_is_asked_again_after_nvml_reopened(fake_nvml, proc):
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.unsupported = {NVML_LIST}
    gpu1.processes = [(1003, GIB)]
    monitor = ProcessMonitor(proc.root)
    try:
        monitor.poll()
        monitor.poll()
        assert fake_nvml.calls(NVML_LIST) == 1 + 2  # GPU 0 once; GPU 1 once a poll
        gpu0.unsupported = set()  # e.g. a driver update: the reopened NVML answers for it
        gpu0.processes = [(1003, 2 * GIB)]
        assert monitor._session.reopen()
        monitor.poll()
        assert {uuid: d.memory_by_pid for uuid, d in monitor.devices().items()} == {
            gpu0.uuid: {1003: 2 * GIB},
            gpu1.uuid: {1003: GIB},
        }
    finally:
        monitor.stop()
    assert fake_nvml.initialised == 0


def test_nvml_a_permission_refusal_is_warned_once_while_it_lasts_and_again_after_an_answer(fake_nvml, proc):
    """The refusal state is the device's own: GPU 0's refusal is told once while it lasts; once GPU 0
    answered, its next refusal is warned about again; GPU 1 is listed throughout."""
    import pynvml
    import structlog

    gpu0, gpu1 = fake_nvml.gpus
    gpu0.processes = gpu1.processes = [(1003, GIB)]
    monitor = ProcessMonitor(proc.root)
    try:
        with structlog.testing.capture_logs() as logs:
            for refused in (True, True, False, True):
                if refused:
                    gpu0.raises[NVML_LIST] = pynvml.NVML_ERROR_NO_PERMISSION
                else:
                    gpu0.raises.pop(NVML_LIST, None)
                monitor.poll()
                assert gpu1.uuid in monitor.devices()
                assert (gpu0.uuid in monitor.devices()) is not refused
    finally:
        monitor.stop()
    told = [(e["event"], e["log_level"], e["device"]) for e in logs if e["event"].startswith("processes_")]
    assert told == [
        ("processes_denied", "warning", 0),
        ("processes_failed", "debug", 0),
        ("processes_denied", "warning", 0),
    ]

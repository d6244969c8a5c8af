"""A capture's states, in process over the NVML double with the recorder installed: the idle one, and
the loaded one recorded once every GPU's stress job runs (a job manager standing in for the stress
child, which needs a GPU torch can use), with what ran and the GPUs' answers under it."""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

import pynvml
import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from warptd.capture import run, schema
from warptd.capture.build import build
from warptd.capture.recorder import Recorder
from warptd.stress.job import JobStatus, StressParameters

pytestmark = pytest.mark.slow  # the doctor's examination, waits for the states' spans


class _Job:
    """A stress job that runs at once."""

    ids = itertools.count()

    def __init__(self, params: StressParameters) -> None:
        self.id, self.params, self.status = f"job{next(self.ids)}", params, JobStatus.RUNNING
        self.done = threading.Event()


class _Manager:
    """The stress job manager's face the capture uses; a started job puts its GPU under load."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus, self.cancelled = gpus, []

    def on_sample(self, *args: object) -> None:
        return None

    def parameters(self, test, device, duration, dtype, size) -> StressParameters:
        return StressParameters(
            test=test or "matmul", device=device, duration_s=duration, dtype="bf16", size=8192
        )

    def start(self, params: StressParameters) -> _Job:
        gpu = self.gpus[int(params.device.partition(":")[2])]
        gpu.power_mw, gpu.util_gpu = 650_000, 100
        gpu.processes = [(os.getpid(), 20 * 2**30, 95)]
        gpu.process_window_us = 166_667
        return _Job(params)

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)

    def shutdown(self) -> None:
        return None


def test_the_loaded_state_is_recorded_once_every_gpu_runs_its_load(settings, monkeypatch):
    gpus = [FakeGpu.h200(0, live=True), FakeGpu.h200(1, live=True)]
    manager = _Manager(gpus)
    monkeypatch.setattr("warptd.stress.setup.make_job_manager", lambda *args, **kwargs: manager)
    monkeypatch.setattr(run, "IDLE_SECONDS", 2.0)
    monkeypatch.setattr(run, "LOADED_SECONDS", 2.0)
    fake = FakeNvml(gpus, "580.159.04")
    recorder = Recorder(pynvml)
    with fake.installed(), recorder.installed():
        measured = run.record(settings, recorder, load=True)
    fake.close()
    assert measured.load == "warptd stress matmul (bf16, size 8192) on every GPU"
    assert measured.load_failed is None and manager.cancelled == ["job0", "job1"]
    capture = build(recorder, measured, Path("/proc"))  # the test process, named there
    assert capture.states == (schema.IDLE, schema.LOADED)
    idle, loaded = (capture.gpus[0].states[state] for state in capture.states)
    assert loaded.load == measured.load and idle.load is None
    assert idle.field(186).value == 120_000 and loaded.field(186).value == 650_000
    assert loaded.call("nvmlDeviceGetUtilizationRates").value["gpu"] == 100
    assert [p.pid for p in loaded.processes] == [os.getpid()] and not idle.processes
    assert loaded.processes[0].used_memory == 20 * 2**30 and loaded.processes[0].name
    assert loaded.field(83).rate == pytest.approx(650_000, rel=0.05)  # mJ/s under load
    assert loaded.seconds >= 2.0 and idle.seconds >= 2.0
    # the doctor's checks are the idle state's: prices and refresh periods once per GPU
    assert capture.gpus[0].price("nvmlDeviceGetFieldValues", field=83).cpu_seconds >= 2.9e-3
    assert capture.gpus[1].refresh_of("energy").seconds == pytest.approx(0.1, abs=0.02)

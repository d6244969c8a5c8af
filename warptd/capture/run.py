"""One capture of this node: the real NVIDIA backend's code paths driven with the recorder installed.

Idle: ``warptd doctor``'s examination (the read plan's first full reads and samples, the backend's
checkup: every read priced, refresh periods polled, paths compared, GPM pairs), then process and MIG
discovery, the XID monitor's registration, and a last read at every counter's edge; apart from the
record, each field id asked alone for its price and ``nvmlDeviceGetPowerUsage`` polled for its refresh.
With a load, the stress child on every GPU, and the plan's reads, the process list and the power polls
again while it runs. Every family is selected, so every read the plan can make is made.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from warptd.backends.checkup import CheckupPlan
from warptd.backends.nvidia.fields import FieldKey, FieldRequest
from warptd.capture import schema
from warptd.capture.recorder import Recorder
from warptd.doctor.examine import examine
from warptd.events.xid import open_xid_monitor
from warptd.processes.nvml import open_process_monitor
from warptd.registry import Loaded, load_backends
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import Snapshot

if TYPE_CHECKING:
    from warptd.backends.nvidia.backend import NvidiaBackend
    from warptd.config import Settings
    from warptd.doctor.report import DoctorReport
    from warptd.stress.job import Job

#: The backends a capture loads: every one that reads NVML.
BACKENDS = ["nvidia", "nvidia_mig", "nvml"]
#: The recorder's state for the fields asked alone: priced, not written as a state.
PRICES = "prices"
#: The idle state spans at least this long, so counters' rates are read over it.
IDLE_SECONDS = 20.0
#: The loaded state: how long it is recorded, once every GPU's load runs, read every so often.
LOADED_SECONDS = 20.0
LOADED_EVERY_S = 1.0
#: How long the stress children may take to start (torch's import, allocation, warm-up).
LOAD_START_S = 120.0
#: nvmlDeviceGetPowerUsage is polled this long, this often, for its refresh period (the doctor's poll).
POWER_USAGE_POLL_S = 1.0
POWER_USAGE_POLL_EVERY_S = 0.01
#: How long the XID monitor waits for events after registering (its waits time out after 1 s).
XID_WAIT_S = 1.2


class CaptureError(Exception):
    """This node cannot be captured; the message says why, in one line."""


@dataclass
class Measured:
    """What a capture measured apart from the record, per GPU index: each field id's price asked
    alone, nvmlDeviceGetPowerUsage's refresh; the doctor's report; the load that ran, or why none."""

    report: DoctorReport | None = None
    field_prices: dict[int, list[tuple[int, float, int]]] = field(default_factory=dict)
    power_usage: dict[int, schema.Refresh] = field(default_factory=dict)
    loaded_power_usage: dict[int, schema.Refresh] = field(default_factory=dict)
    load: str | None = None
    load_failed: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)


def capture_settings(settings: Settings) -> Settings:
    """The settings a capture reads with: the NVML backends, every family selected (every read the
    plan can make), processes listed, nothing saved."""
    return settings.model_copy(
        update={
            "backends": list(BACKENDS),
            "metrics_include": ["*"],
            "metrics_exclude": [],
            "processes": True,
            "xid_events": True,
            "state_dir": None,
        }
    )


def record(
    settings: Settings, recorder: Recorder, *, load: bool, say: Callable[[str], None] = lambda line: None
) -> Measured:
    """Drive the backends through one capture with ``recorder`` installed; ``say`` reports progress."""
    settings = capture_settings(settings)
    measured = Measured()
    recorder.begin(schema.IDLE)
    began = time.monotonic()
    loaded = _load(settings)
    say(f"idle: warptd doctor's checks of {len(_nvidia(loaded).gpus)} GPU(s)")
    measured.report = examine(settings, loaded)  # shuts the backends down when done
    loaded = _load(settings)
    try:
        snapshot = Snapshot(stale_after=float("inf"))
        sampler = Sampler(settings, snapshot, loaded.accelerators, loaded.power)
        try:
            run = _Run(settings, loaded, recorder, sampler, snapshot, measured, say)
            run.idle(began)
            if load:
                run.under_load()
        finally:
            sampler.stop()  # shuts the backends down
    finally:
        loaded.shutdown()
    recorder.pause()
    return measured


@dataclass
class _Run:
    """The capture's parts after the doctor, over backends of its own."""

    settings: Settings
    loaded: Loaded
    recorder: Recorder
    sampler: Sampler
    snapshot: Snapshot
    measured: Measured
    say: Callable[[str], None]

    @property
    def nvidia(self) -> NvidiaBackend:
        return _nvidia(self.loaded)

    def idle(self, began: float) -> None:
        """Discovery and an edge read at each end; the prices and refresh apart from the record."""
        recorder, sampler, measured = self.recorder, self.sampler, self.measured
        sampler.sample_all(edge=True)
        self.say("idle: processes, MIG devices, XID events")
        _discover(self.settings)
        self.say("idle: each field's price alone, the power's refresh")
        recorder.begin(PRICES)  # timed by the recorder, around the C call alone
        _ask_fields_alone(recorder.nvml, self.nvidia)
        recorder.pause()
        measured.field_prices = {
            gpu: [(field_id, statistics.median(cpu), len(cpu)) for field_id, cpu in sorted(by_id.items())]
            for gpu, by_id in recorder.field_cpu(PRICES).items()
        }
        measured.power_usage = _power_usage(recorder.nvml, self.nvidia)
        recorder.begin(schema.IDLE)
        time.sleep(max(0.0, began + IDLE_SECONDS - time.monotonic()))
        sampler.sample_all(edge=True)
        measured.seconds[schema.IDLE] = time.monotonic() - began

    def under_load(self) -> None:
        """The stress child on every GPU; once each runs, its reads recorded as the ``loaded`` state."""
        from warptd.stress.setup import make_job_manager

        recorder, sampler, measured, say = self.recorder, self.sampler, self.measured, self.say
        manager = make_job_manager(self.settings, self.loaded, self.snapshot, sampler, in_daemon=False)
        sampler.listeners.append(manager.on_sample)
        devices = [f"nvidia:{gpu.index}" for gpu in self.nvidia.gpus if gpu.handle is not None]
        duration = LOAD_START_S + LOADED_SECONDS + 30.0
        say(f"loaded: starting the stress child on {len(devices)} GPU(s) (torch's import takes a while)")
        jobs = [manager.start(manager.parameters(None, device, duration, None, None)) for device in devices]
        try:
            why = _wait_running(jobs, sampler)
            if why is not None:
                measured.load_failed = why
                return
            first = jobs[0].params
            measured.load = f"warptd stress {first.test} ({first.dtype}, size {first.size}) on every GPU"
            say(f"loaded: recording {LOADED_SECONDS:g} s of {measured.load}")
            recorder.begin(schema.LOADED)
            began = time.monotonic()
            sampler.sample_all(edge=True)
            _discover(self.settings)
            with recorder.paused():
                measured.loaded_power_usage = _power_usage(recorder.nvml, self.nvidia)
            while time.monotonic() < began + LOADED_SECONDS:
                time.sleep(LOADED_EVERY_S)
                sampler.sample_all()
            sampler.sample_all(edge=True)
            measured.seconds[schema.LOADED] = time.monotonic() - began
            recorder.pause()
        finally:
            for job in jobs:
                manager.cancel(job.id)
            manager.shutdown()


def _load(settings: Settings) -> Loaded:
    loaded = load_backends(settings)
    if not any(backend.name == "nvidia" for backend in loaded.accelerators):
        loaded.shutdown()
        reason = loaded.unavailable.get("nvidia", "not loaded")
        raise CaptureError(f"no NVIDIA GPU to capture here: {reason}")
    return loaded


def _nvidia(loaded: Loaded) -> NvidiaBackend:
    return next(b for b in loaded.accelerators if b.name == "nvidia")  # type: ignore[return-value]


def _discover(settings: Settings) -> None:
    """The process monitor's polls (twice: a second poll reads utilization against the first) and the
    XID monitor's registration of every GPU's events."""
    monitor = open_process_monitor(
        settings.procfs, utilization_interval=settings.process_utilization_interval
    )
    if monitor is not None:
        try:
            monitor.poll()
            time.sleep(0.2)
            monitor.poll()
        finally:
            monitor.stop()
    xid = open_xid_monitor("nvidia")
    if xid is not None:
        xid.start()
        try:
            time.sleep(XID_WAIT_S)
        finally:
            xid.stop()


def _field_keys(nvidia: NvidiaBackend, index: int) -> list[FieldKey]:
    """The fields GPU ``index``'s plan asks, the first key of each field id."""
    batch = nvidia.gpus[index].batch
    keys: dict[int, FieldKey] = {}
    every = [*(batch.plan.keys if batch.plan is not None else ()), *batch.field_set.device]
    every += [key for kind in batch.field_set.kinds.values() for key in kind]
    for key in every:
        keys.setdefault(key[0], key)
    return [keys[field_id] for field_id in sorted(keys)]


def _ask_fields_alone(nvml: Any, nvidia: NvidiaBackend) -> None:
    """Each field id every GPU's plan asks, in a batch of its own, as often as the doctor prices a
    read (the recorder times each)."""
    for gpu in nvidia.gpus:
        if gpu.handle is None:
            continue
        for key in _field_keys(nvidia, gpu.index):
            request = FieldRequest(nvml, (key,), frozenset())
            for _ in range(CheckupPlan().calls):
                try:
                    request.send(gpu.handle)
                except nvml.NVMLError:
                    break


def _power_usage(nvml: Any, nvidia: NvidiaBackend) -> dict[int, schema.Refresh]:
    """``nvmlDeviceGetPowerUsage`` of every GPU polled together, as the doctor polls the fields: the
    median gap between its changes."""
    gpus = [gpu for gpu in nvidia.gpus if gpu.handle is not None]
    changed: dict[int, list[float]] = {gpu.index: [] for gpu in gpus}
    last: dict[int, int] = {}
    began = next_poll = time.monotonic()
    while time.monotonic() < began + POWER_USAGE_POLL_S:
        for gpu in gpus:
            try:
                value = nvml.nvmlDeviceGetPowerUsage(gpu.handle)
            except nvml.NVMLError:
                continue
            if gpu.index in last and value != last[gpu.index]:
                changed[gpu.index].append(time.monotonic())
            last[gpu.index] = value
        next_poll += POWER_USAGE_POLL_EVERY_S
        time.sleep(max(0.0, next_poll - time.monotonic()))
    polled = time.monotonic() - began
    found = {}
    for index, times in changed.items():
        gaps = [later - earlier for earlier, later in pairwise(times)]
        found[index] = schema.Refresh(
            value="power_usage",
            seconds=statistics.median(gaps) if gaps else None,
            changes=len(times),
            polled_seconds=round(polled, 3),
            poll_seconds=POWER_USAGE_POLL_EVERY_S,
        )
    return found


def _wait_running(jobs: list[Job], sampler: Sampler) -> str | None:
    """None once every job runs; else why not (one failed, or they did not start in time)."""
    from warptd.stress.job import JobStatus

    until = time.monotonic() + LOAD_START_S
    while time.monotonic() < until:
        failed = [job for job in jobs if job.done.is_set()]
        if failed:
            view = failed[0].view()
            return f"the stress child on {view.params.device} ended: {view.error or view.status}"
        if all(job.status is JobStatus.RUNNING for job in jobs):
            return None
        sampler.sample_all()
        time.sleep(0.5)
    return f"the stress children did not start within {LOAD_START_S:g} s"


def nvml_module() -> Any:
    """The pynvml module warptd reads through; CaptureError where nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError as exc:
        raise CaptureError(f"nvidia-ml-py is not installed: {exc}") from None
    return pynvml

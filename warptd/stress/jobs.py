"""Stress jobs: one spawned worker process per job, one job per device, bounded history.

The daemon never imports torch: the worker does. A worker that raises, runs out of memory,
crashes or hangs ends its job as ``failed`` and the daemon keeps serving; a cancel terminates
the worker (SIGTERM, then SIGKILL after 1 s).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import multiprocessing
import os
import signal
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from multiprocessing.connection import Connection, wait
from typing import Any

import structlog
from pydantic import BaseModel

from warptd.models import device_kind
from warptd.recording.recorder import Target
from warptd.recording.schema import Recording
from warptd.stress.base import DeviceRef, StressTest, WorkloadResult
from warptd.stress.registry import discover_tests, resolve_test
from warptd.stress.telemetry import RunTelemetry, TelemetryRecorder, summarize
from warptd.stress.worker import WorkerJob, run_job

log = structlog.get_logger("warptd.stress")
_SPAWN = multiprocessing.get_context("spawn")
#: Time a worker may take beyond its duration (torch import, allocation, warm-up) before it is killed.
STARTUP_GRACE_S = 120.0


class JobStatus(StrEnum):
    """``starting`` until the worker begins the timed part (torch import, allocation, warm-up),
    then ``running``, then one of the final three."""

    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        """The worker exists and holds the device."""
        return self in (JobStatus.STARTING, JobStatus.RUNNING)


class StressError(Exception):
    """Refused before anything started; ``status`` is the HTTP code that fits."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class StressParameters(BaseModel):
    test: str
    device: str
    duration_s: float
    dtype: str | None = None
    size: int | None = None


class Efficiency(BaseModel):
    value: float
    unit: str


class JobView(BaseModel):
    """A job as the API returns it."""

    id: str
    status: JobStatus
    params: StressParameters
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None
    progress: dict[str, float] | None = None
    workload: WorkloadResult | None = None
    telemetry: RunTelemetry | None = None
    efficiency: Efficiency | None = None
    #: The run as a recording (the same schema as windows and profiles), with the throughput.
    recording: Recording | None = None


@dataclass
class Job:
    id: str
    params: StressParameters
    device: DeviceRef
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    status: JobStatus = JobStatus.STARTING
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None
    progress: dict[str, float] | None = None
    workload: WorkloadResult | None = None
    telemetry: RunTelemetry | None = None
    recording: Recording | None = None
    recorder: TelemetryRecorder | None = field(default_factory=TelemetryRecorder)
    process: Any = None
    cancel_requested: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    def view(self) -> JobView:
        recorder = self.recorder
        telemetry = self.telemetry or (recorder.summary() if recorder is not None else None)
        recording = self.recording
        if recording is None and recorder is not None and self.started_at is not None:
            recording = recorder.recording_view()
        return JobView(
            id=self.id,
            status=self.status,
            params=self.params,
            created_at=self.created_at,
            started_at=self.started_at,
            ended_at=self.ended_at,
            error=self.error,
            progress=self.progress,
            workload=self.workload,
            telemetry=telemetry,
            efficiency=self.efficiency(),
            recording=recording,
        )

    def efficiency(self) -> Efficiency | None:
        energy = self.telemetry.energy_joules if self.telemetry else None
        if self.workload is None or not energy or energy <= 0:
            return None
        return Efficiency(value=self.workload.work / energy, unit=f"{self.workload.work_unit}/J")


def torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


class JobManager:
    """Starts, tracks and cancels stress jobs; feeds them the samples the daemon records."""

    def __init__(
        self,
        devices: list[DeviceRef],
        companions: dict[str, list[str]],
        *,
        max_duration_s: float = 3600.0,
        history: int = 50,
        on_change: Callable[[], None] | None = None,
        free_memory: Callable[[DeviceRef], int | None] | None = None,
        refresh: Callable[[], list[DeviceRef]] | None = None,
        watch: Callable[[str, set[tuple[str, int]], set[str]], None] | None = None,
        unwatch: Callable[[str], None] | None = None,
        carbon: Callable[[Recording], Recording] | None = None,
    ) -> None:
        """``watch``/``unwatch``: the sampler's, so a running job's device is sampled faster;
        ``carbon`` adds carbon and cost to a finished run's recording."""
        self.devices = {d.key: d for d in devices}
        #: Re-reads the device list (after a backend re-discovered its devices) before each start.
        self._refresh = refresh
        self.companions = companions  # accelerator backend -> power backends that measure it
        self.max_duration_s = max_duration_s
        self.tests = discover_tests()
        self._classes: dict[str, type[StressTest]] = {}  # target -> class
        self.history = history
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._busy: dict[str, str] = {}  # device key -> job id
        self._lock = threading.Lock()
        self._on_change = on_change or (lambda: None)
        self._free_memory = free_memory or (lambda _: None)
        self._closing = False
        self._watch = watch or (lambda *_: None)
        self._unwatch = unwatch or (lambda _: None)
        self._carbon = carbon or (lambda recording: recording)
        self.runs: Counter[tuple[str, str]] = Counter()
        self.last: dict[tuple[str, str, str], Job] = {}  # (backend, device, test) -> last finished job

    # -- starting -----------------------------------------------------------------------------
    def parameters(
        self, test: str | None, device: str | None, duration_s: float, dtype: str | None, size: int | None
    ) -> StressParameters:
        """A request's parameters, with the default device and the default test for it filled in."""
        self._refresh_devices()
        device = device or self.default_device()
        test = test or self.default_test(device)
        return StressParameters(test=test, device=device, duration_s=duration_s, dtype=dtype, size=size)

    def default_test(self, device: str) -> str:
        """``matmul`` where it runs, else the first workload that runs on the device (Path B)."""
        ref = self.devices.get(device)
        suitable = self.tests_for(ref) if ref is not None else []
        return "matmul" if "matmul" in suitable or not suitable else suitable[0]

    def test_class(self, name: str) -> type[StressTest]:
        """The class of a discovered test, imported once per target."""
        target = self.tests[name]
        if target not in self._classes:
            self._classes[target] = resolve_test(target)
        return self._classes[target]

    def tests_for(self, device: DeviceRef) -> list[str]:
        """The workloads that run on this device, sorted."""
        return [name for name in sorted(self.tests) if self.test_class(name).runs_on(device)]

    def usable_tests(self) -> list[str]:
        """The workloads some device of this node runs: the only ones series and messages name."""
        devices = list(self.devices.values())
        return [name for name in sorted(self.tests) if any(self.test_class(name).runs_on(d) for d in devices)]

    def _refresh_devices(self) -> None:
        if self._refresh is not None:
            self.devices = {d.key: d for d in self._refresh()}

    def default_device(self) -> str:
        accelerators = [key for key, ref in self.devices.items() if ref.is_accelerator]
        return accelerators[0] if accelerators else next(iter(self.devices), "cpu:0")

    def start(self, params: StressParameters) -> Job:
        """Validate, then spawn; raises :class:`StressError` and starts nothing on bad input."""
        self._refresh_devices()
        target = self.tests.get(params.test)
        if target is None:
            available = ", ".join(self.usable_tests()) or "none"
            raise StressError(422, f"unknown test {params.test!r}; available: {available}")
        device = self.devices.get(params.device)
        if device is None:
            raise StressError(422, f"unknown device {params.device!r}; available: {', '.join(self.devices)}")
        if not 1 <= params.duration_s <= self.max_duration_s:
            raise StressError(422, f"duration_s must be between 1 and {self.max_duration_s:g}")
        test_cls = self.test_class(params.test)
        try:
            dtype, size = test_cls.resolve_parameters(device, params.dtype, params.size)
        except ValueError as exc:
            raise StressError(422, str(exc)) from None
        params = params.model_copy(update={"dtype": dtype, "size": size})
        self._check_memory(device, test_cls.estimate_bytes(dtype, size))
        self._check_torch()  # after validation: a bad request is 422 whether or not torch is here
        with self._lock:
            if self._closing:
                raise StressError(503, "the daemon is shutting down")
            if device.key in self._busy:
                raise StressError(
                    409, f"device {device.key} is busy with stress job {self._busy[device.key]}"
                )
            job = Job(id=uuid.uuid4().hex[:12], params=params, device=device)
            job.recorder = TelemetryRecorder(
                device=Target(
                    "device",
                    device.backend,
                    str(device.index),
                    device_kind=device_kind(device.is_accelerator),
                ),
                name=params.test,
            )
            self._busy[device.key] = job.id
            self._jobs[job.id] = job
            self._trim()
        try:
            self._spawn(job, WorkerJob(target, device, params.duration_s, params.dtype, params.size))
        except Exception as exc:  # EAGAIN/EMFILE: nothing may stay half-started or the device stays busy
            with self._lock:
                self._busy.pop(device.key, None)
                self._jobs.pop(job.id, None)
            log.error("stress_spawn_failed", job=job.id, error=str(exc))
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise StressError(503, f"could not start the stress worker: {reason}") from None
        log.info(
            "stress_started", job=job.id, test=params.test, device=device.key, duration_s=params.duration_s
        )
        self._on_change()
        return job

    @staticmethod
    def _check_torch() -> None:
        """503 without torch. The pip command names this server's paths: it goes to the log, not
        to the client."""
        if torch_installed():
            return
        from warptd.install import install_command

        log.warning("stress_needs_torch", install=install_command("stress"))
        raise StressError(
            503,
            "torch is not installed on this node; the daemon's log has the command that adds the "
            "stress extra",
        )

    def _check_memory(self, device: DeviceRef, needed: int | None) -> None:
        free = self._free_memory(device)
        if needed is not None and free is not None and needed > 0.9 * free:
            need, have = needed / 2**30, free / 2**30
            raise StressError(
                422, f"the workload needs {need:.1f} GiB but {device.key} has {have:.1f} GiB free"
            )

    def _spawn(self, job: Job, work: WorkerJob) -> None:
        parent, child = _SPAWN.Pipe(duplex=False)
        try:
            job.process = _SPAWN.Process(
                target=run_job, args=(child, work, os.getpid()), name=f"warptd-stress-{job.id}", daemon=True
            )
            job.process.start()
            threading.Thread(
                target=self._monitor, args=(job, parent), name=f"stress-{job.id}", daemon=True
            ).start()
        except BaseException:
            parent.close()
            if job.process is not None and job.process.is_alive():
                job.process.kill()
            raise
        finally:
            child.close()

    def _trim(self) -> None:
        finished = [jid for jid, j in self._jobs.items() if not j.status.active]
        for jid in finished[: max(0, len(finished) - self.history)]:  # keep the newest `history`
            del self._jobs[jid]

    # -- watching -----------------------------------------------------------------------------
    def _monitor(self, job: Job, conn: Connection) -> None:
        """Follow the worker until it exits, is cancelled or overruns; always finish the job."""
        result: dict[str, Any] | None = None
        error: str | None = None
        try:
            deadline = time.monotonic() + job.params.duration_s + STARTUP_GRACE_S
            pipe_open = True
            while not job.cancel_requested:
                ready = wait(
                    [conn, job.process.sentinel] if pipe_open else [job.process.sentinel], timeout=0.2
                )
                if conn in ready:
                    try:
                        message = json.loads(conn.recv_bytes())
                    except (EOFError, OSError):
                        pipe_open = False  # the worker is gone or going; its exit code says how
                        continue
                    result, error = self._handle(job, message, result, error)
                elif job.process.sentinel in ready and not (pipe_open and conn.poll()):
                    break
                if time.monotonic() > deadline:
                    error = (
                        f"worker did not finish within {job.params.duration_s + STARTUP_GRACE_S:g} s; killed"
                    )
                    break
        except Exception as exc:  # a garbled message must not leave the device busy forever
            error = f"stress monitor failed: {exc!r}"
        finally:
            _stop_process(job.process)
            conn.close()
            self._finish(job, result, error)

    def _handle(
        self, job: Job, message: dict[str, Any], result: dict[str, Any] | None, error: str | None
    ) -> tuple[dict[str, Any] | None, str | None]:
        kind, payload = message["kind"], message["payload"]
        if kind == "started":
            job.started_at = datetime.fromtimestamp(payload["at"], UTC)
            if job.status is JobStatus.STARTING:
                job.status = JobStatus.RUNNING
            if job.recorder is not None:
                job.recorder.recording = True
            power = set(self.companions.get(job.device.backend, ()))
            self._watch(f"stress-{job.id}", {(job.device.backend, job.device.index)}, power)
        elif kind == "progress":
            job.progress = {k: float(v) for k, v in payload.items()}
        elif kind == "result":
            result = payload
        elif kind == "error":
            error = f"{payload['type']}: {payload['message']}"
        return result, error

    def _finish(self, job: Job, result: dict[str, Any] | None, error: str | None) -> None:
        self._unwatch(f"stress-{job.id}")
        recorder = job.recorder
        if recorder is not None:
            recorder.recording = False
        job.ended_at = datetime.now(UTC)
        if job.cancel_requested:
            job.status = JobStatus.CANCELLED
        elif result is not None:
            try:
                job.status, job.workload = JobStatus.SUCCEEDED, WorkloadResult(**result)
            except (TypeError, ValueError) as exc:
                job.status, job.error = JobStatus.FAILED, f"malformed result from the worker: {exc}"
        else:
            job.status = JobStatus.FAILED
            job.error = error or _exit_reason(job.process.exitcode if job.process is not None else None)
        if recorder is not None:
            recorder.recorder.end_reason = str(job.status)
            if job.workload is not None:
                recorder.recorder.workload = {
                    "throughput": job.workload.throughput,
                    "unit": job.workload.unit,
                    "work": job.workload.work,
                    "work_unit": job.workload.work_unit,
                }
            job.recording = self._carbon(recorder.recording_view())
            job.telemetry = summarize(job.recording)
            job.recorder = None  # keep the result, not the recorder, in the bounded history
        process, job.process = job.process, None
        with self._lock:
            self._busy.pop(job.device.key, None)
            self.runs[(job.params.test, str(job.status))] += 1
            self._trim()
            if job.status is JobStatus.SUCCEEDED:
                self.last[(job.device.backend, str(job.device.index), job.params.test)] = job
        log.info("stress_finished", job=job.id, status=str(job.status), error=job.error)
        job.done.set()
        self._on_change()
        _release(process)

    # -- telemetry from the sampler -------------------------------------------------------------
    def on_sample(
        self, backend: str, devices: list[Any] | None, domains: list[Any] | None, at: float | None = None
    ) -> None:
        """Sampler listener: hand each running job the samples of its device."""
        for job in self.running():
            recorder = job.recorder
            if recorder is None:
                continue
            if devices is not None and backend == job.device.backend:
                for sample in devices:
                    if sample.reading.index == job.device.index:
                        recorder.add_device(sample, at)
            elif domains is not None and backend in self.companions.get(job.device.backend, ()):
                recorder.add_domains(domains, at, backend)

    # -- queries and cancel -------------------------------------------------------------------
    def running(self) -> list[Job]:
        """Jobs starting or running."""
        with self._lock:
            return [j for j in self._jobs.values() if j.status.active]

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def list(self) -> list[Job]:
        with self._lock:
            return list(reversed(self._jobs.values()))

    def metrics_view(
        self,
    ) -> tuple[set[tuple[str, str, str]], dict[tuple[str, str], int], list[tuple[tuple[str, str, str], Job]]]:
        """Running (backend, device, test), finished-run counts and last results, copied under the lock."""
        with self._lock:
            running = {
                (j.device.backend, str(j.device.index), j.params.test)
                for j in self._jobs.values()
                if j.status.active
            }
            return running, dict(self.runs), list(self.last.items())

    def cancel(self, job_id: str, timeout: float = 2.0) -> Job | None:
        """Ask the worker to stop (SIGTERM; the monitor reaps it, SIGKILL after 1 s) and wait."""
        job = self.get(job_id)
        if job is None:
            return None
        if job.status.active:
            job.cancel_requested = True
            _terminate(job.process)
            job.done.wait(timeout)
        return job

    def shutdown(self, timeout: float = 3.0) -> None:
        """Refuse new jobs, stop every worker at once, and wait for all within one deadline."""
        with self._lock:
            self._closing = True
        jobs = self.running()
        for job in jobs:
            job.cancel_requested = True
            _terminate(job.process)
        deadline = time.monotonic() + timeout
        for job in jobs:
            job.done.wait(max(0.0, deadline - time.monotonic()))


def _terminate(process: Any) -> None:
    with contextlib.suppress(ValueError):  # already closed by the monitor: nothing to stop
        if process is not None and process.is_alive():
            process.terminate()


def _release(process: Any) -> None:
    """Close the process handle (its sentinel descriptor); if it is somehow still dying, reap it later."""
    if process is None:
        return
    if process.exitcode is not None:
        process.close()
        return

    def reap() -> None:
        process.join()
        process.close()

    threading.Thread(target=reap, name="stress-reaper", daemon=True).start()


def _stop_process(process: Any) -> None:
    if process is None or not process.is_alive():
        return
    process.terminate()
    process.join(1.0)
    if process.is_alive():
        process.kill()
        process.join(1.0)


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        return f"worker died from signal {signal.Signals(-code).name} (crash, OOM kill or external kill)"
    return f"worker exited with code {code} without a result"

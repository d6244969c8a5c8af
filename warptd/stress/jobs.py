"""Stress jobs: one spawned worker process per job (see :mod:`warptd.stress.supervise`), one job per
device, bounded history, and the samples of each running job's device handed to its recorder."""

from __future__ import annotations

import importlib.util
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog

from warptd.models import device_kind
from warptd.power.base import DomainPower
from warptd.recording.recorder import Target
from warptd.recording.schema import Recording
from warptd.sampling.snapshot import DeviceSample
from warptd.stress import supervise
from warptd.stress.base import DeviceRef
from warptd.stress.catalog import StressCatalog
from warptd.stress.history import JobHistory
from warptd.stress.job import Job, JobStatus, StressError, StressParameters
from warptd.stress.telemetry import TelemetryRecorder
from warptd.stress.worker import WorkerJob

log = structlog.get_logger("warptd.stress")


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
        edge: Callable[[set[tuple[str, int]], set[str]], None] | None = None,
        carbon: Callable[[Recording], Recording] | None = None,
        in_daemon: bool = True,
    ) -> None:
        """``refresh`` re-reads the device list (after a backend re-discovered its devices) before each
        start; ``watch``/``unwatch``: the sampler's, so a running job's device is sampled faster;
        ``edge``: reads a job's device and power domains with every counter exact, as its run begins
        and ends; ``carbon`` adds carbon and cost to a finished run's recording; ``in_daemon``: the
        daemon's manager, whose refusals go to API clients (else ``warptd stress``'s, run here)."""
        self.catalog = StressCatalog(devices, refresh, in_daemon)
        self.companions = companions  # accelerator backend -> power backends that measure it
        self.max_duration_s = max_duration_s
        self.history = history
        self.jobs = JobHistory(lambda: self.history)
        self._on_change = on_change or (lambda: None)
        self._free_memory = free_memory or (lambda _: None)
        self._watch = watch or (lambda *_: None)
        self._unwatch = unwatch or (lambda _: None)
        self._edge = edge or (lambda *_: None)
        self._carbon = carbon or (lambda recording: recording)

    # -- starting -----------------------------------------------------------------------------
    def parameters(
        self, test: str | None, device: str | None, duration_s: float, dtype: str | None, size: int | None
    ) -> StressParameters:
        """A request's parameters, with the default device and the default test for it filled in."""
        self.catalog.refresh()
        device = device or self.catalog.default_device()
        test = test or self.catalog.default_test(device)
        return StressParameters(test=test, device=device, duration_s=duration_s, dtype=dtype, size=size)

    def start(self, params: StressParameters) -> Job:
        """Validate, then spawn; raises :class:`StressError` and starts nothing on bad input."""
        self.catalog.refresh()
        target, device, test_cls, params = self.catalog.resolve(params, self.max_duration_s)
        self._check_memory(device, test_cls.estimate_bytes(params.dtype, params.size))
        self._check_torch()  # after validation: a bad request is 422 whether or not torch is here
        job = Job(id=uuid.uuid4().hex[:12], params=params, device=device)
        kind = device_kind(device.is_accelerator)
        target_of = Target("device", device.backend, str(device.index), device_kind=kind)
        job.recorder = TelemetryRecorder(device=target_of, name=params.test)
        self.jobs.admit(job)
        try:
            work = WorkerJob(target, device, params.duration_s, params.dtype, params.size)
            supervise.spawn(job, work, self._handle, self._finish)
        except Exception as exc:  # EAGAIN/EMFILE: nothing may stay half-started or the device stays busy
            self.jobs.discard(job)
            log.error("stress_spawn_failed", job=job.id, error=str(exc))
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise StressError(503, f"could not start the stress worker: {reason}") from None
        log.info(
            "stress_started", job=job.id, test=params.test, device=device.key, duration_s=params.duration_s
        )
        self._on_change()
        return job

    def _check_torch(self) -> None:
        """503 without torch, naming the extra that adds it. The daemon's client is told the extra as
        this warptd was installed, and the pip command with the server's paths goes to the log only;
        ``warptd stress``, run here, is told that command."""
        if torch_installed():
            return
        from warptd.install import client_install_command, install_command

        if not self.catalog.in_daemon:
            raise StressError(
                503, f"torch is not installed: install the stress extra: {install_command('stress')}"
            )
        log.warning("stress_needs_torch", install=install_command("stress"))
        raise StressError(
            503,
            "torch is not installed on this node: install warptd's stress extra there "
            f"({client_install_command('stress')}); the daemon's log has the exact command",
        )

    def _check_memory(self, device: DeviceRef, needed: int | None) -> None:
        free = self._free_memory(device)
        if needed is not None and free is not None and needed > 0.9 * free:
            need, have = needed / 2**30, free / 2**30
            raise StressError(
                422, f"the workload needs {need:.1f} GiB but {device.key} has {have:.1f} GiB free"
            )

    # -- the worker's messages and end ---------------------------------------------------------
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
            devices, power = self._measured(job)
            self._watch(f"stress-{job.id}", devices, power)
            self._edge(devices, power)  # the recording's first sample, at the run's start
        elif kind == "progress":
            job.progress = {k: float(v) for k, v in payload.items()}
        elif kind == "result":
            result = payload
        elif kind == "error":
            error = f"{payload['type']}: {payload['message']}"
        return result, error

    def _measured(self, job: Job) -> tuple[set[tuple[str, int]], set[str]]:
        """A job's device ((backend, index)) and the power backends that measure it."""
        return {(job.device.backend, job.device.index)}, set(self.companions.get(job.device.backend, ()))

    def _finish(self, job: Job, result: dict[str, Any] | None, error: str | None) -> None:
        if job.recorder is not None and job.recorder.recording:
            self._edge(*self._measured(job))  # the recording's last sample, at the run's end
        self._unwatch(f"stress-{job.id}")
        if result is None and not job.cancel_requested:
            error = error or supervise.exit_reason(job.process.exitcode if job.process is not None else None)
        job.conclude(result, error, self._carbon)
        process, job.process = job.process, None
        self.jobs.finished(job)
        log.info("stress_finished", job=job.id, status=str(job.status), error=job.error)
        job.done.set()
        self._on_change()
        supervise.release(process)

    # -- telemetry from the sampler -------------------------------------------------------------
    def on_sample(
        self,
        backend: str,
        devices: list[DeviceSample] | None,
        domains: list[DomainPower] | None,
        at: float | None = None,
    ) -> None:
        """Sampler listener: hand each running job the samples of its device."""
        for job in self.jobs.running():
            recorder = job.recorder
            if recorder is None:
                continue
            if devices is not None and backend == job.device.backend:
                for sample in devices:
                    if sample.reading.index == job.device.index:
                        recorder.add_device(sample, at)
            elif domains is not None and backend in self.companions.get(job.device.backend, ()):
                recorder.add_domains(domains, at, backend)

    # -- cancel and shutdown --------------------------------------------------------------------
    def cancel(self, job_id: str, timeout: float = 2.0) -> Job | None:
        """Ask the worker to stop (SIGTERM; the monitor reaps it, SIGKILL after 1 s) and wait."""
        job = self.jobs.get(job_id)
        if job is None:
            return None
        if job.status.active:
            job.cancel_requested = True
            supervise.terminate(job.process)
            job.done.wait(timeout)
        return job

    def shutdown(self, timeout: float = 3.0) -> None:
        """Refuse new jobs, stop every worker at once, and wait for all within one deadline."""
        self.jobs.close()
        jobs = self.jobs.running()
        for job in jobs:
            job.cancel_requested = True
            supervise.terminate(job.process)
        deadline = time.monotonic() + timeout
        for job in jobs:
            job.done.wait(max(0.0, deadline - time.monotonic()))

"""Stress jobs: one spawned worker process per job (see :mod:`warptd.stress.supervise`), one job per
device, bounded history, and the samples of each running job's device handed to its recorder."""

from __future__ import annotations

import importlib.util
import threading
import time
import uuid
from collections import Counter, OrderedDict
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
from warptd.stress.base import DeviceRef, StressTest, WorkloadResult
from warptd.stress.job import Job, JobStatus, StressError, StressParameters
from warptd.stress.registry import discover_tests, resolve_test
from warptd.stress.telemetry import TelemetryRecorder, summarize
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
        """``watch``/``unwatch``: the sampler's, so a running job's device is sampled faster;
        ``edge``: reads a job's device and power domains with every counter exact, as its run begins
        and ends; ``carbon`` adds carbon and cost to a finished run's recording; ``in_daemon``: the
        daemon's manager, whose refusals go to API clients (else ``warptd stress``'s, run here)."""
        self.in_daemon = in_daemon
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
        self._edge = edge or (lambda *_: None)
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
        """The first accelerator. A node without one has no default: a stress of its CPU is asked for
        by name, so that a request meant for a GPU (whose driver failed to load, say) never loads the
        CPU instead."""
        accelerators = [key for key, ref in self.devices.items() if ref.is_accelerator]
        if accelerators:
            return accelerators[0]
        named = ""
        for key, ref in self.devices.items():  # the CPU's device, named as the request names it
            if not ref.is_accelerator:
                asked = f'"device": "{key}"' if self.in_daemon else f"--device {key}"
                named = f"; to stress the CPU, name it: {asked}"
                break
        raise StressError(
            422,
            f"no accelerator on this node (warptd list --verbose says why each backend did not load){named}",
        )

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
            supervise.spawn(
                job,
                WorkerJob(target, device, params.duration_s, params.dtype, params.size),
                self._handle,
                self._finish,
            )
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

    def _check_torch(self) -> None:
        """503 without torch, naming the extra that adds it. The daemon's client is told the extra as
        this warptd was installed, and the pip command with the server's paths goes to the log only;
        ``warptd stress``, run here, is told that command."""
        if torch_installed():
            return
        from warptd.install import client_install_command, install_command

        if not self.in_daemon:
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

    def _trim(self) -> None:
        finished = [jid for jid, j in self._jobs.items() if not j.status.active]
        for jid in finished[: max(0, len(finished) - self.history)]:  # keep the newest `history`
            del self._jobs[jid]

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
        recorder = job.recorder
        if recorder is not None and recorder.recording:
            self._edge(*self._measured(job))  # the recording's last sample, at the run's end
        self._unwatch(f"stress-{job.id}")
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
            job.error = error or supervise.exit_reason(
                job.process.exitcode if job.process is not None else None
            )
        if recorder is not None:
            if job.workload is not None:
                recorder.recorder.workload = {
                    "throughput": job.workload.throughput,
                    "unit": job.workload.unit,
                    "work": job.workload.work,
                    "work_unit": job.workload.work_unit,
                }
            job.recording = self._carbon(recorder.finish(str(job.status), job.error))
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
            supervise.terminate(job.process)
            job.done.wait(timeout)
        return job

    def shutdown(self, timeout: float = 3.0) -> None:
        """Refuse new jobs, stop every worker at once, and wait for all within one deadline."""
        with self._lock:
            self._closing = True
        jobs = self.running()
        for job in jobs:
            job.cancel_requested = True
            supervise.terminate(job.process)
        deadline = time.monotonic() + timeout
        for job in jobs:
            job.done.wait(max(0.0, deadline - time.monotonic()))

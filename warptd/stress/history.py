"""The stress jobs a manager holds: every running one, with the device it holds, and the newest
finished ones, bounded; the runs counted per workload and outcome, and each device's last result."""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable

from warptd.stress.job import Job, JobStatus, StressError

#: (backend, device index, test)
RunKey = tuple[str, str, str]
#: The running RunKeys, the finished runs by (test, status), and each RunKey's last successful job.
MetricsView = tuple[set[RunKey], dict[tuple[str, str], int], list[tuple[RunKey, Job]]]


class JobHistory:
    """Jobs in the order they started: the running ones, and the newest ``limit()`` finished ones (the
    older go). One job per device at a time; none once closed. Thread-safe."""

    def __init__(self, limit: Callable[[], int]) -> None:
        self.limit = limit
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._busy: dict[str, str] = {}  # device key -> job id
        self._lock = threading.Lock()
        self._closing = False
        self.runs: Counter[tuple[str, str]] = Counter()
        self.last: dict[RunKey, Job] = {}  # the last successful job of each

    def admit(self, job: Job) -> None:
        """Take a job in, holding its device: 503 once closed, 409 where the device is busy."""
        with self._lock:
            if self._closing:
                raise StressError(503, "the daemon is shutting down")
            if job.device.key in self._busy:
                raise StressError(
                    409, f"device {job.device.key} is busy with stress job {self._busy[job.device.key]}"
                )
            self._busy[job.device.key] = job.id
            self._jobs[job.id] = job
            self._trim()

    def discard(self, job: Job) -> None:
        """Forget a job that never started (its worker could not be spawned), freeing its device."""
        with self._lock:
            self._busy.pop(job.device.key, None)
            self._jobs.pop(job.id, None)

    def finished(self, job: Job) -> None:
        """A job ended: its device is free, its run counted and, where it succeeded, its result the last."""
        with self._lock:
            self._busy.pop(job.device.key, None)
            self.runs[(job.params.test, str(job.status))] += 1
            self._trim()
            if job.status is JobStatus.SUCCEEDED:
                self.last[(job.device.backend, str(job.device.index), job.params.test)] = job

    def close(self) -> None:
        """Refuse every job from now on."""
        with self._lock:
            self._closing = True

    def _trim(self) -> None:
        finished = [jid for jid, j in self._jobs.items() if not j.status.active]
        for jid in finished[: max(0, len(finished) - self.limit())]:  # keep the newest `limit()`
            del self._jobs[jid]

    def running(self) -> list[Job]:
        """Jobs starting or running."""
        with self._lock:
            return [j for j in self._jobs.values() if j.status.active]

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def list(self) -> list[Job]:
        """Every job held, newest first."""
        with self._lock:
            return list(reversed(self._jobs.values()))

    def metrics_view(self) -> MetricsView:
        """Running (backend, device, test), finished-run counts and last results, copied under the lock."""
        with self._lock:
            running = {
                (j.device.backend, str(j.device.index), j.params.test)
                for j in self._jobs.values()
                if j.status.active
            }
            return running, dict(self.runs), list(self.last.items())

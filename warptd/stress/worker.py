"""The child process of a stress job: imports torch, runs one test, reports over a pipe.

Messages are ``(kind, payload)`` tuples: ``started``, ``progress``, then ``result`` or ``error``.
A crash, kill or OOM-kill shows up in the parent as a closed pipe and an exit code.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

from warptd.stress.base import DeviceRef, Progress
from warptd.stress.registry import resolve_test

PROGRESS_EVERY_S = 0.25


@dataclass(frozen=True, slots=True)
class WorkerJob:
    """What the worker runs: the test class target, the device, and the parameters."""

    target: str
    device: DeviceRef
    duration: float
    dtype: str | None = None
    size: int | None = None


def run_job(conn: Connection, job: WorkerJob) -> None:
    """Entry point of the spawned worker."""
    last_sent = 0.0

    def progress(p: Progress) -> None:
        nonlocal last_sent
        now = time.monotonic()
        if now - last_sent >= PROGRESS_EVERY_S:
            conn.send(("progress", dataclasses.asdict(p)))
            last_sent = now

    try:
        test = resolve_test(job.target)(job.device, dtype=job.dtype, size=job.size, progress=progress)
        test.on_start = lambda: conn.send(("started", {"at": time.time()}))
        result = test.run(job.duration, iterations=1)
        conn.send(("result", dataclasses.asdict(result)))
    except BaseException as exc:  # OOM, bad configuration, a broken plugin: all end as a failed job
        conn.send(("error", {"type": type(exc).__name__, "message": str(exc)[:2000]}))
    finally:
        conn.close()

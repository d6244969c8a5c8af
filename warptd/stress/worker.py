"""The child process of a stress job: imports torch, runs one test, reports over a pipe.

Messages are JSON objects ``{"kind": …, "payload": …}``: ``started``, ``progress``, then
``result`` or ``error``; JSON rather than pickles, so nothing a plugin returns can make the
daemon import torch. A crash, kill or OOM-kill shows up in the parent as a closed pipe and an
exit code. The worker exits by itself if the daemon dies.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

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


def _send(conn: Connection, kind: str, payload: dict[str, Any]) -> None:
    conn.send_bytes(json.dumps({"kind": kind, "payload": payload}, default=str).encode())


def _exit_with_parent(parent: int) -> None:
    """An orphaned worker (daemon SIGKILLed) must not keep the device busy for its whole duration."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def run_job(conn: Connection, job: WorkerJob, parent: int) -> None:
    """Entry point of the spawned worker."""
    _exit_with_parent(parent)
    os.environ.update(job.device.environment)  # e.g. CUDA_VISIBLE_DEVICES=<uuid>, before torch loads
    last_sent = 0.0

    def progress(p: Progress) -> None:
        nonlocal last_sent
        now = time.monotonic()
        if now - last_sent >= PROGRESS_EVERY_S:
            _send(conn, "progress", dataclasses.asdict(p))
            last_sent = now

    try:
        test = resolve_test(job.target)(job.device, dtype=job.dtype, size=job.size, progress=progress)
        test.on_start = lambda: _send(conn, "started", {"at": time.time()})
        result = test.run(job.duration, iterations=1)
        _send(conn, "result", dataclasses.asdict(result))
    except BaseException as exc:  # OOM, bad configuration, a broken plugin: all end as a failed job
        _send(conn, "error", {"type": type(exc).__name__, "message": str(exc)[:2000]})
    finally:
        conn.close()

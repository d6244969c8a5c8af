"""A stress worker's process: spawned, followed until it ends, overruns or is cancelled, then reaped.

The daemon never imports torch: the worker does. A worker that raises, runs out of memory,
crashes or hangs ends its job as ``failed`` and the daemon keeps serving; a cancel terminates
the worker (SIGTERM, then SIGKILL after 1 s).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from warptd.stress.job import Job
from warptd.stress.worker import WorkerJob, run_job

_SPAWN = multiprocessing.get_context("spawn")
#: Time a worker may take beyond its duration (torch import, allocation, warm-up) before it is killed.
STARTUP_GRACE_S = 120.0

#: Takes one message of the worker and the result and error so far; returns them updated.
Handle = Callable[
    [Job, dict[str, Any], "dict[str, Any] | None", "str | None"], tuple["dict[str, Any] | None", "str | None"]
]
#: Ends the job with the worker's result or the reason it has none; called exactly once.
Finish = Callable[[Job, "dict[str, Any] | None", "str | None"], None]


def spawn(job: Job, work: WorkerJob, handle: Handle, finish: Finish) -> None:
    """Start the worker and a thread that follows it; nothing stays half-started when this raises."""
    parent, child = _SPAWN.Pipe(duplex=False)
    try:
        job.process = _SPAWN.Process(
            target=run_job, args=(child, work, os.getpid()), name=f"warptd-stress-{job.id}", daemon=True
        )
        job.process.start()
        threading.Thread(
            target=follow, args=(job, parent, handle, finish), name=f"stress-{job.id}", daemon=True
        ).start()
    except BaseException:
        parent.close()
        if job.process is not None and job.process.is_alive():
            job.process.kill()
        raise
    finally:
        child.close()


def follow(job: Job, conn: Connection, handle: Handle, finish: Finish) -> None:
    """Follow the worker until it exits, is cancelled or overruns; always finish the job."""
    result: dict[str, Any] | None = None
    error: str | None = None
    try:
        deadline = time.monotonic() + job.params.duration_s + STARTUP_GRACE_S
        pipe_open = True
        while not job.cancel_requested:
            ready = wait([conn, job.process.sentinel] if pipe_open else [job.process.sentinel], timeout=0.2)
            if conn in ready:
                try:
                    message = json.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    pipe_open = False  # the worker is gone or going; its exit code says how
                    continue
                result, error = handle(job, message, result, error)
            elif job.process.sentinel in ready and not (pipe_open and conn.poll()):
                break
            if time.monotonic() > deadline:
                error = f"worker did not finish within {job.params.duration_s + STARTUP_GRACE_S:g} s; killed"
                break
    except Exception as exc:  # a garbled message must not leave the device busy forever
        error = f"stress monitor failed: {exc!r}"
    finally:
        stop_process(job.process)
        conn.close()
        finish(job, result, error)


def terminate(process: Any) -> None:
    with contextlib.suppress(ValueError):  # already closed by the monitor: nothing to stop
        if process is not None and process.is_alive():
            process.terminate()


def release(process: Any) -> None:
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


def stop_process(process: Any) -> None:
    if process is None or not process.is_alive():
        return
    process.terminate()
    process.join(1.0)
    if process.is_alive():
        process.kill()
        process.join(1.0)


def exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        return f"worker died from signal {signal.Signals(-code).name} (crash, OOM kill or external kill)"
    return f"worker exited with code {code} without a result"

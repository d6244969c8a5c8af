"""The threads a sample runs on: one worker per backend, and the executor of the ticks that hand it a read."""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from datetime import datetime
from typing import Any

from apscheduler.executors.base import BaseExecutor


class Worker:
    """One daemon thread per backend: a read that never returns cannot keep the process alive at exit."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name=f"warptd-{name}", daemon=True).start()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.put((future, fn))
        return future

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            future, fn = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    def close(self) -> None:
        self._queue.put(None)


class HandOffExecutor(BaseExecutor):  # type: ignore[misc]
    """Runs a job on the scheduler's thread, as APScheduler's DebugExecutor does, without the execution
    events and log records it makes per run (no listener takes them): the jobs run here only hand a
    read to a worker, ten times a second at ``--interval 0.1``. A job's error is logged as usual."""

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        try:
            job.func(*job.args, **job.kwargs)
        except BaseException:
            self._run_job_error(job.id, *sys.exc_info()[1:])
        else:
            self._run_job_success(job.id, [])

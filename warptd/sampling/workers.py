"""The threads a sample runs on: one worker per backend, and the executor of the ticks that hand it a read."""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
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


class HandedRead:
    """A read handed to a worker that publishes it there, and its caller, who waits for it at most a
    timeout: whichever of the two comes first decides whether it is published."""

    __slots__ = ("_decided", "_lock", "future")

    def __init__(self) -> None:
        self.future: Future[None] = Future()
        self._lock = threading.Lock()
        self._decided: bool | None = None  # True: published; False: given up on

    def publishing(self) -> bool:
        """On the worker, once read: True when it is to be published (its caller still waits)."""
        with self._lock:
            if self._decided is None:
                self._decided = True
            return self._decided

    def wait(self, timeout: float) -> None:
        """Wait for the read and its publication; raises ``TimeoutError`` when it was given up on
        (then it is not published), or the read's own error."""
        try:
            self.future.result(timeout=timeout)
        except FutureTimeout:
            with self._lock:
                if self._decided is None:
                    self._decided = False
            if not self._decided:
                raise
            self.future.result()  # being published now: a listener's work, not an SDK call


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

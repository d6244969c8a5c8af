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


class Lane:
    """One worker thread's place in the read it runs: the device whose read it is inside now. A lane
    is cut where such a read is given up on: its thread reads no further device and ends once that
    device's call returns, which releases the device (:meth:`Worker.cut`)."""

    __slots__ = ("_lock", "_worker", "cut", "device", "job")

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self._lock = threading.Lock()
        self.device: int | None = None  # the device being read now
        self.cut = False
        self.job: Future[Any] | None = None  # the job running now

    def enter(self, device: int) -> bool:
        """The read goes on to ``device``; False once the lane was cut (read no further device)."""
        with self._lock:
            if self.cut:
                return False
            self.device = device
            return True

    def leave(self) -> None:
        """The device's read returned; on a cut lane, that device may be read again."""
        with self._lock:
            device, self.device = self.device, None
            released = self.cut
        if released and device is not None:
            self._worker.release(device)

    def held(self) -> frozenset[int]:
        """The devices of this worker whose read has not returned on a cut lane: read as down."""
        return self._worker.held()

    def _cut_inside(self) -> int | None:
        """Cut the lane if it is inside a device's read, and say which; None (not cut) if not."""
        with self._lock:
            if self.device is None:
                return None
            self.cut = True
            return self.device


class Worker:
    """One daemon thread per backend at a time (a read that never returns cannot keep the process
    alive at exit). Where a read hangs inside one device's read, :meth:`cut` leaves that thread to
    its call and hands the queue to a fresh one: the device is held apart until its call returns,
    while the backend's other devices are read. At most one thread is left per held device."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[Lane], Any]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._held: set[int] = set()
        self._unfinished = 0  # jobs submitted and not returned, those left to a hung call included
        self._closed = False
        self._then: Callable[[], None] | None = None
        self._lane = self._start()

    def _start(self) -> Lane:
        lane = Lane(self)
        threading.Thread(target=self._run, args=(lane,), name=f"warptd-{self.name}", daemon=True).start()
        return lane

    def submit(self, fn: Callable[[Lane], Any]) -> Future[Any]:
        """Run ``fn(lane)`` on the worker, after the jobs before it."""
        future: Future[Any] = Future()
        with self._lock:
            self._unfinished += 1
        self._queue.put((future, fn))
        return future

    def _run(self, lane: Lane) -> None:
        while (item := self._queue.get()) is not None:
            future, fn = item
            if future.set_running_or_notify_cancel():
                lane.job = future
                try:
                    future.set_result(fn(lane))
                except BaseException as exc:
                    future.set_exception(exc)
            self._finished()
            if lane.cut:
                return  # a fresh thread took the queue

    def cut(self, job: Future[Any] | None = None) -> tuple[int, Future[Any] | None] | None:
        """Give up on the job running now (only if it is ``job``, where given) where it is inside one
        device's read: that device is held until the call returns and a fresh thread takes the queue.
        Returns the device and the job cut; None where nothing was cut (not inside a device: the
        backend itself hangs)."""
        with self._lock:
            lane = self._lane
            if job is not None and lane.job is not job:
                return None
            device = lane._cut_inside()
            if device is None:
                return None
            self._held.add(device)
            self._lane = self._start()
            return device, lane.job

    def held(self) -> frozenset[int]:
        """Devices whose read was cut and has not returned."""
        with self._lock:
            return frozenset(self._held)

    def release(self, device: int) -> None:
        with self._lock:
            self._held.discard(device)

    def close(self, then: Callable[[], None] | None = None) -> None:
        """Take no more work; ``then`` runs once every job taken has returned, those left to a hung
        call included: here and now where none runs, else on the thread of the last to return."""
        with self._lock:
            self._closed = True
            now = self._unfinished == 0
            self._then = None if now else then
        self._queue.put(None)
        if now and then is not None:
            then()

    def _finished(self) -> None:
        with self._lock:
            self._unfinished -= 1
            then = self._then if self._closed and self._unfinished == 0 else None
            if then is not None:
                self._then = None
        if then is not None:
            then()


class HandedRead:
    """A read handed to a worker that publishes it there, and its caller, who waits for it at most a
    timeout: whichever of the two comes first decides whether it is published."""

    __slots__ = ("_decided", "_lock", "future")

    def __init__(self) -> None:
        self.future: Future[bool] = Future()
        self._lock = threading.Lock()
        self._decided: bool | None = None  # True: published; False: given up on

    def publishing(self) -> bool:
        """On the worker, once read: True when it is to be published (its caller still waits)."""
        with self._lock:
            if self._decided is None:
                self._decided = True
            return self._decided

    def wait(self, timeout: float) -> bool:
        """Wait for the read and its publication: whether it was published. Raises ``TimeoutError``
        when it was given up on (then it is not published), or the read's own error."""
        try:
            return self.future.result(timeout=timeout)
        except FutureTimeout:
            with self._lock:
                if self._decided is None:
                    self._decided = False
            if not self._decided:
                raise
            return self.future.result()  # being published now: a listener's work, not an SDK call


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

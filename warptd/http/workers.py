"""A thread pool for handlers that may block, whose idle threads end, so a burst leaves no threads."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any


def lower_priority(nice: int) -> None:
    """Lower the calling thread's CPU priority by ``nice``, from the daemon's own: on Linux, nice(2)
    applies to the calling thread alone. An unprivileged thread cannot raise it back, so only
    threads of their own (a pool's) call this."""
    with contextlib.suppress(OSError):
        os.nice(nice)


_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


class Workers(Executor):
    """Up to ``size`` threads, started on demand; one idle for ``idle_s`` seconds ends."""

    def __init__(self, size: int, idle_s: float = 5.0, name: str = "warptd-handler", nice: int = 0) -> None:
        self.size, self.idle_s, self.name, self.nice = size, idle_s, name, nice
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = self._idle = 0
        self._closed = False

    @property
    def threads(self) -> int:
        return self._threads

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if kwargs:
            raise TypeError("Workers.submit takes positional arguments only")
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("workers shut down")
            self._queue.put((future, fn, args))
            if self._queue.qsize() > self._idle and self._threads < self.size:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self.name}-{self._threads}", daemon=True).start()
        return future

    def _work(self) -> None:
        if self.nice:
            lower_priority(self.nice)
        while True:
            with self._lock:
                self._idle += 1
            try:
                item = self._queue.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                    if self._queue.empty():  # checked under the lock submit() puts under: nothing is lost
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
            if item is None:
                with self._lock:
                    self._threads -= 1
                return
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:
                    future.set_exception(exc)
            # An idle thread keeps nothing of its last call: its future holds the answer (a
            # response body, megabytes of a listing) until the caller is done with it, no longer.
            del item, future, fn, args

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; queued work is cancelled with ``cancel_futures``, and threads end."""
        with self._lock:
            self._closed = True
            threads = self._threads
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in range(threads):
            self._queue.put(None)

"""The handler pool's threads; the bcrypt checks' pool runs at a lower CPU priority than the daemon."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.helpers import wait_until
from warptd.http.workers import Workers


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_a_niced_pool_lowers_its_own_threads_only():
    """Linux schedules each thread apart: the pool's threads run at the daemon's nice + 10, and the
    event loop's thread (here the caller's) keeps its own."""
    mine = _nice()
    niced, plain = Workers(2, nice=10, name="niced"), Workers(2)
    try:
        assert niced.submit(_nice).result(timeout=5) == min(19, mine + 10)
        assert plain.submit(_nice).result(timeout=5) == mine
        assert _nice() == mine
    finally:
        niced.shutdown()
        plain.shutdown()


def test_bounded_pool_runs_everything_and_idle_threads_end():
    workers = Workers(4, idle_s=0.2)
    gate = threading.Event()
    peak = [0]

    def job(i: int) -> int:
        peak[0] = max(peak[0], workers.threads)
        gate.wait(timeout=5)
        return i * 2

    futures = [workers.submit(job, i) for i in range(50)]
    assert wait_until(lambda: workers.threads == 4, timeout=5)
    gate.set()
    assert [f.result(timeout=10) for f in futures] == [i * 2 for i in range(50)]
    assert peak[0] <= 4
    assert wait_until(lambda: workers.threads == 0, timeout=5)  # idle ones end
    assert workers.submit(lambda: "again").result(timeout=5) == "again"  # and come back on demand
    workers.shutdown(cancel_futures=True)


def test_errors_reach_the_caller_and_shutdown_refuses_work():
    workers = Workers(2, idle_s=5)
    with pytest.raises(ZeroDivisionError):
        workers.submit(lambda: 1 / 0).result(timeout=5)
    workers.shutdown(cancel_futures=True)
    assert wait_until(lambda: workers.threads == 0, timeout=5)
    with pytest.raises(RuntimeError):
        workers.submit(time.time)


def test_an_idle_thread_keeps_nothing_of_its_last_call():
    """Idle, a thread held its last future and with it the answer (a response body): 40 threads,
    40 answers kept for nothing."""
    import weakref

    class Answer:
        pass

    workers = Workers(1, idle_s=30)
    try:
        answer = workers.submit(Answer).result(timeout=5)
        gone = weakref.ref(answer)
        del answer
        assert wait_until(lambda: gone() is None, timeout=2)
        assert workers.threads == 1  # the thread is still there, idle
    finally:
        workers.shutdown()

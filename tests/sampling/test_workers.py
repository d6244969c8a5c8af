"""A backend's worker: a read that hangs inside one device's read is cut, the device held apart until
its call returns, and a fresh thread takes the backend's other reads."""

from __future__ import annotations

import threading

from tests.helpers import wait_until
from warptd.sampling.workers import Lane, Worker


def _reading(device: int, call: threading.Event | None = None):
    """A job that reads ``device`` on its lane (its call waits for ``call`` where given)."""

    def job(lane: Lane) -> str:
        if not lane.enter(device):
            return "cut before"
        try:
            if call is not None:
                call.wait(10)
        finally:
            lane.leave()
        return "cut" if lane.cut else "read"

    return job


def test_a_read_hung_in_a_device_is_cut_and_a_fresh_thread_reads_on_until_the_call_returns():
    worker = Worker("test")
    hung = threading.Event()
    stuck = worker.submit(_reading(5, hung))
    assert wait_until(stuck.running, timeout=5)
    behind = worker.submit(_reading(0))  # queued behind the hung read
    cut = worker.cut()
    assert cut is not None and cut[0] == 5 and cut[1] is stuck
    assert worker.held() == {5}
    assert behind.result(timeout=5) == "read"  # on the fresh thread, while device 5's call hangs
    assert worker.submit(lambda lane: lane.held()).result(timeout=5) == {5}
    assert not stuck.done()
    hung.set()  # the call returns: the device may be read again, the old thread ends
    assert stuck.result(timeout=5) == "cut"
    assert worker.held() == frozenset()
    assert worker.submit(_reading(5)).result(timeout=5) == "read"
    threads = [t for t in threading.enumerate() if t.name == "warptd-test"]
    assert wait_until(lambda: sum(t.is_alive() for t in threads) == 1, timeout=5)
    worker.close()


def test_a_read_outside_any_device_is_not_cut_and_only_the_named_job_is():
    worker = Worker("test")
    release = threading.Event()
    outside = worker.submit(lambda lane: release.wait(10))  # e.g. listing the devices
    assert wait_until(outside.running, timeout=5)
    assert worker.cut() is None  # the backend itself hangs: nothing to hold apart
    release.set()
    hung = threading.Event()
    stuck = worker.submit(_reading(1, hung))
    assert wait_until(stuck.running, timeout=5)
    assert worker.cut(job=outside) is None  # not the job running now
    assert worker.cut(job=stuck) is not None
    hung.set()
    worker.close()


def test_close_runs_its_callback_once_every_job_has_returned_a_hung_one_included():
    worker = Worker("test")
    done: list[str] = []
    worker.close(then=lambda: done.append(threading.current_thread().name))
    assert done == [threading.current_thread().name]  # nothing ran: at once, here
    worker = Worker("test")
    hung = threading.Event()
    stuck = worker.submit(_reading(2, hung))
    assert wait_until(stuck.running, timeout=5)
    worker.cut()
    worker.close(then=lambda: done.append("after"))
    assert done == [threading.current_thread().name]  # the hung call has not returned
    hung.set()
    assert wait_until(lambda: done[-1] == "after", timeout=5)

"""The SDK session's lock: reads share it, a reopen holds it alone and never waits for ever."""

from __future__ import annotations

import threading
import time

from tests.helpers import wait_until
from warptd.backends.session_lock import SessionLock


def test_reads_share_it_and_a_reopen_waits_at_most_its_timeout_for_a_hung_one():
    lock = SessionLock()
    hung, inside = threading.Event(), threading.Event()

    def hung_read() -> None:
        with lock:
            inside.set()
            hung.wait(10)

    reader = threading.Thread(target=hung_read)
    reader.start()
    assert inside.wait(5)
    started = time.monotonic()
    with lock:  # another device's read is not held up
        assert time.monotonic() - started < 0.1
    with lock.exclusive(0.2) as alone:
        assert not alone  # the hung read keeps its share: the reopen is put off
    assert 0.2 <= time.monotonic() - started < 1.0
    hung.set()
    reader.join(5)
    with lock.exclusive(0.2) as alone:
        assert alone


def test_it_is_reentrant_and_a_sole_reader_may_reopen():
    lock = SessionLock()
    with lock, lock, lock.exclusive(0.1) as alone:  # the reader reopens (nvidia_mig's rediscovery does)
        assert alone
        with lock, lock.exclusive(0.1) as again:
            assert again
    assert lock.readers() == 0
    with lock.exclusive(0.1) as alone:
        assert alone


def test_a_read_waits_while_a_reopen_holds_it():
    lock = SessionLock()
    order: list[str] = []
    with lock.exclusive(0.1) as alone:
        assert alone
        reader = threading.Thread(
            target=lambda: (lock.__enter__(), order.append("read"), lock.__exit__(None, None, None))
        )
        reader.start()
        time.sleep(0.1)
        order.append("reopened")
    assert wait_until(lambda: order == ["reopened", "read"], timeout=5)
    reader.join(5)

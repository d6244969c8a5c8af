"""The handler pool's threads; the bcrypt checks' pool runs at a lower CPU priority than the daemon."""

from __future__ import annotations

import os
import threading

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

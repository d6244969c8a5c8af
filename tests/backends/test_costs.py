"""The CPU each kind of read takes, charged to the reading thread and exported per backend."""

from __future__ import annotations

import threading
import time

from tests.doubles.sdk import burn_cpu
from warptd.backends.costs import ReadCosts, thread_time


def test_a_read_is_charged_its_own_threads_cpu_not_the_wall_clock():
    costs = ReadCosts()
    with costs.measure("energy"):
        burn_cpu(0.02)
    with costs.measure("energy"):
        time.sleep(0.05)  # a wait is not the driver's CPU
    started = thread_time()
    burn_cpu(0.01)
    costs.charge("power", started)
    totals = costs.totals()
    assert totals["energy"].reads == 2
    assert 0.02 <= totals["energy"].cpu_seconds < 0.04
    assert totals["power"].reads == 1 and 0.01 <= totals["power"].cpu_seconds < 0.03


def test_another_threads_cpu_is_not_charged():
    costs = ReadCosts()
    busy = threading.Thread(target=burn_cpu, args=(0.1,))
    with costs.measure("calls"):
        busy.start()
        busy.join()  # this thread waits while the other burns 0.1 s
    assert costs.totals()["calls"].cpu_seconds < 0.05

"""The energy total between two reads of a device's counter: the integrated instant power bridges it,
the counter's next read re-anchors it, and it never goes down (issue 32).

The driver is modelled as a real H200 behaved: the energy counter and the instant power are refreshed
every 100 ms (a read between two refreshes sees the last one), and the load changes every second.
"""

from __future__ import annotations

import math
import random
from itertools import pairwise

import pytest

from warptd.sampling.counters import BRIDGE_LAG_S, EnergyTracker

REFRESH_S = 0.1


class Driver:
    """One GPU's true draw (a step every second) and what NVML answers of it at a time ``t``."""

    def __init__(self, seed: int, watts: tuple[float, float] = (80.0, 700.0)) -> None:
        rng = random.Random(seed)
        self.steps = [rng.uniform(*watts) for _ in range(400)]  # W during second k
        self.phase = rng.uniform(0, REFRESH_S)  # where the driver's refreshes fall

    def power(self, t: float) -> float:
        """The true instant draw."""
        return self.steps[int(t)]

    def energy(self, t: float) -> float:
        """The true joules drawn since 0."""
        whole = int(t)
        return sum(self.steps[:whole]) + self.steps[whole] * (t - whole)

    def refreshed(self, t: float) -> float:
        """The time of the driver's last refresh at or before ``t``."""
        return math.floor((t - self.phase) / REFRESH_S) * REFRESH_S + self.phase

    def counter(self, t: float) -> float:
        """What the energy counter answers at ``t`` (J, from a large value since the driver loaded)."""
        return 5_000_000.0 + self.energy(max(0.0, self.refreshed(t)))

    def instant(self, t: float) -> float:
        """What field 186 answers at ``t``."""
        return self.power(max(0.0, self.refreshed(t)))


def _run(driver: Driver, seconds: float, interval: float, counter_every: float, jitter: float = 0.003):
    """Sample ``driver`` every ``interval`` s (with scheduler jitter), reading the counter every
    ``counter_every`` s: [(t, counter read or None, published total)]."""
    rng, tracker, rows = random.Random(7), EnergyTracker(), []
    t, last_counter = 0.05, -math.inf
    while t < seconds:
        read_counter = t - last_counter >= counter_every - interval / 2
        counter = driver.counter(t) if read_counter else None
        if read_counter:
            last_counter = t
        _, total = tracker.update(t, driver.instant(t), counter)
        rows.append((t, counter, total))
        t += interval + rng.uniform(-jitter, jitter)
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_the_total_is_the_counter_at_every_read_of_it_and_never_goes_down(seed):
    rows = _run(Driver(seed), seconds=120, interval=0.1, counter_every=1.0)
    totals = [total for _, _, total in rows]
    assert all(later >= earlier for earlier, later in pairwise(totals))
    anchors = [(counter, total) for _, counter, total in rows if counter is not None]
    assert len(anchors) >= 110
    assert sum(total == counter for counter, total in anchors) >= len(anchors) - 2
    for counter, total in anchors:
        assert total == pytest.approx(counter, abs=1.0)  # a held total is only just past the counter


@pytest.mark.parametrize("seed", range(6))
def test_increase_over_any_60_s_is_within_half_a_percent_of_the_counters(seed):
    driver = Driver(seed)
    rows = _run(driver, seconds=150, interval=0.1, counter_every=1.0)
    for start in range(0, len(rows) - 600, 37):  # windows starting anywhere, anchors or not
        (t0, _, total0), (t1, _, total1) = rows[start], rows[start + 600]
        truth = driver.counter(t1) - driver.counter(t0)
        assert abs((total1 - total0) - truth) <= 0.005 * truth, (t0, t1)


def test_between_two_reads_the_bridge_integrates_the_instant_power():
    """Each interval at the lower of its readings (the step may have come late in it), and the newest
    interval's higher reading times the counter's refresh short of now."""
    tracker = EnergyTracker()
    tracker.update(0.0, 300.0, 1000.0)
    assert tracker.update(0.5, 300.0, None)[1] == pytest.approx(1000.0 + 150 - 300 * BRIDGE_LAG_S)
    assert tracker.update(1.0, 500.0, None)[1] == pytest.approx(1000.0 + 150 + 150 - 500 * BRIDGE_LAG_S)
    assert tracker.update(1.5, 500.0, 1420.0)[1] == 1420.0  # the counter's read re-anchors it


def test_a_bridge_that_ran_ahead_holds_until_the_counter_passes_it():
    tracker = EnergyTracker()
    tracker.update(0.0, 1000.0, 0.0)
    ahead = tracker.update(1.0, 1000.0, None)[1]
    assert ahead == pytest.approx(1000.0 - 100.0)
    assert tracker.update(1.1, 0.0, 500.0)[1] == ahead  # the counter says less: held, not lowered
    assert tracker.update(1.2, 0.0, None)[1] == ahead
    assert tracker.update(2.0, 0.0, 950.0)[1] == 950.0  # and it takes the counter again once past


def test_no_bridge_across_a_gap_the_counter_gives_the_holes_energy():
    tracker = EnergyTracker()
    tracker.update(0.0, 200.0, 0.0)
    before = tracker.update(0.5, 200.0, None)[1]
    tracker.gap()  # lost for a while: the bridge must not integrate across it
    after = tracker.update(10.0, 200.0, None)[1]
    assert after == before
    assert tracker.update(11.0, 200.0, 2200.0)[1] == 2200.0  # the counter's delta holds the hole


def test_a_reset_counter_under_a_bridge_still_counts_only_new_energy():
    tracker = EnergyTracker()
    tracker.update(0.0, 100.0, 50_000.0)
    bridged = tracker.update(0.5, 100.0, None)[1]
    _, total = tracker.update(1.0, 100.0, 40.0, limit_watts=700.0)  # a driver reload restarted it
    assert total >= bridged
    assert total == pytest.approx(50_040.0)

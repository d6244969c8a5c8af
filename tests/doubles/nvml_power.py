"""What NVML answers of a GPU's power and energy over time, in Python, for tests of the estimate between
two reads of the energy counter (the C double charges real CPU and real time; this answers any time).

As the H200 answered (``shared/notes/real-h200.md``): the energy counter, the instant power (field 186)
and the 1 s average (field 185) are refreshed every 100 ms, a read between two refreshes seeing the
last one. ``lag``: an average that is that many seconds late besides, as a driver may be.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

REFRESH_S = 0.1


class SquareWave:
    """A load alternating between ``low`` and ``high`` W every ``turn`` s, from a random phase."""

    def __init__(self, turn: float, low: float = 100.0, high: float = 500.0, seed: int = 0) -> None:
        self.turn, self.low, self.high = turn, low, high
        self.phase = random.Random(seed).uniform(0, 2 * turn)

    def power(self, t: float) -> float:
        return self.high if math.floor((t + self.phase) / self.turn) % 2 else self.low

    def energy(self, t: float) -> float:
        """Joules drawn from 0 to ``t``."""
        return self._from_phase(t + self.phase) - self._from_phase(self.phase)

    def _from_phase(self, x: float) -> float:
        period = 2 * self.turn
        whole = math.floor(x / period)
        rest = x - whole * period
        return (
            whole * (self.low + self.high) * self.turn
            + self.low * min(rest, self.turn)
            + self.high * max(0.0, rest - self.turn)
        )


class Steps:
    """A load changing every ``every`` s to a level drawn between ``low`` and ``high`` W."""

    def __init__(self, every: float = 1.0, low: float = 80.0, high: float = 700.0, seed: int = 0) -> None:
        rng = random.Random(seed)
        self.every = every
        self.levels = [rng.uniform(low, high) for _ in range(100_000)]

    def power(self, t: float) -> float:
        return self.levels[int(t / self.every)]

    def energy(self, t: float) -> float:
        whole = int(t / self.every)
        return sum(self.levels[:whole]) * self.every + self.levels[whole] * (t - whole * self.every)


class Driver:
    """NVML's answers about one GPU drawing ``load``: counter, instant and average as of their last
    refresh (a random phase), the average ``lag`` s later besides."""

    def __init__(self, load: SquareWave | Steps, lag: float = 0.0, seed: int = 0) -> None:
        self.load, self.lag = load, lag
        self.phase = random.Random(seed + 1).uniform(0, REFRESH_S)

    def refreshed(self, t: float) -> float:
        return math.floor((t - self.phase) / REFRESH_S) * REFRESH_S + self.phase

    def counter(self, t: float) -> float:
        """Field 83 (J): from a large value since the driver loaded."""
        return 5_000_000.0 + self.load.energy(self.refreshed(t))

    def instant(self, t: float) -> float:
        return self.load.power(self.refreshed(t))

    def average(self, t: float) -> float:
        end = self.refreshed(t) - self.lag
        return self.load.energy(end) - self.load.energy(end - 1.0)


#: One sample as the tracker saw it: time, whether it read the counter, the total handed out, and
#: the counter as the driver would have answered then.
Row = tuple[float, bool, float, float]


def sample(
    driver: Driver,
    update: Callable[[float, float, float | None, float], float | None],
    *,
    seconds: float,
    interval: float,
    counter_every: float,
    start: float = 5.0,
    jitter: float = 0.003,
    seed: int = 0,
) -> list[Row]:
    """Sample ``driver`` every ``interval`` s (with the scheduler's jitter) for ``seconds``, reading the
    counter every ``counter_every`` s; ``update(t, instant, counter or None, average)`` gives the total."""
    rng, rows, k, last_counter = random.Random(seed + 2), [], 0, -math.inf
    t = start
    while t < start + seconds:
        read = t - last_counter >= counter_every - interval / 2
        if read:
            last_counter = t
        total = update(t, driver.instant(t), driver.counter(t) if read else None, driver.average(t))
        assert total is not None
        rows.append((t, read, total, driver.counter(t)))
        k += 1
        t = start + k * interval + rng.uniform(0, jitter)
    return rows


def span_errors(rows: list[Row], span: float) -> list[float]:
    """The relative error of the total's increase over every ``span`` s between scrapes once a second
    (each reading the newest sample), against the counter at those samples' times."""
    scrapes, at, index = [], rows[0][0] + 0.5, 0
    while at < rows[-1][0]:
        while index + 1 < len(rows) and rows[index + 1][0] <= at:
            index += 1
        scrapes.append(rows[index])
        at += 1.0
    steps = round(span)
    return [
        ((b[2] - a[2]) - (b[3] - a[3])) / (b[3] - a[3])
        for a, b in zip(scrapes, scrapes[steps:], strict=False)
    ]

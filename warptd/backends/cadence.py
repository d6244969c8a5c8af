"""When a device's values of a cadence are read again: the health values (counters, limits, fans, media
engines) every ``--health-interval``, the energy counter every ``--energy-interval``.

The health values change on events (an ECC error, a row remapped, an administrator's power limit),
not from one sample to the next, so a backend sampled faster than ``--health-interval`` reads them only
that often and reports the last values in between, like DCGM's per-field update intervals (dcgm-exporter
collects every 30 s). At the defaults (1 s and 30 s) every thirtieth sample reads them; at ``--interval``
equal to or longer than ``--health-interval`` every sample does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from warptd.metrics.cadence import PERIODS
from warptd.metrics.spec import Cadence

if TYPE_CHECKING:
    from warptd.config import Settings


def is_due(last: float | None, now: float, period: float, pace: float) -> bool:
    """Whether a value read every ``period`` s is due again at ``now`` (monotonic) for a reader that
    comes every ``pace`` s: at every read where the reader is no faster, else once ``period`` less half
    a read (a read a little early still counts) has passed since ``last`` (None: never read)."""
    return pace >= period or last is None or now - last >= period - pace / 2


class DeviceCadence:
    """One device's monotonic time of its last read of the values of a ``cadence`` (the health values,
    the energy counter), read every period :data:`~warptd.metrics.cadence.PERIODS` gives it under the
    settings in force (``settings()``: a reload changes the intervals live)."""

    __slots__ = ("_cadence", "_last", "_settings")

    def __init__(self, settings: Callable[[], Settings], cadence: Cadence = Cadence.HEALTH) -> None:
        self._settings = settings
        self._cadence = cadence
        self._last: float | None = None

    def due(self, now: float | None = None, pace: float | None = None) -> bool:
        """Whether this read of the device reads its values too (and if so, from now on it counts as
        their last read). Half a sample of slack: at 0.1 s and 1 s, every tenth sample. ``pace``: how
        often the device is read now where that is not ``--interval`` (a window's 0.1 s): the device is
        watched."""
        settings = self._settings()
        period = PERIODS[self._cadence](settings, pace is not None)
        pace = min(settings.interval, pace or math.inf)  # how often the device is read now
        if pace >= period:
            return True  # every read reads them
        now = time.monotonic() if now is None else now
        if not is_due(self._last, now, period, pace):
            return False
        self._last = now
        return True

    def read(self, now: float | None = None) -> None:
        """They were read now by a read that reads them anyway (the health batch reads the energy
        counter): the next read of them is a period on."""
        self._last = time.monotonic() if now is None else now

    def forget(self) -> None:
        """Read the values at the next read: the device was down, or the SDK was reopened."""
        self._last = None

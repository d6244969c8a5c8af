"""When a device's slow-changing values are read again: health counters, limits, fans, media engines.

They change on events (an ECC error, a row remapped, an administrator's power limit), not from one
sample to the next, so a backend sampled faster than ``--health-interval`` reads them only that often
and reports the last values in between, like DCGM's per-field update intervals (dcgm-exporter
collects every 30 s). At the defaults (1 s and 10 s) every tenth sample reads them; at ``--interval``
equal to or longer than ``--health-interval`` every sample does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from warptd.config import Settings


class DeviceCadence:
    """One device's monotonic time of its last read of some values, read every ``period`` (a setting's
    name: ``health_interval`` for the slow values, ``energy_interval`` for the energy counter), or every
    ``watched`` (a setting's name) where that is shorter while a window samples the device;
    ``settings()`` gives the settings in force (a reload changes the intervals live)."""

    __slots__ = ("_last", "_period", "_settings", "_watched")

    def __init__(
        self, settings: Callable[[], Settings], period: str = "health_interval", watched: str | None = None
    ) -> None:
        self._settings = settings
        self._period = period
        self._watched = watched
        self._last: float | None = None

    def due(self, now: float | None = None, pace: float | None = None) -> bool:
        """Whether this read of the device reads its values too (and if so, from now on it counts as
        their last read). Half a sample of slack: at 0.1 s and 1 s, every tenth sample. ``pace``: how
        often the device is read now where that is not ``--interval`` (a window's 0.1 s): the device is
        watched."""
        settings = self._settings()
        period = getattr(settings, self._period)
        if pace is not None and self._watched is not None:
            period = min(period, getattr(settings, self._watched))
        pace = min(settings.interval, pace or math.inf)  # how often the device is read now
        if pace >= period:
            return True  # every read reads them
        now = time.monotonic() if now is None else now
        last = self._last
        if last is not None and now - last < period - pace / 2:
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


class SlowReads:
    """Per device index, its :class:`DeviceCadence` (for backends without device objects)."""

    def __init__(self, settings: Callable[[], Settings]) -> None:
        self._settings = settings
        self._devices: dict[int, DeviceCadence] = {}

    def due(self, index: int, now: float | None = None) -> bool:
        """:meth:`DeviceCadence.due` of device ``index``."""
        cadence = self._devices.get(index)
        if cadence is None:
            cadence = self._devices[index] = DeviceCadence(self._settings)
        return cadence.due(now)

    def forget(self, index: int | None = None) -> None:
        """Read device ``index``'s (or every device's) slow values at its next read: it was down, or
        the SDK was reopened."""
        if index is None:
            self._devices.clear()
        else:
            self._devices.pop(index, None)

"""Joules since the last sample, per energy total, for the listeners that split energy (pods,
workloads, their recordings).

What a listener gets (``DeviceSample.energy_joules``, ``DomainPower.energy_joules``) is no raw counter:
it is the total of the device's or domain's :class:`~warptd.sampling.tracks.EnergyTrack`, which takes
wraps and resets (a GPU reset, a driver reload, amdgpu's counter back at 0) into account and is kept
by identity for the daemon's life, so it never goes back. A lower total is an older read handed over
late: the publisher tells the listeners after releasing the backend's lock, so a fast read and a
scheduled one of the same backend may reach them in the other order. Such a reading adds nothing and
is not taken as the baseline: taking it would count the joules between it and the newer one twice.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)


class TotalDeltas(Generic[Key]):
    """The last total read of each key, and the joules each new one adds."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[Key, float] = {}

    def is_late(self, key: Key, total: float) -> bool:
        """True for a total lower than the last of ``key``: an older read, which :meth:`delta` ignores."""
        previous = self._last.get(key)
        return previous is not None and total < previous

    def delta(self, key: Key, total: float | None) -> float:
        """Joules since the last total of ``key``: 0 for its first (the baseline), for an unreadable
        one, and for a lower one (an older read published late, left out of the baseline)."""
        if total is None or self.is_late(key, total):
            return 0.0
        previous = self._last.get(key)
        self._last[key] = total
        return 0.0 if previous is None else total - previous

"""The energy a recording was handed out, mapped onto the energy counter's own totals at its reads."""

from __future__ import annotations

import bisect
from typing import ClassVar


class CounterAnchors:
    """The energy handed out mapped onto the counter's own totals: at each read of the counter
    (handed out, counted), straight lines between, the handed-out growth after the last read.

    Between reads of the counter the daemon hands out a total tiled on from the power's average,
    which may run ahead of the counter and is then held back until the counter catches up. Mapped
    through the anchors, a point at a read of the counter holds the counter's own total and the
    points between share out its growth, so a rate taken from the points is the counter's. The span
    starts at the counter's first read: a total bridged before it (a read in flight as a window
    opened) may be up to a refresh behind.
    """

    #: Anchors kept at most: past it every other interior one goes (a day of 1 s reads is 86 400).
    LIMIT: ClassVar[int] = 4096
    __slots__ = ("_counted", "_first", "_handed")

    def __init__(self) -> None:
        self._handed: list[float] = []
        self._counted: list[float] = []
        self._first = 0.0  # the counter's own total at its first read

    def add(self, handed: float, counter: float) -> None:
        """A read of the counter: ``handed`` the total handed out since the start, ``counter`` the
        counter's own total."""
        handed_at, counted_at = self._handed, self._counted
        if not handed_at:
            self._first = counter
        counted = counter - self._first
        if handed_at and handed <= handed_at[-1]:  # nothing handed out since: the later read stands
            counted_at[-1] = max(counted_at[-1], counted)
            return
        offset = counted - handed
        if len(handed_at) >= 2 and all(abs(c - h - offset) < 1e-9 for h, c in self._last_two()):
            handed_at[-1], counted_at[-1] = handed, counted  # on one line: the middle one says nothing
            return
        handed_at.append(handed)
        counted_at.append(counted)
        if len(handed_at) > self.LIMIT:
            del handed_at[1:-1:2], counted_at[1:-1:2]

    def _last_two(self) -> zip[tuple[float, float]]:
        return zip(self._handed[-2:], self._counted[-2:], strict=True)

    def covers(self, handed: float) -> bool:
        """The counter was read, and more was handed out after its first read (else its span is empty)."""
        return len(self._handed) > 1 or (bool(self._handed) and handed > self._handed[0])

    def counted(self, handed: float) -> float:
        """The counter's own total since its first read where ``handed`` had been handed out."""
        handed_at, counted_at = self._handed, self._counted
        at = bisect.bisect_right(handed_at, handed) - 1
        if at < 0:
            return 0.0
        if at == len(handed_at) - 1:
            return counted_at[at] + handed - handed_at[at]
        share = (handed - handed_at[at]) / (handed_at[at + 1] - handed_at[at])
        return counted_at[at] + share * (counted_at[at + 1] - counted_at[at])

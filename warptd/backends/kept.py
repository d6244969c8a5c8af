"""Values made from raw SDK answers, kept while the answers stand still.

Most of what a sample reads does not change from one sample to the next (an idle GPU's memory, its
clocks, temperatures and clock-event states). Handing back the same object then lets the sampler's
checks and totals recognise it by identity, and a 10 Hz sample allocates less.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
_NOTHING: Any = object()


class Kept(Generic[T]):
    """The last value made from some raw answers; made again only when they change."""

    __slots__ = ("_raw", "_value")

    def __init__(self) -> None:
        self._raw: Hashable = _NOTHING
        self._value: Any = None

    def of(self, raw: Hashable, make: Callable[[Any], T]) -> T:
        """``make(raw)``, or the value it made last time for equal answers."""
        if raw != self._raw:
            self._raw, self._value = raw, make(raw)
        return self._value  # type: ignore[no-any-return]

"""An energy total carried across a restart of the daemon: what the run before saved, and how the
counter's first reading after the gap continues it (the counter ran on, wrapped, or restarted)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from warptd.models import DriverInstance


class Bounded(Protocol):
    """The counter a total continues on: it bounds what a claim adds, and counts its wraps."""

    wraps: int

    def bounded(self, added: float, ceiling: float | None, seconds: float | None) -> float: ...


@dataclass(frozen=True, slots=True)
class Resumed:
    """What an earlier run of the daemon saved of one total: the total, the raw counter it was computed
    from (None: not of this boot), whether that run was on this boot, the Unix time of that reading,
    the power then (W), the most it had handed out (J), the most it promised to hand out before its
    next save (J) and the driver's initialisation of the device then; None in files of earlier
    versions."""

    total: float
    raw: float | None = None
    same_boot: bool = False
    read_at: float | None = None
    power: float | None = None
    published: float | None = None
    promise: float | None = None
    driver: DriverInstance | None = None  #: the driver's initialisation the raw value was counted under

    def continued(
        self,
        counter: Bounded,
        energy: float,
        power: float | None,
        *,
        wrap_range: float | None,
        ceiling: float,
        since: float | None,
        driver: DriverInstance | None,
    ) -> tuple[float, float]:
        """The total at the first reading after the gap (``energy`` J, ``power`` W, ``since`` s after the
        saved reading, under the driver's ``driver``), and the joules it adds beyond what was counted.

        A counter that ran on across the gap measured it: at or above the saved raw value on the same
        boot (or with the boot unknown), or below it on the same boot with a known wrap range (a wrap;
        more than one cannot be told from one). What it adds is at most the ceiling (the device's power
        limit) times the time since the saved reading. A counter that restarted meanwhile (no raw value
        after a reboot, else lower without a wrap: a driver reload) counted only since then, and its
        reading is no measure of the gap: it adds at most the gap's estimate from the power on both
        sides of it (the one known, where the other is not), and nothing where neither is known.
        Beyond either bound is dropped (the counter's ``dropped``), never the power limit times the gap.

        Nothing handed out goes back: a total the earlier run had handed out beyond the counter's is
        carried (as ahead of a counter), and where the counter restarted, or may have, the total starts
        at the most the earlier run promised before its next save, the rest counted as added: it may
        have been killed just before that save.
        """
        raw, total = self.raw, self.total
        same = self._same_driver(driver, energy, ceiling, since)
        if raw is not None and energy >= raw and same is not False:  # it ran on: the gap's energy
            total += counter.bounded(energy - raw, ceiling, since)
            # Not told either way: as counted it adds only what the counter says, but a reload may have
            # come between, so nothing handed out before goes back.
            return self._promised(total) if same is None else (total, 0.0)
        if raw is not None and same is not False and self.same_boot and wrap_range:  # a wrap
            counter.wraps += 1
            return total + counter.bounded((wrap_range - raw) + energy, ceiling, since), 0.0
        # It restarted (a reboot; a reset, or the boot unknown): the gap's power as measured around it.
        measured = [watts for watts in (self.power, power) if watts is not None]
        estimate = min(sum(measured) / len(measured), ceiling) if measured else 0.0
        total = max(
            total + counter.bounded(energy, estimate, since if since is not None else 0.0),
            self.published or 0.0,
        )  # handed out for sure
        return self._promised(total)

    def _promised(self, total: float) -> tuple[float, float]:
        """``total``, or the promise where it is more (it may have handed out up to that), and the excess."""
        if self.promise is not None and self.promise > total:
            return self.promise, self.promise - total
        return total, 0.0

    def _same_driver(
        self, driver: DriverInstance | None, energy: float, ceiling: float, since: float | None
    ) -> bool | None:
        """Whether the counter kept counting across the gap under one initialisation of the device by its
        driver: what the driver tells (:meth:`DriverInstance.same_as`); else True where the counter now
        holds more than twice the ceiling times the gap (it cannot have restarted since), False where
        it went back; None where nothing tells."""
        if self.raw is None:
            return False  # another boot
        if driver is not None and self.driver is not None:
            same = driver.same_as(self.driver)
            if same is not None:
                return same
        if energy < self.raw:
            return None  # a wrap or a reset: the counter's own range tells
        if since is not None and energy > 2 * ceiling * since:
            return True
        return None

"""Each device's and each power domain's state across readings, as plain objects: no threads, no
sleeps, no clock of their own (the caller passes the monotonic time of each read; only a total
restored from ``--state-dir`` reads the wall clock, once, to bound what its first reading may add:
:meth:`EnergyTracker.resume_from`).

A :class:`DeviceTrack` owns what the sampler keeps between two readings of one device: its energy
total (and the joules a reset counter claimed beyond its ceiling), its throttle seconds, its further
counters made monotonic, its identity (UUID) and the time of its newest reading. ``update(reading,
at)`` turns one reading into the :class:`DeviceSample` that scrapes and listeners get. A backend's
tracks (:class:`DeviceTracks`) are found by index in its current list of devices, made again when a
rediscovery lists them anew, and kept by identity, so a device listed again continues its totals.
:class:`DomainTrack` and :class:`DomainTracks` do the same for a power backend's domains.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from operator import attrgetter
from typing import TYPE_CHECKING

import structlog

from warptd.models import DeviceReading
from warptd.power.base import DomainPower
from warptd.sampling.counters import MAX_PLAUSIBLE_WATTS, CounterTotals, EnergyTracker, ThrottleSeconds
from warptd.sampling.snapshot import DeviceSample

if TYPE_CHECKING:
    from warptd.models import GPUInfo
    from warptd.power.base import DomainReading, PowerSource

log = structlog.get_logger("warptd.sampler")

#: Gives a new energy tracker, saved as ``backend/identity``, the total an earlier run saved.
Resume = Callable[[str, EnergyTracker], None]


def no_saved_totals(key: str, tracker: EnergyTracker) -> None:
    """A :data:`Resume` for a sampler without ``--state-dir``: every total starts anew."""


#: A reading's values in field order, and the setters of its slots in the same order.
_VALUES = attrgetter(*(f.name for f in fields(DeviceReading)))
_SETTERS = tuple(getattr(DeviceReading, f.name).__set__ for f in fields(DeviceReading))
_SET_UUID, _SET_POWER = (getattr(DeviceReading, name).__set__ for name in ("uuid", "power_watts"))


def _published(reading: DeviceReading, uuid: str, power: float | None) -> DeviceReading:
    """``reading`` with the device's UUID and power, in 40 % of :func:`dataclasses.replace`'s time
    (once per device and sample): its slots copied as they are, the reading having been built (and
    normalised by ``__post_init__``) already; only the new copy is written to, before anyone has it."""
    copy = object.__new__(DeviceReading)
    for set_slot, value in zip(_SETTERS, _VALUES(reading), strict=True):
        set_slot(copy, value)
    _SET_UUID(copy, uuid)
    _SET_POWER(copy, power)
    return copy


class DroppedJoules:
    """Energy that reset or restored counters of one backend claimed beyond their ceiling (``joules``),
    and that restarts added to stay at or above what the run before may have handed out."""

    __slots__ = ("joules", "overcount")

    def __init__(self) -> None:
        self.joules = 0.0
        self.overcount = 0.0


class EnergyTrack:
    """One energy total under the key its saved state has (``backend/identity``); a reset or restored
    counter's claim beyond its ceiling is dropped, added to its backend's ``dropped`` and logged."""

    __slots__ = ("dropped", "key", "tracker")

    def __init__(
        self, key: str, resume: Resume = no_saved_totals, dropped: DroppedJoules | None = None
    ) -> None:
        self.key = key
        self.tracker = EnergyTracker()
        self.dropped = dropped if dropped is not None else DroppedJoules()
        resume(key, self.tracker)

    def update_energy(
        self,
        at: float,
        power: float | None,
        energy: float | None,
        wrap_range: float | None = None,
        limit_watts: float | None = None,
        *,
        average: float | None = None,
    ) -> tuple[float | None, float | None]:
        """Power (W) and monotonic energy (J) of a reading at ``at``: see :meth:`EnergyTracker.update`."""
        tracker = self.tracker
        before = tracker.counter.dropped if tracker.counter is not None else 0.0
        overcount = tracker.overcount
        result = tracker.update(at, power, energy, wrap_range, limit_watts, average=average)
        if tracker.overcount != overcount:
            added = tracker.overcount - overcount
            self.dropped.overcount += added
            log.warning(
                "energy_restart_overcount",
                counter=self.key,
                added_joules=round(added, 3),
                reason="the counter restarted while the daemon was down: the total starts at the most the "
                "run before promised to hand out before its next save, which it may have reached",
            )
        if tracker.counter is not None and tracker.counter.dropped != before:
            dropped = tracker.counter.dropped - before
            self.dropped.joules += dropped
            log.warning(
                "energy_jump_dropped",
                counter=self.key,
                dropped_joules=round(dropped, 3),
                ceiling_watts=limit_watts or MAX_PLAUSIBLE_WATTS,
                reason="a reset or restored counter claimed more than the ceiling times the time since "
                "its last reading",
            )
        return result

    def gap(self) -> None:
        """Not read this time (lost, or its backend failed): nothing is integrated across the hole."""
        self.tracker.gap()


class DeviceTrack:
    """One device across its readings: energy, throttle seconds, monotonic counters, its UUID and the
    time of its newest reading."""

    __slots__ = ("counters", "energy", "seen_at", "throttle", "uuid")

    def __init__(
        self,
        backend: str,
        index: int,
        uuid: str = "",
        resume: Resume = no_saved_totals,
        dropped: DroppedJoules | None = None,
    ) -> None:
        self.uuid = uuid
        self.energy = EnergyTrack(f"{backend}/{uuid or index}", resume, dropped)
        self.throttle = ThrottleSeconds()
        self.counters = CounterTotals()
        #: Monotonic time of the newest reading made a sample.
        self.seen_at = -math.inf

    def update(self, reading: DeviceReading, at: float) -> DeviceSample | None:
        """The sample of ``reading``, read at monotonic ``at``, with the device's UUID and, where it
        has only an energy counter, the mean power since its last reading; None when a reading read
        as late or later was already made one (a normal and a fast read crossing)."""
        if at <= self.seen_at:
            return None
        self.seen_at = at
        uuid = self.uuid
        if not reading.up:
            self.energy.gap()
            return DeviceSample(reading if reading.uuid == uuid else replace(reading, uuid=uuid))
        tracker = self.energy.tracker
        power, energy = self.energy.update_energy(
            reading.read_at or at,
            reading.power_watts,
            reading.energy_counter_joules,
            limit_watts=reading.power_limit_watts,
            average=reading.power_average_watts,
        )
        if reading.power_average_watts is not None:  # the driver's average: no instant reading to make
            power = reading.power_watts
        if reading.uuid != uuid or power != reading.power_watts:
            reading = _published(reading, uuid, power)
        counted = read_at = None
        if tracker.counter_read_at is not None:
            read_at = tracker.counter_read_at + (time.time() - time.monotonic())
            if reading.energy_counter_joules is not None:
                counted = tracker.counter.total if tracker.counter is not None else None
        return DeviceSample(
            reading,
            energy,
            self.throttle.update(at, reading.throttle_active, reading.throttle_counter_seconds),
            self.counters.update(reading.counters),
            counted,
            read_at,
        )


class DeviceTracks:
    """One device backend's tracks: by index in its current list of devices, and by identity (UUID,
    else index) for every device it listed, so one listed again continues where it was."""

    __slots__ = ("_by_identity", "_by_index", "_listed", "_resume", "backend", "dropped")

    def __init__(self, backend: str, resume: Resume = no_saved_totals) -> None:
        self.backend = backend
        self._resume = resume
        self.dropped = DroppedJoules()
        self._listed: list[GPUInfo] | None = None
        self._by_index: dict[int, DeviceTrack] = {}
        self._by_identity: dict[str, DeviceTrack] = {}

    def follow(self, listed: list[GPUInfo]) -> None:
        """Take the backend's list of devices (a new list at each rediscovery): each index's track is
        the one of the device now there, told the driver's current initialisation of it."""
        if listed is self._listed:
            return
        self._listed = listed
        self._by_index = {}
        for info in listed:
            track = self._by_index[info.index] = self._track(info.index, info.uuid or "")
            track.energy.tracker.driver = info.driver_instance

    def track(self, index: int) -> DeviceTrack:
        """The track of the device at ``index``; one the list does not name is known by its index."""
        track = self._by_index.get(index)
        if track is None:
            track = self._by_index[index] = self._track(index, "")
        return track

    def _track(self, index: int, uuid: str) -> DeviceTrack:
        identity = uuid or str(index)
        track = self._by_identity.get(identity)
        if track is None:
            track = self._by_identity[identity] = DeviceTrack(
                self.backend, index, uuid, self._resume, self.dropped
            )
        return track

    def update(self, readings: list[DeviceReading], at: float) -> list[DeviceSample]:
        """The samples of ``readings``, read at ``at``, but of those older than their device's last."""
        samples, by_index = [], self._by_index
        for reading in readings:
            track = by_index.get(reading.index) or self.track(reading.index)
            sample = track.update(reading, at)
            if sample is not None:
                samples.append(sample)
        return samples

    def gap(self) -> None:
        """The backend failed: no device's energy is integrated across the outage."""
        for track in tuple(self._by_identity.values()):  # a publish may add one meanwhile
            track.energy.gap()

    def energy(self) -> Iterator[EnergyTrack]:
        """Every device's energy total, for the saved state."""
        for track in tuple(self._by_identity.values()):
            yield track.energy


class DomainTrack(EnergyTrack):
    """One power domain across its readings: its energy total, keyed by what it belongs to."""

    __slots__ = ()

    def update(self, reading: DomainReading, at: float, source: PowerSource) -> DomainPower:
        """The domain's power (measured, or derived from its counter) and monotonic energy."""
        if not reading.readable:
            self.gap()
            return DomainPower(reading.domain, source, None, None, False)
        power, energy = self.update_energy(
            at,
            reading.power_watts,
            reading.energy_counter_joules,
            reading.energy_range_joules,
            reading.limit_watts,
        )
        return DomainPower(reading.domain, source, power, energy, True)


class DomainTracks:
    """One power backend's domain tracks, by what each domain's energy belongs to (a GPU's UUID, else
    the domain's name); its domains are read together, so one time of the newest read serves all."""

    __slots__ = ("_resume", "_tracks", "backend", "dropped", "seen_at", "source")

    def __init__(self, backend: str, source: PowerSource, resume: Resume = no_saved_totals) -> None:
        self.backend = backend
        self.source = source
        self._resume = resume
        self.dropped = DroppedJoules()
        self._tracks: dict[str, DomainTrack] = {}
        self.seen_at = -math.inf

    def update(self, readings: list[DomainReading], at: float) -> list[DomainPower] | None:
        """Every domain's power and energy; None when a read as late or later was already made."""
        if at <= self.seen_at:
            return None
        self.seen_at = at
        tracks, source, domains = self._tracks, self.source, []
        for reading in readings:
            identity = reading.identity or reading.domain
            track = tracks.get(identity)
            if track is None:
                track = tracks[identity] = DomainTrack(
                    f"{self.backend}/{identity}", self._resume, self.dropped
                )
            domains.append(track.update(reading, at, source))
        return domains

    def gap(self) -> None:
        """The backend failed: no domain's energy is integrated across the outage."""
        for track in tuple(self._tracks.values()):
            track.gap()

    def energy(self) -> Iterator[EnergyTrack]:
        """Every domain's energy total, for the saved state."""
        yield from tuple(self._tracks.values())

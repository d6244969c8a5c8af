"""Turns a backend's read into samples through its tracks, stores them in the snapshot and tells the
listeners. No thread of its own: the backend's worker, or a caller waiting for a read, publishes.

A power backend that measures an accelerator backend's devices through the same SDK calls (NVML's
``nvml`` beside ``nvidia``: :meth:`PowerBackend.domains_from`) is published from each full read of
that backend, so a GPU's power and energy counter are read once per tick, not twice.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from warptd.power.base import DomainPower, PowerBackend
from warptd.sampling.listener import SampleListener
from warptd.sampling.reads import Raw
from warptd.sampling.snapshot import DeviceSample, Snapshot
from warptd.sampling.tracks import DeviceTracks, DomainTracks

if TYPE_CHECKING:
    from warptd.backends.base import AcceleratorBackend
    from warptd.errors import ErrorKind
    from warptd.sampling.counters import EnergyTracker
    from warptd.sampling.state import CounterState


class Publisher:
    """Every backend's tracks, and what a published read changes: the snapshot, the saved totals, the
    listeners. One read of a backend is published at a time."""

    def __init__(
        self,
        snapshot: Snapshot,
        state: CounterState,
        backends: dict[str, AcceleratorBackend | PowerBackend],
    ) -> None:
        self.snapshot = snapshot
        self.state = state
        #: Called after every published read; a fast read passes only the watched devices' samples.
        self.listeners: list[SampleListener] = []
        #: One map of tracks per backend: its devices' (made again at a rediscovery) or its domains'.
        self.tracks: dict[str, DeviceTracks | DomainTracks] = {
            name: (
                DomainTracks(name, backend.source, state.resume)
                if isinstance(backend, PowerBackend)
                else DeviceTracks(name, state.resume)
            )
            for name, backend in backends.items()
        }
        self._locks = {name: threading.Lock() for name in backends}
        #: accelerator backend -> the power backends published from its full reads (no job of their own)
        self.derived: dict[str, list[PowerBackend]] = {}
        for backend in backends.values():
            if (
                isinstance(backend, PowerBackend)
                and backend.companion in backends
                and backend.domains_from([]) is not None
            ):
                self.derived.setdefault(backend.companion, []).append(backend)

    def publish(self, name: str, raw: Raw, started: float, *, full: bool) -> None:
        """Make the samples of backend ``name``'s read, store them and tell the listeners; ``full``: a
        scheduled read of every device (a fast read has only the watched ones). A device's reading
        older than one already published (a normal and a fast read crossing) is dropped."""
        derived = [
            (power.name, Raw(raw.at, power.domains_from(raw.readings) or [], Counter()))
            for power in (self.derived.get(name, ()) if full else ())
        ]
        tracks = self.tracks[name]
        with self._locks[name]:
            self.snapshot.count_errors(name, raw.errors)
            self.snapshot.count_device_errors(name, raw.device_errors)
            state = self.snapshot.get(name)
            new_devices: list[DeviceSample] | None = None
            new_domains: list[DomainPower] | None = None
            changes: dict[str, object]
            if isinstance(tracks, DomainTracks):
                new_domains = tracks.update(raw.readings, raw.at)
                kept = state.domains if state else []
                changes = {"domains": new_domains if new_domains is not None else kept}
            else:
                tracks.follow(state.devices_info if state else [])
                new_devices = tracks.update(raw.readings, raw.at)
                order = [r.index for r in raw.readings] if full else None
                changes = {"devices": _merge(state.devices if state else [], new_devices, order)}
            if full:
                changes["last_duration"] = time.monotonic() - started
                changes["samples"] = (state.samples + 1) if state else 1
            dropped, overcount = tracks.dropped.joules, tracks.dropped.overcount
            if dropped:
                changes["energy_dropped_joules"] = dropped
            if overcount:
                changes["energy_overcount_joules"] = overcount
            if raw.costs:
                changes["read_costs"] = raw.costs
            self._save_due(name, tracks)  # before the totals show: the file holds what they may reach
            now = time.time()
            self.snapshot.update(
                name, **changes, healthy=True, stale_reason=None, last_success=now, last_attempt_done=now
            )
        for listener in self.listeners:
            listener(name, new_devices, new_domains, raw.at)
        for power_name, power_raw in derived:
            self.publish(power_name, power_raw, started, full=True)

    def fail(self, name: str, kind: ErrorKind, reason: str) -> None:
        """Backend ``name``'s read failed: it is stale, nothing is integrated across the outage."""
        self.tracks[name].gap()
        self.snapshot.count_errors(name, Counter({kind: 1}))
        self.snapshot.update(name, healthy=False, stale_reason=reason, last_attempt_done=time.time())
        for power in self.derived.get(name, ()):  # its read was this one
            self.fail(power.name, kind, reason)

    def _save_due(self, name: str, tracks: DeviceTracks | DomainTracks) -> None:
        """Save backend ``name``'s totals, under its lock, when due: first at its first read, then every
        ``SAVE_EVERY_S``, and at once where a total reached the promise the file holds."""
        state = self.state
        if state.due(name) or any(track.tracker.over_promise for track in tracks.energy()):
            state.record(name, _trackers(tracks))
            if not state.write():
                self.snapshot.state_save_errors = state.save_errors

    def save_all(self) -> None:
        """Save every backend's totals as they are, each taken under its lock, promising no more (at
        stop: nothing is handed out after)."""
        for name, tracks in self.tracks.items():
            with self._locks[name]:
                self.state.record(name, _trackers(tracks), final=True)
        if not self.state.write():
            self.snapshot.state_save_errors = self.state.save_errors


def _trackers(tracks: DeviceTracks | DomainTracks) -> Iterator[tuple[str, EnergyTracker]]:
    for track in tracks.energy():
        yield track.key, track.tracker


def _merge(
    current: list[DeviceSample], new: list[DeviceSample], order: list[int] | None
) -> list[DeviceSample]:
    """The backend's device list after a read. A full read (``order``: the indices it read) gives the
    list, keeping the current sample of a device whose reading was dropped as older; a fast read
    replaces its devices in the current list."""
    if order is not None and len(new) == len(order):  # the common case: every device read was newer
        return list(new)  # the snapshot's own list, apart from the one the listeners get
    fresh = {sample.reading.index: sample for sample in new}
    if order is None:
        return [fresh.pop(s.reading.index, s) for s in current] + list(fresh.values())
    kept = {sample.reading.index: sample for sample in current}
    return [sample for i in order if (sample := fresh.get(i) or kept.get(i)) is not None]

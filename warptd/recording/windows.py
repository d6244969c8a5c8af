"""Energy windows on the daemon: named recordings opened and ended over HTTP (Zeus-style).

Windows overlap and nest; each is its own :class:`Recorder` fed by the daemon's samplers. While a
window is open its devices are sampled at ``--window-interval``, and each edge reads them at once,
so a window's energy spans its own begin and end rather than the nearest regular samples. Every
resource is bounded: open windows, history, the bytes of their time series (memory.py), and a
maximum duration after which a window ends itself. A window opened with a lease (``lease_s``) also
ends when its client stops renewing it: one reaper thread ends every window at its deadline,
whichever of the two comes first.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import structlog

from warptd.config import SettingsView
from warptd.power.base import DomainPower
from warptd.recording.digest import forget_digests
from warptd.recording.memory import SeriesBudget
from warptd.recording.reaper import Reaper
from warptd.recording.recorder import Recorder
from warptd.recording.schema import Recording
from warptd.recording.selection import UnknownTarget, select_targets
from warptd.recording.window_history import WindowHistory
from warptd.sampling.snapshot import DeviceSample, Snapshot

#: Ended windows that keep their time series (the rest keep their summaries only).
HISTORY_WITH_POINTS = 10

log = structlog.get_logger("warptd.windows")


class WindowError(Exception):
    """Refused; ``status`` is the HTTP code that fits. Nothing was started."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Sampling(Protocol):
    """What windows need of the sampler: faster sampling of watched devices, and reads at the edges."""

    def watch(self, owner: str, devices: set[tuple[str, int]], power: set[str]) -> None: ...
    def unwatch(self, owner: str) -> None: ...
    def read_edges(self, devices: Iterable[tuple[str, int]], power: Iterable[str] = ()) -> None: ...


@dataclass
class Window:
    """One open window: its recorder, and the monotonic deadlines at which it ends by itself."""

    recorder: Recorder
    max_deadline: float = float("inf")  # opened + --window-max-duration
    lease_s: float | None = None  # the lease its client renews; None: held to the maximum only
    lease_deadline: float = float("inf")  # last renewal + lease_s

    @property
    def id(self) -> str:
        return self.recorder.id

    @property
    def devices(self) -> set[tuple[str, int]]:
        """Its devices, as (backend, index)."""
        return {(t.backend, int(t.key)) for t in self.recorder.targets if t.kind == "device"}

    @property
    def power(self) -> set[str]:
        """The power backends of its domains."""
        return {t.backend for t in self.recorder.targets if t.kind == "domain"}

    def start(self, max_duration_s: float) -> None:
        """Start recording, its deadlines counted from now."""
        self.recorder.start()
        now = time.monotonic()
        self.max_deadline = now + max_duration_s
        if self.lease_s is not None:
            self.lease_deadline = now + self.lease_s

    def renew(self) -> Lease:
        """Extend the lease by its ``lease_s`` from now; 409 without one, or once it lapsed."""
        if self.lease_s is None:
            raise WindowError(409, f"window {self.id} has no lease to renew (open it with lease_s)")
        now = time.monotonic()
        if self.lease_deadline <= now:  # lapsed; the reaper ends it at once
            raise WindowError(409, f"window {self.id}'s lease expired before this renewal")
        self.lease_deadline = now + self.lease_s
        return Lease(self.id, self.lease_s, time.time() + self.lease_s)

    def due(self) -> tuple[float, str]:
        """When this window ends by itself, and the end_reason it then gets."""
        if self.lease_deadline < self.max_deadline:
            return self.lease_deadline, "lease_expired"
        return self.max_deadline, "max_duration"

    def lease_fields(self) -> dict[str, float | None]:
        """The lease as a recording shows it: its length and, while open, the Unix time it lapses."""
        if self.lease_s is None:
            return {"lease_seconds": None, "lease_expires_at": None}
        left = self.lease_deadline - time.monotonic()
        return {"lease_seconds": self.lease_s, "lease_expires_at": time.time() + max(left, 0.0)}


@dataclass(frozen=True)
class Lease:
    """A renewed lease: the window, its lease's length and the Unix time it now lapses."""

    window_id: str
    lease_seconds: float
    expires_at: float


class WindowLimits(SettingsView, prefix="window_"):
    """Bounds on the windows open at once and kept: the ``window_*`` settings."""

    max_open: int
    max_duration: float
    history: int
    lease_min: float
    lease_max: float
    memory: int  # bytes: the time series of open windows and the history (memory.py)


class WindowManager:
    """Opens, shows and ends windows; ``on_end`` receives every finished recording (the metrics)."""

    def __init__(
        self,
        snapshot: Snapshot,
        sampling: Sampling,
        accelerator_backends: set[str],
        limits: WindowLimits | None = None,
        *,
        carbon: Callable[[Recording], Recording] | None = None,
        interval: Callable[[], float | None] | None = None,
        on_end: Callable[[Recording], None] | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.sampling = sampling
        self.accelerator_backends = accelerator_backends
        self.limits = limits or WindowLimits()
        self._carbon = carbon or (lambda recording: recording)
        self._interval: Callable[[], float | None] = interval or (lambda: None)
        self._on_end = on_end or (lambda _: None)
        self._on_change = on_change or (lambda: None)
        self._open: dict[str, Window] = {}
        self.budget = SeriesBudget(lambda: self.limits.memory)
        self.history = WindowHistory(lambda: self.limits.history, lambda: HISTORY_WITH_POINTS, self.budget)
        self._lock = threading.Lock()
        self._deadlines = threading.Condition(self._lock)  # wakes the reaper when one comes nearer
        self._closing = False
        self._reaper = Reaper(
            self._deadlines,
            lambda: {w.id: w.due() for w in self._open.values()},
            self._end_by_itself,
            lambda: self._closing,
        )

    # -- opening ------------------------------------------------------------------------------
    def open(
        self,
        name: str,
        devices: list[str] | None = None,
        labels: dict[str, str] | None = None,
        lease_s: float | None = None,
    ) -> Recording:
        """Start a window on ``devices`` (default: every accelerator and the CPU packages); with
        ``lease_s``, it ends ``lease_expired`` unless renewed within each ``lease_s``."""
        window = self._window(name, devices, labels, lease_s)
        self._admit(window)
        self.sampling.watch(window.id, window.devices, window.power)
        with self._lock:
            ended_meanwhile = window.id not in self._open
        if ended_meanwhile:  # a request or the reaper ended it (and unwatched) before the watch above
            self.sampling.unwatch(window.id)
            raise WindowError(409, f"window {window.id} was ended while it opened")
        self._read_edges(window)
        targets = [t.id for t in window.recorder.targets]
        log.info("window_opened", window=window.id, name=name, targets=targets, lease_s=lease_s)
        self._on_change()
        return self._view(window)

    def _window(
        self, name: str, devices: list[str] | None, labels: dict[str, str] | None, lease_s: float | None
    ) -> Window:
        """A window on the targets ``devices`` names, not started; 422 for a request that cannot be."""
        limits = self.limits
        if lease_s is not None and not limits.lease_min <= lease_s <= limits.lease_max:
            raise WindowError(
                422,
                f"invalid window request: lease_s: {lease_s:g} is outside {limits.lease_min:g}-"
                f"{limits.lease_max:g} s (--window-lease-min, --window-lease-max)",
            )
        try:
            targets = select_targets(self.snapshot, devices, self.accelerator_backends)
        except UnknownTarget as exc:
            raise WindowError(422, str(exc)) from None
        if not targets:
            raise WindowError(422, "no device or power domain to record on this node")
        recorder = Recorder(
            targets,
            kind="window",
            name=name,
            labels=labels,
            recording_id=uuid.uuid4().hex[:12],
            interval_seconds=self._interval(),
            edges=True,
            on_grow=self.budget.update,
        )
        return Window(recorder, lease_s=lease_s)

    def _admit(self, window: Window) -> None:
        """Start the window among the open ones, its deadlines counted from now: 503 while shutting
        down, 429 past --window-max-open or where its series do not fit --window-memory."""
        targets = window.recorder.targets
        with self._lock:
            if self._closing:
                raise WindowError(503, "the daemon is shutting down")
            if len(self._open) >= self.limits.max_open:
                raise WindowError(429, f"{len(self._open)} windows are open already (--window-max-open)")
            domains = sum(t.kind == "domain" for t in targets)
            if not self.budget.admit(window.recorder, len(targets) - domains, domains):
                full = f"open windows fill --window-memory: {len(targets)} more targets do not fit"
                raise WindowError(429, full)
            window.start(self.limits.max_duration)
            self._open[window.id] = window
            self._reaper.start()  # before the edge reads: a window always ends by itself
            self._deadlines.notify_all()

    def _view(self, window: Window, points: bool = True) -> Recording:
        """An open window's recording so far (without its points for a listing), with its lease."""
        recording = self._carbon(window.recorder.recording_now(points=points))
        return recording.model_copy(update=window.lease_fields())

    def _read_edges(self, window: Window) -> None:
        """Read the window's devices and domains now, every counter exactly (the energy counter, throttle
        times, whatever their cadence): its first or last sample is at its edge."""
        self.sampling.read_edges(window.devices, window.power)

    # -- the sampler's samples ------------------------------------------------------------------
    def on_sample(
        self,
        backend: str,
        devices: list[DeviceSample] | None,
        domains: list[DomainPower] | None,
        at: float | None = None,
    ) -> None:
        """Sampler listener: every open window records the samples of its targets."""
        with self._lock:
            recorders = [w.recorder for w in self._open.values()]
        try:
            for recorder in recorders:
                recorder.on_sample(backend, devices, domains, at)
        finally:
            forget_digests()

    # -- queries and ending ---------------------------------------------------------------------
    def get(self, window_id: str) -> Recording | None:
        with self._lock:
            window, ended = self._open.get(window_id), self.history.summary(window_id)
        if window is not None:
            return self._view(window)
        return None if ended is None else self.history.recording(window_id, ended)

    def list(self) -> list[Recording]:
        """Open windows, then ended ones, newest first, without their time series."""
        return [Recording.model_validate_json(window) for window in self.page(0, None)[0]]

    def page(self, offset: int, limit: int | None) -> tuple[list[bytes], int]:
        """The JSON of the windows of :meth:`list` from ``offset`` on, at most ``limit`` (None: all),
        and how many there are in all. An ended window's is its summary as kept, neither parsed nor
        written again: a listing costs a join, not a pass of pydantic over every window (which,
        holding the GIL, kept the scrapes waiting)."""
        with self._lock:
            live = list(reversed(self._open.values()))
            ended = self.history.newest_first()
        stop = None if limit is None else offset + limit
        shown = [self._view(w, points=False).model_dump_json().encode() for w in live[offset:stop]]
        after = max(offset - len(live), 0)
        until = None if stop is None else max(stop - len(live), 0)
        return shown + ended[after:until], len(live) + len(ended)

    @property
    def open_count(self) -> int:
        with self._lock:
            return len(self._open)

    def end(self, window_id: str, reason: str = "requested") -> Recording:
        """End a window and return its recording; ``reason`` ``requested`` when a client ended it (a
        status of its own, not the word ``ended`` again). A client's end reads the window's devices
        once more, so its last sample is at its edge; an end by itself (the reaper's) reads nothing,
        so that a hung backend cannot hold up the ends of other windows. A client's end that comes
        after its lease lapsed (before the reaper got to it) ends the window as ``lease_expired``
        and answers 409, as if the reaper had been first."""
        with self._lock:
            window = self._open.get(window_id)
            if window is None:
                raise self._not_open(window_id)
            late = reason == "requested" and window.lease_deadline <= time.monotonic()
        if late:
            reason = "lease_expired"
        elif reason == "requested":
            self._read_edges(window)
        try:
            with self._lock:
                if self._open.pop(window_id, None) is None:  # ended meanwhile by another request
                    raise self._not_open(window_id)
                try:
                    recording = self._file(window_id, window, reason)
                except BaseException:
                    self.budget.release(window.recorder)  # its reservation, whatever failed
                    raise
        finally:
            self.sampling.unwatch(window_id)  # never left sampling at 10 Hz, whatever failed
        log.info("window_ended", window=window_id, reason=reason, energy_joules=recording.energy_joules)
        self._on_end(recording)
        self._on_change()
        if late:
            raise self._not_open(window_id)
        return recording

    def _file(self, window_id: str, window: Window, reason: str) -> Recording:
        """Stop the window's recorder and keep it in the history; the whole recording returned.
        Called with the lock held."""
        window.recorder.stop(reason)
        recording = self._carbon(window.recorder.recording_now())
        recording = recording.model_copy(update={"lease_seconds": window.lease_s})
        self.history.add(recording, window.recorder)
        return recording

    def _not_open(self, window_id: str) -> WindowError:
        """409 naming how an ended window ended (``lease_expired`` tells a client it was too late),
        else 404. Called with the lock held."""
        reason = self.history.end_reason(window_id)
        if reason is not None:
            return WindowError(409, f"window {window_id} already ended ({reason})")
        return WindowError(404, f"no window {window_id!r}")

    # -- leases and deadlines -------------------------------------------------------------------
    def renew(self, window_id: str) -> Lease:
        """Extend a leased window's lease by its ``lease_s`` from now; 409 once it lapsed or ended."""
        with self._lock:
            window = self._open.get(window_id)
            if window is None:
                raise self._not_open(window_id)
            return window.renew()

    def _end_by_itself(self, window_id: str, reason: str) -> None:
        """End a window past its deadline, or at shutdown; one a request ended meanwhile stays ended."""
        with contextlib.suppress(WindowError):
            self.end(window_id, reason)

    def shutdown(self) -> None:
        """Refuse new windows and end the open ones (their recordings stay in the history)."""
        with self._lock:
            self._closing = True
            self._deadlines.notify_all()
            ids = list(self._open)
        for window_id in ids:
            self._end_by_itself(window_id, "shutdown")

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
import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from warptd.config import SettingsView
from warptd.power.base import DomainPower
from warptd.recording.memory import SeriesBudget
from warptd.recording.recorder import Recorder, forget_digests
from warptd.recording.schema import Recording
from warptd.recording.selection import UnknownTarget, select_targets
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
    devices: dict[str, set[int]] = field(default_factory=dict)  # accelerator backend -> indices
    power: set[str] = field(default_factory=set)  # power backends of its domains

    @property
    def id(self) -> str:
        return self.recorder.id

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
        # Summaries without points, as their JSON: one buffer each, not thousands of small objects
        # that would pin the allocator's arenas after the points are freed.
        self._ended: OrderedDict[str, bytes] = OrderedDict()
        self._kept: OrderedDict[str, Recorder] = OrderedDict()  # ended windows that keep points
        self.budget = SeriesBudget(lambda: self.limits.memory)
        self._lock = threading.Lock()
        self._deadlines = threading.Condition(self._lock)  # wakes the reaper when one comes nearer
        self._reaper: threading.Thread | None = None
        self._closing = False

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
        window = Window(
            Recorder(
                targets,
                kind="window",
                name=name,
                labels=labels,
                recording_id=uuid.uuid4().hex[:12],
                interval_seconds=self._interval(),
                edges=True,
                on_grow=self.budget.update,
            ),
            lease_s=lease_s,
        )
        for target in targets:
            if target.kind == "device":
                window.devices.setdefault(target.backend, set()).add(int(target.key))
            else:
                window.power.add(target.backend)
        with self._lock:
            if self._closing:
                raise WindowError(503, "the daemon is shutting down")
            if len(self._open) >= self.limits.max_open:
                raise WindowError(429, f"{len(self._open)} windows are open already (--window-max-open)")
            domains = sum(t.kind == "domain" for t in targets)
            if not self.budget.admit(window.recorder, len(targets) - domains, domains):
                full = f"open windows fill --window-memory: {len(targets)} more targets do not fit"
                raise WindowError(429, full)
            window.recorder.start()
            now = time.monotonic()
            window.max_deadline = now + limits.max_duration
            if lease_s is not None:
                window.lease_deadline = now + lease_s
            self._open[window.id] = window
            self._start_reaper()  # before the edge reads: a window always ends by itself
            self._deadlines.notify_all()
        self.sampling.watch(window.id, _pairs(window.devices), window.power)
        with self._lock:
            ended_meanwhile = window.id not in self._open
        if ended_meanwhile:  # a request or the reaper ended it (and unwatched) before the watch above
            self.sampling.unwatch(window.id)
            raise WindowError(409, f"window {window.id} was ended while it opened")
        self._read_edges(window)
        log.info(
            "window_opened", window=window.id, name=name, targets=[t.id for t in targets], lease_s=lease_s
        )
        self._on_change()
        return self._view(window)

    def _view(self, window: Window, points: bool = True) -> Recording:
        """An open window's recording so far (without its points for a listing), with its lease."""
        recording = self._carbon(window.recorder.recording_now(points=points))
        return recording.model_copy(update=window.lease_fields())

    def _read_edges(self, window: Window) -> None:
        """Read the window's devices and domains now, every counter exactly (the energy counter, throttle
        times, whatever their cadence): its first or last sample is at its edge."""
        self.sampling.read_edges(_pairs(window.devices), window.power)

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
            window, ended = self._open.get(window_id), self._ended.get(window_id)
        if window is not None:
            return self._view(window)
        if ended is None:
            return None
        kept, summary = self._kept.get(window_id), Recording.model_validate_json(ended)
        return kept.with_points(summary) if kept is not None else summary

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
            ended = list(reversed(self._ended.values()))
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
        """Stop the window's recorder and keep its summary (and, for a while, its points) in the
        history; the whole recording returned. Called with the lock held."""
        window.recorder.stop(reason)
        recording = self._carbon(window.recorder.recording_now())
        recording = recording.model_copy(update={"lease_seconds": window.lease_s})
        targets = [target.model_copy(update={"points": []}) for target in recording.targets]
        summary = recording.model_copy(update={"targets": targets})
        self._ended[window_id] = summary.model_dump_json().encode()
        self._kept[window_id] = window.recorder
        self.budget.ended(window.recorder)
        window.recorder.compact_series()  # kept among windows that come and go
        while len(self._ended) > self.limits.history:
            self._ended.popitem(last=False)
        self._thin_history()
        return recording

    def _thin_history(self) -> None:
        """Only the newest ``HISTORY_WITH_POINTS`` ended windows still in the history keep their
        time series (compact, and charged to --window-memory); older ones keep their summaries."""
        for window_id in list(self._kept):
            if window_id not in self._ended or len(self._kept) > HISTORY_WITH_POINTS:
                self.budget.release(self._kept.pop(window_id))

    def _not_open(self, window_id: str) -> WindowError:
        """409 naming how an ended window ended (``lease_expired`` tells a client it was too late),
        else 404. Called with the lock held."""
        ended = self._ended.get(window_id)
        if ended is not None:
            reason = json.loads(ended).get("end_reason")  # kept as its summary's JSON
            return WindowError(409, f"window {window_id} already ended ({reason})")
        return WindowError(404, f"no window {window_id!r}")

    # -- leases and deadlines -------------------------------------------------------------------
    def renew(self, window_id: str) -> Lease:
        """Extend a leased window's lease by its ``lease_s`` from now; 409 once it lapsed or ended."""
        with self._lock:
            window = self._open.get(window_id)
            if window is None:
                raise self._not_open(window_id)
            if window.lease_s is None:
                raise WindowError(409, f"window {window_id} has no lease to renew (open it with lease_s)")
            now = time.monotonic()
            if window.lease_deadline <= now:  # lapsed; the reaper ends it at once
                raise WindowError(409, f"window {window_id}'s lease expired before this renewal")
            window.lease_deadline = now + window.lease_s
        return Lease(window_id, window.lease_s, time.time() + window.lease_s)

    def _start_reaper(self) -> None:
        """Start the one thread that ends windows at their deadlines (with the lock held)."""
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="warptd-window-reaper", daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        """Sleep until the nearest deadline of any open window (woken when a nearer one appears), then
        end every window past its own: a lease not renewed in time, or the maximum duration."""
        while True:
            with self._lock:
                if self._closing:
                    return
                now = time.monotonic()
                deadlines = {window_id: window.due() for window_id, window in self._open.items()}
                due = [(window_id, reason) for window_id, (at, reason) in deadlines.items() if at <= now]
                if not due:
                    nearest = min((at for at, _ in deadlines.values()), default=float("inf"))
                    self._deadlines.wait(None if nearest == float("inf") else nearest - now)
                    continue
            for window_id, reason in due:
                try:
                    self.end(window_id, reason)
                except WindowError:  # a request ended it at the same moment
                    pass
                except Exception:  # the reaper outlives any one window's end, without spinning on it
                    log.exception("window_end_failed", window=window_id, reason=reason)
                    time.sleep(1.0)

    def shutdown(self) -> None:
        """Refuse new windows and end the open ones (their recordings stay in the history)."""
        with self._lock:
            self._closing = True
            self._deadlines.notify_all()
            ids = list(self._open)
        for window_id in ids:
            with contextlib.suppress(WindowError):
                self.end(window_id, "shutdown")


def _pairs(devices: dict[str, set[int]]) -> set[tuple[str, int]]:
    return {(backend, index) for backend, indices in devices.items() for index in indices}

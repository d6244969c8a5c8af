"""Energy windows on the daemon: named recordings opened and ended over HTTP (Zeus-style).

Windows overlap and nest; each is its own :class:`Recorder` fed by the daemon's samplers. While a
window is open its devices are sampled at ``--window-interval``, and each edge reads them at once,
so a window's energy spans its own begin and end rather than the nearest regular samples. Every
resource is bounded: open windows, history, the bytes of their time series (memory.py), and a
maximum duration after which a window ends itself.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from warptd.power.base import DomainPower
from warptd.recording.memory import SeriesBudget
from warptd.recording.recorder import Recorder
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
    def sample_watched(self, name: str, indices: set[int] | None = None) -> bool: ...


@dataclass
class Window:
    """One open window: its recorder and the timer that ends it at the maximum duration."""

    recorder: Recorder
    timer: threading.Timer | None = None
    devices: dict[str, set[int]] = field(default_factory=dict)  # accelerator backend -> indices
    power: set[str] = field(default_factory=set)  # power backends of its domains

    @property
    def id(self) -> str:
        return self.recorder.id


@dataclass(frozen=True)
class WindowLimits:
    max_open: int = 64
    max_duration_s: float = 86400.0
    history: int = 100
    memory_bytes: int = 8 * 2**20  # the time series of open windows and the history (memory.py)


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
        self.budget = SeriesBudget(lambda: self.limits.memory_bytes)
        self._lock = threading.Lock()
        self._closing = False

    # -- opening ------------------------------------------------------------------------------
    def open(
        self, name: str, devices: list[str] | None = None, labels: dict[str, str] | None = None
    ) -> Recording:
        """Start a window on ``devices`` (default: every accelerator and the CPU packages)."""
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
            )
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
            if not self.budget.admit(window.recorder, len(targets)):
                full = f"open windows fill --window-memory: {len(targets)} more targets do not fit"
                raise WindowError(429, full)
            window.recorder.start()
            self._open[window.id] = window
        self.sampling.watch(window.id, _pairs(window.devices), window.power)
        window.timer = threading.Timer(self.limits.max_duration_s, self._expire, args=[window.id])
        window.timer.daemon = True
        window.timer.start()  # before the edge reads: a window always ends by itself
        with self._lock:
            ended_meanwhile = window.id not in self._open
        if ended_meanwhile:  # a request ended it (and unwatched) before the watch above
            window.timer.cancel()
            self.sampling.unwatch(window.id)
            raise WindowError(409, f"window {window.id} was ended while it opened")
        self._read_edges(window)
        log.info("window_opened", window=window.id, name=name, targets=[t.id for t in targets])
        self._on_change()
        return self._carbon(window.recorder.recording_now())

    def _read_edges(self, window: Window) -> None:
        """Read the window's devices and domains now: its first or last sample is at its edge."""
        for backend, indices in window.devices.items():
            self.sampling.sample_watched(backend, indices)
        for backend in window.power:
            self.sampling.sample_watched(backend)

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
        for recorder in recorders:
            recorder.on_sample(backend, devices, domains, at)

    # -- queries and ending ---------------------------------------------------------------------
    def get(self, window_id: str) -> Recording | None:
        with self._lock:
            window, ended = self._open.get(window_id), self._ended.get(window_id)
        if window is not None:
            return self._carbon(window.recorder.recording_now())
        if ended is None:
            return None
        kept, summary = self._kept.get(window_id), Recording.model_validate_json(ended)
        return kept.with_points(summary) if kept is not None else summary

    def list(self) -> list[Recording]:
        """Open windows, then ended ones, newest first."""
        with self._lock:
            windows = list(self._open.values())
            ended = list(reversed(self._ended.values()))
        live = [self._carbon(w.recorder.recording_now(points=False)) for w in reversed(windows)]
        return live + [Recording.model_validate_json(summary) for summary in ended]

    @property
    def open_count(self) -> int:
        with self._lock:
            return len(self._open)

    def end(self, window_id: str, reason: str = "ended") -> Recording:
        """End a window (a last read of its devices first) and return its recording."""
        with self._lock:
            window = self._open.get(window_id)
            if window is None:
                if window_id in self._ended:
                    raise WindowError(409, f"window {window_id} already ended")
                raise WindowError(404, f"no window {window_id!r}")
        self._read_edges(window)
        with self._lock:
            if self._open.pop(window_id, None) is None:  # ended meanwhile by another request
                raise WindowError(409, f"window {window_id} already ended")
            window.recorder.stop(reason)
            recording = self._carbon(window.recorder.recording_now())
            targets = [target.model_copy(update={"points": []}) for target in recording.targets]
            summary = recording.model_copy(update={"targets": targets})
            self._ended[window_id] = summary.model_dump_json().encode()
            self._kept[window_id] = window.recorder
            self.budget.ended(window.recorder)
            while len(self._ended) > self.limits.history:
                self._ended.popitem(last=False)
            self._thin_history()
        if window.timer is not None:
            window.timer.cancel()
        self.sampling.unwatch(window_id)
        log.info("window_ended", window=window_id, reason=reason, energy_joules=recording.energy_joules)
        self._on_end(recording)
        self._on_change()
        return recording

    def _thin_history(self) -> None:
        """Only the newest ``HISTORY_WITH_POINTS`` ended windows still in the history keep their
        time series (compact, and charged to --window-memory); older ones keep their summaries."""
        for window_id in list(self._kept):
            if window_id not in self._ended or len(self._kept) > HISTORY_WITH_POINTS:
                self.budget.release(self._kept.pop(window_id))

    def _expire(self, window_id: str) -> None:
        with contextlib.suppress(WindowError):  # a request ended it at the same moment
            self.end(window_id, "max_duration")

    def shutdown(self) -> None:
        """Refuse new windows and end the open ones (their recordings stay in the history)."""
        with self._lock:
            self._closing = True
            ids = list(self._open)
        for window_id in ids:
            with contextlib.suppress(WindowError):
                self.end(window_id, "shutdown")


def _pairs(devices: dict[str, set[int]]) -> set[tuple[str, int]]:
    return {(backend, index) for backend, indices in devices.items() for index in indices}

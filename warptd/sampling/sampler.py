"""Scheduling: APScheduler jobs, one per backend, each handing a read to the backend's worker thread
with a deadline (:class:`~warptd.sampling.inflight.ReadsInFlight`). No per-device arithmetic here: a
read is turned into samples by its backend's tracks (:mod:`warptd.sampling.tracks`) through
:class:`~warptd.sampling.publish.Publisher`.

Every job runs at ``--interval``, except that a backend declaring a ``max_interval`` (RAPL: its
counters must not wrap twice between two reads) runs at that where it is shorter. Devices someone
watches (an open energy window, a running stress job: :meth:`Sampler.watch`) are also read by a
second job per backend at ``--window-interval``, which reads only those devices, on the same worker.

A power backend that measures an accelerator backend's devices through the same SDK calls (NVML's
``nvml`` beside ``nvidia``: :meth:`PowerBackend.domains_from`) has no job of its own while that backend
is loaded: each full read of the accelerator backend publishes its domains too, so a GPU's power and
energy counter are read once per tick, not twice. Loaded alone, or watched, it reads itself.
:meth:`Sampler.tick` is a scheduled read made and waited for by its caller.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import structlog
from apscheduler.executors.pool import ThreadPoolExecutor as JobExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from warptd.models import device_kind
from warptd.power.base import PowerBackend
from warptd.sampling.inflight import ReadsInFlight
from warptd.sampling.listener import SampleListener
from warptd.sampling.publish import Publisher
from warptd.sampling.reads import Reader
from warptd.sampling.snapshot import BackendState, Snapshot
from warptd.sampling.state import CounterState
from warptd.sampling.watches import Watches
from warptd.sampling.workers import HandOffExecutor

if TYPE_CHECKING:
    from warptd.backends.base import AcceleratorBackend
    from warptd.config import Settings

__all__ = ["REDISCOVER_EVERY_S", "HandOffExecutor", "Sampler"]

log = structlog.get_logger("warptd.sampler")
#: How often a backend with lost devices (or a reset SDK) may re-enumerate them.
REDISCOVER_EVERY_S = 30.0


class Sampler:
    """Owns the schedule of every backend's reads and the watches that read some devices faster; the
    reads themselves, on each backend's worker under a deadline, are :attr:`reads`'."""

    def __init__(
        self,
        settings: Settings,
        snapshot: Snapshot,
        accelerators: list[AcceleratorBackend],
        power: list[PowerBackend],
    ) -> None:
        self.settings = settings
        self.snapshot = snapshot
        self.backends: dict[str, AcceleratorBackend | PowerBackend] = {}
        self.state = CounterState(settings.state_dir, settings.procfs)
        self._capped: set[str] = set()  # backends sampled more often than --interval, logged once
        self.watches = Watches()
        self._watch_lock = threading.Lock()
        for backend in accelerators:
            self._add(
                backend,
                BackendState(
                    backend.name,
                    device_kind(backend.is_accelerator),
                    devices_info=backend.list_devices(),
                    source=getattr(backend, "source", backend.name),
                ),
            )
        for backend in power:
            self._add(backend, BackendState(backend.name, "power", source=backend.source))
        self.publisher = Publisher(snapshot, self.state, self.backends)
        #: Called after every completed sample: see :attr:`Publisher.listeners`.
        self.listeners: list[SampleListener] = self.publisher.listeners
        self._derived_names = {p.name for derived in self.publisher.derived.values() for p in derived}
        self.scheduler = BackgroundScheduler(
            executors={
                "default": JobExecutor(max_workers=max(2, 2 * len(self.backends) + 1)),
                # the regular ticks only hand their read to the backend's worker: run on the spot
                "handoff": HandOffExecutor(),
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=UTC,
        )
        reader = Reader(snapshot, self.backends, lambda: REDISCOVER_EVERY_S)
        self.reads = ReadsInFlight(
            list(self.backends),
            reader,
            self.publisher,
            lambda: self.settings.sample_timeout,
            lambda: self.scheduler.running,
        )

    def _add(self, backend: AcceleratorBackend | PowerBackend, state: BackendState) -> None:
        self.backends[backend.name] = backend
        self.snapshot.add(state)
        # Errors counted while listing devices at start belong to the backend too.
        self.snapshot.count_errors(backend.name, backend.take_errors())

    # -- lifecycle --------------------------------------------------------------------------
    def interval(self, name: str, settings: Settings | None = None) -> float:
        """Seconds between two samples of backend ``name``: ``--interval``, or the backend's
        ``max_interval`` where that is shorter (a counter that must not wrap unseen)."""
        interval = (settings or self.settings).interval
        cap = self.backends[name].max_interval
        return min(interval, cap) if cap else interval

    def _log_capped(self, name: str) -> None:
        """Say once per backend that it is sampled more often than ``--interval``."""
        interval = self.interval(name)
        if interval < self.settings.interval and name not in self._capped:
            self._capped.add(name)
            log.info(
                "sample_interval_capped",
                backend=name,
                interval_s=interval,
                configured_interval_s=self.settings.interval,
                reason="the backend must be read at least this often (e.g. its counters would wrap unseen)",
            )

    def scheduled(self) -> list[str]:
        """The backends with a job of their own: all but those published from a companion's reads."""
        return [name for name in self.backends if name not in self._derived_names]

    def start(self) -> None:
        for name in self.scheduled():
            self._log_capped(name)
            self.scheduler.add_job(
                self.reads.hand_off,
                "interval",
                args=[name],
                seconds=self.interval(name),
                next_run_time=datetime.now(UTC),
                id=f"sample-{name}",
                executor="handoff",
            )
        self.reads.deadlines.start()
        self.scheduler.start()
        for name in self.backends:
            self._schedule_fast(name)

    def reconfigure(self, settings: Settings) -> None:
        """Apply reloaded settings: a new interval reschedules the jobs it changes; the timeout
        applies next tick."""
        old, self.settings = self.settings, settings
        for backend in self.backends.values():
            backend.reconfigure(settings)  # what they read per sample (--health-interval) applies live
        if not self.scheduler.running:
            return
        for name in self.backends:
            seconds = self.interval(name)
            if name not in self._derived_names and seconds != self.interval(name, old):
                self._log_capped(name)
                self.scheduler.reschedule_job(f"sample-{name}", trigger="interval", seconds=seconds)
            if settings.window_interval != old.window_interval and self.fast_sampling(name):
                self.scheduler.reschedule_job(
                    f"fast-{name}", trigger="interval", seconds=settings.window_interval
                )

    def halt(self) -> None:
        """Stop scheduling and wait for the jobs and reads running now, all together at most one
        timeout, and not for a read already given up on (then :meth:`sample_all` may read)."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        self.reads.wait()

    def stop(self) -> None:
        """Stop scheduling, save the energy totals, shut the SDKs down; a backend whose read hangs is
        shut down when that read returns (so a shared SDK session is still released), not waited for."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        self.reads.deadlines.stop()
        self.publisher.save_all()
        for name, worker in self.reads.workers.items():
            # at once where no read runs, else on the worker thread when the last (a hung one) returns
            worker.close(then=self.backends[name].shutdown)

    def sample_all(self, *, edge: bool = False) -> None:
        """Sample every backend once, now, on the calling thread's schedule (for ``warptd sample``);
        ``edge``: a recording begins or ends here, so every counter is read exactly."""
        for name in self.scheduled():
            self.tick(name, edge=edge)

    def tick(self, name: str, *, edge: bool = False) -> None:
        """Read backend ``name`` once, within the timeout, and publish the result (``edge``: with every
        counter read exactly)."""
        self.reads.tick(name, edge=edge)

    # -- faster sampling of watched devices -------------------------------------------------
    def watch(self, owner: str, devices: set[tuple[str, int]], power: set[str]) -> None:
        """Sample ``devices`` ((backend, index)) and the ``power`` backends at ``--window-interval``
        until :meth:`unwatch` (``owner``: a window or stress job id; watches nest and overlap)."""
        with self._watch_lock:
            for name in self.watches.add(owner, devices, power):
                self._schedule_fast(name)

    def unwatch(self, owner: str) -> None:
        """Drop ``owner``'s watch; a device nobody watches any more returns to ``--interval``."""
        with self._watch_lock:
            for name in self.watches.remove(owner):
                self._schedule_fast(name)

    def _schedule_fast(self, name: str) -> None:
        """Add or remove backend ``name``'s fast job to match whether anything of it is watched, and
        tell the backend which of its devices are watched."""
        backend = self.backends[name]
        if not isinstance(backend, PowerBackend):
            backend.watch_devices(frozenset(self.watches.devices(name)))
        if not self.scheduler.running:
            return
        job_id = f"fast-{name}"
        job = self.scheduler.get_job(job_id)
        wanted = self.watches.watched(name)
        if wanted and job is None:
            interval = self.settings.window_interval
            self.scheduler.add_job(
                self.sample_watched,
                "interval",
                args=[name],
                seconds=interval,
                next_run_time=datetime.now(UTC) + timedelta(seconds=interval),  # after the watcher's edge
                id=job_id,
            )
            log.debug("fast_sampling_on", backend=name, interval_s=interval)
        elif not wanted and job is not None:
            self.scheduler.remove_job(job_id)
            log.debug("fast_sampling_off", backend=name)

    def fast_sampling(self, name: str) -> bool:
        """Whether backend ``name`` has a fast job now."""
        return self.scheduler.running and self.scheduler.get_job(f"fast-{name}") is not None

    def sample_watched(self, name: str, indices: set[int] | None = None, *, edge: bool = False) -> bool:
        """Read backend ``name``'s watched devices (or ``indices``; a power backend: every domain) now,
        on its worker, and publish them; False when the read could not be done in time. ``edge``: a
        window, profile, stress job or recording begins or ends here, so the read takes every counter
        exactly (:meth:`AcceleratorBackend.anchor`: the energy counter, throttle times). These devices
        are read even where a fast read was in flight (:meth:`ReadsInFlight.settle_fast`): it began
        before this edge and may not have covered them."""
        if not self.reads.settle_fast(name):
            return False
        wanted = None
        if not isinstance(self.backends[name], PowerBackend):
            wanted = sorted(indices if indices is not None else self.watches.devices(name))
            if not wanted:
                return True
        return self.reads.fast_read(name, wanted, edge=edge)

    def read_edges(self, devices: Iterable[tuple[str, int]], power: Iterable[str] = ()) -> None:
        """Read these devices ((backend, index)) and power backends now, every counter exactly: a
        window, profile, stress job or workload begins or ends here. One read per backend."""
        by_backend: dict[str, set[int]] = {}
        for name, index in devices:
            by_backend.setdefault(name, set()).add(index)
        for name, indices in by_backend.items():
            self.sample_watched(name, indices, edge=True)
        for name in power:
            self.sample_watched(name, edge=True)

"""Scheduling: APScheduler jobs, one per backend, each handing a read to the backend's worker thread
with a deadline. No per-device arithmetic here: a read is turned into samples by its backend's
tracks (:mod:`warptd.sampling.tracks`) through :class:`~warptd.sampling.publish.Publisher`.

Every job runs at ``--interval``, except that a backend declaring a ``max_interval`` (RAPL: its
counters must not wrap twice between two reads) runs at that where it is shorter. Devices someone
watches (an open energy window, a running stress job: :meth:`Sampler.watch`) are also read by a
second job per backend at ``--window-interval``, which reads only those devices, on the same worker.

A power backend that measures an accelerator backend's devices through the same SDK calls (NVML's
``nvml`` beside ``nvidia``: :meth:`PowerBackend.domains_from`) has no job of its own while that backend
is loaded: each full read of the accelerator backend publishes its domains too, so a GPU's power and
energy counter are read once per tick, not twice. Loaded alone, or watched, it reads itself.

A scheduled tick hands the read to the backend's worker and returns: the worker reads and publishes,
so a sample wakes two threads (the scheduler's, the worker), not four. Every read is published on the
worker, in the order read (an edge read too, whose caller waits for it). A hung SDK call blocks only
that backend's worker, and :class:`~warptd.sampling.deadlines.Deadlines` gives up on the read after
``sample_timeout``. Where the worker is inside one device's read then, that device is held apart
(:class:`~warptd.sampling.workers.Worker`): it reads as down, counted ``timeout`` and then ``hung``
under its index, while a fresh thread reads the backend's other devices at once, until its call
returns. Elsewhere the backend is marked stale (its series are dropped) and counted ``timeout``; later
ticks count ``hung`` until the call returns, whose late result is dropped. Other backends keep their
own workers and schedule. :meth:`Sampler.tick` is the same read made and waited for by its caller.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import structlog
from apscheduler.executors.pool import ThreadPoolExecutor as JobExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from warptd.errors import ErrorKind
from warptd.models import device_kind
from warptd.power.base import PowerBackend
from warptd.sampling.deadlines import Deadlines
from warptd.sampling.publish import Listener, Publisher
from warptd.sampling.reads import Raw, Reader
from warptd.sampling.snapshot import BackendState, Snapshot
from warptd.sampling.state import CounterState
from warptd.sampling.watches import Watches
from warptd.sampling.workers import HandedRead, HandOffExecutor, Lane, Worker

if TYPE_CHECKING:
    from warptd.backends.base import AcceleratorBackend
    from warptd.config import Settings

__all__ = ["REDISCOVER_EVERY_S", "HandOffExecutor", "Listener", "Sampler"]

log = structlog.get_logger("warptd.sampler")
#: How often a backend with lost devices (or a reset SDK) may re-enumerate them.
REDISCOVER_EVERY_S = 30.0


class Sampler:
    """Owns the schedule, the per-backend workers and deadlines, and the watches that sample faster."""

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
        self._inflight: dict[str, Future[Raw]] = {}
        self._workers: dict[str, Worker] = {}
        self._capped: set[str] = set()  # backends sampled more often than --interval, logged once
        self._fast_inflight: dict[str, Future[Raw]] = {}
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
        self._reader = Reader(snapshot, self.backends, lambda: REDISCOVER_EVERY_S)
        self.publisher = Publisher(snapshot, self.state, self.backends)
        #: Called after every completed sample: see :attr:`Publisher.listeners`.
        self.listeners: list[Listener] = self.publisher.listeners
        self._derived_names = {p.name for derived in self.publisher.derived.values() for p in derived}
        self._deadlines = Deadlines(lambda: self.settings.sample_timeout, self._timed_out)
        self.scheduler = BackgroundScheduler(
            executors={
                "default": JobExecutor(max_workers=max(2, 2 * len(self.backends) + 1)),
                # the regular ticks only hand their read to the backend's worker: run on the spot
                "handoff": HandOffExecutor(),
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=UTC,
        )

    def _add(self, backend: AcceleratorBackend | PowerBackend, state: BackendState) -> None:
        self.backends[backend.name] = backend
        self.snapshot.add(state)
        self._workers[backend.name] = Worker(backend.name)
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
                self._hand_off,
                "interval",
                args=[name],
                seconds=self.interval(name),
                next_run_time=datetime.now(UTC),
                id=f"sample-{name}",
                executor="handoff",
            )
        self._deadlines.start()
        self.scheduler.start()
        for name in self.backends:
            self._schedule_fast(name)

    # -- faster sampling of watched devices -------------------------------------------------
    def watch(self, owner: str, devices: set[tuple[str, int]], power: set[str]) -> None:
        """Sample ``devices`` ((backend, index)) and the ``power`` backends at ``--window-interval``
        until :meth:`unwatch` (``owner``: a window or stress job id; watches nest and overlap)."""
        with self._watch_lock:
            changed = self.watches.add(owner, devices, power)
            for name in changed:
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
                next_run_time=datetime.now(UTC)
                + timedelta(seconds=interval),  # after the watcher's edge read
                id=job_id,
            )
            log.debug("fast_sampling_on", backend=name, interval_s=self.settings.window_interval)
        elif not wanted and job is not None:
            self.scheduler.remove_job(job_id)
            log.debug("fast_sampling_off", backend=name)

    def fast_sampling(self, name: str) -> bool:
        """Whether backend ``name`` has a fast job now."""
        return self.scheduler.running and self.scheduler.get_job(f"fast-{name}") is not None

    def sample_watched(self, name: str, indices: set[int] | None = None, *, edge: bool = False) -> bool:
        """Read backend ``name``'s watched devices (or ``indices``; a power backend: every domain)
        now, on its worker, and publish them; False when the read could not be done in time.
        ``edge``: a window, profile, stress job or recording begins or ends here, so the read takes
        every counter exactly (:meth:`AcceleratorBackend.anchor`: the energy counter, throttle times).

        A fast read already in flight is waited for first, so a hung SDK holds at most one fast read
        (a backend's hangs and timeouts are counted by the normal job; a read that times out inside
        one device's read holds that device apart at once); then these devices are read anyway: that
        read began before this edge and may not have covered them.
        """
        previous = self._fast_inflight.get(name)
        if previous is not None and not previous.done():
            try:
                previous.result(timeout=self.settings.sample_timeout)
            except Exception:  # its own caller reports it
                return False
        backend = self.backends[name]
        if isinstance(backend, PowerBackend):
            wanted = None
        else:
            wanted = sorted(indices if indices is not None else self.watches.devices(name))
            if not wanted:
                return True
        read = self._read_on_worker(
            name, lambda lane: self._reader.read(name, wanted, edge=edge, lane=lane), full=False
        )
        self._fast_inflight[name] = read.future
        try:
            return read.wait(self.settings.sample_timeout)
        except FutureTimeout:
            log.debug("fast_sample_timeout", backend=name)
            self._cut(name, read.future)  # hung inside one device: read the others without it
            return False
        except Exception as exc:
            log.error("fast_sample_failed", backend=name, error=repr(exc))
            return False

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
        deadline = time.monotonic() + self.settings.sample_timeout
        pending = [f for name, f in self._inflight.items() if not self._deadlines.expired(name)]
        for future in [*pending, *self._fast_inflight.values()]:
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:  # a hung or failed read: counted where it happened
                continue

    def stop(self) -> None:
        """Stop scheduling, save the energy totals, shut the SDKs down; a backend whose read hangs is
        shut down when that read returns (so a shared SDK session is still released), not waited for."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        self._deadlines.stop()
        self.publisher.save_all()
        for name, worker in self._workers.items():
            # at once where no read runs, else on the worker thread when the last (a hung one) returns
            worker.close(then=self.backends[name].shutdown)

    def sample_all(self, *, edge: bool = False) -> None:
        """Sample every backend once, now, on the calling thread's schedule (for ``warptd sample``);
        ``edge``: a recording begins or ends here, so every counter is read exactly."""
        for name in self.scheduled():
            self.tick(name, edge=edge)

    # -- one tick ---------------------------------------------------------------------------
    def _hand_off(self, name: str) -> None:
        """A scheduled tick, on the scheduler's thread: give backend ``name``'s read to its worker,
        which publishes it. While the last read is in flight this tick is skipped, and counted
        ``hung`` once that read is past its deadline."""
        previous = self._inflight.get(name)
        if previous is not None and not previous.done():
            # past its deadline (or a :meth:`tick` read, which gave up waiting before returning)
            if self._deadlines.expired(name) or not self._deadlines.armed(name):
                self._fail(name, ErrorKind.HUNG, "hung")
            return
        started = time.monotonic()
        self._deadlines.arm(name, started)
        self._inflight[name] = self._workers[name].submit(
            lambda lane: self._read_and_publish(name, started, lane)
        )

    def _read_and_publish(self, name: str, started: float, lane: Lane) -> None:
        """A scheduled tick's work, on the backend's worker; a read given up on, or cut inside a hung
        device (the worker went on without it), is not published."""
        try:
            raw = self._reader.read(name, lane=lane)
        except Exception as exc:  # a backend bug outside its guarded SDK calls
            if not lane.cut and not self._deadlines.finish(name):
                log.error("sample_failed", backend=name, error=repr(exc))
                self._fail(name, ErrorKind.UNEXPECTED, "error")
            return
        # Cut only inside a device's read, so a read that returned whole (not None) was not cut.
        if raw is None or self._deadlines.finish(name):
            return
        try:
            self.publisher.publish(name, raw, started, full=True)
        except Exception as exc:  # a listener's bug: the worker goes on
            log.error("publish_failed", backend=name, error=repr(exc))

    def _timed_out(self, name: str) -> None:
        """Backend ``name``'s read is past its deadline: where it hangs inside one device's read, that
        device is held apart; elsewhere the backend is stale."""
        if self._cut(name):
            return
        log.warning("sample_timeout", backend=name, timeout_s=self.settings.sample_timeout)
        self._fail(name, ErrorKind.TIMEOUT, "timeout")

    def _cut(self, name: str, job: Future[bool] | None = None) -> bool:
        """Where backend ``name``'s worker hangs inside one device's read (``job``'s, where given),
        hold that device apart (it reads as down until its call returns; counted ``timeout`` once, then
        ``hung`` per sample, both labelled with the device) and let a fresh thread read the others.
        False where it hangs elsewhere (the backend itself: listing, set-up)."""
        with self._deadlines.lock:  # one cut at a time, never between a deadline's check and its report
            cut = self._workers[name].cut(job)
            if cut is None:
                return False
            device, running = cut
            again = self._inflight.get(name) is running and self.scheduler.running
            for inflight in (self._inflight, self._fast_inflight):
                if inflight.get(name) is running:
                    del inflight[name]  # left to the hung call: its result is not published
            scheduled = self._inflight.get(name)
            # a scheduled read queued behind the hung one starts now, on the fresh thread
            self._deadlines.resume(
                name, time.monotonic() if scheduled is not None and not scheduled.done() else None
            )
            if again:  # the scheduled read was the one cut: the others are read now, not a tick later
                self._hand_off(name)
        log.warning(
            "device_read_hung",
            backend=name,
            device=device,
            timeout_s=self.settings.sample_timeout,
            reason="a call of this device has not returned: read as down, the others go on",
        )
        self.publisher.count_device_errors(name, Counter({(device, ErrorKind.TIMEOUT): 1}))
        return True

    def tick(self, name: str, *, edge: bool = False) -> None:
        """Read backend ``name`` once, within the timeout, and publish the result (``edge``: with every
        counter read exactly)."""
        previous = self._inflight.get(name)
        if previous is not None and not previous.done():
            self._fail(name, ErrorKind.HUNG, "hung")
            return
        read = self._read_on_worker(
            name, lambda lane: self._reader.read(name, edge=edge, lane=lane), full=True
        )
        self._inflight[name] = read.future
        try:
            read.wait(self.settings.sample_timeout)
        except FutureTimeout:
            self._timed_out(name)
        except Exception as exc:  # a backend bug outside its guarded SDK calls
            log.error("sample_failed", backend=name, error=repr(exc))
            self._fail(name, ErrorKind.UNEXPECTED, "error")

    def _read_on_worker(self, name: str, read: Callable[[Lane], Raw | None], *, full: bool) -> HandedRead:
        """Hand ``read`` to backend ``name``'s worker, which publishes it there, in the order the
        worker reads: an edge read is never published after a read queued behind it (which would drop
        it as older). A read its caller gave up waiting for, or cut inside a hung device, is not
        published; the handed read's result says whether it was."""
        started = time.monotonic()
        handed = HandedRead()

        def job(lane: Lane) -> bool:
            raw = read(lane)
            if raw is None or not handed.publishing():
                return False  # cut, or given up on
            try:
                self.publisher.publish(name, raw, started, full=full)
            except Exception as exc:  # a listener's bug: the worker goes on
                log.error("publish_failed", backend=name, error=repr(exc))
            return True

        handed.future = self._workers[name].submit(job)
        return handed

    def _fail(self, name: str, kind: ErrorKind, reason: str) -> None:
        self.publisher.fail(name, kind, reason)

"""APScheduler jobs, one per backend, each reading its backend on a worker thread with a timeout.

Every job runs at ``--interval``, except that a backend declaring a ``max_interval`` (RAPL: its
counters must not wrap twice between two reads) runs at that where it is shorter. Devices someone
watches (an open energy window, a running stress job: :meth:`Sampler.watch`) are also read by a
second job per backend at ``--window-interval``, which reads only those devices, on the same worker.

A power backend that measures an accelerator backend's devices through the same SDK calls (NVML's
``nvml`` beside ``nvidia``: :meth:`PowerBackend.domains_from`) has no job of its own while that backend
is loaded: each full read of the accelerator backend publishes its domains too, so a GPU's power and
energy counter are read once per tick, not twice. Loaded alone, or watched, it reads itself.

A scheduled tick hands the read to the backend's worker and returns: the worker reads and publishes,
so a sample wakes two threads (the scheduler's, the worker), not four. A hung SDK call blocks only
that backend's worker: :class:`~warptd.sampling.deadlines.Deadlines` gives up on the read after
``sample_timeout``, marks the backend stale (its series are dropped) and counts a ``timeout``; later
ticks count ``hung`` until the call returns, whose late result is dropped. Other backends keep their
own workers and schedule. :meth:`Sampler.tick` is the same read made and waited for by its caller.
"""

from __future__ import annotations

import math
import queue
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog
from apscheduler.executors.base import BaseExecutor
from apscheduler.executors.pool import ThreadPoolExecutor as JobExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from warptd.errors import ErrorKind
from warptd.models import device_kind
from warptd.power.base import DomainPower, DomainReading, PowerBackend
from warptd.sampling.counters import MAX_PLAUSIBLE_WATTS, EnergyTracker, MonotonicCounter, ThrottleSeconds
from warptd.sampling.deadlines import Deadlines
from warptd.sampling.snapshot import BackendState, DeviceSample, Snapshot
from warptd.sampling.state import CounterState
from warptd.sampling.validate import sanitize_device, sanitize_domain
from warptd.sampling.watches import Watches

if TYPE_CHECKING:
    from warptd.backends.base import AcceleratorBackend
    from warptd.config import Settings
    from warptd.models import DeviceReading, GPUInfo, LabelledValues

log = structlog.get_logger("warptd.sampler")
#: A sampler listener: (backend, device samples or None, domains or None, monotonic time of the read).
Listener = Callable[[str, "list[DeviceSample] | None", "list[DomainPower] | None", float], None]
#: How often a backend with lost devices (or a reset SDK) may re-enumerate them.
REDISCOVER_EVERY_S = 30.0


@dataclass(slots=True)
class _Raw:
    """What one worker read returns: when (monotonic), the readings and the errors counted."""

    at: float
    readings: list[Any]
    errors: Counter[ErrorKind]
    devices_info: list[GPUInfo] | None = None  # set when the backend re-enumerated its devices


class _Worker:
    """One daemon thread per backend: a read that never returns cannot keep the process alive at exit."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name=f"warptd-{name}", daemon=True).start()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.put((future, fn))
        return future

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            future, fn = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    def close(self) -> None:
        self._queue.put(None)


class HandOffExecutor(BaseExecutor):  # type: ignore[misc]
    """Runs a job on the scheduler's thread, as APScheduler's DebugExecutor does, without the execution
    events and log records it makes per run (no listener takes them): the jobs run here only hand a
    read to a worker, ten times a second at ``--interval 0.1``. A job's error is logged as usual."""

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        try:
            job.func(*job.args, **job.kwargs)
        except BaseException:
            self._run_job_error(job.id, *sys.exc_info()[1:])
        else:
            self._run_job_success(job.id, [])


class Sampler:
    """Owns the schedule, the per-backend workers and the cross-sample trackers (energy, throttle)."""

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
        #: Called after every completed sample with (backend, device samples or None, domains or None,
        #: the monotonic time of the read). A fast read passes only the watched devices' samples.
        self.listeners: list[Listener] = []
        self._energy: dict[str, EnergyTracker] = {}
        self._energy_dropped: dict[str, float] = {}  # by backend: joules the counter ceiling left out
        self.state = CounterState(settings.state_dir, settings.procfs)
        self._throttle: dict[tuple[str, str], ThrottleSeconds] = {}  # by backend, device
        self._uuids_of: dict[str, tuple[list[GPUInfo], dict[int, str]]] = {}  # by backend
        # backend, device, metric -> label values -> counter
        self._counters: dict[tuple[str, str, str], dict[tuple[str, ...], MonotonicCounter]] = {}
        # backend, device, metric -> the raw values last read and the totals they gave
        self._last_counters: dict[tuple[str, str, str], tuple[LabelledValues, LabelledValues]] = {}
        # backend, device -> the reading's raw counters last read and the totals they gave
        self._last_reading_counters: dict[tuple[str, str], tuple[Any, dict[str, LabelledValues]]] = {}
        self._inflight: dict[str, Future[_Raw]] = {}
        self._rediscovered: dict[str, float] = {}
        self._workers: dict[str, _Worker] = {}
        self._capped: set[str] = set()  # backends sampled more often than --interval, logged once
        self._fast_inflight: dict[str, Future[_Raw]] = {}
        self._publishing: dict[str, threading.Lock] = {}  # one tick's results published at a time
        self._seen_at: dict[tuple[str, int | str], float] = {}  # newest read published per device
        self.watches = Watches()
        self._power_names: set[str] = set()  # the power backends among ``backends``
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
        #: accelerator backend -> the power backends published from its full reads (no job of their own)
        self._derived: dict[str, list[PowerBackend]] = {}
        for backend in power:
            if backend.companion in self.backends and backend.domains_from([]) is not None:
                self._derived.setdefault(backend.companion, []).append(backend)
        self._derived_names = {p.name for derived in self._derived.values() for p in derived}
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
        if isinstance(backend, PowerBackend):  # asked once: an ABC's isinstance is slow per sample
            self._power_names.add(backend.name)
        self.snapshot.add(state)
        self._workers[backend.name] = _Worker(backend.name)
        self._publishing[backend.name] = threading.Lock()
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
        """Add or remove backend ``name``'s fast job to match whether anything of it is watched."""
        if not self.scheduler.running:
            return
        job_id = f"fast-{name}"
        job = self.scheduler.get_job(job_id)
        wanted = self.watches.watched(name)
        if wanted and job is None:
            self.scheduler.add_job(
                self.sample_watched,
                "interval",
                args=[name],
                seconds=self.settings.window_interval,
                next_run_time=datetime.now(UTC),
                id=job_id,
            )
            log.debug("fast_sampling_on", backend=name, interval_s=self.settings.window_interval)
        elif not wanted and job is not None:
            self.scheduler.remove_job(job_id)
            log.debug("fast_sampling_off", backend=name)

    def fast_sampling(self, name: str) -> bool:
        """Whether backend ``name`` has a fast job now."""
        return self.scheduler.running and self.scheduler.get_job(f"fast-{name}") is not None

    def sample_watched(self, name: str, indices: set[int] | None = None) -> bool:
        """Read backend ``name``'s watched devices (or ``indices``; a power backend: every domain)
        now, on its worker, and publish them; False when the read could not be done in time.

        A fast read already in flight is waited for first, so a hung SDK holds at most one fast read
        (hangs and timeouts are counted by the normal job only); then these devices are read anyway:
        that read began before this edge and may not have covered them.
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
        started = time.monotonic()
        future = self._workers[name].submit(lambda: self._read(name, wanted))
        self._fast_inflight[name] = future
        try:
            raw = future.result(timeout=self.settings.sample_timeout)
        except FutureTimeout:
            log.debug("fast_sample_timeout", backend=name)
            return False
        except Exception as exc:
            log.error("fast_sample_failed", backend=name, error=repr(exc))
            return False
        self._publish(name, raw, started, full=False)
        return True

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
        self.state.maybe_save(self._energy, force=True)
        for name, worker in self._workers.items():
            worker.close()
            backend = self.backends[name]
            pending = [self._inflight.get(name), self._fast_inflight.get(name)]
            inflight = next((f for f in pending if f is not None and not f.done()), None)
            if inflight is None:
                backend.shutdown()
            else:  # runs now if the read is done, else on the worker thread when it returns
                inflight.add_done_callback(lambda _, backend=backend: backend.shutdown())

    def sample_all(self) -> None:
        """Sample every backend once, now, on the calling thread's schedule (for ``warptd sample``)."""
        for name in self.scheduled():
            self.tick(name)

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
        self._inflight[name] = self._workers[name].submit(lambda: self._read_and_publish(name, started))

    def _read_and_publish(self, name: str, started: float) -> None:
        """A scheduled tick's work, on the backend's worker; a read given up on is not published."""
        try:
            raw = self._read(name)
        except Exception as exc:  # a backend bug outside its guarded SDK calls
            if not self._deadlines.finish(name):
                log.error("sample_failed", backend=name, error=repr(exc))
                self._fail(name, ErrorKind.UNEXPECTED, "error")
            return
        if self._deadlines.finish(name):
            return
        try:
            self._publish(name, raw, started, full=True)
        except Exception as exc:  # a listener's bug: the worker goes on
            log.error("publish_failed", backend=name, error=repr(exc))

    def _timed_out(self, name: str) -> None:
        log.warning("sample_timeout", backend=name, timeout_s=self.settings.sample_timeout)
        self._fail(name, ErrorKind.TIMEOUT, "timeout")

    def tick(self, name: str) -> None:
        """Read backend ``name`` once, within the timeout, and publish the result."""
        previous = self._inflight.get(name)
        if previous is not None and not previous.done():
            self._fail(name, ErrorKind.HUNG, "hung")
            return
        started = time.monotonic()
        future = self._workers[name].submit(lambda: self._read(name))
        self._inflight[name] = future
        try:
            raw = future.result(timeout=self.settings.sample_timeout)
        except FutureTimeout:
            self._timed_out(name)
            return
        except Exception as exc:  # a backend bug outside its guarded SDK calls
            log.error("sample_failed", backend=name, error=repr(exc))
            self._fail(name, ErrorKind.UNEXPECTED, "error")
            return
        self._publish(name, raw, started, full=True)

    def _publish(self, name: str, raw: _Raw, started: float, *, full: bool) -> None:
        """Turn a read into samples, store them in the snapshot and tell the listeners.

        One read of a backend is published at a time, and a device's reading older than one
        already published (a normal and a fast read crossing) is dropped.
        """
        derived = self._derived_raws(name, raw) if full else []
        with self._publishing[name]:
            self.snapshot.count_errors(name, raw.errors)
            state = self.snapshot.get(name)
            new_devices: list[DeviceSample] | None = None
            new_domains: list[DomainPower] | None = None
            changes: dict[str, object]
            if name in self._power_names:
                new_domains = self._domains(name, raw)
                kept = state.domains if state else []
                changes = {"domains": new_domains if new_domains is not None else kept}
            else:
                new_devices = self._devices(name, raw)
                order = [r.index for r in raw.readings] if full else None
                changes = {"devices": _merge(state.devices if state else [], new_devices, order)}
            counters: dict[str, object] = {}
            if full:
                counters = {
                    "last_duration": time.monotonic() - started,
                    "samples": (state.samples + 1) if state else 1,
                }
            if name in self._energy_dropped:
                counters["energy_dropped_joules"] = self._energy_dropped[name]
            now = time.time()
            self.snapshot.update(
                name,
                **changes,
                **counters,
                healthy=True,
                stale_reason=None,
                last_success=now,
                last_attempt_done=now,
            )
            self.state.maybe_save(self._energy)
        for listener in self.listeners:
            listener(name, new_devices, new_domains, raw.at)
        for power_name, power_raw in derived:
            self._publish(power_name, power_raw, started, full=True)

    def _derived_raws(self, name: str, raw: _Raw) -> list[tuple[str, _Raw]]:
        """The reads of the power backends published from accelerator ``name``'s full read, taken
        before its samples are made (which replace a reading's power with the tracker's)."""
        derived = self._derived.get(name)
        if not derived:
            return []
        return [(p.name, _Raw(raw.at, p.domains_from(raw.readings) or [], Counter())) for p in derived]

    def _read(self, name: str, indices: list[int] | None = None) -> _Raw:
        """Read every device (or only ``indices``, a fast read) or every domain of backend ``name``."""
        backend = self.backends[name]
        infos = None
        readings: list[Any] = []
        if name in self._power_names:
            rejected = 0
            for as_read in backend.read_domains():  # type: ignore[union-attr]
                domain, dropped = sanitize_domain(as_read)
                readings.append(domain)
                rejected += dropped
        else:
            if indices is None:
                infos = self._rediscover(name, backend)
                indices = list(range(backend.get_device_count()))
            backend.begin_sample()
            read = [backend.read_device(i) for i in indices]
            state = self.snapshot.get(name)
            last = {sample.reading.index: sample.reading for sample in state.devices} if state else {}
            rejected = 0
            for as_read in read:
                reading, dropped = sanitize_device(as_read, last.get(as_read.index))
                readings.append(reading)
                rejected += dropped
        errors = backend.take_errors()
        if rejected:
            errors[ErrorKind.INVALID_VALUE] += rejected
        return _Raw(at=time.monotonic(), readings=readings, errors=errors, devices_info=infos)

    def _rediscover(self, name: str, backend: AcceleratorBackend) -> list[GPUInfo] | None:
        """At most every ``REDISCOVER_EVERY_S``, let a suspect backend re-enumerate (in its worker)."""
        now = time.monotonic()
        if (
            not backend.needs_rediscovery()
            or now - self._rediscovered.get(name, -math.inf) < REDISCOVER_EVERY_S
        ):
            return None
        self._rediscovered[name] = now
        if not backend.rediscover():
            return None
        infos = backend.list_devices()
        # Published from here, the worker: even if this tick timed out, the new identities apply.
        state = self.snapshot.get(name)
        changed = state is None or infos != state.devices_info
        self.snapshot.update(name, devices_info=infos)
        if changed:
            log.info("devices_rediscovered", backend=name, uuids=[i.uuid for i in infos])
        return infos

    def _fail(self, name: str, kind: ErrorKind, reason: str) -> None:
        for key, tracker in tuple(self._energy.items()):  # other backends' ticks may add keys
            if key.partition("/")[0] == name:
                tracker.gap()  # nothing is integrated across the outage
        self.snapshot.count_errors(name, Counter({kind: 1}))
        self.snapshot.update(name, healthy=False, stale_reason=reason, last_attempt_done=time.time())
        for power in self._derived.get(name, ()):  # its read was this one
            self._fail(power.name, kind, reason)

    # -- turning readings into samples ------------------------------------------------------
    def _tracker(self, key: str) -> EnergyTracker:
        """The energy tracker of ``backend/device-uuid-or-index`` or ``backend/domain``."""
        tracker = self._energy.get(key)
        if tracker is None:
            tracker = self._energy[key] = EnergyTracker()
            self.state.resume(key, tracker)
        return tracker

    def _devices(self, name: str, raw: _Raw) -> list[DeviceSample]:
        """Samples of the readings newer than the last published one of their device."""
        state = self.snapshot.get(name)
        uuids = self._uuids(name, state.devices_info if state else [])
        samples = []
        reading: DeviceReading
        for as_read in raw.readings:
            reading = as_read
            seen = (name, reading.index)
            if self._seen_at.get(seen, -math.inf) >= raw.at:
                continue
            self._seen_at[seen] = raw.at
            uuid = uuids.get(reading.index, "")
            if reading.uuid != uuid:
                reading = replace(reading, uuid=uuid)
            key = f"{name}/{reading.uuid or reading.index}"
            tracker = self._tracker(key)
            if not reading.up:
                tracker.gap()
                samples.append(DeviceSample(reading=reading))
                continue
            dropped = tracker.dropped_joules
            power, energy = tracker.update(
                raw.at,
                reading.power_watts,
                reading.energy_counter_joules,
                limit_watts=reading.power_limit_watts,
            )
            if tracker.dropped_joules != dropped:
                self._dropped(key, tracker, dropped, reading.power_limit_watts)
            if reading.power_average_watts is None and power != reading.power_watts:
                # a device with only an energy counter: its mean (one with the driver's average has
                # no instant reading)
                reading = replace(reading, power_watts=power)
            samples.append(
                DeviceSample(
                    reading=reading,
                    energy_joules=energy,
                    throttle_seconds=self._throttle_seconds(name, raw.at, reading),
                    counters=self._counter_totals(name, reading),
                )
            )
        return samples

    def _dropped(self, key: str, tracker: EnergyTracker, before: float, limit: float | None) -> None:
        """A reset or restored counter (``backend/device``) claimed more than its ceiling allows:
        count it for its backend and log it."""
        dropped = tracker.dropped_joules - before
        name = key.partition("/")[0]
        self._energy_dropped[name] = self._energy_dropped.get(name, 0.0) + dropped
        log.warning(
            "energy_jump_dropped",
            counter=key,
            dropped_joules=round(dropped, 3),
            ceiling_watts=limit or MAX_PLAUSIBLE_WATTS,
            reason="a reset or restored counter claimed more than the ceiling times the time since "
            "its last reading",
        )

    def _uuids(self, name: str, infos: list[GPUInfo]) -> dict[int, str]:
        """Each device's UUID by index, made once per list of identities (a new list at rediscovery)."""
        made = self._uuids_of.get(name)
        if made is None or made[0] is not infos:
            made = self._uuids_of[name] = (infos, {info.index: info.uuid or "" for info in infos})
        return made[1]

    def _throttle_seconds(self, name: str, at: float, reading: DeviceReading) -> dict[str, float]:
        device = (name, reading.uuid or str(reading.index))
        seconds = self._throttle.get(device)
        if seconds is None:
            seconds = self._throttle[device] = ThrottleSeconds()
        return seconds.update(at, reading.throttle_active, reading.throttle_counter_seconds)

    def _counter_totals(self, name: str, reading: DeviceReading) -> dict[str, LabelledValues]:
        """The reading's further counters made monotonic: a decrease is a reset (driver reload).
        Health counters mostly stand still: a reading, or a metric, read as last time keeps last
        time's totals."""
        device = reading.uuid or str(reading.index)
        last_reading = self._last_reading_counters.get((name, device))
        if last_reading is not None and last_reading[0] == reading.counters:
            return last_reading[1]
        totals: dict[str, LabelledValues] = {}
        for metric, values in reading.counters.items():
            key = (name, device, metric)
            last = self._last_counters.get(key)
            if last is not None and last[0] == values:
                totals[metric] = last[1]
                continue
            series = self._counters.setdefault(key, {})
            totals[metric] = metric_totals = {}
            for labels, raw in values.items():
                counter = series.get(labels)
                if counter is None:
                    counter = series[labels] = MonotonicCounter()
                counter.update(raw)
                metric_totals[labels] = counter.total or 0.0
            self._last_counters[key] = (values, metric_totals)
        self._last_reading_counters[name, device] = (reading.counters, totals)
        return totals

    def _domains(self, name: str, raw: _Raw) -> list[DomainPower] | None:
        """Every domain's power and energy; None when a newer read was already published."""
        if self._seen_at.get((name, ""), -math.inf) >= raw.at:
            return None
        self._seen_at[(name, "")] = raw.at
        source = self.backends[name].source  # type: ignore[union-attr]
        domains = []
        reading: DomainReading
        for reading in raw.readings:
            key = f"{name}/{reading.identity or reading.domain}"
            tracker = self._tracker(key)
            if reading.readable:
                dropped = tracker.dropped_joules
                power, energy = tracker.update(
                    raw.at,
                    reading.power_watts,
                    reading.energy_counter_joules,
                    reading.energy_range_joules,
                    reading.limit_watts,
                )
                if tracker.dropped_joules != dropped:
                    self._dropped(key, tracker, dropped, reading.limit_watts)
            else:
                tracker.gap()
                power, energy = None, None
            domains.append(DomainPower(reading.domain, source, power, energy, reading.readable))
        return domains


def _merge(
    current: list[DeviceSample], new: list[DeviceSample], order: list[int] | None
) -> list[DeviceSample]:
    """The backend's device list after a read. A full read (``order``: the indices it read) gives the
    list, keeping the current sample of a device whose reading was dropped as older; a fast read
    replaces its devices in the current list."""
    fresh = {sample.reading.index: sample for sample in new}
    if order is None:
        return [fresh.pop(s.reading.index, s) for s in current] + list(fresh.values())
    kept = {sample.reading.index: sample for sample in current}
    return [sample for i in order if (sample := fresh.get(i) or kept.get(i)) is not None]

"""APScheduler jobs, one per backend, each reading its backend on a worker thread with a timeout.

Every job runs at ``--interval``, except that a backend declaring a ``max_interval`` (RAPL: its
counters must not wrap twice between two reads) runs at that where it is shorter.

A hung SDK call blocks only that backend's worker: its job gives up after ``sample_timeout``,
marks the backend stale (its series are dropped) and counts a ``timeout``; later ticks count
``hung`` until the call returns. Other backends keep their own workers and schedule.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog
from apscheduler.executors.pool import ThreadPoolExecutor as JobExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from warptd.errors import ErrorKind
from warptd.power.base import DomainPower, DomainReading, PowerBackend
from warptd.sampling.counters import EnergyTracker, MonotonicCounter, ThrottleTracker
from warptd.sampling.snapshot import BackendState, DeviceSample, Snapshot
from warptd.sampling.state import CounterState
from warptd.sampling.validate import sanitize_device, sanitize_domain

if TYPE_CHECKING:
    from warptd.backends.base import AcceleratorBackend
    from warptd.config import Settings
    from warptd.models import DeviceReading, GPUInfo, LabelledValues

log = structlog.get_logger("warptd.sampler")
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
        #: Called after every completed sample with (backend, device samples or None, domains or None).
        self.listeners: list[Callable[[str, list[DeviceSample] | None, list[DomainPower] | None], None]] = []
        self._energy: dict[str, EnergyTracker] = {}
        self.state = CounterState(settings.state_dir, settings.procfs)
        self._throttle: dict[tuple[str, str, str], ThrottleTracker] = {}
        # backend, device, metric -> label values -> counter
        self._counters: dict[tuple[str, str, str], dict[tuple[str, ...], MonotonicCounter]] = {}
        # backend, device, metric -> the raw values last read and the totals they gave
        self._last_counters: dict[tuple[str, str, str], tuple[LabelledValues, LabelledValues]] = {}
        self._inflight: dict[str, Future[_Raw]] = {}
        self._rediscovered: dict[str, float] = {}
        self._workers: dict[str, _Worker] = {}
        self._capped: set[str] = set()  # backends sampled more often than --interval, logged once
        for backend in accelerators:
            self._add(
                backend,
                BackendState(
                    backend.name,
                    "accelerator",
                    devices_info=backend.list_devices(),
                    source=getattr(backend, "source", backend.name),
                ),
            )
        for backend in power:
            self._add(backend, BackendState(backend.name, "power", source=backend.source))
        self.scheduler = BackgroundScheduler(
            executors={"default": JobExecutor(max_workers=max(2, len(self.backends) + 1))},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=UTC,
        )

    def _add(self, backend: AcceleratorBackend | PowerBackend, state: BackendState) -> None:
        self.backends[backend.name] = backend
        self.snapshot.add(state)
        self._workers[backend.name] = _Worker(backend.name)
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

    def start(self) -> None:
        for name in self.backends:
            self._log_capped(name)
            self.scheduler.add_job(
                self.tick,
                "interval",
                args=[name],
                seconds=self.interval(name),
                next_run_time=datetime.now(UTC),
                id=f"sample-{name}",
            )
        self.scheduler.start()

    def reconfigure(self, settings: Settings) -> None:
        """Apply reloaded settings: a new interval reschedules the jobs it changes; the timeout
        applies next tick."""
        old, self.settings = self.settings, settings
        if not self.scheduler.running:
            return
        for name in self.backends:
            seconds = self.interval(name)
            if seconds != self.interval(name, old):
                self._log_capped(name)
                self.scheduler.reschedule_job(f"sample-{name}", trigger="interval", seconds=seconds)

    def stop(self) -> None:
        """Stop scheduling, save the energy totals, shut the SDKs down; a backend whose read hangs is
        shut down when that read returns (so a shared SDK session is still released), not waited for."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        self.state.maybe_save(self._energy, force=True)
        for name, worker in self._workers.items():
            worker.close()
            backend, inflight = self.backends[name], self._inflight.get(name)
            if inflight is None:
                backend.shutdown()
            else:  # runs now if the read is done, else on the worker thread when it returns
                inflight.add_done_callback(lambda _, backend=backend: backend.shutdown())

    def sample_all(self) -> None:
        """Sample every backend once, now, on the calling thread's schedule (for ``warptd sample``)."""
        for name in self.backends:
            self.tick(name)

    # -- one tick ---------------------------------------------------------------------------
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
            log.warning("sample_timeout", backend=name, timeout_s=self.settings.sample_timeout)
            self._fail(name, ErrorKind.TIMEOUT, "timeout")
            return
        except Exception as exc:  # a backend bug outside its guarded SDK calls
            log.error("sample_failed", backend=name, error=repr(exc))
            self._fail(name, ErrorKind.UNEXPECTED, "error")
            return
        self.snapshot.count_errors(name, raw.errors)
        changes: dict[str, object]
        if isinstance(self.backends[name], PowerBackend):
            changes = {"domains": self._domains(name, raw)}
        else:
            changes = {"devices": self._devices(name, raw)}
        state = self.snapshot.get(name)
        self.snapshot.update(
            name,
            **changes,
            healthy=True,
            stale_reason=None,
            last_success=time.time(),
            last_attempt_done=time.time(),
            last_duration=time.monotonic() - started,
            samples=(state.samples + 1) if state else 1,
        )
        self.state.maybe_save(self._energy)
        for listener in self.listeners:
            listener(name, changes.get("devices"), changes.get("domains"))  # type: ignore[arg-type]

    def _read(self, name: str) -> _Raw:
        backend = self.backends[name]
        infos = None
        if isinstance(backend, PowerBackend):
            readings: list[Any] = backend.read_domains()
            rejected = sum(sanitize_domain(r) for r in readings)
        else:
            infos = self._rediscover(name, backend)
            backend.begin_sample()
            readings = [backend.read_device(i) for i in range(backend.get_device_count())]
            rejected = sum(sanitize_device(r) for r in readings)
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

    # -- turning readings into samples ------------------------------------------------------
    def _tracker(self, key: str) -> EnergyTracker:
        """The energy tracker of ``backend/device-uuid-or-index`` or ``backend/domain``."""
        tracker = self._energy.get(key)
        if tracker is None:
            tracker = self._energy[key] = EnergyTracker()
            self.state.resume(key, tracker)
        return tracker

    def _devices(self, name: str, raw: _Raw) -> list[DeviceSample]:
        state = self.snapshot.get(name)
        uuids = {info.index: info.uuid or "" for info in (state.devices_info if state else [])}
        samples = []
        reading: DeviceReading
        for reading in raw.readings:
            reading.uuid = uuids.get(reading.index, "")
            tracker = self._tracker(f"{name}/{reading.uuid or reading.index}")
            if not reading.up:
                tracker.gap()
                samples.append(DeviceSample(reading=reading))
                continue
            power, energy = tracker.update(raw.at, reading.power_watts, reading.energy_counter_joules)
            reading.power_watts = power  # derived from the energy counter where the device has only that
            samples.append(
                DeviceSample(
                    reading=reading,
                    energy_joules=energy,
                    throttle_seconds=self._throttle_seconds(name, raw.at, reading),
                    counters=self._counter_totals(name, reading),
                )
            )
        return samples

    def _throttle_seconds(self, name: str, at: float, reading: DeviceReading) -> dict[str, float]:
        seconds = {}
        for reason in reading.throttle_active.keys() | reading.throttle_counter_seconds.keys():
            key = (name, reading.uuid or str(reading.index), reason)
            tracker = self._throttle.get(key)
            if tracker is None:
                tracker = self._throttle[key] = ThrottleTracker()
            seconds[reason] = tracker.update(
                at, reading.throttle_active.get(reason, False), reading.throttle_counter_seconds.get(reason)
            )
        return seconds

    def _counter_totals(self, name: str, reading: DeviceReading) -> dict[str, LabelledValues]:
        """The reading's further counters made monotonic: a decrease is a reset (driver reload).
        Health counters mostly stand still: a metric read as last time keeps last time's totals."""
        totals: dict[str, LabelledValues] = {}
        device = reading.uuid or str(reading.index)
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
        return totals

    def _domains(self, name: str, raw: _Raw) -> list[DomainPower]:
        source = self.backends[name].source  # type: ignore[union-attr]
        domains = []
        reading: DomainReading
        for reading in raw.readings:
            tracker = self._tracker(f"{name}/{reading.identity or reading.domain}")
            if reading.readable:
                power, energy = tracker.update(
                    raw.at, reading.power_watts, reading.energy_counter_joules, reading.energy_range_joules
                )
            else:
                tracker.gap()
                power, energy = None, None
            domains.append(DomainPower(reading.domain, source, power, energy, reading.readable))
        return domains

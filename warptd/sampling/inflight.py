"""Each backend's reads on its worker thread: the scheduled read in flight and the fast one, each under
its deadline (:class:`~warptd.sampling.deadlines.Deadlines`), published on the worker in the order read.

A scheduled tick hands the read to the worker and returns, so a sample wakes two threads (the
scheduler's, the worker), not four. A hung SDK call blocks only that backend's worker. Where the worker
is inside one device's read when the deadline passes, that device is held apart
(:class:`~warptd.sampling.workers.Worker`): it reads as down, counted ``timeout`` and then ``hung``
under its index, while a fresh thread reads the backend's other devices at once, until its call
returns. Elsewhere the backend is marked stale (its series are dropped) and counted ``timeout``; later
ticks count ``hung`` until the call returns, whose late result is dropped.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import structlog

from warptd.errors import ErrorKind
from warptd.sampling.deadlines import Deadlines
from warptd.sampling.publish import Publisher
from warptd.sampling.reads import Raw, Reader
from warptd.sampling.workers import HandedRead, Lane, Worker

log = structlog.get_logger("warptd.sampler")


class ReadsInFlight:
    """Every backend's worker, its scheduled and fast reads in flight and their deadlines; ``timeout()``
    gives ``--sample-timeout`` in force, ``scheduling()`` whether the schedule runs."""

    def __init__(
        self,
        names: list[str],
        reader: Reader,
        publisher: Publisher,
        timeout: Callable[[], float],
        scheduling: Callable[[], bool],
    ) -> None:
        self.workers = {name: Worker(name) for name in names}
        self.reader, self.publisher = reader, publisher
        self.timeout, self._scheduling = timeout, scheduling
        self.scheduled: dict[str, Future[Any]] = {}
        self.fast: dict[str, Future[bool]] = {}
        self.deadlines = Deadlines(timeout, self.timed_out)

    def hand_off(self, name: str) -> None:
        """A scheduled tick, on the scheduler's thread: give backend ``name``'s read to its worker,
        which publishes it. While the last read is in flight this tick is skipped, and counted
        ``hung`` once that read is past its deadline."""
        previous = self.scheduled.get(name)
        if previous is not None and not previous.done():
            # past its deadline (or a :meth:`tick` read, which gave up waiting before returning)
            if self.deadlines.expired(name) or not self.deadlines.armed(name):
                self.publisher.fail(name, ErrorKind.HUNG, "hung")
            return
        started = time.monotonic()
        self.deadlines.arm(name, started)
        self.scheduled[name] = self.workers[name].submit(
            lambda lane: self._read_and_publish(name, started, lane)
        )

    def _read_and_publish(self, name: str, started: float, lane: Lane) -> None:
        """A scheduled tick's work, on the backend's worker; a read given up on, or cut inside a hung
        device (the worker went on without it), is not published."""
        try:
            raw = self.reader.read(name, lane=lane)
        except Exception as exc:  # a backend bug outside its guarded SDK calls
            if not lane.cut and not self.deadlines.finish(name):
                log.error("sample_failed", backend=name, error=repr(exc))
                self.publisher.fail(name, ErrorKind.UNEXPECTED, "error")
            return
        # Cut only inside a device's read, so a read that returned whole (not None) was not cut.
        if raw is None or self.deadlines.finish(name):
            return
        try:
            self.publisher.publish(name, raw, started, full=True)
        except Exception as exc:  # a listener's bug: the worker goes on
            log.error("publish_failed", backend=name, error=repr(exc))

    def tick(self, name: str, *, edge: bool = False) -> None:
        """Read backend ``name`` once, within the timeout, and publish the result (``edge``: with every
        counter read exactly)."""
        previous = self.scheduled.get(name)
        if previous is not None and not previous.done():
            self.publisher.fail(name, ErrorKind.HUNG, "hung")
            return
        read = self.on_worker(name, lambda lane: self.reader.read(name, edge=edge, lane=lane), full=True)
        self.scheduled[name] = read.future
        try:
            read.wait(self.timeout())
        except FutureTimeout:
            self.timed_out(name)
        except Exception as exc:  # a backend bug outside its guarded SDK calls
            log.error("sample_failed", backend=name, error=repr(exc))
            self.publisher.fail(name, ErrorKind.UNEXPECTED, "error")

    def settle_fast(self, name: str) -> bool:
        """Wait for backend ``name``'s fast read in flight, so that a hung SDK holds at most one (a
        backend's hangs and timeouts are counted by the scheduled reads); False where it failed."""
        previous = self.fast.get(name)
        if previous is not None and not previous.done():
            try:
                previous.result(timeout=self.timeout())
            except Exception:  # its own caller reports it
                return False
        return True

    def fast_read(self, name: str, indices: list[int] | None, *, edge: bool) -> bool:
        """Read backend ``name``'s devices at ``indices`` (a power backend: every domain) on its worker
        and publish them; False when the read could not be done in time (one timing out inside one
        device's read holds that device apart at once)."""
        read = self.on_worker(
            name, lambda lane: self.reader.read(name, indices, edge=edge, lane=lane), full=False
        )
        self.fast[name] = read.future
        try:
            return read.wait(self.timeout())
        except FutureTimeout:
            log.debug("fast_sample_timeout", backend=name)
            self.cut(name, read.future)  # hung inside one device: read the others without it
            return False
        except Exception as exc:
            log.error("fast_sample_failed", backend=name, error=repr(exc))
            return False

    def on_worker(self, name: str, read: Callable[[Lane], Raw | None], *, full: bool) -> HandedRead:
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

        handed.future = self.workers[name].submit(job)
        return handed

    def timed_out(self, name: str) -> None:
        """Backend ``name``'s read is past its deadline: where it hangs inside one device's read, that
        device is held apart; elsewhere the backend is stale."""
        if self.cut(name):
            return
        log.warning("sample_timeout", backend=name, timeout_s=self.timeout())
        self.publisher.fail(name, ErrorKind.TIMEOUT, "timeout")

    def cut(self, name: str, job: Future[bool] | None = None) -> bool:
        """Where backend ``name``'s worker hangs inside one device's read (``job``'s, where given),
        hold that device apart (it reads as down until its call returns; counted ``timeout`` once, then
        ``hung`` per sample, both labelled with the device) and let a fresh thread read the others.
        False where it hangs elsewhere (the backend itself: listing, set-up)."""
        with self.deadlines.lock:  # one cut at a time, never between a deadline's check and its report
            cut = self.workers[name].cut(job)
            if cut is None:
                return False
            device, running = cut
            again = self.scheduled.get(name) is running and self._scheduling()
            for inflight in (self.scheduled, self.fast):
                if inflight.get(name) is running:
                    del inflight[name]  # left to the hung call: its result is not published
            scheduled = self.scheduled.get(name)
            # a scheduled read queued behind the hung one starts now, on the fresh thread
            self.deadlines.resume(
                name, time.monotonic() if scheduled is not None and not scheduled.done() else None
            )
            if again:  # the scheduled read was the one cut: the others are read now, not a tick later
                self.hand_off(name)
        log.warning(
            "device_read_hung",
            backend=name,
            device=device,
            timeout_s=self.timeout(),
            reason="a call of this device has not returned: read as down, the others go on",
        )
        self.publisher.snapshot.count_device_errors(name, Counter({(device, ErrorKind.TIMEOUT): 1}))
        return True

    def wait(self) -> None:
        """Wait for the reads in flight, all together at most one timeout, and not for a read already
        given up on."""
        deadline = time.monotonic() + self.timeout()
        pending = [f for name, f in self.scheduled.items() if not self.deadlines.expired(name)]
        for future in [*pending, *self.fast.values()]:
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:  # a hung or failed read: counted where it happened
                continue

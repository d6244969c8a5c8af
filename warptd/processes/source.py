"""What every vendor's process monitor shares: its polling thread, the latest process lists by device
UUID, what each device answered the calls made on it (:class:`DeviceCalls`, kept by the monitor's
device objects), and starting over when the SDK's session was reopened.

A subclass lists its SDK's processes in :meth:`ProcessPoller.poll` and hands them to :meth:`publish`;
the workload split (:mod:`warptd.workloads.energy`) reads :meth:`devices` and judges their freshness
by ``DeviceProcesses.polled_at`` against ``interval``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from warptd.errors import ErrorKind
from warptd.processes.shares import DeviceProcesses
from warptd.sampling.poller import PollingThread

if TYPE_CHECKING:
    from warptd.config import Settings

log = structlog.get_logger("warptd.processes")


class DeviceCalls:
    """What one device answered the calls a monitor makes on it: a call refused as "not supported" is
    never made again (a reopened session gives new device objects); one refused for want of
    permission is warned about once while it keeps being refused, and again after it answered."""

    def __init__(self, backend: str, index: int) -> None:
        self.backend, self.index = backend, index
        self._refused: set[str] = set()
        self._denied: set[str] = set()

    def asks(self, call: str) -> bool:
        """Whether ``call`` is still made on this device (not refused as unsupported)."""
        return call not in self._refused

    def answered(self, call: str) -> None:
        """``call`` succeeded: a later refusal for want of permission is a new one, warned about."""
        self._denied.discard(call)

    def failed(self, call: str, kind: ErrorKind, exc: BaseException) -> None:
        """``call`` failed: "not supported" is remembered and never asked again; anything else fails
        this poll only."""
        if kind is ErrorKind.NOT_SUPPORTED:
            self._refused.add(call)
            log.info(f"{call}_unsupported", backend=self.backend, device=self.index, reason=str(exc))
        elif kind is ErrorKind.PERMISSION and call not in self._denied:
            self._denied.add(call)  # told once while it lasts: it answers so at every poll
            log.warning(f"{call}_denied", backend=self.backend, device=self.index, reason=str(exc))
        else:
            log.debug(
                f"{call}_failed", backend=self.backend, device=self.index, kind=str(kind), error=str(exc)
            )


class ProcessPoller:
    """Polls one SDK's per-device process lists on a thread of its own; scrapes and the workload split
    read the latest lists, never the SDK."""

    def __init__(self, backend: str, interval: float, thread: str, release: Callable[[], None]) -> None:
        """``release()`` gives the SDK session back at :meth:`stop`."""
        self.backend = backend
        #: Seconds between two polls; may be changed while running (e.g. on a config reload).
        self.interval = interval
        self._release = release
        self._lock = threading.Lock()
        self._devices: dict[str, DeviceProcesses] = {}
        self._generation = self.session_generation()
        self._poller = PollingThread(thread, self.poll, lambda: self.interval)

    # -- what a vendor's monitor provides ---------------------------------------------------------
    def poll(self) -> None:
        """List every device's processes and :meth:`publish` them."""
        raise NotImplementedError

    def session_generation(self) -> int:
        """A number the SDK session changes when it is reopened (new handles); constant by default."""
        return 0

    def forget(self) -> None:
        """Drop what was kept about the old session's devices, their :class:`DeviceCalls` too (called
        once it was reopened: every device is asked again)."""

    # -- the mechanism ----------------------------------------------------------------------------
    def reopened(self) -> bool:
        """Whether the session was reopened since the last poll; if so, every device is asked again."""
        generation = self.session_generation()
        if generation == self._generation:
            return False
        self._generation = generation
        self.forget()
        return True

    def publish(self, devices: dict[str, DeviceProcesses]) -> None:
        with self._lock:
            self._devices = devices

    def devices(self) -> dict[str, DeviceProcesses]:
        """Every device's processes in the latest poll by UUID, uncapped, with their memory and busy
        weights (for the workload energy split; never calls the SDK)."""
        with self._lock:
            return dict(self._devices)

    def reconfigure(self, settings: Settings) -> None:
        """A reload: poll at the new ``--interval`` from the next poll on."""
        self.interval = settings.interval

    def start(self) -> None:
        self._poller.start()

    def stop(self) -> None:
        """Stop polling and give the SDK session back."""
        self._poller.stop()
        self._release()

"""The in-memory snapshot that scrapes read: the latest sample of every backend, never an SDK call."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from warptd.backends.costs import ReadCost
from warptd.errors import ErrorKind
from warptd.models import BackendKind, DeviceReading, GPUInfo, LabelledValues
from warptd.power.base import DomainPower, PowerSource


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """A device reading plus the totals the sampler keeps across readings; handed to scrapes and
    listeners as it is, never changed."""

    reading: DeviceReading
    energy_joules: float | None = None
    throttle_seconds: dict[str, float] = field(default_factory=dict)
    #: The reading's ``counters`` made monotonic (across driver reloads), keyed the same way.
    counters: dict[str, LabelledValues] = field(default_factory=dict)
    #: Where this reading read the energy counter: its total then (J), the counter's own (made
    #: monotonic), which ``energy_joules`` may have run past; None between two reads of it.
    energy_counted_joules: float | None = None
    #: Unix time of the last read of the energy counter that ``energy_joules`` is counted from.
    energy_read_at: float | None = None


@dataclass(slots=True)
class BackendState:
    """What one backend last told us, and how healthy its sampling is."""

    name: str
    kind: BackendKind
    devices_info: list[GPUInfo] = field(default_factory=list)
    #: Where the readings come from: the power source, or an accelerator backend's SDK.
    source: PowerSource | str | None = None
    devices: list[DeviceSample] = field(default_factory=list)
    domains: list[DomainPower] = field(default_factory=list)
    last_success: float | None = None  # wall clock of the last completed sample
    last_attempt_done: float | None = None
    last_duration: float | None = None
    healthy: bool = False  # the last attempt completed in time
    stale_reason: str | None = "not_sampled_yet"
    errors: Counter[ErrorKind] = field(default_factory=Counter)
    #: Errors of one device (by index) rather than of the backend: a read of it that hangs.
    device_errors: Counter[tuple[int, ErrorKind]] = field(default_factory=Counter)
    samples: int = 0
    #: Energy that reset or restored counters claimed beyond their ceiling, left out of the totals.
    energy_dropped_joules: float = 0.0
    #: Energy restarts added to totals so that none went below what the run before may have handed out.
    energy_overcount_joules: float = 0.0
    #: The CPU each kind of read took so far, by kind (as of the last read).
    read_costs: dict[str, ReadCost] = field(default_factory=dict)

    @property
    def has_devices(self) -> bool:
        """Devices (accelerators, the CPU) rather than power domains."""
        return self.kind != "power"


class Snapshot:
    """Thread-safe store of every :class:`BackendState`; ``generation`` changes on every update."""

    def __init__(self, stale_after: float) -> None:
        self.stale_after = stale_after
        self._lock = threading.Lock()
        self._states: dict[str, BackendState] = {}
        self.generation = 0
        self.started = time.time()
        #: Saves of --state-dir that failed (their promises were given up).
        self.state_save_errors = 0

    def add(self, state: BackendState) -> None:
        with self._lock:
            self._states[state.name] = state
            self.generation += 1

    def update(self, name: str, **changes: object) -> None:
        """Replace fields of one backend's state atomically with respect to readers."""
        with self._lock:
            state = self._states[name]
            for key, value in changes.items():
                setattr(state, key, value)
            self.generation += 1

    def touch(self) -> None:
        """Mark the snapshot changed (e.g. a stress job started) so the next scrape re-renders."""
        with self._lock:
            self.generation += 1

    def count_errors(self, name: str, errors: Counter[ErrorKind]) -> None:
        if not errors:
            return
        with self._lock:
            self._states[name].errors.update(errors)
            self.generation += 1

    def count_device_errors(self, name: str, errors: Counter[tuple[int, ErrorKind]]) -> None:
        """Errors of backend ``name``'s devices (by index), read or found outside a read (one cut as hung)."""
        if not errors:
            return
        with self._lock:
            self._states[name].device_errors.update(errors)
            self.generation += 1

    def states(self) -> list[BackendState]:
        with self._lock:
            return list(self._states.values())

    def get(self, name: str) -> BackendState | None:
        with self._lock:
            return self._states.get(name)

    def is_fresh(self, state: BackendState, now: float | None = None) -> bool:
        """Fresh: the last attempt succeeded in time, and not too long ago."""
        now = time.time() if now is None else now
        return bool(state.healthy and state.last_success and now - state.last_success <= self.stale_after)

    def freshness(self, now: float | None = None) -> tuple[bool, ...]:
        now = time.time() if now is None else now
        return tuple(self.is_fresh(s, now) for s in self.states())

    def pending(self) -> list[str]:
        """Backends that have not finished (or given up on) their first sample."""
        return [s.name for s in self.states() if s.last_attempt_done is None]

    def ready(self) -> bool:
        """At least one backend, and every backend finished (or gave up on) its first sample."""
        return bool(self.states()) and not self.pending()

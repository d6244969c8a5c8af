"""One read of a backend, made on its worker: its devices (all, or the watched ones) or its power
domains, each reading checked (:mod:`warptd.sampling.validate`) before anything else sees it. A full
read of a backend with lost devices (or a reset SDK) lets it re-enumerate them first, at most every
so often. A device whose read hangs is held apart (:class:`~warptd.sampling.workers.Lane`): it reads
as down, not asked, until its call returns."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from warptd.errors import ErrorKind
from warptd.models import DeviceReading
from warptd.power.base import PowerBackend
from warptd.sampling.validate import sanitize_device, sanitize_domain

if TYPE_CHECKING:
    from warptd.backends.base import AcceleratorBackend
    from warptd.backends.costs import ReadCost
    from warptd.models import GPUInfo
    from warptd.sampling.snapshot import Snapshot
    from warptd.sampling.workers import Lane

log = structlog.get_logger("warptd.sampler")


@dataclass(frozen=True, slots=True)
class Raw:
    """What one read returns: when it ended (monotonic), the checked readings, the errors counted and
    the backend's read costs so far (:mod:`warptd.backends.costs`)."""

    at: float
    readings: list[Any]
    errors: Counter[ErrorKind]
    costs: dict[str, ReadCost] = field(default_factory=dict)
    #: Errors of one device (by index) rather than of the backend: its read held apart as hung.
    device_errors: Counter[tuple[int, ErrorKind]] = field(default_factory=Counter)


def read_devices(
    backend: AcceleratorBackend,
    indices: list[int],
    last: dict[int, DeviceReading],
    lane: Lane | None = None,
    *,
    full: bool = False,
) -> Raw | None:
    """Read the devices at ``indices`` on ``lane``; ``last``: each device's last published reading,
    whose values handed over again need no second check. A device held apart (its read hangs on a
    lane cut before) reads as down, not asked, and a ``full`` read counts it ``hung``. None where
    this read was cut itself (it hangs inside a device): the sampler has moved on without it."""
    held = lane.held() if lane is not None else frozenset()
    hung: Counter[tuple[int, ErrorKind]] = Counter()
    backend.begin_sample()
    read = []
    for index in indices:
        if index in held:
            read.append(DeviceReading(index=index, up=False))
            if full:
                hung[index, ErrorKind.HUNG] += 1
            continue
        if lane is None:
            read.append(backend.read_device(index))
            continue
        if not lane.enter(index):
            break
        try:
            read.append(backend.read_device(index))
        finally:
            lane.leave()
    if lane is not None and lane.cut:
        return None
    readings, rejected = [], 0
    for as_read in read:
        reading, dropped = sanitize_device(as_read, last.get(as_read.index))
        readings.append(reading)
        rejected += dropped
    return _raw(backend, readings, rejected, hung)


def read_domains(backend: PowerBackend) -> Raw:
    """Read every power domain of ``backend``."""
    readings, rejected = [], 0
    for as_read in backend.read_domains():
        reading, dropped = sanitize_domain(as_read)
        readings.append(reading)
        rejected += dropped
    return _raw(backend, readings, rejected)


def _raw(
    backend: AcceleratorBackend | PowerBackend,
    readings: list[Any],
    rejected: int,
    device_errors: Counter[tuple[int, ErrorKind]] | None = None,
) -> Raw:
    errors = backend.take_errors()
    if rejected:
        errors[ErrorKind.INVALID_VALUE] += rejected
    return Raw(
        at=time.monotonic(),
        readings=readings,
        errors=errors,
        costs=backend.read_costs.totals(),
        device_errors=device_errors or Counter(),
    )


class Reader:
    """Reads the backends: every device (re-enumerated first where the backend asks, at most every
    ``rediscover_every()`` s), some devices (a fast read), or every domain of a power backend."""

    def __init__(
        self,
        snapshot: Snapshot,
        backends: dict[str, AcceleratorBackend | PowerBackend],
        rediscover_every: Callable[[], float],
    ) -> None:
        self.snapshot = snapshot
        self.backends = backends
        self._rediscover_every = rediscover_every
        self._rediscovered: dict[str, float] = {}
        # asked once: an ABC's isinstance is slow per sample
        self._power = {name for name, backend in backends.items() if isinstance(backend, PowerBackend)}

    def read(
        self, name: str, indices: list[int] | None = None, *, edge: bool = False, lane: Lane | None = None
    ) -> Raw | None:
        """Read every device (or only ``indices``, a fast read) or every domain of backend ``name``
        on ``lane``, its worker's; ``edge``: with every counter read exactly
        (:meth:`AcceleratorBackend.anchor`). None where the read was cut inside a hung device."""
        backend = self.backends[name]
        if name in self._power:
            if edge:
                backend.anchor()  # type: ignore[union-attr]
            return read_domains(backend)  # type: ignore[arg-type]
        full = indices is None
        if indices is None:
            self._rediscover(name, backend)  # type: ignore[arg-type]
            indices = list(range(backend.get_device_count()))  # type: ignore[union-attr]
        if edge:
            backend.anchor(indices)  # type: ignore[union-attr]
        state = self.snapshot.get(name)
        last = {sample.reading.index: sample.reading for sample in state.devices} if state else {}
        return read_devices(backend, indices, last, lane, full=full)  # type: ignore[arg-type]

    def _rediscover(self, name: str, backend: AcceleratorBackend) -> list[GPUInfo] | None:
        """At most every ``rediscover_every()`` s, let a suspect backend re-enumerate (in its worker)."""
        now = time.monotonic()
        if (
            not backend.needs_rediscovery()
            or now - self._rediscovered.get(name, -math.inf) < self._rediscover_every()
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

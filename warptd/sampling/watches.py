"""Who watches which devices and power backends, so the sampler reads them faster while watched."""

from __future__ import annotations

import threading


class Watches:
    """Each owner's watched devices ((backend, index)) and power backends; owners overlap and nest.
    Thread-safe: sampler jobs read it while requests change it."""

    def __init__(self) -> None:
        self._devices: dict[str, set[tuple[str, int]]] = {}
        self._power: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def add(self, owner: str, devices: set[tuple[str, int]], power: set[str]) -> set[str]:
        """Watch (replacing ``owner``'s earlier watch); return the backends it concerns."""
        with self._lock:
            earlier = self._backends_of(owner)
            self._devices[owner] = set(devices)
            self._power[owner] = set(power)
            return earlier | self._backends_of(owner)

    def remove(self, owner: str) -> set[str]:
        """Stop ``owner``'s watch; return the backends it watched."""
        with self._lock:
            backends = self._backends_of(owner)
            self._devices.pop(owner, None)
            self._power.pop(owner, None)
            return backends

    def devices(self, backend: str) -> set[int]:
        """Indices of ``backend``'s devices someone watches."""
        with self._lock:
            return {i for watched in self._devices.values() for b, i in watched if b == backend}

    def watched(self, backend: str) -> bool:
        """Whether anything of ``backend`` (a device, or the power backend itself) is watched."""
        with self._lock:
            return any(b == backend for watched in self._devices.values() for b, _ in watched) or any(
                backend in power for power in self._power.values()
            )

    def _backends_of(self, owner: str) -> set[str]:
        return {b for b, _ in self._devices.get(owner, ())} | self._power.get(owner, set())

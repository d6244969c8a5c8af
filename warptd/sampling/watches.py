"""Who watches which devices and power backends, so the sampler reads them faster while watched."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Watches:
    """Each owner's watched devices ((backend, index)) and power backends; owners overlap and nest."""

    _devices: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    _power: dict[str, set[str]] = field(default_factory=dict)

    def add(self, owner: str, devices: set[tuple[str, int]], power: set[str]) -> set[str]:
        """Watch; return the backends whose watched set changed."""
        before = self._backends()
        self._devices[owner] = set(devices)
        self._power[owner] = set(power)
        return self._backends() ^ before | {b for b, _ in devices} | set(power)

    def remove(self, owner: str) -> set[str]:
        """Stop ``owner``'s watch; return the backends it watched."""
        devices, power = self._devices.pop(owner, set()), self._power.pop(owner, set())
        return {b for b, _ in devices} | power

    def devices(self, backend: str) -> set[int]:
        """Indices of ``backend``'s devices someone watches."""
        return {i for watched in self._devices.values() for b, i in watched if b == backend}

    def watched(self, backend: str) -> bool:
        """Whether anything of ``backend`` (a device, or the power backend itself) is watched."""
        return bool(self.devices(backend)) or any(backend in p for p in self._power.values())

    def _backends(self) -> set[str]:
        return {b for watched in self._devices.values() for b, _ in watched} | {
            b for p in self._power.values() for b in p
        }

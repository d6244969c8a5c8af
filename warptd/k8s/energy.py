"""Per-container energy: each device's energy, from the same samples, while it is allocated.

A device allocated to several containers (time-slicing, shared GPUs) splits each sample's energy
evenly between them. Totals of containers that no longer hold a device are dropped after
``retention`` seconds, so ended pods do not pile up as series.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from warptd.k8s.attribution import PodAttribution

if TYPE_CHECKING:
    from warptd.power.base import DomainPower
    from warptd.sampling.snapshot import DeviceSample, Snapshot

#: (namespace, pod, container, backend)
EnergyKey = tuple[str, str, str, str]


class PodEnergy:
    """A sampler listener accumulating device energy deltas onto the containers that hold the device."""

    def __init__(self, attribution: PodAttribution, snapshot: Snapshot, retention: float = 600.0) -> None:
        self.attribution = attribution
        self.snapshot = snapshot
        self.retention = retention
        self._last: dict[tuple[str, str], float] = {}  # (backend, device uuid or index) -> energy J
        self._totals: dict[EnergyKey, float] = {}
        self._held_at: dict[EnergyKey, float] = {}
        self._lock = threading.Lock()

    def on_sample(
        self,
        backend: str,
        devices: list[DeviceSample] | None,
        domains: list[DomainPower] | None,
        at: float | None = None,
    ) -> None:
        state = self.snapshot.get(backend)
        if devices is None or state is None:
            return
        infos = {info.index: info for info in state.devices_info}
        now = time.monotonic()
        with self._lock:
            for sample in devices:
                info = infos.get(sample.reading.index)
                key = (backend, sample.reading.uuid or str(sample.reading.index))
                energy, previous = sample.energy_joules, self._last.get(key)
                if energy is None or info is None:
                    continue
                self._last[key] = energy
                owners = self.attribution.owners(info)
                for owner in owners:
                    held = (owner.namespace, owner.pod, owner.container, backend)
                    self._held_at[held] = now
                    self._totals.setdefault(held, 0.0)
                    if previous is not None and energy > previous:
                        self._totals[held] += (energy - previous) / len(owners)
            self._expire(now)

    def _expire(self, now: float) -> None:
        for key in [k for k, at in self._held_at.items() if now - at > self.retention]:
            del self._held_at[key], self._totals[key]

    def totals(self) -> dict[EnergyKey, float]:
        with self._lock:
            return dict(self._totals)

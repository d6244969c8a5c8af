"""Per-container energy: each device's energy, from the same samples, while it is allocated.

A device allocated to several containers (time-slicing, shared GPUs) splits each sample's energy
evenly between them. Totals of containers that no longer hold a device are dropped after
``retention`` seconds, so ended pods do not pile up as series. A MIG GPU's energy is split by its
MIG devices' activity instead (:mod:`warptd.k8s.mig_shares`).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import structlog

from warptd.k8s.attribution import PodAttribution
from warptd.k8s.mig_shares import MIG_BACKEND, mig_shares

if TYPE_CHECKING:
    from warptd.power.base import DomainPower
    from warptd.sampling.snapshot import DeviceSample, Snapshot

log = structlog.get_logger("warptd.k8s")
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
        self._mig_methods: dict[tuple[str, str], str] = {}  # MIG GPU -> how its energy was last split

    def on_sample(
        self, backend: str, devices: list[DeviceSample] | None, domains: list[DomainPower] | None
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
                split = mig_shares(info, owners, self.attribution.owners, self.snapshot.get(MIG_BACKEND))
                if split and self._mig_methods.get(key) != split[1]:  # say how the GPU is split, once
                    self._mig_methods[key] = split[1]
                    log.info("mig_energy_split", backend=backend, uuid=info.uuid, method=split[1])
                for owner in owners:
                    held = (owner.namespace, owner.pod, owner.container, backend)
                    self._held_at[held] = now
                    self._totals.setdefault(held, 0.0)
                    if previous is not None and energy > previous:
                        share = split[0][owner] if split else 1 / len(owners)
                        self._totals[held] += (energy - previous) * share
            self._expire(now)

    def _expire(self, now: float) -> None:
        for key in [k for k, at in self._held_at.items() if now - at > self.retention]:
            del self._held_at[key], self._totals[key]

    def totals(self) -> dict[EnergyKey, float]:
        with self._lock:
            return dict(self._totals)

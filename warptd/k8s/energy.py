"""Per-container energy: each device's energy, from the same samples, while it is allocated.

A device allocated to several containers (time-slicing, shared GPUs) splits each sample's energy
between them by their share of the GPU's SM use where the GPU tells it per process (``sm_share``),
else evenly (``even``); a MIG GPU's energy is split by its MIG devices' activity instead
(:mod:`warptd.k8s.mig_shares`: ``mig_sm_activity`` or ``mig_slice_size``). SM use by processes
outside any pod is a share too, of no container: it is counted per device as unattributed, whether
the device is held by one container or several. The joules split each way are counted per device;
either way the containers' parts of a sample and its unattributed part sum to the device's energy.
Totals of containers that no longer hold a device are dropped after ``retention`` seconds, so ended
pods do not pile up as series.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from warptd.k8s.attribution import PodAttribution
from warptd.k8s.mig_shares import MIG_BACKEND, mig_shares
from warptd.k8s.podresources import Owner
from warptd.processes.shares import split
from warptd.sampling.deltas import TotalDeltas

if TYPE_CHECKING:
    from warptd.models import GPUInfo
    from warptd.power.base import DomainPower
    from warptd.sampling.snapshot import DeviceSample, Snapshot

#: (namespace, pod, container, backend)
EnergyKey = tuple[str, str, str, str]
SplitMethod = Literal["sm_share", "even", "mig_sm_activity", "mig_slice_size"]
#: (backend, device index, uuid, method)
SplitKey = tuple[str, str, str, SplitMethod]
#: (backend, device index, uuid)
DeviceKey = tuple[str, str, str]
#: SM use per container (None: by processes outside any pod) on the GPU of this uuid, or None where
#: it cannot tell.
SmUse = Callable[[str], "dict[Owner | None, float] | None"]


class PodEnergy:
    """A sampler listener accumulating device energy deltas onto the containers that hold the device."""

    def __init__(
        self,
        attribution: PodAttribution,
        snapshot: Snapshot,
        retention: float = 600.0,
        sm_use: SmUse | None = None,
    ) -> None:
        self.attribution = attribution
        self.snapshot = snapshot
        self.retention = retention
        #: Where set (--processes), shared devices split by SM use; else always evenly.
        self.sm_use = sm_use
        self._deltas: TotalDeltas[tuple[str, str]] = TotalDeltas()  # by (backend, uuid or index)
        self._totals: dict[EnergyKey, float] = {}
        self._held_at: dict[EnergyKey, float] = {}
        self._split: dict[SplitKey, float] = {}
        self._unattributed: dict[DeviceKey, float] = {}
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
                energy = sample.energy_joules
                if energy is None or info is None or self._deltas.is_late(key, energy):
                    continue  # no total, or an older read published late
                delta = self._deltas.delta(key, energy)  # 0 for the device's first total
                owners = self.attribution.owners(info)
                for owner in owners:
                    held = (owner.namespace, owner.pod, owner.container, backend)
                    self._held_at[held] = now
                    self._totals.setdefault(held, 0.0)
                if not owners or delta == 0.0:
                    continue
                device: DeviceKey = (backend, str(sample.reading.index), sample.reading.uuid or "")
                fractions, method = self._fractions(info, owners, sample.reading.uuid)
                for owner, fraction in fractions.items():
                    if owner is None:  # processes outside any pod
                        self._unattributed[device] = self._unattributed.get(device, 0.0) + delta * fraction
                        continue
                    self._totals[(owner.namespace, owner.pod, owner.container, backend)] += delta * fraction
                if len(fractions) > 1:
                    self._split[(*device, method)] = self._split.get((*device, method), 0.0) + delta
            self._expire(now)

    def _fractions(
        self, info: GPUInfo, owners: tuple[Owner, ...], uuid: str | None
    ) -> tuple[dict[Owner | None, float], SplitMethod]:
        """A device held by several: by its MIG slices where it has held ones; any device: by SM use
        (a single holder shares with processes outside pods), else evenly."""
        if len(owners) > 1:
            mig = mig_shares(info, owners, self.attribution.owners, self.snapshot.get(MIG_BACKEND))
            if mig is not None:
                return mig[0], f"mig_{mig[1]}"  # type: ignore[return-value]
        used = self.sm_use(uuid) if self.sm_use is not None and uuid else None
        return split(owners, used)

    def _expire(self, now: float) -> None:
        for key in [k for k, at in self._held_at.items() if now - at > self.retention]:
            del self._held_at[key], self._totals[key]

    def totals(self) -> dict[EnergyKey, float]:
        with self._lock:
            return dict(self._totals)

    def split_joules(self) -> dict[SplitKey, float]:
        """Joules of shared devices split per method, by device."""
        with self._lock:
            return dict(self._split)

    def unattributed_joules(self) -> dict[DeviceKey, float]:
        """Joules of allocated devices that went to no container (SM use outside any pod), by device."""
        with self._lock:
            return dict(self._unattributed)

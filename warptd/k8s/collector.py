"""Pod attribution metrics: device allocations, per-container energy and the kubelet poller's health."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from warptd.k8s.attribution import PodAttribution
from warptd.k8s.energy import PodEnergy
from warptd.metrics import catalog as m
from warptd.metrics.families import Families
from warptd.sampling.snapshot import Snapshot

_ERROR_KINDS = ("unavailable", "permission", "timeout", "error")


class KubernetesCollector(Collector):
    """Reads the attribution's last mapping and the energy totals; never calls the kubelet."""

    def __init__(self, attribution: PodAttribution, energy: PodEnergy | None, snapshot: Snapshot) -> None:
        self.attribution = attribution
        self.energy = energy
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        families = Families(m.KUBERNETES)
        state = self.attribution.state
        families.add(m.PODRESOURCES_UP, [], 1 if state.up else 0)
        families.add(m.PODRESOURCES_LAST_SUCCESS, [], state.last_success)
        for kind in _ERROR_KINDS:
            families.add(m.PODRESOURCES_ERRORS, [kind], state.errors.get(kind, 0))
        for backend in self.snapshot.states():
            for info in backend.devices_info:
                ids = [backend.name, str(info.index), info.uuid or ""]
                for owner in self.attribution.owners(info):
                    families.add(m.DEVICE_ALLOCATION, [*ids, owner.namespace, owner.pod, owner.container], 1)
        if self.energy is not None:  # none where no pod energy family is exported
            self._energy(families, self.energy)
        yield from families.nonempty()

    @staticmethod
    def _energy(families: Families, energy: PodEnergy) -> None:
        for (namespace, pod, container, backend_name), joules in sorted(energy.totals().items()):
            families.add(m.POD_ENERGY, [namespace, pod, container, backend_name], joules)
        for (backend_name, device, uuid, method), joules in sorted(energy.split_joules().items()):
            families.add(m.POD_ENERGY_SPLIT, [backend_name, device, uuid, method], joules)
        for (backend_name, device, uuid), joules in sorted(energy.unattributed_joules().items()):
            families.add(m.POD_ENERGY_UNATTRIBUTED, [backend_name, device, uuid], joules)

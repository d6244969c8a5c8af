"""Which container each device is allocated to, polled from the kubelet off the scrape path.

Device plugins name devices differently: NVIDIA by GPU UUID, AMD by PCI address, others by serial
or UUID. A device matches an allocated ID by any of its UUID, PCI address, ``serial`` or
``aliases``. NVIDIA's plugin also hands out parts of a GPU: a time-slicing replica
``GPU-<uuid>::<n>`` and a legacy MIG device ``MIG-GPU-<uuid>/<gi>/<ci>`` both count as the GPU
itself; a new-style MIG device ``MIG-<uuid>`` does not name its GPU and matches by the GPU's
``aliases``. Parts of one GPU held by several containers make the GPU shared by them. A partition of
an AMD GPU (``extra_metrics["partition_id"]``) matches by its identity and aliases only.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from warptd.install import install_command
from warptd.k8s.podresources import Allocation, Owner, PodResourcesClient, PodResourcesError
from warptd.models import GPUInfo, pci_address
from warptd.sampling.poller import PollingThread

if TYPE_CHECKING:
    from warptd.config import Settings

log = structlog.get_logger("warptd.k8s")


def device_keys(info: GPUInfo) -> set[str]:
    """The names a device plugin may give this device, normalised as :func:`_normalise` does."""
    extras = info.extra_metrics or {}
    serial = extras.get("serial")
    if extras.get("partition_id") is not None:  # a partition: the serial and PCI address name its whole GPU
        return {_normalise(name) for name in (info.uuid, *(info.aliases or ())) if name}
    names = (info.uuid, info.pci_bus_id, serial if isinstance(serial, str) else None, *(info.aliases or ()))
    return {_normalise(name) for name in names if name}


def _normalise(device_id: str) -> str:
    """The key of the device an ID names: a PCI address in one spelling, else the ID lower-cased,
    without a time-slicing replica suffix (``::<n>``), a legacy MIG ID read as its parent GPU."""
    key = device_id.strip().lower()
    base, separator, replica = key.rpartition("::")
    if separator and replica.isdigit():  # GPU-<uuid>::<n>: replica n of the GPU
        key = base
    address = pci_address(key)
    if address is not None:
        return address
    if key.startswith("mig-gpu-") and "/" in key:  # MIG-GPU-<uuid>/<gi>/<ci>: an instance of GPU-<uuid>
        return key.removeprefix("mig-").partition("/")[0]
    return key


@dataclass(slots=True)
class PollState:
    """What the last List calls gave: the mapping in use and the health of the polling."""

    owners_by_id: dict[str, tuple[Owner, ...]] = field(default_factory=dict)
    up: bool = False
    last_success: float | None = None
    errors: Counter[str] = field(default_factory=Counter)


class PodAttribution:
    """Polls ``List`` every ``interval`` seconds on its own thread; a failure keeps the last good mapping."""

    def __init__(self, client: PodResourcesClient, interval: float) -> None:
        self.client = client
        self.interval = interval
        self.state = PollState()
        #: Called after each successful poll (the exposition re-renders).
        self.on_change: Callable[[], None] = lambda: None
        self._poller = PollingThread("warptd-podresources", self.poll_once, lambda: self.interval)
        self._failing: str | None = None

    def owners(self, info: GPUInfo) -> tuple[Owner, ...]:
        """The containers the device is allocated to, sorted; empty when it is not allocated."""
        mapping = self.state.owners_by_id  # one reference read: a poll replaces the dict whole
        found = {owner for key in device_keys(info) for owner in mapping.get(key, ())}
        return tuple(sorted(found, key=_order))

    def pod_labels(self, info: GPUInfo) -> tuple[str, str, str]:
        """``namespace``, ``pod``, ``container`` for --pod-labels. A shared device keeps one series, its
        owners joined with commas position by position, so sums over devices count it once."""
        owners = self.owners(info)
        return tuple(
            ",".join(getattr(o, label) for o in owners) for label in ("namespace", "pod", "container")
        )

    def poll_once(self) -> None:
        """One List call; on failure count it by kind and keep the previous mapping."""
        try:
            allocations = self.client.list()
        except PodResourcesError as exc:
            self.state.errors[exc.kind] += 1
            self.state.up = False
            if self._failing is None:
                log.warning("podresources_failing", kind=exc.kind, error=str(exc), kept_mapping=True)
            self._failing = exc.kind
            self.on_change()
            return
        self.state.owners_by_id = _index(allocations)
        self.state.up, self.state.last_success = True, time.time()
        if self._failing is not None:
            log.info("podresources_recovered", after=self._failing)
            self._failing = None
        self.on_change()

    def start(self) -> None:
        self._poller.start()

    def stop(self) -> None:
        self._poller.stop(timeout=self.client.timeout + 1)
        self.client.close()


def _index(allocations: list[Allocation]) -> dict[str, tuple[Owner, ...]]:
    owners: dict[str, set[Owner]] = {}
    for allocation in allocations:
        owners.setdefault(_normalise(allocation.device_id), set()).add(allocation.owner)
    return {
        key: tuple(sorted(found, key=lambda o: (o.namespace, o.pod, o.container)))
        for key, found in owners.items()
    }


def _order(owner: Owner) -> tuple[str, str, str]:
    return owner.namespace, owner.pod, owner.container


def from_settings(settings: Settings) -> PodAttribution | None:
    """The attribution to run, or None (with one log line saying why) when it is off."""
    reason, level = None, log.info
    if not settings.pod_attribution:
        reason = "turned off (--no-pod-attribution)"
    elif not settings.kubelet_socket.exists():
        reason = f"no kubelet PodResources socket at {settings.kubelet_socket}"
        if "kubelet_socket" not in settings.model_fields_set:
            level = log.debug  # the default path on a node without a kubelet: nothing to say
    if reason is None:
        try:
            client = PodResourcesClient(settings.kubelet_socket)
        except ImportError:
            reason = f"grpcio is not installed: {install_command('kubernetes')}"
        else:
            return PodAttribution(client, settings.pod_resources_interval)
    level("pod_attribution_off", reason=reason)
    return None

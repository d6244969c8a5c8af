"""Each container's share of a GPU's SM use, named as the kubelet names containers, for pod energy.

The process monitor (--processes) sums each poll's per-process SM samples by pod UID and container
ID; here those become (namespace, pod, container) through the runtime's bundle annotations, and the
SM use of processes outside any pod is kept under ``None``: a share no container gets. SM use of a
process whose cgroup could not be read (gone since NVML listed it, or outside warptd's pid namespace)
belongs to nobody known: the GPU cannot tell, like a container whose names are unknown.
"""

from __future__ import annotations

import time

from warptd.k8s.containers import ContainerOwners
from warptd.k8s.podresources import Owner
from warptd.processes.collector import ListsProcesses
from warptd.processes.shares import FRESH_INTERVALS


class SmShares:
    """SM use per container on a GPU in the monitor's latest poll."""

    def __init__(self, monitor: ListsProcesses, owners: ContainerOwners) -> None:
        self.monitor = monitor
        self.owners = owners

    def by_owner(self, uuid: str) -> dict[Owner | None, float] | None:
        """Summed SM ratios per container (None: processes outside any pod), or None where the GPU
        cannot tell: no per-process utilization, no recent poll, or SM used by a process whose cgroup
        could not be read or by a pod's container whose names are unknown."""
        usage = self.monitor.sm_usage(uuid)
        if usage is None or time.monotonic() - usage.polled_at > FRESH_INTERVALS * self.monitor.interval:
            return None
        used: dict[Owner | None, float] = {}
        for attribution, sm in usage.by_attribution.items():
            if sm <= 0:
                continue
            if not attribution.resolved:  # in a pod or not: unknown
                return None
            owner = None  # outside Kubernetes: a share no container gets
            if attribution.pod_uid:
                owner = self.owners.owner(attribution)
                if owner is None:
                    return None
            used[owner] = used.get(owner, 0.0) + sm
        return used

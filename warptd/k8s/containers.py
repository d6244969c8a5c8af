"""The namespace, pod and container name of a container ID, from its OCI runtime bundle.

A process's cgroup names its pod UID and container ID; the kubelet's PodResources API names pods and
containers by namespace and name. The container runtime writes both into the bundle's
``config.json`` annotations, found under one of the roots given: ``/`` (the host's, or the Helm
chart's read-only mounts of these directories) or ``<procfs>/1/root`` (the host's, with ``hostPID``
and CAP_SYS_PTRACE)::

    containerd  /run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json
                io.kubernetes.cri.sandbox-namespace, ….sandbox-name, ….container-name, ….sandbox-uid
    CRI-O       /run/containers/storage/overlay-containers/<id>/userdata/config.json
                io.kubernetes.pod.namespace, ….pod.name, ….container.name, ….pod.uid
"""

from __future__ import annotations

import json
from pathlib import Path

from warptd.files import read_bytes
from warptd.k8s.podresources import Owner
from warptd.processes.cgroup import Attribution

#: Bundle config.json paths under the host root, by runtime ("{id}" is the container ID).
BUNDLES = (
    "run/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json",
    "run/containers/storage/overlay-containers/{id}/userdata/config.json",
)
#: (namespace, pod, container, pod UID) annotation keys, by runtime.
_KEYS = (
    (
        "io.kubernetes.cri.sandbox-namespace",
        "io.kubernetes.cri.sandbox-name",
        "io.kubernetes.cri.container-name",
        "io.kubernetes.cri.sandbox-uid",
    ),
    (
        "io.kubernetes.pod.namespace",
        "io.kubernetes.pod.name",
        "io.kubernetes.container.name",
        "io.kubernetes.pod.uid",
    ),
)


def read_owner(roots: tuple[Path, ...], attribution: Attribution) -> Owner | None:
    """The container's owner, or None when no runtime bundle names it (or names another pod)."""
    if not attribution.container_id:
        return None
    for root, bundle in ((root, bundle) for root in roots for bundle in BUNDLES):
        try:
            config = json.loads(read_bytes(root / bundle.format(id=attribution.container_id)))
        except (OSError, ValueError):
            continue
        annotations = config.get("annotations") if isinstance(config, dict) else None
        if isinstance(annotations, dict):
            return _owner(annotations, attribution.pod_uid)
    return None


def _owner(annotations: dict[str, object], pod_uid: str) -> Owner | None:
    for namespace, pod, container, uid in _KEYS:
        values = [annotations.get(key) for key in (namespace, pod, container)]
        if all(isinstance(v, str) and v for v in values):
            named_uid = annotations.get(uid)
            if isinstance(named_uid, str) and named_uid and named_uid != pod_uid:
                return None  # a reused container ID of another pod: trust neither
            return Owner(*values)  # type: ignore[arg-type]
    return None


class ContainerOwners:
    """Owner per container, cached by (pod UID, container ID): a container's names never change. A
    container no bundle names yet is looked up again next time (two failed opens)."""

    def __init__(self, roots: tuple[Path, ...], max_cached: int = 4096) -> None:
        self.roots = roots
        self.max_cached = max_cached
        self._cache: dict[Attribution, Owner] = {}

    def owner(self, attribution: Attribution) -> Owner | None:
        found = self._cache.get(attribution)
        if found is None:
            found = read_owner(self.roots, attribution)
            if found is not None:
                if len(self._cache) >= self.max_cached:  # bounded: the oldest entry goes first
                    del self._cache[next(iter(self._cache))]
                self._cache[attribution] = found
        return found

    def __len__(self) -> int:
        return len(self._cache)

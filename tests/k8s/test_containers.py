"""Container names from the runtime's bundles (containerd, CRI-O) under the host root of a fixture
/proc tree, and their bounded cache."""

from __future__ import annotations

import json

from tests.e2e import test_processes as e2e_processes
from tests.e2e.test_processes import CID, UID, Proc
from tests.processes.test_collector import CID2, UID2
from warptd.k8s.containers import ContainerOwners, read_owner
from warptd.k8s.podresources import Owner
from warptd.processes.cgroup import Attribution

proc = e2e_processes.proc  # an empty procfs to add processes to, a fixture

CONTAINERD = "run/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json"
CRIO = "run/containers/storage/overlay-containers/{id}/userdata/config.json"


def bundle(proc: Proc, layout: str, container_id: str, annotations: dict[str, str]) -> None:
    """A runtime bundle's config.json under the host root (``<procfs>/1/root``)."""
    path = proc.root / "1" / "root" / layout.format(id=container_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"ociVersion": "1.1.0", "annotations": annotations}))


def containerd_bundle(proc: Proc, where: Attribution, owner: Owner) -> None:
    bundle(
        proc,
        CONTAINERD,
        where.container_id,
        {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.sandbox-namespace": owner.namespace,
            "io.kubernetes.cri.sandbox-name": owner.pod,
            "io.kubernetes.cri.container-name": owner.container,
            "io.kubernetes.cri.sandbox-uid": where.pod_uid,
        },
    )


def test_container_owner_from_containerd_and_cri_o_bundles(proc):
    host = (proc.root / "1" / "root",)
    containerd_bundle(proc, Attribution(UID, CID), Owner("ml", "train-0", "trainer"))
    bundle(
        proc,
        CRIO,
        CID2,
        {
            "io.kubernetes.pod.namespace": "ml",
            "io.kubernetes.pod.name": "serve-1",
            "io.kubernetes.container.name": "server",
            "io.kubernetes.pod.uid": UID2,
        },
    )
    assert read_owner(host, Attribution(UID, CID)) == Owner("ml", "train-0", "trainer")
    assert read_owner(host, Attribution(UID2, CID2)) == Owner("ml", "serve-1", "server")
    assert read_owner(host, Attribution(UID2, CID)) is None  # the bundle names another pod
    assert read_owner(host, Attribution(UID, "c" * 64)) is None  # no bundle
    assert read_owner(host, Attribution(UID, "")) is None
    (host[0] / CONTAINERD.format(id=CID)).write_text("{not json")
    assert read_owner(host, Attribution(UID, CID)) is None
    owners = ContainerOwners(host, max_cached=2)
    for n in range(5):
        containerd_bundle(proc, Attribution(UID, f"{n:064x}"), Owner("ml", "a", f"c{n}"))
        assert owners.owner(Attribution(UID, f"{n:064x}")) == Owner("ml", "a", f"c{n}")
    assert owners.owner(Attribution(UID, "d" * 64)) is None
    assert len(owners) == 2  # bounded, and a miss is not kept

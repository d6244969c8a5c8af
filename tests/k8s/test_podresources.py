"""Pod attribution against a real gRPC kubelet double on a unix socket, per-pod energy, the daemon wiring."""

from __future__ import annotations

from tests.k8s import kubelet_rig
from warptd.k8s.attribution import PodAttribution

kubelet = kubelet_rig.kubelet  # the kubelet double, serving, a fixture
pod_rig = kubelet_rig.pod_rig  # a PodRig, closed after the test, a fixture


def test_a_root_only_socket_is_counted_as_permission(pod_rig, kubelet, monkeypatch):
    """As root every socket is writable, so the non-root answer of ``os.access`` is injected."""
    from warptd.k8s import podresources

    monkeypatch.setattr(podresources.os, "access", lambda path, mode: path != kubelet.socket)
    pod_rig.pods.poll_once()
    assert pod_rig.pods.state.errors == {"permission": 1} and not pod_rig.pods.state.up


def test_devices_match_by_uuid_pci_address_or_serial():
    """Device plugins name devices their own way: NVIDIA by UUID, AMD by PCI address, Habana by serial."""
    from warptd.k8s.podresources import Allocation, Owner
    from warptd.models import GPUInfo

    class Kubelet:  # the client's interface, answering a fixed List
        timeout = 1.0

        def list(self):
            return [
                Allocation(Owner("ml", "a", "main"), "nvidia.com/gpu", "GPU-ABC"),
                Allocation(Owner("ml", "b", "main"), "amd.com/gpu", "0000:C1:00.0"),
                Allocation(Owner("ml", "c", "main"), "habana.ai/gaudi", "AM12345"),
            ]

        def close(self):
            pass

    pods = PodAttribution(Kubelet(), interval=10)
    pods.poll_once()
    nvidia = GPUInfo(index=0, model="H100", uuid="gpu-abc", pci_bus_id="00000000:18:00.0")
    amd = GPUInfo(index=0, model="MI300X", uuid="74a1-x", pci_bus_id="0000:c1:00.0")
    gaudi = GPUInfo(index=0, model="Gaudi 3", uuid="01-x", extra_metrics={"serial": "AM12345"})
    other = GPUInfo(index=1, model="MI300X", uuid="74a2-x", pci_bus_id="0000:c2:00.0")
    assert [o.pod for o in pods.owners(nvidia)] == ["a"]
    assert [o.pod for o in pods.owners(amd)] == ["b"]
    assert [o.pod for o in pods.owners(gaudi)] == ["c"]
    assert pods.owners(other) == ()

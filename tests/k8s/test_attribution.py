"""The amd and amdsmi backends against the amdsmi double (tests/doubles/amdsmi.py); no GPU or ROCm needed."""

from __future__ import annotations

import pytest

from tests.backends.amd import test_backend as amd_backend
from tests.dcgm import compat_rig
from tests.doubles.amdsmi import FakeAmdsmi
from tests.helpers import Rig, select
from tests.kubelet import FakeKubelet
from warptd.config import load_settings
from warptd.k8s.attribution import PodAttribution, from_settings
from warptd.k8s.podresources import PodResourcesClient

fake = amd_backend.fake  # the amdsmi double: GPU 0 and a Navi card, a fixture


pytestmark = pytest.mark.rig("amd", doubles=["fake"])


def test_partitions_are_devices_by_uuid_and_partition_id(settings):
    """CPX-style partitions share one UUID, serial and PCI address: each is its own device, keyed by
    (UUID, partition id); only the primary partition has socket power, energy and socket counters."""
    from warptd.k8s.attribution import device_keys

    fake = FakeAmdsmi.partitioned(sockets=2, partitions=4)
    settings.backends = ["amd"]
    with fake.installed():
        rig = Rig(settings)
        try:
            samples = rig.tick()
            info = select(samples, "warptd_device_info", backend="amd")
            infos = {s.labels["device"]: s.labels for s in info}
            assert len({labels["uuid"] for labels in infos.values()}) == 8
            assert infos["1"]["uuid"] == f"{fake.gpus[1].uuid}/1"
            assert infos["4"]["uuid"] == f"{fake.gpus[4].uuid}/0" and fake.gpus[4].uuid != fake.gpus[1].uuid
            assert infos["1"]["pci_bus_id"] == infos["0"]["pci_bus_id"]
            power = select(samples, "warptd_device_power_watts", backend="amd")
            powered = {s.labels["device"] for s in power}
            assert powered == {"0", "4"}
            energy = select(samples, "warptd_device_energy_joules_total", backend="amd")
            assert {s.labels["device"]: s.value for s in energy} == {"0": 5000, "4": 5000}
            xgmi = select(
                samples, "warptd_device_nvlink_link_bytes_total", link="0", direction="rx", backend="amd"
            )
            assert {s.labels["device"] for s in xgmi} == {"0", "4"}
            throttled = select(samples, "warptd_device_throttle_active", backend="amd", reason="sw_power_cap")
            assert len(throttled) == 8  # throttling is the socket's, and each partition's
            # totals follow (UUID, partition id): one partition's throttling is not another's
            fake.gpus[1].throttling.add("ppt_residency_acc")
            fake.advance(2.0)
            seconds = select(
                rig.tick(), "warptd_device_throttle_seconds_total", backend="amd", reason="sw_power_cap"
            )
            assert {s.labels["device"]: s.value for s in seconds} == {"1": 2.0, **dict.fromkeys("0234567", 0)}
            devices = rig.loaded.accelerators[0].list_devices()
            keys = device_keys(devices[1])
            assert keys == {devices[1].uuid.lower()}  # not the GPU's serial or PCI address
            assert devices[1].pci_bus_id not in keys and devices[0].pci_bus_id not in device_keys(devices[0])
        finally:
            rig.close()


def test_a_shared_gpu_has_one_series_per_container_and_a_free_one_none(settings, fake_nvml, tmp_path):
    kubelet = FakeKubelet(tmp_path / "kubelet.sock").start()
    gpu0 = fake_nvml.gpus[0].uuid
    kubelet.pods = {
        ("ml", "train-0", "trainer"): {"nvidia.com/gpu": [f"{gpu0}::0"]},
        ("web", "infer-1", "server"): {"nvidia.com/gpu": [f"{gpu0}::1"]},  # time-slicing replicas
    }
    pods = PodAttribution(PodResourcesClient(kubelet.socket, timeout=1.0), interval=10)
    rig = compat_rig(settings, "nvidia", attribution=pods)
    try:
        pods.poll_once()
        samples = rig.tick()
    finally:
        rig.close()
        pods.stop()
        kubelet.stop()
    shared = select(samples, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    owners = sorted((s.labels["namespace"], s.labels["pod"], s.labels["container"]) for s in shared)
    assert owners == [("ml", "train-0", "trainer"), ("web", "infer-1", "server")]
    assert {s.value for s in shared} == {fake_nvml.gpus[0].util_gpu}  # the device's value, not split
    free = select(samples, "DCGM_FI_DEV_GPU_UTIL", gpu="1")
    assert [(s.labels["pod"], s.labels["namespace"], s.labels["container"]) for s in free] == [("", "", "")]


def test_no_socket_means_attribution_off_with_one_log_line(tmp_path, capsys):
    settings = load_settings(listen="127.0.0.1:0", kubelet_socket=tmp_path / "absent.sock", backends=["cpu"])
    assert from_settings(settings) is None
    assert capsys.readouterr().out.count("pod_attribution_off") == 1
    settings.kubelet_socket.write_text("")
    settings.pod_attribution = False
    assert from_settings(settings) is None


def test_device_ids_normalise_to_the_device_they_name():
    from warptd.k8s.attribution import _normalise, device_keys
    from warptd.models import GPUInfo

    uuid = "GPU-8f3c0a2e-1b2c-3d4e-5f60-718293a4b5c6"
    assert _normalise(f"{uuid}::3") == _normalise(f"{uuid.upper()}::12") == uuid.lower()
    assert _normalise(f"MIG-{uuid}/7/0") == uuid.lower()
    assert _normalise("0000:C1:00.0::1") == "0000:c1:00.0"
    mig = "MIG-4a1d2e3f-0000-5111-8222-333344445555"
    assert _normalise(mig) == mig.lower()  # does not name its GPU: matched through aliases
    assert _normalise("weird::name") == "weird::name"  # only a numeric suffix is a replica
    info = GPUInfo(index=0, model="A100", uuid=uuid, aliases=["MIG-4A1D", "MIG-5b2e"])
    assert device_keys(info) == {uuid.lower(), "mig-4a1d", "mig-5b2e"}
    assert device_keys(GPUInfo(index=0, model="A100", uuid=uuid)) == {uuid.lower()}

"""Pod attribution against a real gRPC kubelet double on a unix socket, per-pod energy, the daemon wiring."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import Rig, http, parse, select, value, wait_until
from tests.kubelet import FakeKubelet, legacy_mig_device, mig_device, replica
from warptd.config import load_settings
from warptd.daemon import Daemon
from warptd.k8s.attribution import PodAttribution, from_settings
from warptd.k8s.collector import KubernetesCollector
from warptd.k8s.energy import PodEnergy
from warptd.k8s.podresources import PodResourcesClient

GPU = "nvidia.com/gpu"


@pytest.fixture
def kubelet(tmp_path):
    fake = FakeKubelet(tmp_path / "kubelet.sock").start()
    yield fake
    fake.stop()


class PodRig:
    """The NVML double's GPUs sampled by hand, with attribution polled by hand (no threads)."""

    def __init__(self, settings, kubelet: FakeKubelet) -> None:
        settings.backends = ["nvidia"]
        self.rig = Rig(settings)
        self.pods = PodAttribution(PodResourcesClient(kubelet.socket, timeout=1.0), interval=10)
        self.energy = PodEnergy(self.pods, self.rig.snapshot)
        self.rig.sampler.listeners.append(self.energy.on_sample)
        self.rig.exposition.registry.register(KubernetesCollector(self.pods, self.energy, self.rig.snapshot))
        self.pods.on_change = self.rig.snapshot.touch

    def poll_and_tick(self):
        self.pods.poll_once()
        return self.rig.tick()

    def close(self) -> None:
        self.pods.stop()
        self.rig.close()


@pytest.fixture
def pod_rig(settings, kubelet, fake_nvml):
    rig = PodRig(settings, kubelet)
    yield rig
    rig.close()


def allocations(samples):
    return sorted(
        (s.labels["device"], s.labels["namespace"], s.labels["pod"], s.labels["container"])
        for s in select(samples, "warptd_device_allocation_info")
    )


def test_devices_map_to_their_containers_by_uuid(pod_rig, kubelet, fake_nvml):
    gpu0, gpu1 = (g.uuid for g in fake_nvml.gpus)
    kubelet.pods = {
        ("ml", "train-0", "trainer"): {GPU: [gpu0]},
        ("ml", "infer-a", "server"): {GPU: [gpu1.lower()]},  # plugins' spelling may differ in case
        ("ml", "infer-b", "server"): {GPU: [gpu1]},  # time-sliced: one GPU, two pods
        ("web", "nginx", "nginx"): {"cpu": ["0"]},  # not a device of ours
    }
    samples = pod_rig.poll_and_tick()
    assert allocations(samples) == [
        ("0", "ml", "train-0", "trainer"),
        ("1", "ml", "infer-a", "server"),
        ("1", "ml", "infer-b", "server"),
    ]
    info = select(samples, "warptd_device_allocation_info", pod="train-0")[0]
    assert info.value == 1 and info.labels["backend"] == "nvidia" and info.labels["uuid"] == gpu0
    assert value(samples, "warptd_podresources_up") == 1
    assert value(samples, "warptd_podresources_last_success_timestamp_seconds") > time.time() - 60


def test_time_sliced_and_mig_devices_match_their_gpu(settings, kubelet):
    """Replicas ``GPU-<uuid>::<n>`` and legacy ``MIG-GPU-<uuid>/<gi>/<ci>`` IDs count as their GPU; a
    ``MIG-<uuid>`` matches the GPU whose MIG devices NVML lists it among (``GPUInfo.aliases``). Parts of
    one GPU held by several containers share the GPU: allocation_info for each, its energy split evenly."""
    mig_uuid = "7b3c2a10-5d4e-5f6a-8b9c-0d1e2f3a4b5c"
    fake = FakeNvml(gpus=3)
    fake.gpus[1].mig_uuids = [mig_device(mig_uuid), mig_device("0e1f2a3b-4c5d-5e6f-8a9b-0c1d2e3f4a5b")]
    gpu0, gpu1, gpu2 = (g.uuid for g in fake.gpus)
    kubelet.pods = {
        ("ml", "a", "main"): {GPU: [replica(gpu0, 0)]},
        ("ml", "b", "main"): {GPU: [replica(gpu0, 3), replica(gpu0, 4)]},  # two replicas, one owner
        ("ml", "c", "main"): {"nvidia.com/mig-1g.10gb": [mig_device(mig_uuid)]},
        ("ml", "d", "main"): {"nvidia.com/mig-3g.40gb": [legacy_mig_device(gpu2, 1, 0)]},
        ("ml", "e", "main"): {"nvidia.com/mig-3g.40gb": [legacy_mig_device(gpu2, 2, 0)]},
    }
    with fake.installed():
        rig = PodRig(settings, kubelet)
        try:
            samples = rig.poll_and_tick()
            assert allocations(samples) == [
                ("0", "ml", "a", "main"),
                ("0", "ml", "b", "main"),
                ("1", "ml", "c", "main"),
                ("2", "ml", "d", "main"),
                ("2", "ml", "e", "main"),
            ]
            mig = select(samples, "warptd_device_allocation_info", pod="c")
            assert [s.labels["uuid"] for s in mig] == [gpu1]
            for gpu, joules in zip(fake.gpus, (100.0, 30.0, 60.0), strict=True):
                gpu.energy_mj += int(joules * 1000)
            samples = rig.rig.tick()
        finally:
            rig.close()
    energy = {s.labels["pod"]: s.value for s in select(samples, "warptd_pod_energy_joules_total")}
    assert energy == pytest.approx({"a": 50.0, "b": 50.0, "c": 30.0, "d": 30.0, "e": 30.0}, rel=0.01)


def test_a_pod_going_away_drops_its_allocation(pod_rig, kubelet, fake_nvml):
    kubelet.pods = {("ml", "train-0", "trainer"): {GPU: [fake_nvml.gpus[0].uuid]}}
    assert allocations(pod_rig.poll_and_tick()) == [("0", "ml", "train-0", "trainer")]
    kubelet.pods = {}
    assert allocations(pod_rig.poll_and_tick()) == []


def test_socket_gone_keeps_the_last_mapping_and_counts_then_recovers(pod_rig, kubelet, fake_nvml):
    kubelet.pods = {("ml", "train-0", "trainer"): {GPU: [fake_nvml.gpus[0].uuid]}}
    pod_rig.poll_and_tick()
    kubelet.stop()  # the kubelet restarts: its socket is removed
    samples = pod_rig.poll_and_tick()
    assert allocations(samples) == [("0", "ml", "train-0", "trainer")]  # the last good mapping
    assert value(samples, "warptd_podresources_up") == 0
    assert value(samples, "warptd_podresources_errors_total", kind="unavailable") == 1
    kubelet.pods = {("ml", "train-1", "trainer"): {GPU: [fake_nvml.gpus[1].uuid]}}
    kubelet.start()  # back, on the same path
    samples = pod_rig.poll_and_tick()
    assert value(samples, "warptd_podresources_up") == 1
    assert allocations(samples) == [("1", "ml", "train-1", "trainer")]
    assert value(samples, "warptd_podresources_errors_total", kind="unavailable") == 1


@pytest.mark.slow
def test_a_refusing_socket_and_a_slow_kubelet_are_counted_by_kind(pod_rig, kubelet, tmp_path):
    kubelet.delay = 1.5  # over the client's 1 s timeout
    pod_rig.pods.poll_once()
    assert pod_rig.pods.state.errors == {"timeout": 1}
    kubelet.delay = 0
    kubelet.stop()
    kubelet.socket.write_text("")  # a stale file where the socket was: connection refused
    pod_rig.pods.poll_once()
    assert pod_rig.pods.state.errors == {"timeout": 1, "unavailable": 1}


def test_per_pod_energy_follows_a_scripted_allocation_timeline(pod_rig, kubelet, fake_nvml):
    """GPU 0 alone for pod A, then shared by A and B (split evenly), then B's alone; GPU 1 idle."""
    gpu0 = fake_nvml.gpus[0]
    timeline = [  # (owners of GPU 0, joules GPU 0 uses in the next interval)
        ([("ml", "a", "main")], 120.0),
        ([("ml", "a", "main"), ("ml", "b", "main")], 80.0),
        ([("ml", "b", "main")], 50.0),
    ]
    expected = {"a": 0.0, "b": 0.0}
    for owners, joules in timeline:
        kubelet.pods = {owner: {GPU: [gpu0.uuid]} for owner in owners}
        pod_rig.poll_and_tick()  # the allocation is known before the energy is used
        gpu0.energy_mj += int(joules * 1000)
        fake_nvml.gpus[1].energy_mj += 999_000  # an unallocated GPU's energy is nobody's
        for _, pod, _ in owners:
            expected[pod] += joules / len(owners)
        samples = pod_rig.rig.tick()
    for pod, joules in expected.items():
        got = value(samples, "warptd_pod_energy_joules_total", namespace="ml", pod=pod, container="main")
        assert got == pytest.approx(joules, rel=0.01)
    assert expected == {"a": 160.0, "b": 90.0}
    assert len(select(samples, "warptd_pod_energy_joules_total")) == 2


@pytest.mark.slow
def test_exposition_with_pods_is_promtool_clean(pod_rig, kubelet, fake_nvml):
    kubelet.pods = {("ml", "train-0", "trainer"): {GPU: [fake_nvml.gpus[0].uuid]}}
    pod_rig.poll_and_tick()
    fake_nvml.gpus[0].energy_mj += 5000
    pod_rig.rig.tick()
    body = pod_rig.rig.exposition.render(None, None)[0]
    assert b"warptd_pod_energy_joules_total{" in body
    assert_promtool_clean(body)


def test_no_socket_means_attribution_off_with_one_log_line(tmp_path, capsys):
    settings = load_settings(listen="127.0.0.1:0", kubelet_socket=tmp_path / "absent.sock", backends=["cpu"])
    assert from_settings(settings) is None
    assert capsys.readouterr().out.count("pod_attribution_off") == 1
    settings.kubelet_socket.write_text("")
    settings.pod_attribution = False
    assert from_settings(settings) is None


@pytest.mark.slow
def test_a_slow_kubelet_never_delays_a_scrape(tmp_path, kubelet):
    """The daemon polls on its own thread: scrapes while List hangs are served from the snapshot."""
    fake = FakeNvml([FakeGpu(index=i) for i in range(2)])
    kubelet.pods = {("ml", "train-0", "trainer"): {GPU: [fake.gpus[0].uuid]}}
    settings = load_settings(
        listen="127.0.0.1:0",
        backends=["nvidia"],
        interval=0.2,
        kubelet_socket=kubelet.socket,
        pod_resources_interval=1,
        pod_labels=True,
        sysfs=tmp_path,
    )
    with fake.installed():
        daemon = Daemon(settings)
        daemon.start()
        try:
            assert wait_until(
                lambda: b"warptd_device_allocation_info{" in http(daemon.port, "GET", "/metrics")[2]
            )
            kubelet.delay = 1.8  # each List now takes longer than its timeout
            calls = kubelet.calls
            daemon.pods.interval = 0.1
            assert wait_until(lambda: kubelet.calls > calls + 1, timeout=10)
            slowest = 0.0
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:  # bounded: at most ~2 s of scrapes
                started = time.monotonic()
                status, _, body = http(daemon.port, "GET", "/metrics")
                slowest = max(slowest, time.monotonic() - started)
                assert status == 200
            samples = parse(body.decode())
            assert slowest < 0.5, f"a scrape took {slowest:.2f} s while the kubelet hung"
            assert allocations(samples) == [("0", "ml", "train-0", "trainer")]  # kept while failing
            power = {
                s.labels["device"]: s.labels["pod"] for s in select(samples, "warptd_device_power_watts")
            }
            assert power == {"0": "train-0", "1": ""}  # --pod-labels
        finally:
            kubelet.delay = 0
            stopper = threading.Thread(target=daemon.stop)
            stopper.start()
            stopper.join(timeout=10)
            assert not stopper.is_alive()


def test_a_root_only_socket_is_counted_as_permission(pod_rig, kubelet, monkeypatch):
    """As root every socket is writable, so the non-root answer of ``os.access`` is injected."""
    from warptd.k8s import podresources

    monkeypatch.setattr(podresources.os, "access", lambda path, mode: path != kubelet.socket)
    pod_rig.pods.poll_once()
    assert pod_rig.pods.state.errors == {"permission": 1} and not pod_rig.pods.state.up


def test_pod_labels_put_the_owners_on_device_series(settings, kubelet, fake_nvml):
    """--pod-labels: one series per device still; a shared device lists its owners joined by commas."""
    from warptd.exporter.exposition import Exposition

    gpu0, gpu1 = (g.uuid for g in fake_nvml.gpus)
    kubelet.pods = {
        ("ml", "train-0", "trainer"): {GPU: [gpu0]},
        ("ml", "infer-a", "server"): {GPU: [gpu1]},
        ("dev", "notebook", "jupyter"): {GPU: [gpu1]},
    }
    rig = PodRig(settings, kubelet)
    try:
        rig.pods.poll_once()
        rig.rig.tick()
        labelled = Exposition(rig.rig.snapshot, node="node-a", pod_labels=rig.pods.pod_labels)
        samples = parse(labelled.render(None, None)[0].decode())
        power = {s.labels["device"]: s.labels for s in select(samples, "warptd_device_power_watts")}
        assert (power["0"]["namespace"], power["0"]["pod"], power["0"]["container"]) == (
            "ml",
            "train-0",
            "trainer",
        )
        assert (power["1"]["namespace"], power["1"]["pod"], power["1"]["container"]) == (
            "dev,ml",
            "notebook,infer-a",
            "jupyter,server",
        )
        temps = select(samples, "warptd_device_temperature_celsius", device="0")
        assert temps and all(s.labels["pod"] == "train-0" for s in temps)
        assert {s.labels["sensor"] for s in temps} == {"gpu", "memory"}
        assert all("pod" not in s.labels for s in select(samples, "warptd_backend_up"))
        unlabelled = select(rig.rig.scrape(), "warptd_device_power_watts")  # off by default
        assert unlabelled and all("pod" not in s.labels for s in unlabelled)
    finally:
        rig.close()


@pytest.mark.slow
def test_committed_stubs_match_the_proto(tmp_path):
    """The generated podresources_pb2 is what grpc_tools makes of podresources.proto today."""
    import sys
    from pathlib import Path

    from warptd.k8s import podresources_pb2

    root = Path(__file__).parents[1]
    out = tmp_path / "descriptor.pb"
    result = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"--descriptor_set_out={out}",
         "warptd/k8s/podresources.proto"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    from google.protobuf import descriptor_pb2

    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    for message in fresh.message_type:  # descriptor sets carry json_name; generated modules do not
        for field in message.field:
            field.ClearField("json_name")
    committed = descriptor_pb2.FileDescriptorProto.FromString(podresources_pb2.DESCRIPTOR.serialized_pb)
    assert fresh == committed, "regenerate: see the header of warptd/k8s/podresources.proto"
    service = committed.service[0]
    assert (committed.package, service.name, service.method[0].name) == ("v1", "PodResourcesLister", "List")


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


def test_an_older_read_published_late_is_not_counted_twice(pod_rig, kubelet, fake_nvml):
    """A window's fast reads and the regular tick may publish one GPU out of order: the energy total
    it carries is monotonic, so a lower one is an older read and changes nothing."""
    from warptd.models import DeviceReading
    from warptd.sampling.snapshot import DeviceSample

    gpu0 = fake_nvml.gpus[0]
    kubelet.pods = {("ml", "a", "main"): {GPU: [gpu0.uuid]}}
    pod_rig.poll_and_tick()
    energy = PodEnergy(pod_rig.pods, pod_rig.rig.snapshot)
    for joules in (90.0, 110.0, 100.0, 120.0):  # 100 J is the read before 110 J, published after it
        sample = DeviceSample(DeviceReading(index=0, uuid=gpu0.uuid), energy_joules=joules)
        energy.on_sample("nvidia", [sample], None)
    assert energy.totals() == {("ml", "a", "main", "nvidia"): pytest.approx(30.0)}

"""Pod attribution against a real gRPC kubelet double on a unix socket, per-pod energy, the daemon wiring."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import http, parse, select, wait_until
from tests.k8s import kubelet_rig
from tests.k8s.kubelet_rig import GPU, allocations
from warptd.config import load_settings
from warptd.daemon import Daemon

kubelet = kubelet_rig.kubelet  # the kubelet double, serving, a fixture
pod_rig = kubelet_rig.pod_rig  # a PodRig, closed after the test, a fixture


@pytest.mark.slow
def test_exposition_with_pods_is_promtool_clean(pod_rig, kubelet, fake_nvml):
    kubelet.pods = {("ml", "train-0", "trainer"): {GPU: [fake_nvml.gpus[0].uuid]}}
    pod_rig.poll_and_tick()
    fake_nvml.gpus[0].energy_mj += 5000
    pod_rig.rig.tick()
    body = pod_rig.rig.exposition.render(None, None)[0]
    assert b"warptd_pod_energy_joules_total{" in body
    assert_promtool_clean(body)


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


@pytest.mark.slow
def test_committed_stubs_match_the_proto(tmp_path):
    """The generated podresources_pb2 is what grpc_tools makes of podresources.proto today."""
    import sys
    from pathlib import Path

    from warptd.k8s import podresources_pb2

    root = Path(__file__).parents[2]
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

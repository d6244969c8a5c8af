"""Pod attribution against a real gRPC kubelet double on a unix socket, per-pod energy, the daemon wiring."""

from __future__ import annotations

from tests.helpers import parse, select
from tests.k8s import kubelet_rig
from tests.k8s.kubelet_rig import GPU, PodRig

kubelet = kubelet_rig.kubelet  # the kubelet double, serving, a fixture


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

"""The compat series carry the node label of the dcgm-exporter release named (issue 39, finding 21), on
the daemon's /metrics as a scraper reads it."""

from __future__ import annotations

import time

import pytest

from tests.dcgm import compat_rig, scrape
from tests.doubles.nvml import GIB, FakeMig, FakeNvml
from tests.helpers import Rig, http, parse, select, serving, value
from warptd.exporter.dcgm import DcgmCompatCollector


@pytest.mark.slow
@pytest.mark.parametrize(
    ("release", "label", "other"), [(None, "hostname", "Hostname"), ("4.5.3-4.8.2", "Hostname", "hostname")]
)
def test_the_daemon_serves_the_release_s_node_label(settings, fake_nvml, release, label, other):
    settings.backends, settings.compat, settings.node = ["nvidia"], "dcgm-exporter", "gpu-node-7"
    if release is not None:
        settings.dcgm_exporter_release = release
    with serving(settings) as daemon:
        samples = parse(http(daemon.port, "GET", "/metrics")[2].decode())
    temperatures = select(samples, "DCGM_FI_DEV_GPU_TEMP")
    assert len(temperatures) == 2
    for sample in temperatures:
        assert sample.labels[label] == "gpu-node-7" and other not in sample.labels


@pytest.mark.slow
def test_before_hopper_the_profiling_series_are_absent_and_the_rest_served(settings):
    fake = FakeNvml(gpus=1)
    fake.gpus[0].compute_capability = (8, 0)  # an A100: no GPM
    fake.gpus[0].gpm_supported = False
    with fake.installed():
        rig = compat_rig(settings, "nvidia")
        try:
            rig.tick()
            samples = rig.tick_gpm()
        finally:
            rig.close()
    fake.close()
    served = {s.name for s in samples if s.name.startswith("DCGM_")}
    assert not {name for name in served if name.startswith("DCGM_FI_PROF_")}
    assert "DCGM_FI_DEV_GPU_UTIL" in served and "DCGM_FI_DEV_POWER_USAGE" in served


def test_mig_devices_carry_their_gpu_s_identity_and_their_instance(settings):
    slices = [
        FakeMig("MIG-aaaaaaaa-1111-5222-8333-444444444444", gpu_instance=1, compute_instance=0,
                name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", memory_total=40 * GIB, memory_used=3 * GIB),
        FakeMig("MIG-bbbbbbbb-1111-5222-8333-444444444444", gpu_instance=9, compute_instance=0,
                name="NVIDIA H100 80GB HBM3 MIG 1g.10gb", memory_total=10 * GIB, memory_used=1 * GIB),
    ]  # fmt: skip
    fake = FakeNvml(gpus=2)
    fake.gpus[0].mig_devices = slices
    with fake.installed():
        rig = compat_rig(settings, "nvidia", "nvidia_mig")
        try:
            samples = rig.tick()
        finally:
            rig.close()
    fake.close()
    instances = select(samples, "DCGM_FI_DEV_FB_USED", gpu="0", GPU_I_ID="9")
    assert len(instances) == 1
    labels = instances[0].labels
    assert labels["GPU_I_PROFILE"] == "1g.10gb" and labels["UUID"] == fake.gpus[0].uuid
    assert labels["device"] == "nvidia0" and labels["modelName"] == fake.gpus[0].name
    assert instances[0].value == 1024  # the instance's own memory, in MiB
    assert value(samples, "DCGM_FI_DEV_FB_USED", gpu="0", GPU_I_ID="1", GPU_I_PROFILE="3g.40gb") == 3 * 1024
    # the whole GPU keeps its own series (no instance id), GPU 1 (MIG off) only its own
    assert len(select(samples, "DCGM_FI_DEV_FB_USED", gpu="0", GPU_I_ID="")) == 1
    assert [s.labels["GPU_I_ID"] for s in select(samples, "DCGM_FI_DEV_FB_USED", gpu="1")] == [""]


def test_openmetrics_types_the_bare_counters_unknown_and_parses(settings, fake_nvml):
    """OpenMetrics has no counter without _total samples (Prometheus negotiates it by default): there
    those two families are unknown, and the body still parses; the text format keeps them counters."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    rig = compat_rig(settings, "nvidia")
    try:
        rig.tick()
        body = rig.exposition.render("application/openmetrics-text; version=1.0.0", None)[0].decode()
        text = rig.exposition.render(None, None)[0].decode()
    finally:
        rig.close()
    types = {family.name: family.type for family in text_string_to_metric_families(body)}
    assert types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "unknown"
    assert types["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == "unknown"
    assert types["DCGM_FI_DEV_GPU_UTIL"] == "gauge" and types["warptd_device_energy_joules"] == "counter"
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert "# TYPE warptd_device_energy_joules_total counter\n" in text


def test_a_stale_backend_or_a_lost_gpu_loses_its_compat_series(settings, fake_nvml):
    settings.backends = ["nvidia"]
    rig = Rig(settings, stale_after=0.3)
    rig.exposition.registry.register(DcgmCompatCollector(rig.snapshot, settings.node))
    try:
        fake_nvml.gpus[1].lost = True
        rig.tick()
        samples = scrape(rig)
        assert {s.labels["gpu"] for s in select(samples, "DCGM_FI_DEV_GPU_TEMP")} == {"0"}
        time.sleep(0.4)  # no sample since: the backend is stale, and so are its values
        assert not [s for s in rig.scrape() if s.name.startswith("DCGM_")]
    finally:
        rig.close()

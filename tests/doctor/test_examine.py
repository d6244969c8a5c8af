"""``warptd doctor`` counts the series the daemon's /metrics has (issue 39, finding 17: it counted 157
where /metrics had 166 per H100, the XID counters left out), with ``--compat dcgm-exporter`` too."""

from __future__ import annotations

from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import http, serving, wait_until
from warptd.doctor.examine import examine
from warptd.registry import load_backends


def _scrape(port: int) -> bytes:
    return http(port, "GET", "/metrics")[2]


def _per_device(body: str) -> dict[tuple[str, str], int]:
    """Series by device as a scraper counts them: warptd's by backend and device, dcgm-exporter's by
    the index of their whole GPU."""
    counted: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            labels = sample.labels
            if "backend" in labels and labels.get("device"):
                counted[labels["backend"], labels["device"]] += 1
            elif sample.name.startswith("DCGM_") and "gpu" in labels:
                counted["nvidia", labels["gpu"]] += 1
    return dict(counted)


@pytest.mark.slow
@pytest.mark.parametrize("compat", [None, "dcgm-exporter"])
def test_the_doctor_counts_the_series_the_daemons_metrics_has(settings, compat):
    fake = FakeNvml([FakeGpu(0), FakeGpu.h200(1)], driver_version="580.159.04")
    settings.backends, settings.compat = ["nvidia"], compat
    try:
        with fake.installed():
            report = examine(settings, load_backends(settings, strict=True), quick=True)
            with serving(settings) as daemon:  # once GPM has had its two samples a second apart
                assert wait_until(
                    lambda: b"warptd_device_sm_active_ratio{" in _scrape(daemon.port), timeout=10
                )
                scraped = _per_device(_scrape(daemon.port).decode())
    finally:
        fake.close()
    nvidia = next(checkup for checkup in report.backends if checkup.backend == "nvidia")
    counted = {("nvidia", str(device.index)): sum(device.series.values()) for device in nvidia.devices}
    assert counted == {key: n for key, n in scraped.items() if key[0] == "nvidia"}
    if compat is None:
        assert counted["nvidia", "0"] == 57  # an H100 SXM, idle: its 18 NVLinks summed, 9 XIDs
    else:
        assert counted["nvidia", "0"] > 57 and nvidia.devices[0].series["DCGM_FI_DEV_GPU_TEMP"] == 1
    assert nvidia.devices[0].series["warptd_device_xid_errors_total"] == 9

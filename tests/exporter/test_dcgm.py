"""The compat series carry the node label of the dcgm-exporter release named (issue 39, finding 21), on
the daemon's /metrics as a scraper reads it."""

from __future__ import annotations

import pytest

from tests.helpers import http, parse, select, serving


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

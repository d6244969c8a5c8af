"""Several vendors in one daemon: the NVML and amdsmi doubles, a sysfs i915 card and an amdgpu card
that amdsmi also serves, the CPU; one real HTTP /metrics, promtool-clean, and ``warptd list``."""

from __future__ import annotations

import pytest

from tests import test_cli as cli
from tests.conftest import assert_promtool_clean
from tests.helpers import http, parse, select, wait_until
from warptd.daemon import Daemon

node = cli.node  # two NVIDIA, two AMD and an Intel GPU and the CPU, a fixture


@pytest.mark.slow
def test_two_gpu_vendors_in_one_exposition_promtool_clean(node):
    settings, nvml, amd = node
    daemon = Daemon(settings)
    daemon.start()
    try:
        assert wait_until(lambda: http(daemon.port, "GET", "/readyz")[0] == 200)
        assert wait_until(lambda: b'warptd_device_energy_joules_total{backend="hwmon"' in _scrape(daemon))
        body = _scrape(daemon)
        samples = parse(body.decode())
        info = {
            (s.labels["backend"], s.labels["device"]): s.labels for s in select(samples, "warptd_device_info")
        }
        assert {k: v["source"] for k, v in info.items()} == {
            ("nvidia", "0"): "nvml",
            ("nvidia", "1"): "nvml",
            ("amd", "0"): "amdsmi",
            ("amd", "1"): "amdsmi",
            ("hwmon", "0"): "sysfs",  # only the i915: amdsmi serves the amdgpu card
            ("cpu", "0"): "psutil",
        }
        assert info[("hwmon", "0")]["pci_bus_id"] == "0000:00:02.0"
        assert (
            info[("amd", "0")]["uuid"] == amd.gpus[0].uuid
            and info[("nvidia", "1")]["uuid"] == nvml.gpus[1].uuid
        )
        for backend in ("nvidia", "amd"):
            powers = select(samples, "warptd_device_power_watts", backend=backend)
            assert len(powers) == 2 and all(s.value > 0 for s in powers)
        domains = {(s.labels["source"], s.labels["domain"]) for s in select(samples, "warptd_power_watts")}
        assert ("amdsmi", "gpu1") in domains and not any(source == "nvml" for source, _ in domains)
        assert_promtool_clean(body)
    finally:
        daemon.stop()


def _scrape(daemon: Daemon) -> bytes:
    return http(daemon.port, "GET", "/metrics")[2]

"""The amd and amdsmi backends against the amdsmi double (tests/doubles/amdsmi.py); no GPU or ROCm needed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles.amdsmi import TT, U16, FakeAmdsmi, FakeGpu


@pytest.fixture
def fake() -> FakeAmdsmi:
    navi = FakeGpu(
        index=1,
        market_name="AMD Radeon RX 7900 XTX",
        vram_total_mb=24_560,
        vram_used_mb=1_024,
        current_socket_power=U16,  # Navi fills the average only
        average_socket_power=212,
        power_cap_uw=300_000_000,
        temperatures={TT.EDGE: 55, TT.HOTSPOT: 61, TT.VRAM: 58},
        metrics={"vcn_activity": [10, 250]},  # two VCNs, no XGMI; 250 % is out of range: "N/A"
        fan_speed=102,  # of 255
        pcie_replays=0,
        has_residency=False,  # no throttle residency accumulators: violation status NOT_SUPPORTED
    )
    # a consumer card without ECC, so without bad pages
    navi.unsupported = {
        "amdsmi_get_gpu_total_ecc_count",
        "amdsmi_get_gpu_bad_page_info",
    }
    fake = FakeAmdsmi([FakeGpu(index=0), navi])
    with fake.installed():
        yield fake
        assert fake.initialised == 0, "a backend was not shut down: the shared amdsmi session leaked"


pytestmark = pytest.mark.rig("amd", doubles=["fake"])


@pytest.mark.slow
def test_missing_library_in_a_clean_interpreter():
    """Nothing of the double in the process at all: a fresh Python as the daemon starts."""
    code = (
        "from warptd.backends.amd.backend import AmdBackend\n"
        "from warptd.config import load_settings\n"
        "try:\n"
        "    AmdBackend(load_settings(listen='127.0.0.1:0'))\n"
        "except Exception as exc:\n"
        "    import sys; sys.stderr.write(type(exc).__name__ + ': ' + str(exc))\n"
    )
    run = [sys.executable, "-c", code]
    result = subprocess.run(run, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0
    assert result.stdout == ""
    assert result.stderr == "BackendUnavailableError: libamd_smi.so not found (install ROCm's amd-smi-lib)"


@pytest.mark.slow
def test_exposition_passes_promtool(rig, fake):
    rig.tick()
    fake.gpus[0].throttling.add("ppt_residency_acc")
    fake.advance(1.0)
    rig.tick()
    body = rig.exposition.render(None, None)[0]
    for family in ("ecc_errors_total", "nvlink_link_bytes_total", "engine_active_ratio", "fan_speed_ratio"):
        assert f"# TYPE warptd_device_{family} ".encode() in body, family
    assert_promtool_clean(body)

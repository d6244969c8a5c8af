"""The amd and amdsmi backends against the amdsmi double (tests/doubles/amdsmi.py); no GPU or ROCm needed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.backends.amd import test_backend as amd_backend
from tests.conftest import assert_promtool_clean

fake = amd_backend.fake  # the amdsmi double: GPU 0 and a Navi card, a fixture


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

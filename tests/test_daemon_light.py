"""The daemon loads an opt-in feature's modules only when the feature is on: a default daemon holds
neither the code of --processes, --workloads and pod energy nor the report renderer (RSS, issue 24)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: Modules of features that are off by default, or needed only when a report is asked for.
OPT_IN = (
    "warptd.processes.nvml",
    "warptd.processes.amd",
    "warptd.processes.device_files",
    "warptd.workloads.energy",
    "warptd.workloads.history",
    "warptd.k8s.energy",
    "warptd.k8s.collector",
    "warptd.recording.render",
    "warptd.exporter.dcgm",
)


def loaded_after_building(tmp_path: Path, **settings: object) -> set[str]:
    """The opt-in modules a fresh interpreter holds once it built a Daemon with these settings."""
    code = (
        "import sys\n"
        "from warptd.config import load_settings\n"
        "from warptd.daemon import Daemon\n"
        f"settings = load_settings(listen='127.0.0.1:0', backends=['cpu'], sysfs={str(tmp_path)!r}, "
        f"procfs={str(tmp_path)!r}, cgroupfs={str(tmp_path)!r}, log_level='error', **{settings!r})\n"
        "daemon = Daemon(settings)\n"
        f"print('LOADED=' + ','.join(m for m in {OPT_IN!r} if m in sys.modules))\n"
        "daemon.server.server_close()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).parents[1],
    )
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("LOADED="))
    return set(filter(None, line.removeprefix("LOADED=").split(",")))


def test_a_default_daemon_loads_no_opt_in_feature(tmp_path):
    assert loaded_after_building(tmp_path) == set()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {"workloads": True},
            {"warptd.workloads.energy", "warptd.workloads.history"},
        ),
        ({"compat": "dcgm-exporter"}, {"warptd.exporter.dcgm"}),
    ],
)
def test_a_feature_turned_on_loads_its_modules(tmp_path, settings, expected):
    assert expected <= loaded_after_building(tmp_path, **settings)


def test_workloads_on_the_cpu_alone_load_no_vendor_s_process_source(tmp_path):
    """No AMD backend, no device-file backend: neither source's modules (nor amdsmi's) are loaded."""
    loaded = loaded_after_building(tmp_path, workloads=True)
    assert not loaded & {"warptd.processes.amd", "warptd.processes.device_files"}

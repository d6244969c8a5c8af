"""The daemon loads an opt-in feature's modules only when the feature is on: a default daemon holds
neither the code of --processes, --workloads and pod energy nor the report renderer (RSS, issue 24),
nor rich and pygments, which structlog imports where they are installed (issue 32)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import http, wait_until

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
        cwd=Path(__file__).parents[2],
    )
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("LOADED="))
    return set(filter(None, line.removeprefix("LOADED=").split(",")))


@pytest.mark.slow
def test_a_default_daemon_loads_no_opt_in_feature(tmp_path):
    assert loaded_after_building(tmp_path) == set()


@pytest.mark.slow
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


@pytest.mark.slow
def test_workloads_on_the_cpu_alone_load_no_vendor_s_process_source(tmp_path):
    """No AMD backend, no device-file backend: neither source's modules (nor amdsmi's) are loaded."""
    loaded = loaded_after_building(tmp_path, workloads=True)
    assert not loaded & {"warptd.processes.amd", "warptd.processes.device_files"}


#: Runs ``python -m warptd ARGS`` as that command does (runpy), and once the file READY exists writes
#: the names of the modules the running daemon holds to OUT.
_SERVE_AND_LIST_MODULES = """
import runpy, sys, threading, time
from pathlib import Path

ready, out = Path(sys.argv[1]), Path(sys.argv[2])


def report():
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    out.write_text("\\n".join(sorted(sys.modules)))


threading.Thread(target=report, daemon=True).start()
sys.argv = ["warptd", *sys.argv[3:]]
runpy.run_module("warptd", run_name="__main__", alter_sys=True)
"""


def modules_of_a_running_daemon(tmp_path: Path, log_format: str) -> set[str]:
    """The modules a ``warptd serve`` holds once it served /metrics, logging in ``log_format``."""
    ready, out = tmp_path / "ready", tmp_path / "modules"
    args = [
        "--backend",
        "cpu",
        "--listen",
        "127.0.0.1:0",
        "--sysfs",
        str(tmp_path),
        "--log-format",
        log_format,
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE_AND_LIST_MODULES, str(ready), str(out), *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    try:
        port = None
        for _ in range(200):  # bounded: the start lines come first
            line = proc.stderr.readline()
            if not line:
                break
            if "warptd_started" in line:
                port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))
                break
        assert port is not None, (
            f"warptd did not start: {proc.stderr.read() if proc.poll() is not None else ''}"
        )
        assert wait_until(lambda: http(port, "GET", "/metrics")[0] == 200)
        ready.touch()
        assert wait_until(out.exists)
        return set(out.read_text().split())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.parametrize("log_format", ["json", "console"])
def test_a_running_daemon_holds_neither_rich_nor_pygments(tmp_path, log_format):
    """structlog imports rich (and pygments) wherever installed; warptd renders neither (warptd/logs.py)."""
    pytest.importorskip("rich")  # installed here (tpu-info, the test tools): the case that matters
    loaded = modules_of_a_running_daemon(tmp_path, log_format)
    assert "structlog.dev" in loaded
    assert not {m for m in loaded if m.split(".")[0] in {"rich", "pygments"}}


@pytest.mark.slow
def test_rich_stays_importable_after_warptd_set_structlog_up():
    """The mark that kept rich out of structlog's import is lifted: tpu-info's own import of it works."""
    pytest.importorskip("rich")
    code = "import warptd.logs, structlog.dev, rich.console; print(structlog.dev.rich is None)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "True"

"""``warptd profile -- CMD`` as a user runs it: a real subprocess over the C-level NVML double, with its
own samplers or through a daemon on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import http, wait_until
from warptd.daemon import Daemon

ROOT = Path(__file__).parents[1]
WATTS = {0: 250.0, 1: 100.0}
NOBODY = "http://127.0.0.1:9"  # the discard port: no daemon answers there


@pytest.fixture
def gpus():
    fake = FakeNvml([FakeGpu(index=i, power_mw=int(w * 1000), live=True) for i, w in WATTS.items()])
    with fake.installed():
        yield fake
    fake.close()


def profile_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "warptd", "--backend", "nvidia", "--log-level", "error", "profile", *args]


def environment(gpus: FakeNvml) -> dict[str, str]:
    return {**os.environ, **gpus.environment(), "PYTHONPATH": str(ROOT)}


def run_profile(gpus: FakeNvml, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        profile_args(*args),
        env=environment(gpus),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


def sleeper(seconds: float, code: int = 0) -> list[str]:
    return [sys.executable, "-c", f"import sys, time; time.sleep({seconds}); sys.exit({code})"]


def test_energy_per_device_against_the_double_with_its_own_samplers(gpus):
    result = run_profile(gpus, "--url", NOBODY, "--json", "--", *sleeper(2.0))
    assert result.returncode == 0, result.stderr
    recording = json.loads(result.stdout)
    assert recording["kind"] == "profile" and recording["end_reason"] == "command_exited"
    assert recording["interval_seconds"] == 0.1 and recording["name"] == Path(sys.executable).name
    assert recording["duration_seconds"] == pytest.approx(2.0, abs=0.6)  # the child's start-up too
    for index, watts in WATTS.items():
        gpu = next(t for t in recording["targets"] if t["id"] == f"nvidia:{index}")
        assert gpu["energy_joules"] == pytest.approx(watts * recording["duration_seconds"], rel=0.02), gpu
        assert gpu["samples"] >= 15


@pytest.mark.parametrize("code", [0, 3])
def test_the_exit_code_is_the_commands(gpus, code):
    result = run_profile(gpus, "--url", NOBODY, "--device", "nvidia:1", "--", *sleeper(0.2, code))
    assert result.returncode == code, result.stderr
    assert "nvidia:1" in result.stderr and "nvidia:0" not in result.stderr  # the table, on stderr
    assert result.stdout == ""  # stdout stays the command's


def test_sigint_is_forwarded_and_its_exit_code_passed_through(gpus):
    child = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *_: sys.exit(7))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen(
        profile_args("--url", NOBODY, "--json", "--", sys.executable, "-c", child),
        env=environment(gpus),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 7, err
    assert time.monotonic() - started < 10
    assert json.loads(out)["end_reason"] == "command_exited"


def test_a_killed_command_exits_128_plus_the_signal(gpus):
    result = run_profile(
        gpus, "--url", NOBODY, "--", sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"
    )
    assert result.returncode == 128 + 9, result.stderr


def test_through_the_daemon_when_one_answers(gpus, settings):
    settings.backends = ["nvidia"]
    daemon = Daemon(settings)
    daemon.start()
    try:
        assert wait_until(lambda: http(daemon.port, "GET", "/readyz")[0] == 200)
        calls = gpus.calls("nvmlInitWithFlags") + gpus.calls("nvmlInit_v2")
        url = f"http://127.0.0.1:{daemon.port}"
        result = run_profile(gpus, "--url", url, "--json", "--name", "train", "--", *sleeper(1.0))
        assert result.returncode == 0, result.stderr
        recording = json.loads(result.stdout)
        assert calls == gpus.calls("nvmlInitWithFlags") + gpus.calls("nvmlInit_v2")  # no second NVML user
        windows = json.loads(http(daemon.port, "GET", "/windows")[2])["windows"]
        assert [w["id"] for w in windows] == [recording["id"]] and windows[0]["name"] == "train"
        gpu = next(t for t in recording["targets"] if t["id"] == "nvidia:0")
        assert gpu["energy_joules"] == pytest.approx(250 * recording["duration_seconds"], rel=0.02)
    finally:
        daemon.stop()


def test_output_needs_the_report_module(gpus, tmp_path):
    import importlib.util

    marker, report = tmp_path / "ran", tmp_path / "report.html"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    result = run_profile(gpus, "--url", NOBODY, "--output", str(report), "--", *command)
    if importlib.util.find_spec("warptd.recording.report") is None:
        assert result.returncode == 2 and "--output needs the HTML report" in result.stderr
        assert not marker.exists()  # refused before running anything
    else:  # the report module, merged from its own branch; it needs plotly
        assert result.returncode == 0 and marker.exists(), result.stderr
        if importlib.util.find_spec("plotly") is None:
            assert f"cannot write {report}" in result.stderr
        else:
            assert report.read_text().lstrip().lower().startswith("<!doctype html")


def test_carbon_and_cost_from_the_flags(gpus):
    result = run_profile(
        gpus,
        "--url",
        NOBODY,
        "--json",
        "--carbon-intensity",
        "400",
        "--energy-price",
        "0.3",
        "--",
        *sleeper(0.3),
    )
    assert result.returncode == 0, result.stderr
    recording = json.loads(result.stdout)
    kwh = recording["energy_joules"] / 3.6e6
    assert recording["carbon_grams"] == pytest.approx(400 * kwh) and recording["cost"] == pytest.approx(
        0.3 * kwh
    )
    assert recording["carbon_intensity_g_per_kwh"] == 400


def test_an_unknown_device_is_refused_before_running(gpus, tmp_path):
    marker = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    result = run_profile(gpus, "--url", NOBODY, "--device", "nvidia:7", "--", *command)
    assert result.returncode == 2 and "unknown device or domain 'nvidia:7'" in result.stderr
    assert not marker.exists()


def test_no_command_is_a_usage_error(gpus):
    result = run_profile(gpus, "--url", NOBODY)
    assert result.returncode == 2 and "give the command" in result.stderr

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

from tests.doubles.nvml import FakeNvml, drawing
from tests.helpers import http, serving, wait_until
from warptd.daemon import Daemon

ROOT = Path(__file__).parents[2]
WATTS = {0: 250.0, 1: 100.0}
NOBODY = "http://127.0.0.1:9"  # the discard port: no daemon answers there
BLOCK_PLOTLY = (  # the real CLI, as a host without the report extra runs it
    "import runpy, sys; sys.modules['plotly'] = None; sys.argv[0] = 'warptd'; "
    "runpy.run_module('warptd', run_name='__main__', alter_sys=True)"
)


@pytest.fixture
def gpus():
    with drawing(WATTS) as fake:
        yield fake


def profile_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "warptd", "--backend", "nvidia", "--log-level", "error", "profile", *args]


def environment(gpus: FakeNvml) -> dict[str, str]:
    return {**os.environ, **gpus.environment(), "PYTHONPATH": str(ROOT)}


def run_profile(gpus: FakeNvml, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_command(gpus, profile_args(*args), timeout)


def run_command(
    gpus: FakeNvml,
    command: list[str],
    timeout: float = 60,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess[str]:
    """A warptd command line run over the NVML double (``env`` added to its environment), output captured."""
    return subprocess.run(
        command,
        env={**environment(gpus), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        check=False,
    )


def sleeper(seconds: float, code: int = 0) -> list[str]:
    return [sys.executable, "-c", f"import sys, time; time.sleep({seconds}); sys.exit({code})"]


@pytest.mark.slow
def test_energy_per_device_against_the_double_with_its_own_samplers(gpus):
    result = run_profile(gpus, "--local", "--json", "--", *sleeper(2.0))
    assert result.returncode == 0, result.stderr
    recording = json.loads(result.stdout)
    assert recording["kind"] == "profile" and recording["end_reason"] == "command_exited"
    assert recording["interval_seconds"] == 0.1 and recording["name"] == Path(sys.executable).name
    assert recording["duration_seconds"] == pytest.approx(2.0, abs=0.6)  # the child's start-up too
    for index, watts in WATTS.items():
        gpu = next(t for t in recording["targets"] if t["id"] == f"nvidia:{index}")
        # the driver's counter at each edge is as of its last refresh (every 100 ms)
        assert gpu["energy_joules"] == pytest.approx(
            watts * recording["duration_seconds"], abs=watts * 0.2
        ), gpu
        assert gpu["samples"] >= 15


@pytest.mark.slow
@pytest.mark.parametrize("code", [0, 3])
def test_the_exit_code_is_the_commands(gpus, code):
    result = run_profile(gpus, "--local", "--device", "nvidia:1", "--", *sleeper(0.2, code))
    assert result.returncode == code, result.stderr
    assert "nvidia:1" in result.stderr and "nvidia:0" not in result.stderr  # the table, on stderr
    assert result.stdout == ""  # stdout stays the command's


@pytest.mark.slow
def test_sigint_is_forwarded_and_its_exit_code_passed_through(gpus):
    child = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *_: sys.exit(7))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen(
        profile_args("--local", "--json", "--", sys.executable, "-c", child),
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


@pytest.mark.slow
def test_a_killed_command_exits_128_plus_the_signal(gpus):
    result = run_profile(gpus, "--local", "--", sys.executable, "-c", "import os; os.kill(os.getpid(), 9)")
    assert result.returncode == 128 + 9, result.stderr


@pytest.fixture
def daemon(gpus, settings):
    settings.backends = ["nvidia"]
    with serving(settings) as running:
        yield running


@pytest.mark.slow
def test_through_the_daemon_when_one_answers(gpus, daemon):
    calls = gpus.calls("nvmlInitWithFlags") + gpus.calls("nvmlInit_v2")
    url = f"http://127.0.0.1:{daemon.port}"
    result = run_profile(gpus, "--url", url, "--json", "--name", "train", "--", *sleeper(1.0))
    assert result.returncode == 0, result.stderr
    recording = json.loads(result.stdout)
    assert calls == gpus.calls("nvmlInitWithFlags") + gpus.calls("nvmlInit_v2")  # no second NVML user
    windows = json.loads(http(daemon.port, "GET", "/windows")[2])["windows"]
    assert [w["id"] for w in windows] == [recording["id"]] and windows[0]["name"] == "train"
    gpu = next(t for t in recording["targets"] if t["id"] == "nvidia:0")
    assert gpu["energy_joules"] == pytest.approx(250 * recording["duration_seconds"], abs=250 * 0.2)


def marker_command(marker: Path) -> list[str]:
    return [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]


@pytest.mark.slow
def test_output_without_the_report_extra_is_refused_before_running(gpus, tmp_path):
    marker, report = tmp_path / "ran", tmp_path / "report.html"
    blocked = [sys.executable, "-c", BLOCK_PLOTLY, "--backend", "nvidia", "--log-level", "error", "profile"]
    result = run_command(gpus, [*blocked, "--local", "--output", str(report), "--", *marker_command(marker)])
    assert result.returncode == 2, result.stderr
    assert "install the report extra: " in result.stderr and "[report]'" in result.stderr, result.stderr
    assert " install '" in result.stderr  # the pip command that fits this install
    assert not marker.exists() and not report.exists()  # refused before running anything


@pytest.mark.slow
@pytest.mark.parametrize("where", ["missing/report.html", "."])
def test_an_unwritable_output_is_refused_before_running(gpus, tmp_path, where):
    marker, report = tmp_path / "ran", tmp_path / where
    result = run_profile(gpus, "--local", "--output", str(report), "--", *marker_command(marker))
    assert result.returncode == 2 and f"cannot write {report}" in result.stderr, result.stderr
    assert not marker.exists()


@pytest.mark.slow
def test_an_unwritable_save_is_refused_before_running(gpus, tmp_path):
    marker, saved = tmp_path / "ran", tmp_path / "missing" / "run.json"
    result = run_profile(gpus, "--local", "--save", str(saved), "--", *marker_command(marker))
    assert result.returncode == 2 and f"cannot write {saved}" in result.stderr, result.stderr
    assert not marker.exists()


@pytest.mark.slow
def test_the_recording_is_saved_beside_the_report(gpus, tmp_path):
    report = tmp_path / "run.html"
    result = run_profile(gpus, "--local", "--output", str(report), "--", *sleeper(0.3))
    assert result.returncode == 0, result.stderr
    assert report.read_text().lstrip().lower().startswith("<!doctype html")
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved["kind"] == "profile" and {t["id"] for t in saved["targets"]} == {"nvidia:0", "nvidia:1"}
    assert f"wrote {report}, and its recording in {tmp_path / 'run.json'}" in result.stderr


@pytest.mark.slow
def test_a_file_beside_the_report_that_is_no_recording_is_never_replaced(gpus, tmp_path):
    marker, report, other = tmp_path / "ran", tmp_path / "run.html", tmp_path / "run.json"
    other.write_text('{"learning_rate": 0.1}\n')  # the user's own file, sharing the report's name
    result = run_profile(gpus, "--local", "--output", str(report), "--", *marker_command(marker))
    assert result.returncode == 2 and f"{other} exists and is not a warptd recording" in result.stderr
    assert other.read_text() == '{"learning_rate": 0.1}\n' and not marker.exists()
    again = run_profile(
        gpus, "--local", "--output", str(report), "--save", str(tmp_path / "r.json"), "--", "true"
    )
    assert again.returncode == 0, again.stderr  # --save names another place
    other.unlink()
    for _ in range(2):  # profiled again: the earlier recording beside the report is replaced
        result = run_profile(gpus, "--local", "--output", str(report), "--", "true")
        assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_save_writes_the_recording_without_a_report(gpus, tmp_path):
    saved = tmp_path / "run.json"
    result = run_profile(gpus, "--local", "--save", str(saved), "--json", "--", *sleeper(0.3))
    assert result.returncode == 0, result.stderr
    assert json.loads(saved.read_text()) == json.loads(result.stdout)


@pytest.mark.slow
def test_a_report_failing_after_the_command_keeps_the_recording(gpus, tmp_path):
    """CMD itself takes the report's path (a directory there): the report fails after CMD ran, the
    exit is non-zero, the recording is where stderr says, and ``warptd report`` renders it."""
    report, saved = tmp_path / "run.html", tmp_path / "run.json"
    command = [sys.executable, "-c", f"import os; os.mkdir({str(report)!r})"]
    result = run_profile(gpus, "--local", "--output", str(report), "--", *command)
    assert result.returncode == 1, result.stderr
    assert f"cannot write {report}: Is a directory; the recording is saved in {saved}" in result.stderr
    later = tmp_path / "later.html"
    rendered = run_command(gpus, [sys.executable, "-m", "warptd", "report", str(saved), "-o", str(later)])
    assert rendered.returncode == 0, rendered.stderr
    assert later.read_text().lstrip().lower().startswith("<!doctype html")


@pytest.mark.slow
def test_a_failed_output_keeps_a_failing_commands_exit_code(gpus, tmp_path):
    report = tmp_path / "run.html"
    command = [sys.executable, "-c", f"import os, sys; os.mkdir({str(report)!r}); sys.exit(5)"]
    result = run_profile(gpus, "--local", "--output", str(report), "--", *command)
    assert result.returncode == 5 and f"cannot write {report}" in result.stderr, result.stderr


@pytest.mark.slow
def test_a_recording_that_cannot_be_saved_goes_to_the_temporary_directory(gpus, tmp_path):
    saved = tmp_path / "run.json"
    command = [sys.executable, "-c", f"import os; os.mkdir({str(saved)!r})"]
    result = run_profile(gpus, "--local", "--save", str(saved), "--", *command)
    assert result.returncode == 1, result.stderr
    line = next(line for line in result.stderr.splitlines() if f"cannot write {saved}" in line)
    fallback = Path(line.rsplit("the recording is saved in ", 1)[1])
    try:
        assert json.loads(fallback.read_text())["kind"] == "profile"
    finally:
        fallback.unlink()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "code", "message"),
    [
        (["warptd-no-such-command"], 127, "warptd-no-such-command: command not found"),
        (["./missing/tool"], 127, "./missing/tool: no such file or directory"),
        (["./script.sh"], 126, "./script.sh: permission denied"),
        (["script.sh"], 126, "script.sh: permission denied"),
        (["./scripts"], 126, "./scripts: is a directory"),
    ],
)
def test_a_command_that_cannot_run_exits_as_a_shell_does(gpus, tmp_path, command, code, message):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)  # not executable, as a script fresh from an editor
    (tmp_path / "scripts").mkdir()
    path = {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    result = run_command(gpus, profile_args("--local", "--", *command), env=path, cwd=tmp_path)
    assert result.returncode == code and message in result.stderr, result.stderr


@pytest.mark.slow
def test_a_command_that_cannot_run_leaves_no_window_on_the_daemon(gpus, daemon, tmp_path):
    url = f"http://127.0.0.1:{daemon.port}"
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    for command, code in ((["warptd-no-such-command"], 127), ([str(script)], 126)):
        result = run_profile(gpus, "--url", url, "--", *command)
        assert result.returncode == code, result.stderr
    assert json.loads(http(daemon.port, "GET", "/windows")[2])["windows"] == []


@pytest.mark.slow
def test_a_url_where_no_daemon_answers_is_an_error(gpus, tmp_path):
    marker = tmp_path / "ran"
    result = run_profile(gpus, "--url", NOBODY, "--", *marker_command(marker))
    assert result.returncode == 2 and f"no warptd daemon answers at {NOBODY} (--url)" in result.stderr
    assert "--local" in result.stderr and not marker.exists()


@pytest.mark.slow
def test_a_named_daemon_without_windows_is_an_error(gpus, settings, tmp_path):
    settings.backends, settings.windows = ["nvidia"], False
    daemon = Daemon(settings)
    daemon.start()
    try:
        assert wait_until(lambda: http(daemon.port, "GET", "/readyz")[0] == 200)
        url, marker = f"http://127.0.0.1:{daemon.port}", tmp_path / "ran"
        result = run_profile(gpus, "--url", url, "--", *marker_command(marker))
    finally:
        daemon.stop()
    assert result.returncode == 2 and "has windows turned off (--no-windows)" in result.stderr, result.stderr
    assert not marker.exists()


@pytest.mark.slow
def test_warptd_url_where_no_daemon_answers_is_an_error(gpus, tmp_path):
    marker = tmp_path / "ran"
    result = run_command(gpus, profile_args("--", *marker_command(marker)), env={"WARPTD_URL": NOBODY})
    assert result.returncode == 2 and "($WARPTD_URL)" in result.stderr, result.stderr
    assert not marker.exists()


@pytest.mark.slow
def test_no_energy_source_is_named(tmp_path):
    """The CPU alone, on a sysfs without RAPL: the total has no energy, and one line says why."""
    cpu_alone = [sys.executable, "-m", "warptd", "--backend", "cpu", "--sysfs", str(tmp_path)]
    result = subprocess.run(
        [
            *cpu_alone,
            "--procfs",
            str(tmp_path),
            "--log-level",
            "error",
            "profile",
            "--local",
            "--",
            *sleeper(0.3),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[-2].startswith("total") and lines[-2].endswith(", -")
    assert lines[-1] == (
        f"warptd profile: no energy measured: cpu:0 reads no power or energy; rapl: no RAPL zones under "
        f"{tmp_path / 'class' / 'powercap'}; no accelerator found (warptd list --verbose says why each "
        "backend did not load)"
    )


@pytest.mark.slow
def test_carbon_and_cost_from_the_flags(gpus):
    result = run_profile(
        gpus,
        "--local",
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


@pytest.mark.slow
def test_an_unknown_device_is_refused_before_running(gpus, tmp_path):
    marker = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    result = run_profile(gpus, "--local", "--device", "nvidia:7", "--", *command)
    assert result.returncode == 2 and "unknown device or domain 'nvidia:7'" in result.stderr
    assert not marker.exists()


@pytest.mark.slow
def test_no_command_is_a_usage_error(gpus):
    result = run_profile(gpus, "--local")
    assert result.returncode == 2 and "give the command" in result.stderr

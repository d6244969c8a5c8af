"""The real ``warptd`` process, as a user starts it: CPU backend, loopback port, promtool, SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import assert_promtool_clean
from tests.helpers import http, parse, select, value, wait_until
from warptd.install import install_command

ROOT = Path(__file__).parents[2]


def start_daemon(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], int]:
    """Start ``python -m warptd`` on an ephemeral loopback port; return the process and its port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "warptd", "--listen", "127.0.0.1:0", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=env,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        event = json.loads(line)
        if event["event"] == "warptd_started":
            return proc, int(event["listen"].rpartition(":")[2])
    proc.kill()
    raise AssertionError(f"warptd did not start: {proc.stderr.read()}")


@pytest.fixture
def cpu_daemon(tmp_path):
    proc, port = start_daemon("--backend", "cpu", "--interval", "0.2", "--sysfs", str(tmp_path))
    yield proc, port
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_cpu_daemon_serves_metrics_promtool_clean(cpu_daemon):
    _, port = cpu_daemon
    assert wait_until(lambda: b"warptd_device_utilization_ratio{" in http(port, "GET", "/metrics")[2])
    body = http(port, "GET", "/metrics")[2]
    samples = parse(body.decode())
    assert value(samples, "warptd_device_up", backend="cpu", device="0") == 1
    assert 0 <= value(samples, "warptd_device_utilization_ratio", backend="cpu") <= 1
    assert value(samples, "warptd_device_memory_total_bytes", backend="cpu") > 0
    assert not select(samples, "warptd_device_up", backend="nvidia")
    assert_promtool_clean(body)


@pytest.mark.slow
def test_sigterm_stops_within_5_seconds(cpu_daemon):
    proc, port = cpu_daemon
    assert wait_until(lambda: http(port, "GET", "/readyz")[0] == 200)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == 0
    assert time.monotonic() - started < 5
    last = [json.loads(line) for line in proc.stderr.read().splitlines() if line.strip()][-1]
    assert last["event"] == "warptd_stopped"


@pytest.mark.slow
def test_daemon_process_never_imports_torch(cpu_daemon):
    proc, port = cpu_daemon
    assert wait_until(lambda: http(port, "GET", "/readyz")[0] == 200)
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert "torch" not in maps


@pytest.mark.slow
def test_port_in_use_is_a_clear_error(cpu_daemon):
    _, port = cpu_daemon
    result = subprocess.run(
        [sys.executable, "-m", "warptd", "--backend", "cpu", "--listen", f"127.0.0.1:{port}"],
        capture_output=True,
        check=False,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def _events(proc: subprocess.Popen[str], until: str, timeout: float = 10) -> list[dict]:
    """Read JSON log lines until one with event ``until`` (bounded by count and time)."""
    seen: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(seen) < 1000:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(json.loads(line))
        if seen[-1]["event"] == until:
            return seen
    raise AssertionError(f"no {until} in {seen}")


@pytest.mark.slow
def test_sighup_reloads_the_config_file_and_a_bad_one_changes_nothing(tmp_path):
    config = tmp_path / "warptd.toml"
    config.write_text("interval = 0.5\n")
    proc, port = start_daemon("--backend", "cpu", "--config", str(config), "--sysfs", str(tmp_path))
    try:
        assert wait_until(lambda: http(port, "GET", "/readyz")[0] == 200)
        config.write_text('interval = 0.2\nnode = "renamed"\n')
        proc.send_signal(signal.SIGHUP)
        reloaded = _events(proc, "config_reloaded")[-1]
        assert reloaded["interval_s"] == 0.2 and reloaded["needs_restart"] == ["node"]
        config.write_text("interval = -3\n")
        proc.send_signal(signal.SIGHUP)
        failed = _events(proc, "config_reload_failed")[-1]
        assert "interval" in failed["error"]
        assert http(port, "GET", "/healthz")[0] == 200  # still serving, on the old port
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_sigint_ends_a_running_stress_and_stops_within_5_seconds(tmp_path):
    pytest.importorskip("torch")
    proc, port = start_daemon("--backend", "cpu", "--interval", "0.2", "--sysfs", str(tmp_path))
    try:
        assert wait_until(lambda: http(port, "GET", "/readyz")[0] == 200)
        body = json.dumps({"test": "matmul", "device": "cpu:0", "duration_s": 600, "size": 256}).encode()
        status, _, raw = http(port, "POST", "/stress", body, {"Content-Type": "application/json"})
        assert status == 202
        job_id = json.loads(raw)["id"]
        assert wait_until(
            lambda: json.loads(http(port, "GET", f"/stress/{job_id}")[2])["started_at"], timeout=60
        )
        workers = _children(proc.pid)
        assert workers
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=5) == 0 and time.monotonic() - started < 5
        events = [json.loads(line) for line in proc.stderr.read().splitlines() if line.strip()]
        finished = [e for e in events if e["event"] == "stress_finished"]
        assert finished and finished[0]["status"] == "cancelled"
        assert events[-1]["event"] == "warptd_stopped"
        assert wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m warptd`` to its end (bounded): a start that must fail, not serve."""
    return subprocess.run(
        [sys.executable, "-m", "warptd", "--listen", "127.0.0.1:0", *args],
        capture_output=True,
        check=False,
        text=True,
        timeout=30,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def _nvml_library_present() -> bool:
    """Asked in a fresh interpreter: in this one, the NVML double (soname libnvidia-ml.so.1) may
    already be loaded by an earlier test, and the loader would answer with it."""
    probe = "import ctypes; ctypes.CDLL('libnvidia-ml.so.1')"
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    return (
        subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, check=False).returncode
        == 0
    )


@pytest.mark.slow
@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_named_backend_without_its_package_stops_the_start(tmp_path, how):
    """--backend nvidia (or WARPTD_BACKENDS=nvidia) without nvidia-ml-py: exit 2 and one line saying
    why and how to install it, instead of serving nothing and reporting ready."""
    missing = tmp_path / "missing"
    missing.mkdir()
    (missing / "pynvml.py").write_text('raise ImportError("No module named \'pynvml\'", name="pynvml")\n')
    env = {"PYTHONPATH": str(missing)}
    args = ["--sysfs", str(tmp_path)]
    if how == "flag":
        args += ["--backend", "nvidia"]
    else:
        env["WARPTD_BACKENDS"] = "nvidia"
    result = _run(*args, env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    message = (
        f"warptd: backend nvidia cannot load: nvidia-ml-py is not installed: {install_command('nvidia')}"
    )
    assert lines[-1] == message
    assert [line for line in lines if line.startswith("warptd:")] == [message]
    assert "warptd_started" not in result.stderr


@pytest.mark.slow
def test_a_named_backend_without_its_driver_stops_the_start(tmp_path):
    """This machine's real state: nvidia-ml-py installed, libnvidia-ml.so.1 absent."""
    if _nvml_library_present():
        pytest.skip("an NVIDIA driver is installed here")
    result = _run("--backend", "nvidia", "--backend", "cpu", "--sysfs", str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == (
        "warptd: backend nvidia cannot load: libnvidia-ml.so.1 not found: no NVIDIA driver on this host"
    )


@pytest.mark.slow
def test_an_unavailable_companion_does_not_stop_the_start(tmp_path):
    """--backend cpu also loads rapl, its power companion; no RAPL zone under --sysfs: cpu serves."""
    args = ["--listen", "127.0.0.1:0", "--backend", "cpu", "--interval", "0.2", "--sysfs", str(tmp_path)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "warptd", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    try:
        started = _events(proc, "warptd_started", timeout=20)[-1]
        assert started["backends"] == ["cpu"]
        port = int(started["listen"].rpartition(":")[2])
        assert wait_until(lambda: http(port, "GET", "/readyz")[0] == 200)
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_start_up_output_is_the_loaded_backends_and_the_url(tmp_path):
    """A newcomer's first run, on a terminal's format: a line per loaded backend and the URL, no more."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "warptd",
            "--listen",
            "127.0.0.1:0",
            "--sysfs",
            str(tmp_path),
            "--log-format",
            "console",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(lines) < 50:
            lines.append(proc.stderr.readline())
            if "warptd_started" in lines[-1] or not lines[-1]:
                break
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert "warptd_started" in lines[-1] and len(lines) <= 4, "".join(lines)
    assert any(re.search(r" backend_loaded +backend=cpu kind=cpu devices=1$", line) for line in lines)
    assert re.search(r" url=http://127\.0\.0\.1:\d+/metrics ", lines[-1]), lines[-1]
    assert "unavailable" not in "".join(lines)

"""Leased energy windows on the real daemon over loopback (GPUs from the C-level NVML double): a
window whose client stops renewing ends ``lease_expired`` and its fast sampling stops; the client
and ``warptd profile`` renew for the user, and a SIGKILLed profile leaves neither a window nor its
command behind. Leases here are 1-2 s (``window_lease_min`` lowered), every loop bounded."""

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
from tests.e2e.test_windows import call
from tests.helpers import http, serving, wait_until
from tests.pids import alive, children
from warptd import client
from warptd.recording.windows import WindowLimits

ROOT = Path(__file__).parents[2]


@pytest.fixture
def gpus():
    with drawing({0: 200.0, 1: 200.0}) as fake:
        yield fake


@pytest.fixture
def daemon(settings, gpus):
    settings.backends = ["nvidia"]
    settings.window_interval = 0.1
    settings.window_lease_min = 0.5
    with serving(settings) as running:
        yield running


def opened(port: int, **payload) -> dict:
    status, body = call(port, "POST", "/windows", payload)
    assert status == 201, body
    return body


def shown(port: int, window_id: str) -> dict:
    return call(port, "GET", f"/windows/{window_id}")[1]


def ended(port: int, window_id: str) -> bool:
    return shown(port, window_id)["status"] == "ended"


@pytest.mark.slow
def test_a_window_not_renewed_ends_lease_expired_and_its_fast_sampling_stops(daemon):
    window = opened(daemon.port, name="abandoned", devices=["nvidia:0", "nvidia:1"], lease_s=1)
    assert window["lease_seconds"] == 1 and window["lease_expires_at"] > time.time()
    assert daemon.sampler.fast_sampling("nvidia")
    assert wait_until(lambda: ended(daemon.port, window["id"]), timeout=5)
    recording = shown(daemon.port, window["id"])
    assert recording["end_reason"] == "lease_expired"
    assert recording["duration_seconds"] == pytest.approx(1.0, abs=0.5)
    assert recording["lease_seconds"] == 1 and recording["lease_expires_at"] is None
    assert not daemon.sampler.fast_sampling("nvidia")
    assert daemon.sampler.watches.devices("nvidia") == set()
    status, body = call(daemon.port, "POST", f"/windows/{window['id']}/renew")
    assert status == 409 and "already ended (lease_expired)" in body["error"]
    status, body = call(daemon.port, "POST", f"/windows/{window['id']}/end")
    assert status == 409 and "(lease_expired)" in body["error"]  # a late client learns why


@pytest.mark.slow
def test_lapsed_windows_end_at_once_though_a_backend_hangs(settings, gpus):
    """The reaper reads no device at an end of its own: with the NVIDIA backend hung (each read
    given up on only after --sample-timeout), three lapsed windows end together, not one edge read
    (up to twice the timeout) after another."""
    settings.backends, settings.sample_timeout = ["nvidia"], 5.0
    settings.window_lease_min = 0.5
    with serving(settings) as running:
        windows = [opened(running.port, name=f"w{n}", devices=["nvidia:1"], lease_s=1) for n in range(3)]
        gpus.gpus[0].hang.set()  # every read of the backend from now on waits for the timeout
        try:
            lapsed = time.monotonic() + 1.0
            assert wait_until(lambda: all(ended(running.port, w["id"]) for w in windows), timeout=8)
            assert time.monotonic() - lapsed < 2.5  # not 3 x (up to 10 s) of edge reads
            assert {shown(running.port, w["id"])["end_reason"] for w in windows} == {"lease_expired"}
        finally:
            gpus.gpus[0].hang.clear()
            gpus.gpus[0].release.set()


@pytest.mark.slow
def test_a_client_end_after_its_lease_lapsed_is_a_lease_expiry(daemon):
    """A client's end that comes after the deadline, before the reaper acted, ends the window as
    lease_expired and answers 409, as if the reaper had been first."""
    window = opened(daemon.port, name="late", devices=["nvidia:0"], lease_s=30)
    daemon.windows._open[window["id"]].lease_deadline = time.monotonic() - 1  # lapsed; reaper asleep
    status, body = call(daemon.port, "POST", f"/windows/{window['id']}/end")
    assert status == 409 and "already ended (lease_expired)" in body["error"]
    assert shown(daemon.port, window["id"])["end_reason"] == "lease_expired"
    assert daemon.sampler.watches.devices("nvidia") == set()


@pytest.mark.slow
def test_a_failing_end_still_stops_the_windows_sampling_and_frees_its_memory(daemon, monkeypatch):
    window = opened(daemon.port, name="doomed", devices=["nvidia:0"])
    manager = daemon.windows

    def fail(*_args):
        raise RuntimeError("boom")

    monkeypatch.setattr(manager, "_file", fail)
    with pytest.raises(RuntimeError):
        manager.end(window["id"])
    assert daemon.sampler.watches.devices("nvidia") == set()  # not left at 10 Hz
    assert manager.budget.used == 0  # nothing still charged for it


@pytest.mark.slow
def test_a_renewed_window_stays_open_and_lapses_once_renewals_stop(daemon):
    window = opened(daemon.port, name="kept", devices=["nvidia:0"], lease_s=2)
    deadline = time.monotonic() + 4.5  # over two leases
    renewals = 0
    while time.monotonic() < deadline and renewals < 50:
        status, lease = call(daemon.port, "POST", f"/windows/{window['id']}/renew")
        assert status == 200 and lease["id"] == window["id"] and lease["lease_seconds"] == 2, lease
        assert lease["lease_expires_at"] == pytest.approx(time.time() + 2, abs=0.5)
        renewals += 1
        time.sleep(0.3)
    live = shown(daemon.port, window["id"])
    assert live["status"] == "open" and live["duration_seconds"] > 4.4
    assert daemon.sampler.fast_sampling("nvidia")
    stopped = time.monotonic()
    assert wait_until(lambda: ended(daemon.port, window["id"]), timeout=6)
    assert time.monotonic() - stopped < 3.5
    assert shown(daemon.port, window["id"])["end_reason"] == "lease_expired"
    assert not daemon.sampler.fast_sampling("nvidia")


@pytest.mark.slow
def test_a_window_without_a_lease_is_held_to_the_maximum_duration_only(daemon):
    window = opened(daemon.port, name="plain", devices=["nvidia:0"])
    assert window["lease_seconds"] is None and window["lease_expires_at"] is None
    time.sleep(1.5)  # past any lease the test daemon allows
    assert shown(daemon.port, window["id"])["status"] == "open"
    status, body = call(daemon.port, "POST", f"/windows/{window['id']}/renew")
    assert status == 409 and "has no lease" in body["error"]
    status, body = call(daemon.port, "POST", f"/windows/{window['id']}/end")
    assert status == 200 and body["end_reason"] == "requested" and body["lease_seconds"] is None


@pytest.mark.slow
def test_the_maximum_duration_still_ends_a_leased_window(daemon):
    daemon.windows.limits = WindowLimits(max_duration=1.0, lease_min=0.5)
    window = opened(daemon.port, name="renewed-forever", devices=["nvidia:0"], lease_s=30)
    assert wait_until(lambda: ended(daemon.port, window["id"]), timeout=5)
    assert shown(daemon.port, window["id"])["end_reason"] == "max_duration"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lease", "message"),
    [
        (0.1, "lease_s: 0.1 is outside 0.5-600 s"),
        (601, "lease_s: 601 is outside 0.5-600 s"),
        (0, "lease_s: Input should be greater than 0"),
        (86401, "lease_s: Input should be less than or equal to 86400"),
        ("30", "lease_s: Input should be a valid number"),
    ],
)
def test_a_lease_out_of_bounds_is_refused_and_opens_nothing(daemon, lease, message):
    status, body = call(daemon.port, "POST", "/windows", {"name": "bad", "lease_s": lease})
    assert status == 422 and message in body["error"], body
    assert daemon.windows.open_count == 0 and not daemon.sampler.fast_sampling("nvidia")


@pytest.mark.slow
def test_renewals_are_protected_like_the_other_writes(daemon):
    assert call(daemon.port, "POST", "/windows/nope/renew")[0] == 404
    window = opened(daemon.port, name="guarded", devices=["nvidia:0"], lease_s=5)
    status, body = call(
        daemon.port, "POST", f"/windows/{window['id']}/renew", headers={"Origin": "http://evil.example"}
    )
    assert status == 403 and "cross-origin" in body["error"]
    daemon._token = "s3cret"  # as a reload that adds a token would
    assert call(daemon.port, "POST", f"/windows/{window['id']}/renew")[0] == 401
    headers = {"Authorization": "Bearer s3cret"}
    assert call(daemon.port, "POST", f"/windows/{window['id']}/renew", headers=headers)[0] == 200


@pytest.mark.slow
def test_the_client_renews_while_the_block_runs(daemon):
    url = f"http://127.0.0.1:{daemon.port}"
    with client.window("epoch", ["nvidia:0"], url=url, lease_s=2.0) as w:
        assert w.opened["lease_seconds"] == 2.0
        time.sleep(4.5)  # over two leases
        assert shown(daemon.port, w.id)["status"] == "open"
    assert w.recording is not None and w.recording["end_reason"] == "requested"
    assert w.recording["duration_seconds"] > 4.4
    assert w.keeper is not None and w.keeper.renewals >= 4 and w.keeper.error is None


@pytest.mark.slow
def test_a_client_that_stops_renewing_loses_its_window(daemon):
    url = f"http://127.0.0.1:{daemon.port}"
    window, keeper = client.begin_leased_window(
        "dies", ["nvidia:0"], None, 1.0, url=url, token=None, timeout=5
    )
    assert keeper is not None
    keeper.stop()  # as if the process died
    assert wait_until(lambda: ended(daemon.port, window["id"]), timeout=5)
    with pytest.raises(client.WindowClientError) as late:
        client.end_window(window["id"], url=url)
    assert late.value.status == 409 and "lease_expired" in str(late.value)


def _profile(gpus: FakeNvml, url: str, *command: str) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "warptd", "--backend", "nvidia", "--log-level", "error", "profile"]
    return subprocess.Popen(
        [*args, "--url", url, "--lease", "2", "--json", "--", *command],
        env={**os.environ, **gpus.environment(), "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def _open_window(port: int) -> dict | None:
    windows = json.loads(http(port, "GET", "/windows")[2])["windows"]
    return next((w for w in windows if w["status"] == "open"), None)


@pytest.mark.slow
def test_a_profile_stopped_past_its_lease_still_prints_the_recording(daemon, gpus):
    """Stopped (Ctrl-Z, a laptop's suspend) past its lease, profile finds its window ended by the
    daemon: it prints the recording the daemon kept, up to the lapse, and says so."""
    proc = _profile(gpus, f"http://127.0.0.1:{daemon.port}", "sleep", "6")
    try:
        assert wait_until(lambda: _open_window(daemon.port) is not None, timeout=30)
        window = _open_window(daemon.port)
        proc.send_signal(signal.SIGSTOP)  # CMD, in its own session, sleeps on
        assert wait_until(lambda: ended(daemon.port, window["id"]), timeout=6)
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    recording = json.loads(out)
    assert recording["id"] == window["id"] and recording["end_reason"] == "lease_expired"
    assert "the daemon ended the window before CMD did (lease_expired" in err


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_sigkilled_profile_leaves_neither_its_window_nor_its_command(daemon, gpus):
    proc = _profile(gpus, f"http://127.0.0.1:{daemon.port}", "sleep", "60")
    sleepers: list[int] = []
    try:
        assert wait_until(lambda: _open_window(daemon.port) is not None, timeout=30)
        assert wait_until(lambda: bool(sleepers.extend(children(proc.pid)) or sleepers), timeout=10)
        window = _open_window(daemon.port)
        assert window is not None and window["lease_seconds"] == 2
        time.sleep(2.5)  # past one lease: profile renews it
        assert shown(daemon.port, window["id"])["status"] == "open"
        proc.kill()
        killed = time.monotonic()
        proc.wait(timeout=10)
        assert wait_until(lambda: ended(daemon.port, window["id"]), timeout=6)
        assert time.monotonic() - killed < 3.5  # within the 2 s lease, and the reaper's read
        assert shown(daemon.port, window["id"])["end_reason"] == "lease_expired"
        assert not daemon.sampler.fast_sampling("nvidia")
        assert wait_until(lambda: not any(alive(pid) for pid in sleepers), timeout=5)  # PDEATHSIG
    finally:
        for pid in sleepers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_sigterm_to_profile_reaches_the_commands_whole_group_and_ends_the_window(daemon, gpus, tmp_path):
    """CMD is a shell that started a ``sleep`` of its own: a TERM forwarded to the shell alone would
    leave that sleep running; forwarded to the group, both end, and so does the window."""
    pid_file = tmp_path / "sleep.pid"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    proc = _profile(gpus, f"http://127.0.0.1:{daemon.port}", "sh", "-c", script)
    grandchild = 0
    try:
        assert wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", timeout=30)
        grandchild = int(pid_file.read_text())
        assert wait_until(lambda: _open_window(daemon.port) is not None, timeout=10)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert json.loads(out)["end_reason"] == "command_exited"
        assert _open_window(daemon.port) is None
        windows = json.loads(http(daemon.port, "GET", "/windows")[2])["windows"]
        assert [w["end_reason"] for w in windows] == ["requested"]  # profile ended it, not the lease
        assert wait_until(lambda: not alive(grandchild), timeout=5)
    finally:
        if grandchild and alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()

"""``warptd.client``: the standard-library window client against the real daemon on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import http, wait_until
from warptd import client
from warptd.daemon import Daemon


@pytest.fixture
def daemon(settings):
    fake = FakeNvml([FakeGpu(index=0, power_mw=200_000, live=True)])
    with fake.installed():
        settings.backends = ["nvidia"]
        settings.stress_token = "s3cret"
        d = Daemon(settings)
        d.start()
        assert wait_until(lambda: http(d.port, "GET", "/readyz")[0] == 200)
        yield d
        d.stop()
    fake.close()


def url(daemon: Daemon) -> str:
    return f"http://127.0.0.1:{daemon.port}"


@pytest.mark.slow
def test_a_window_around_a_block_records_its_energy(daemon):
    with client.window(
        "epoch-1", ["nvidia:0"], {"step": "1"}, url=url(daemon), token="s3cret", sync="torch"
    ) as w:
        assert w.opened["status"] == "open" and w.recording is None
        time.sleep(1.0)
    recording = w.recording
    assert recording is not None and recording["status"] == "ended" and recording["id"] == w.id
    assert recording["labels"] == {"step": "1"}
    # the driver's counter at each edge is as of its last refresh (every 100 ms)
    assert recording["energy_joules"] == pytest.approx(200 * recording["duration_seconds"], abs=200 * 0.2)


@pytest.mark.slow
def test_the_window_ends_when_the_block_raises(daemon):
    with pytest.raises(KeyError), client.window("crash", url=url(daemon), token="s3cret") as w:
        raise KeyError("boom")
    assert w.recording is not None and w.recording["status"] == "ended"
    assert daemon.windows.open_count == 0


@pytest.mark.slow
def test_begin_and_end_take_the_token_from_the_environment(daemon, monkeypatch):
    monkeypatch.setenv("WARPTD_URL", url(daemon))
    with pytest.raises(client.WindowClientError) as refused:
        client.begin_window("no-token")
    assert refused.value.status == 401 and "bearer token" in str(refused.value)
    monkeypatch.setenv("WARPTD_STRESS_TOKEN", "s3cret")
    opened = client.begin_window("env")
    assert client.end_window(opened["id"])["name"] == "env"


@pytest.mark.slow
def test_refusals_carry_the_daemons_message(daemon):
    with pytest.raises(client.WindowClientError) as refused:
        client.begin_window("x", ["nvidia:9"], url=url(daemon), token="s3cret")
    assert refused.value.status == 422 and "unknown device or domain 'nvidia:9'" in str(refused.value)


def test_no_daemon_is_a_clear_error():
    with pytest.raises(client.WindowClientError) as missing:
        client.begin_window("x", url="http://127.0.0.1:9", timeout=2)
    assert missing.value.status is None and "no warptd daemon answers at http://127.0.0.1:9" in str(
        missing.value
    )


def test_an_unknown_sync_is_refused_before_anything_starts():
    with (
        pytest.raises(ValueError, match="unknown sync"),
        client.window("x", url="http://127.0.0.1:9", sync="jax"),
    ):
        pass


@pytest.mark.slow
def test_the_client_imports_only_the_standard_library():
    code = (
        "import sys, warptd.client\n"
        "third = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(third & {'pydantic', 'torch', 'structlog', 'prometheus_client'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


README_EXAMPLE = """
import sys
sys.modules["torch"] = None  # a host without torch
import warptd.client

with warptd.client.window("epoch-3", sync="torch") as w:  # the README's example
    pass
"""


@pytest.mark.slow
def test_sync_torch_without_torch_names_the_extra_at_the_call(daemon):
    result = subprocess.run(
        [sys.executable, "-c", README_EXAMPLE],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "WARPTD_URL": url(daemon)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("warptd.client.SyncUnavailableError: sync='torch' needs torch"), result.stderr
    assert "install the stress extra (" in last and "[stress]')" in last and "pip install torch" in last
    assert "import torch" not in result.stderr  # raised at the call, not from inside the window
    assert "During handling" not in result.stderr
    assert json.loads(http(daemon.port, "GET", "/windows")[2])["windows"] == []  # nothing opened


class _LeaseStandIn(ThreadingHTTPServer):
    """A loopback stand-in for the daemon's renew endpoint with a strict lease: a renewal at or after
    the deadline is refused 409, as the daemon does; the first renewal hangs ``hang_s`` first."""

    daemon_threads = True

    def __init__(self, lease_s: float, hang_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _LeaseStandInHandler)
        self.lease_s, self.hang_s = lease_s, hang_s
        self.deadline = time.monotonic() + lease_s
        self.requests = 0
        self.renewed: list[float] = []
        self.lapsed = False
        self.released = threading.Event()
        self.lock = threading.Lock()


class _LeaseStandInHandler(BaseHTTPRequestHandler):
    server: _LeaseStandIn

    def do_POST(self) -> None:
        stand_in = self.server
        with stand_in.lock:
            stand_in.requests += 1
            first = stand_in.requests == 1
        if first:
            stand_in.released.wait(stand_in.hang_s)
        with stand_in.lock:
            now = time.monotonic()
            if now >= stand_in.deadline:
                stand_in.lapsed = True
                status, body = 409, {"error": "window w1 has ended (lease_expired)"}
            else:
                stand_in.deadline = now + stand_in.lease_s
                stand_in.renewed.append(now)
                status, body = 200, {"id": "w1", "lease_seconds": stand_in.lease_s}
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up on this one
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow
def test_a_renewal_that_hangs_past_a_period_still_leaves_the_lease_held():
    lease_s = 1.5  # a period of 0.5 s; the first renewal hangs 1.2 s, longer than two periods
    stand_in = _LeaseStandIn(lease_s, hang_s=1.2)
    serving = threading.Thread(target=stand_in.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    serving.start()
    keeper = client.LeaseKeeper("w1", lease_s, url=f"http://127.0.0.1:{stand_in.server_port}")
    try:
        keeper.start()
        assert wait_until(lambda: stand_in.lapsed or len(stand_in.renewed) >= 3, timeout=6.0)
    finally:
        keeper.stop()
        stand_in.released.set()
        stand_in.shutdown()
        stand_in.server_close()
    assert not stand_in.lapsed and keeper.error is None
    assert keeper.renewals >= 2 and not keeper._thread.is_alive()


@pytest.mark.slow
def test_a_sync_that_raises_at_the_end_still_stops_the_keeper_and_ends_the_window(daemon, monkeypatch):
    def sticky_cuda_error(sync: client.Sync) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    raised = pytest.raises(RuntimeError, match="illegal memory")
    with raised, client.window("sticky", url=url(daemon), token="s3cret") as w:
        monkeypatch.setattr(client, "synchronize", sticky_cuda_error)
    assert w.keeper is not None and not w.keeper._thread.is_alive()
    assert w.recording is not None and w.recording["status"] == "ended"
    assert daemon.windows.open_count == 0


def test_get_workloads_follows_the_pages(monkeypatch):
    """GET /workloads answers a page (100 at most): the client's every workload is every page's."""
    from warptd import client

    second, third = "/workloads?offset=2&limit=2", "/workloads?offset=4&limit=2"
    pages = {
        "/workloads?limit=100": {"workloads": [1, 2], "total": 5, "next": second, "dropped": 0},
        second: {"workloads": [3, 4], "total": 5, "next": third},
        third: {"workloads": [5], "total": 5, "next": None},
    }
    asked = []

    def answer(method: str, path: str, payload: object, **_: object) -> dict:
        asked.append(path)
        return json.loads(json.dumps(pages[path]))

    monkeypatch.setattr(client, "_request", answer)
    listing = client.get_workloads()
    assert listing["workloads"] == [1, 2, 3, 4, 5] and listing["next"] is None and listing["total"] == 5
    assert asked == list(pages)


@pytest.mark.slow
def test_a_token_outside_latin_1_is_sent_as_utf8(daemon, monkeypatch):
    """http.client writes a header as Latin-1: such a token raised before anything was sent, and the
    daemon could not have matched it either (issue 39, finding 11)."""
    monkeypatch.setattr(daemon, "_token", "ключ-🔑")
    opened = client.begin_window("utf8", url=url(daemon), token="ключ-🔑")
    assert client.end_window(opened["id"], url=url(daemon), token="ключ-🔑")["name"] == "utf8"
    with pytest.raises(client.WindowClientError) as refused:
        client.begin_window("latin", url=url(daemon), token="ключ")
    assert refused.value.status == 401

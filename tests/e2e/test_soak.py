"""Soak: 20,000 scrapes and 50 stress jobs leave RSS within 5 MB, and leak no thread or descriptor.

The daemon runs in this process with 8 GPUs from the NVML double; stress jobs use a worker that
fails at once (tests/stress_faults.py), so the daemon's whole job path runs 50 times in seconds.
Measured after a warm-up, so one-time allocations (imports, caches) are not counted as leaks.
"""

from __future__ import annotations

import http.client as httpclient
import importlib.util
import io
import json
import os
import threading
import time
from pathlib import Path

import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import wait_until
from warptd.daemon import Daemon
from warptd.logs import configure_logging


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _scrape(conn: httpclient.HTTPConnection, path: str = "/metrics") -> int:
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    return response.status


def _job(port: int) -> None:
    conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps({"test": "raise", "duration_s": 1})
    conn.request("POST", "/stress", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    job_id = json.loads(response.read())["id"]
    assert response.status == 202
    assert wait_until(lambda: _status(conn, job_id) not in ("starting", "running"), timeout=30, interval=0.05)
    conn.close()


def _status(conn: httpclient.HTTPConnection, job_id: str) -> str:
    conn.request("GET", f"/stress/{job_id}")
    return json.loads(conn.getresponse().read())["status"]


def _load(port: int, scrapes: int, jobs: int) -> None:
    errors: list[int] = []

    def scraper(count: int) -> None:
        conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=30)
        errors.extend(s for s in (_scrape(conn) for _ in range(count)) if s != 200)
        conn.close()

    threads = [threading.Thread(target=scraper, args=(scrapes // 4,)) for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(jobs):
        _job(port)
    for t in threads:
        t.join(timeout=300)
    assert errors == []


@pytest.mark.slow
def test_soak_20000_scrapes_50_stress_jobs(settings):
    if importlib.util.find_spec("torch") is None:  # the API needs torch installed; this worker never loads it
        pytest.skip("torch not installed")
    fake = FakeNvml([FakeGpu(index=i, live=True) for i in range(8)])
    settings.backends = ["nvidia", "cpu"]
    settings.stress_history = 10
    configure_logging("warning", "json", io.StringIO())  # 20,000 debug access lines would dominate
    with fake.installed():
        daemon = Daemon(settings)
        daemon.stress.catalog.tests["raise"] = "tests.stress_faults:RaisingTest"
        daemon.start()
        try:
            assert wait_until(daemon.snapshot.ready, timeout=10)
            _load(daemon.port, scrapes=2000, jobs=5)  # warm-up
            time.sleep(0.5)
            rss, threads, fds = _rss(), threading.active_count(), _fds()
            started = time.monotonic()
            _load(daemon.port, scrapes=20_000, jobs=50)
            assert time.monotonic() - started < 300
            time.sleep(1.0)  # let connection threads and monitors finish
            growth = _rss() - rss
            print(
                f"soak: RSS {rss / 2**20:.1f} MiB -> +{growth / 2**20:.2f} MiB, threads {threads}, fds {fds}"
            )
            assert growth < 5 * 2**20
            assert wait_until(lambda: threading.active_count() <= threads, timeout=10)
            assert wait_until(lambda: _fds() <= fds, timeout=10)
            assert len(daemon.stress.jobs.list()) == 10  # bounded history
        finally:
            daemon.stop()

"""Load on loopback, bounded in count and time: 32 concurrent scrapers x 200 scrapes, 8 GPUs, no errors.

Latency figures belong to bench/ (python bench/load_bench.py); this test asserts correctness
under load only.
"""

from __future__ import annotations

import http.client as httpclient
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import http, ready, wait_until

ROOT = Path(__file__).parents[2]
SCRAPERS, SCRAPES = 32, 200


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_32_concurrent_scrapers_no_errors():
    port = _free_port()
    daemon = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "double_daemon.py"),
            "8",
            "--backend",
            "nvidia",
            "--listen",
            f"127.0.0.1:{port}",
            "--log-level",
            "error",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    errors: list[str] = []
    done = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + 120

    def scraper() -> None:
        conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=10)  # keep-alive, like Prometheus
        for _ in range(SCRAPES):
            if time.monotonic() > deadline:
                errors.append("deadline")
                return
            try:
                conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
                response = conn.getresponse()
                body = response.read()
                if response.status != 200 or not body:
                    errors.append(f"status {response.status}")
            except (OSError, httpclient.HTTPException) as exc:
                errors.append(repr(exc))
                conn.close()
                conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=10)
            with lock:
                done[0] += 1
        conn.close()

    try:
        assert wait_until(lambda: ready(port), timeout=30)
        threads = [threading.Thread(target=scraper) for _ in range(SCRAPERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=130)
        assert done[0] == SCRAPERS * SCRAPES and errors == []
        assert http(port, "GET", "/healthz")[0] == 200
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)

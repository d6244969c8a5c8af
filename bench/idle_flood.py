"""Issue 23's attack at the real defaults: 4,200 idle keep-alive connections from one address, each
after one ``GET /healthz``, against the daemon with 8 stand-in GPUs (4096 connections, 256 per
client), then 20 scrapes on new connections. Prints how many scrapes got 200 and how many
connections the daemon held.

python bench/idle_flood.py [CONNECTIONS] [SCRAPES]
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.connection_flood import idle_keepalive, release, scrapes  # noqa: E402
from tests.helpers import http, wait_until  # noqa: E402
from warptd.http.limits import raise_nofile_limit  # noqa: E402


def _ready(port: int) -> bool:
    try:
        return http(port, "GET", "/readyz")[0] == 200
    except OSError:
        return False


def main(connections: int = 4200, count: int = 20) -> None:
    if raise_nofile_limit() < connections + 100:
        sys.exit(f"RLIMIT_NOFILE too low for {connections} sockets")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [sys.executable, str(ROOT / "bench" / "double_daemon.py"), "8", "--backend", "nvidia"]
    daemon = subprocess.Popen(
        [*args, "--listen", f"127.0.0.1:{port}", "--log-level", "error"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: _ready(port), timeout=30)
        started = time.monotonic()
        flood = idle_keepalive(port, connections, within_s=300)
        flooded = time.monotonic() - started
        held = len(os.listdir(f"/proc/{daemon.pid}/fd"))
        started = time.monotonic()
        served = scrapes(port, count)
        print(
            f"{connections} idle keep-alive connections from one address ({flooded:.1f} s, answers {flood}); "
            f"daemon descriptors {held}; scrapes {served}/{count} in {time.monotonic() - started:.2f} s"
        )
    finally:
        release()
        daemon.terminate()
        daemon.wait(timeout=10)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))

"""The real daemon under issue 39's connection attacks: scrapes keep being served, and nothing but
structlog's JSON lines reaches its stderr (20 connections x 5,000 pipelined requests closed with a
RST once wrote 29,005 bare lines of asyncio's ``socket.send() raised exception.`` in 3 s)."""

from __future__ import annotations

import json
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

from tests.e2e.test_e2e import start_daemon
from tests.helpers import http, wait_until

RESET = struct.pack("ii", 1, 0)


def reset_pipelines(port: int, connections: int, depth: int, rounds: int) -> None:
    """``connections`` threads that each pipeline ``depth`` GET /healthz and reset, ``rounds`` times."""

    def flood() -> None:
        for _ in range(rounds):
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=5)
                conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n" * depth)
                time.sleep(0.02)  # the daemon is answering them
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
                conn.close()
            except OSError:
                continue

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


@pytest.mark.slow
def test_reset_pipelines_leave_stderr_to_structlog_and_scrapes_served(tmp_path):
    proc, port = start_daemon("--backend", "cpu", "--interval", "0.2", "--sysfs", str(tmp_path))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        assert wait_until(lambda: http(port, "GET", "/readyz")[0] == 200)
        attack = threading.Thread(target=reset_pipelines, args=(port, 20, 5000, 3), daemon=True)
        attack.start()
        statuses = []
        while attack.is_alive() and len(statuses) < 200:
            statuses.append(http(port, "GET", "/metrics")[0])
            time.sleep(0.02)
        attack.join(timeout=60)
        assert statuses and set(statuses) == {200}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()  # still answering the pipelines of connections long gone
            proc.wait(timeout=10)
        reader.join(timeout=10)
    stray = []
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            stray.append(line)
    assert not stray, f"{len(stray)} lines outside structlog, e.g. {stray[:3]}"
    assert json.loads(lines[-1])["event"] == "warptd_stopped"

"""Idle keep-alive connections that each sent one request and stay open: the flood that once locked
scrapes out at the connection cap. Shared by tests/test_connection_room.py and bench/idle_flood.py."""

from __future__ import annotations

import time
from http.client import HTTPConnection

from tests.helpers import http


def idle_keepalive(
    port: int, count: int, source: str = "127.0.0.1", within_s: float = 120.0
) -> dict[int, int]:
    """Open ``count`` connections from ``source``, send ``GET /healthz`` on each and leave it open;
    returns how many got each status. Bounded by ``count`` and ``within_s`` seconds."""
    statuses: dict[int, int] = {}
    deadline = time.monotonic() + within_s
    for _ in range(count):
        if time.monotonic() > deadline:
            break
        conn = HTTPConnection("127.0.0.1", port, timeout=5, source_address=(source, 0))
        try:
            conn.request("GET", "/healthz", headers={"Connection": "keep-alive"})
            response = conn.getresponse()
            response.read()
            status = response.status
        except OSError:
            status = 0  # refused or reset
        statuses[status] = statuses.get(status, 0) + 1
        _HELD.append(conn)  # kept open, idle, until release()
    return statuses


_HELD: list[HTTPConnection] = []


def release() -> None:
    """Close every connection :func:`idle_keepalive` left open."""
    while _HELD:
        _HELD.pop().close()


def scrapes(port: int, count: int) -> int:
    """``count`` scrapes on new connections, as Prometheus without keep-alive; how many got 200."""
    served = 0
    for _ in range(count):
        try:
            status, _, body = http(port, "GET", "/metrics")
        except OSError:
            continue
        served += status == 200 and body.startswith(b"# HELP")
    return served

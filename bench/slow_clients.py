"""The slow-client attack of issue 14, for benchmarks: silent half request lines, one-byte-a-second
headers, and normal scrapes measured meanwhile (loopback only, bounded in count and time)."""

from __future__ import annotations

import http.client
import resource
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress


def raise_nofile() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@contextmanager
def attack(
    port: int, idle: int = 1000, trickle: int = 200, limit_s: float = 120
) -> Iterator[list[socket.socket]]:
    """Hold ``idle`` connections that sent half a request line and ``trickle`` that send one header
    byte a second; yields every socket (a server may close some of them)."""
    raise_nofile()
    socks: list[socket.socket] = []
    stop = threading.Event()
    deadline = time.monotonic() + limit_s
    try:
        opening_until = time.monotonic() + 5  # a server that drops SYNs must not stretch the attack
        for i in range(idle + trickle):
            if time.monotonic() > opening_until:
                break
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=0.25)
                conn.sendall(b"GET /metr" if i < idle else b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n")
            except OSError:
                continue  # refused or reset: the server's own policy, counted by open_count()
            socks.append(conn)
        dribblers = socks[idle:]

        def dribble() -> None:
            while not stop.wait(1.0) and time.monotonic() < deadline:
                for conn in dribblers:
                    with suppress(OSError):
                        conn.send(b"x")

        threading.Thread(target=dribble, daemon=True).start()
        time.sleep(0.5)
        yield socks
    finally:
        stop.set()
        for conn in socks:
            conn.close()


def open_count(socks: list[socket.socket]) -> int:
    """How many of these the server still holds open, unanswered (a 503 or a close is not held)."""
    alive = 0
    for conn in socks:
        conn.setblocking(False)
        try:
            conn.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    return alive


def scrapes(port: int, n: int = 100, timeout: float = 2.0, path: str = "/metrics") -> tuple[int, list[float]]:
    """``n`` scrapes on new connections, 20 ms apart: (how many got 200, each one's seconds)."""
    ok, times = 0, []
    for _ in range(n):
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            ok += response.status == 200
        except (OSError, http.client.HTTPException):
            pass
        finally:
            conn.close()
        times.append(time.perf_counter() - started)
        time.sleep(0.02)
    return ok, times

"""The slow-client attack of issue 14, for benchmarks: silent half request lines, one-byte-a-second
headers, and normal scrapes measured meanwhile (loopback only, bounded in count and time). Run, it
measures issue 34's heavy reads instead, this tree beside an older one (both over 8 GPUs of the
NVML double, one after the other, on loopback):

    git archive 8afb724 | tar -x -C /tmp/warptd-8afb724      # once: the tree before issue 34
    python bench/slow_clients.py [--old /tmp/warptd-8afb724] [--quick]

With 100 ended windows and one recorded at 20 Hz for 25 s (BIG: 2 MiB of JSON with its points),
100 scrapes on new connections, 20 ms apart: while nothing else runs; while 250 connections have
each sent 8 pipelined GET /windows and read nothing; while 50 clients read GET /windows, 8 a
connection, on and on; and the same for BIG (100 and 20 clients). The listings are asked for as the
default page and as the largest (?limit=100, which an older daemon ignores: it answers every
window); 4 clients ask for BIG's HTML report, 2 at a time each. The attackers run in a process of
their own. Prints how many scrapes got 200, their p50
and p99, the daemon's peak RSS, and this tree's p99 over the older one's.
"""

from __future__ import annotations

import argparse
import http.client
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path


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


def scrapes(
    port: int,
    n: int = 100,
    timeout: float = 2.0,
    path: str = "/metrics",
    *,
    headers: dict[str, str] | None = None,
    limit_s: float = float("inf"),
) -> tuple[int, list[float]]:
    """``n`` scrapes on new connections, 20 ms apart, fewer if ``limit_s`` runs out first: (how many
    got 200, each one's seconds)."""
    ok, times = 0, []
    deadline = time.monotonic() + limit_s
    for _ in range(n):
        if times and time.monotonic() > deadline:
            break
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request("GET", path, headers=headers or {})
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


def ended_windows(port: int, count: int) -> None:
    """Open and end ``count`` windows on loopback, so ``GET /windows`` has a history to list."""
    for i in range(count):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request(
                "POST", "/windows", body=b'{"name":"w%d"}' % i, headers={"Content-Type": "application/json"}
            )
            response = conn.getresponse()
            window = response.read()
            window_id = window.split(b'"id":"', 1)[1].split(b'"', 1)[0].decode()
            conn.request("POST", f"/windows/{window_id}/end")
            conn.getresponse().read()
        finally:
            conn.close()


@contextmanager
def unread_pipelines(
    port: int, connections: int = 250, depth: int = 8, path: str = "/windows", limit_s: float = 60
) -> Iterator[list[socket.socket]]:
    """``connections`` clients that each send ``depth`` pipelined ``GET path`` and never read an
    answer; held open for the block."""
    raise_nofile()
    request = f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode() * depth
    socks: list[socket.socket] = []
    deadline = time.monotonic() + limit_s
    try:
        for _ in range(connections):
            if time.monotonic() > deadline:
                break
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=1)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # reads nothing: keeps little
                conn.sendall(request)
            except OSError:
                continue
            socks.append(conn)
        yield socks
    finally:
        for conn in socks:
            conn.close()


@contextmanager
def reading_clients(
    port: int, clients: int = 50, requests: int = 8, path: str = "/windows", limit_s: float = 60
) -> Iterator[list[int]]:
    """``clients`` threads that each make ``requests`` ``GET path`` on a keep-alive connection,
    reading every answer, then do so again on a new one, until the block ends (``limit_s`` at
    most); yields the statuses seen so far."""
    statuses: list[int] = []
    stop = threading.Event()
    deadline = time.monotonic() + limit_s

    def client() -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=limit_s)
            try:
                for _ in range(requests):
                    conn.request("GET", path)
                    response = conn.getresponse()
                    response.read()
                    statuses.append(response.status)
            except (OSError, http.client.HTTPException):
                statuses.append(0)
            finally:
                conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield statuses
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


#: (what, attack, its clients and requests each, path); "{big}" is the window recorded at 20 Hz.
PHASES = (
    ("idle", None, 0, 0, ""),
    ("unread", "unread", 250, 8, "/windows"),
    ("unread", "unread", 250, 8, "/windows?limit=100"),
    ("unread", "unread", 100, 4, "/windows/{big}"),
    ("readers", "readers", 50, 8, "/windows"),
    ("readers", "readers", 50, 8, "/windows?limit=100"),
    ("readers", "readers", 20, 4, "/windows/{big}"),
    ("readers", "readers", 4, 2, "/windows/{big}/report"),
)
_ATTACKS = {"unread": unread_pipelines, "readers": reading_clients}


def attack_process(port: int, kind: str, clients: int, requests: int, path: str) -> subprocess.Popen[str]:
    """The attack in a process of its own, so that its threads' GIL is not the scraping client's;
    it runs from the time it prints "ready" until its stdin closes (60 s at most)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import slow_clients as s; "
        "s.run_attack(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])"
    )
    here = str(Path(__file__).resolve().parent)
    args = [sys.executable, "-c", code, here, str(port), kind, str(clients), str(requests), path]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def run_attack(port: int, kind: str, clients: int, requests: int, path: str) -> None:
    """The attack process's body: attack until stdin closes."""
    raise_nofile()
    with _ATTACKS[kind](port, clients, requests, path=path, limit_s=60):
        print("ready", flush=True)
        sys.stdin.read()


def _phase(port: int, pid: int, attack: tuple[str | None, int, int, str], count: int) -> dict[str, object]:
    """One phase: ``count`` scrapes while the attack runs (in its own process); the daemon's peak RSS."""
    from common import pct, rss_bytes

    kind, clients, requests, path = attack
    peak, done = [rss_bytes(pid)], threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], rss_bytes(pid))

    threading.Thread(target=watch, daemon=True).start()
    attacker = None if kind is None else attack_process(port, kind, clients, requests, path)
    try:
        ok, times = scrapes(port, count, timeout=10)
    finally:
        done.set()
        if attacker is not None:
            attacker.communicate(timeout=60)
    time.sleep(1.0)  # the attack's connections closed, its work drained
    return {
        "ok": ok,
        "p50_ms": pct(times, 50) * 1e3,
        "p99_ms": pct(times, 99) * 1e3,
        "peak_mib": peak[0] / 2**20,
    }


def _windows(port: int, big_s: float) -> str:
    """100 ended windows, and one recorded at 20 Hz for ``big_s`` s (ended too): its id."""
    from common import http_json

    big = http_json(port, "POST", "/windows", {"name": "big"})
    started = time.monotonic()
    ended_windows(port, 100)
    time.sleep(max(0.0, big_s - (time.monotonic() - started)))
    http_json(port, "POST", f"/windows/{big['id']}/end")
    return str(big["id"])


def measure(root: Path, count: int, big_s: float) -> list[dict[str, object]]:
    """Every phase against the daemon of ``root`` (this tree or an older one)."""
    from common import free_port, start_warptd_double, stop

    port = free_port()
    extra = ("--http-max-client-connections", "4096", "--window-interval", "0.05")
    proc, _ = start_warptd_double(8, port, *extra, root=root)
    try:
        big = _windows(port, big_s)
        rows = []
        for what, kind, clients, requests, path in PHASES:
            asked = path.format(big=big)
            attack = f"{clients} x {requests} {what}" if kind else what
            shown = path.replace("{big}", "BIG") or "-"
            rows.append(
                {
                    "attack": attack,
                    "asked": shown,
                    **_phase(port, proc.pid, (kind, clients, requests, asked), count),
                }
            )
        return rows
    finally:
        stop(proc)


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import ROOT, emit, print_p99_ratios

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", type=Path, help="an older tree (git archive COMMIT | tar -x -C DIR)")
    parser.add_argument("--quick", action="store_true", help="50 scrapes a phase, a 10 s BIG window")
    args = parser.parse_args()
    count, big_s = (50, 10.0) if args.quick else (100, 25.0)
    raise_nofile()
    new = measure(ROOT, count, big_s)
    rows = [{"tree": "this", **row} for row in new]
    if args.old is not None:
        old = measure(args.old, count, big_s)
        rows += [{"tree": "old", **row} for row in old]
        print_p99_ratios(new, old, "attack", "asked")
    emit(rows, f"scrapes (of {count}) during heavy reads, 8 GPUs, 100 ended windows and BIG")
    return 0


if __name__ == "__main__":
    sys.exit(main())

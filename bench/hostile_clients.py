"""Issue 39's hostile clients, with scrapes measured meanwhile, this tree beside an older one (both
over 8 GPUs of the NVML double, one after the other, on loopback):

    mkdir -p /tmp/warptd-aebfaa6 && git archive aebfaa6 | tar -x -C /tmp/warptd-aebfaa6
    python bench/hostile_clients.py [--old /tmp/warptd-aebfaa6] [--quick]

The attacks, each in a process of its own (as bench/slow_clients.py runs them), while 100 scrapes of
/metrics on new connections, 20 ms apart (10 s timeout, 40 s in all at most), measure what a
Prometheus would see:

- 16 connections that pipeline ``GET /healthz`` and read the answers, on and on;
- one connection that pipelines 6,000 ``GET /devices`` at a time (246 KiB) and reads the answers;
- 60 and 200 threads sending wrong basic-auth passwords (each a new one; bcrypt cost 10) while the
  scrapes authenticate (the daemon under a web config with one user);
- 20 connections that each pipeline 5,000 ``GET /healthz`` and close with a RST, over and over;
- for reference, 200 threads asking ``GET /healthz`` on new connections (no auth): what opening
  connections alone costs the daemon on this machine, whose cores the attackers share.

Each attack gets a daemon of its own. Prints, for each attack and tree: the scrapes that got 200 of
those asked (a scrape that fails or times out is not a 200), their p50 and p99, and the lines the
daemon wrote to stderr meanwhile (``stray``: those that are not structlog's JSON).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import itertools
import json
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit, free_port, pct, print_p99_ratios, start_warptd_double, stop
from slow_clients import raise_nofile, scrapes

USER, PASSWORD = "prometheus", "scrape-secret"
AUTH = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}


def _request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()


@contextmanager
def in_threads(count: int, work: Callable[[], None], stop: threading.Event) -> Iterator[None]:
    """``count`` daemon threads running ``work``, told to stop (``stop`` set) when the block ends."""
    for _ in range(count):
        threading.Thread(target=work, daemon=True).start()
    try:
        yield
    finally:
        stop.set()


def _drain(conn: socket.socket, stop: threading.Event) -> None:
    with suppress(OSError):
        while not stop.is_set() and conn.recv(1 << 16):
            pass


@contextmanager
def pipelining(port: int, connections: int, path: str, depth: int, limit_s: float) -> Iterator[None]:
    """``connections`` connections that each send ``depth`` pipelined ``GET path`` at a time, again
    and again, while another thread reads every answer."""
    stop, deadline = threading.Event(), time.monotonic() + limit_s
    batch = _request(path) * depth
    socks = [socket.create_connection(("127.0.0.1", port), timeout=limit_s) for _ in range(connections)]

    def send(conn: socket.socket) -> None:
        with suppress(OSError):
            while not stop.is_set() and time.monotonic() < deadline:
                conn.sendall(batch)

    threads = [threading.Thread(target=send, args=(c,), daemon=True) for c in socks]
    threads += [threading.Thread(target=_drain, args=(c, stop), daemon=True) for c in socks]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for conn in socks:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


@contextmanager
def wrong_passwords(port: int, threads: int, path: str = "/metrics", *, limit_s: float) -> Iterator[None]:
    """``threads`` threads that each ask for ``path`` with a wrong password, a new one each time,
    on a new connection, on and on."""
    stop, deadline, counter = threading.Event(), time.monotonic() + limit_s, itertools.count()

    def guess() -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            secret = base64.b64encode(f"{USER}:guess-{next(counter)}".encode()).decode()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=limit_s)
            try:
                conn.request("GET", path, headers={"Authorization": f"Basic {secret}"})
                conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                time.sleep(0.01)
            finally:
                conn.close()

    with in_threads(threads, guess, stop):
        yield


@contextmanager
def reset_pipelines(port: int, connections: int, depth: int, limit_s: float) -> Iterator[None]:
    """``connections`` threads that each pipeline ``depth`` ``GET /healthz`` on a new connection and
    close it at once with a RST (SO_LINGER 0), over and over."""
    stop, deadline = threading.Event(), time.monotonic() + limit_s
    batch = _request("/healthz") * depth
    linger = struct.pack("ii", 1, 0)

    def flood() -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                time.sleep(0.01)
                continue
            with suppress(OSError):
                conn.sendall(batch)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            conn.close()
            time.sleep(0.01)

    with in_threads(connections, flood, stop):
        yield


#: name -> (the attack's constructor and its arguments after the port, whether the daemon needs auth).
ATTACKS: dict[str, tuple[Callable[..., object], tuple[object, ...], bool]] = {
    "idle": (lambda port, limit_s: _nothing(), (), False),
    "16 conns pipelining /healthz": (pipelining, (16, "/healthz", 1000), False),
    "1 conn, 6000 pipelined /devices": (pipelining, (1, "/devices", 6000), False),
    "idle, basic auth": (lambda port, limit_s: _nothing(), (), True),
    "60 threads, wrong passwords": (wrong_passwords, (60,), True),
    "200 threads, wrong passwords": (wrong_passwords, (200,), True),
    "20 conns x 5000 pipelined, RST": (reset_pipelines, (20, 5000), False),
    # Not one of the issue's: what 200 threads opening connections cost here, with no auth at all.
    "reference: 200 threads, new conns, /healthz": (wrong_passwords, (200, "/healthz"), False),
}


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def run_attack(port: int, name: str, limit_s: float) -> None:
    """The attack process's body: attack until stdin closes (``limit_s`` at most)."""
    raise_nofile()
    make, args, _ = ATTACKS[name]
    with make(port, *args, limit_s=limit_s):  # type: ignore[operator]
        print("ready", flush=True)
        sys.stdin.read()


def attack_process(port: int, name: str, limit_s: float) -> subprocess.Popen[str]:
    """The attack in a process of its own, so that its threads' GIL is not the scraping client's."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import hostile_clients as h; "
        "h.run_attack(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))"
    )
    here = str(Path(__file__).resolve().parent)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, here, str(port), name, str(limit_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _stderr_lines(path: Path, start: int) -> tuple[int, int, int]:
    """(lines after byte ``start``, those that are not a JSON object, the file's size)."""
    data = path.read_bytes()
    lines = data[start:].splitlines()
    stray = 0
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            stray += 1
    return len(lines), stray, len(data)


def _web_config(directory: Path) -> Path:
    import bcrypt

    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    path = directory / "web.yml"
    path.write_text(f"basic_auth_users:\n  {USER}: '{hashed}'\n")
    return path


def measure(root: Path, names: list[str], count: int, limit_s: float, work: Path) -> list[dict[str, object]]:
    """Each attack in ``names`` against a daemon of ``root`` of its own (under basic auth where the
    attack needs it): what one attack leaves behind never weighs on the next."""
    rows: list[dict[str, object]] = []
    for name in names:
        auth = ATTACKS[name][2]
        port = free_port()
        extra = ["--http-max-client-connections", "4096"]
        if auth:
            extra += ["--web-config-file", str(_web_config(work))]
        errors = work / f"stderr-{port}.log"
        with errors.open("wb") as sink:
            daemon, _ = start_warptd_double(
                8, port, *extra, root=root, stderr=sink, headers=AUTH if auth else None
            )
        try:
            _, _, start = _stderr_lines(errors, 0)
            attacker = attack_process(port, name, limit_s + 20)
            try:
                ok, times = scrapes(port, count, timeout=10, headers=AUTH if auth else None, limit_s=limit_s)
            finally:
                attacker.communicate(timeout=60)
            time.sleep(1.0)  # what the attack left is logged
            lines, stray, _ = _stderr_lines(errors, start)
        finally:
            stop(daemon)
        rows.append(
            {
                "attack": name,
                "ok": f"{ok}/{len(times)}",
                "p50_ms": pct(times, 50) * 1e3,
                "p99_ms": pct(times, 99) * 1e3,
                "stderr": lines,
                "stray": stray,
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", type=Path, help="an older tree (git archive COMMIT | tar -x -C DIR)")
    parser.add_argument("--quick", action="store_true", help="50 scrapes an attack, 20 s at most")
    parser.add_argument("--only", action="append", choices=list(ATTACKS), help="these attacks only")
    args = parser.parse_args()
    count, limit_s = (50, 20.0) if args.quick else (100, 40.0)
    names = args.only or list(ATTACKS)
    raise_nofile()
    with tempfile.TemporaryDirectory() as work:
        new = measure(ROOT, names, count, limit_s, Path(work))
        rows = [{"tree": "this", **row} for row in new]
        if args.old is not None:
            old = measure(args.old, names, count, limit_s, Path(work))
            rows = [
                {"tree": tree, **row}
                for pair in zip(new, old, strict=True)
                for tree, row in zip(("this", "old"), pair, strict=True)
            ]
            print_p99_ratios(new, old, "attack")
    emit(rows, f"/metrics scrapes (up to {count}, {limit_s:g} s) under issue 39's attacks, 8 GPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

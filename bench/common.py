"""Helpers shared by the benchmarks: processes on loopback, /proc readings, latency loops."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(
    port: int, path: str = "/metrics", timeout: float = 10, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """One request on a new connection, like a curl or a Prometheus scrape without keep-alive."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def http_json(port: int, method: str, path: str, payload: object = None, timeout: float = 30) -> dict:
    """One JSON request on loopback; raises on anything but 2xx."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        body = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        if not 200 <= response.status < 300:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")
        return json.loads(data)
    finally:
        conn.close()


def wait_http(
    port: int, path: str, timeout: float = 30, poll: float = 0.1, headers: dict[str, str] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if get(port, path, timeout=2, headers=headers)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(poll)
    raise RuntimeError(f"nothing ready on :{port}{path}")


def start_warptd_double(
    gpus: int,
    port: int,
    *extra: str,
    root: Path = ROOT,
    stderr: int | IO[bytes] = subprocess.DEVNULL,
    headers: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], float]:
    """Start the daemon of ``root`` (this tree, or an older checkout) with ``gpus`` simulated GPUs,
    its stderr to ``stderr``; return it and the seconds until /readyz (asked with ``headers``) said 200."""
    args = [sys.executable, str(root / "bench" / "double_daemon.py"), str(gpus)]
    args += ["--backend", "nvidia", "--listen", f"127.0.0.1:{port}", "--log-level", "warning", *extra]
    started = time.monotonic()
    proc = subprocess.Popen(args, cwd=root, stdout=subprocess.DEVNULL, stderr=stderr)
    wait_http(port, "/readyz", poll=0.01, headers=headers)
    return proc, time.monotonic() - started


def start_node_exporter(port: int) -> subprocess.Popen[bytes] | None:
    binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if binary is None:
        return None
    proc = subprocess.Popen(
        [binary, f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_http(port, "/metrics")
    return proc


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def thread_cpu_seconds(pid: int) -> float:
    """CPU time so far of the threads ``pid`` has now, in nanoseconds (``/proc/PID/task/*/schedstat``):
    for an idle daemon using a fraction of a percent, where ``/proc/PID/stat``'s 10 ms ticks are too
    coarse. Threads that ended are not counted: compare daemons whose threads live on."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


#: What the daemon imports that is not warptd's: its runtime dependencies (pyproject.toml) and the
#: standard library's asyncio, which its HTTP server runs on. pydantic.main and the settings base
#: class are what load pydantic's machinery (``import pydantic`` alone is lazy). structlog comes
#: through ``warptd.logs`` first, as in the daemon: without ``rich`` (and pygments), which structlog
#: imports wherever they are installed; that small module is all of warptd in the floor.
DEPENDENCY_IMPORTS = (
    "warptd.logs",
    "asyncio",
    "structlog",
    "pydantic.main",
    "pydantic_settings",
    "prometheus_client",
    "apscheduler.schedulers.background",
    "psutil",
    "pynvml",
    "h11",
)


def dependencies_rss_bytes(root: Path = ROOT) -> int:
    """RSS of this interpreter once it imported the daemon's dependencies as the daemon imports them and
    nothing else of warptd: the floor under the daemon's RSS in this environment."""
    code = f"import {', '.join(DEPENDENCY_IMPORTS)}, sys; sys.stdout.write(open('/proc/self/status').read())"
    status = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    ).stdout
    return next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))


def latencies(port: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        status, _ = get(port)
        out.append(time.perf_counter() - started)
        assert status == 200
    return out


def keepalive_latencies(port: int, n: int) -> list[float]:
    """Requests on one persistent connection, as Prometheus scrapes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out = []
    for _ in range(n):
        started = time.perf_counter()
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        response.read()
        out.append(time.perf_counter() - started)
        assert response.status == 200
    conn.close()
    return out


def samples_total(port: int, backend: str) -> float:
    for line in get(port)[1].decode().splitlines():
        if line.startswith(f'warptd_samples_total{{backend="{backend}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def pct(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]
    )


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def print_p99_ratios(new: list[dict[str, object]], old: list[dict[str, object]], *keys: str) -> None:
    """One line per row: its ``keys``' values, and this tree's p99 over the older one's."""
    for after, before in zip(new, old, strict=True):
        ratio = float(after["p99_ms"]) / max(float(before["p99_ms"]), 1e-9)  # type: ignore[arg-type]
        print(f"{' '.join(str(after[k]) for k in keys)}: p99 this/old {ratio:.3f}")


def emit(rows: list[dict[str, object]], title: str) -> None:
    """Print a table, and the rows as JSON for notes."""
    print(f"\n## {title}")
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(f"{row[k]:.3g}" if isinstance(row[k], float) else str(row[k]) for k in keys))
    print(json.dumps(rows))

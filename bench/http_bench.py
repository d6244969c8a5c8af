"""The HTTP server of issue 14 side by side with today's (the thread-per-connection server of
15089dc) and node_exporter, in one run on loopback:

    git worktree add /tmp/old-warptd 15089dc     # once, read-only
    python bench/http_bench.py [--old /tmp/old-warptd] [--quick]

1. /metrics p50/p99 on new connections and on one keep-alive connection, requests per second
   under ``wrk -c32``, RSS and idle CPU, at 8 and 64 simulated GPUs (the C NVML double);
2. the slow-client attack (1,000 silent half request lines + 200 one-byte-a-second headers) with
   100 normal scrapes meanwhile: how many got 200, their p50/p99.
"""

from __future__ import annotations

import argparse
import http.client
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    cpu_seconds,
    emit,
    free_port,
    latencies,
    pct,
    rss_bytes,
    start_node_exporter,
    stop,
    wait_http,
)
from slow_clients import attack, open_count, scrapes

ROOT = Path(__file__).resolve().parents[1]


def start(root: Path, gpus: int, port: int) -> subprocess.Popen[bytes]:
    """warptd from ``root`` (this tree or the old worktree) with ``gpus`` GPUs of the NVML double."""
    args = [sys.executable, str(root / "bench" / "double_daemon.py"), str(gpus), "--backend", "nvidia"]
    args += ["--listen", f"127.0.0.1:{port}", "--log-level", "error", "--interval", "1"]
    if root == ROOT:  # the attack's 1,200 connections come from loopback's one address: all held
        args += ["--http-max-client-connections", "4096"]
    proc = subprocess.Popen(args, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(port, "/readyz", poll=0.05)
    return proc


def wrk_rps(port: int, seconds: int) -> float:
    wrk = shutil.which("wrk")
    if wrk is None:
        return float("nan")
    out = subprocess.run(
        [wrk, "-c32", "-t2", f"-d{seconds}s", f"http://127.0.0.1:{port}/metrics"],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
        check=False,
    ).stdout
    found = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return float(found.group(1)) if found and not errors else float("nan")


def steady(
    servers: dict[str, tuple[subprocess.Popen[bytes], int]], *, scrapes_n: int, idle: float, wrk_s: int
):
    """Latencies interleaved request by request, so every server sees the same machine; idle CPU
    over one shared window; wrk one server at a time."""
    time.sleep(2)
    fresh: dict[str, list[float]] = {name: [] for name in servers}
    kept: dict[str, list[float]] = {name: [] for name in servers}
    conns = {
        name: http.client.HTTPConnection("127.0.0.1", port, timeout=10) for name, (_, port) in servers.items()
    }
    for i in range(scrapes_n + 20):
        for name, (_, port) in servers.items():
            fresh_s = latencies(port, 1)[0]
            started = time.perf_counter()
            conns[name].request("GET", "/metrics")
            conns[name].getresponse().read()
            if i >= 20:  # the first 20 warm up
                fresh[name].append(fresh_s)
                kept[name].append(time.perf_counter() - started)
    for conn in conns.values():
        conn.close()
    rss = {name: rss_bytes(proc.pid) for name, (proc, _) in servers.items()}
    cpu0, t0 = {name: cpu_seconds(proc.pid) for name, (proc, _) in servers.items()}, time.monotonic()
    time.sleep(idle)
    window = time.monotonic() - t0
    idle_cpu = {
        name: (cpu_seconds(proc.pid) - cpu0[name]) / window * 100 for name, (proc, _) in servers.items()
    }
    rows = []
    for name, (proc, port) in servers.items():
        rows.append(
            {
                "server": name,
                "p50_ms": pct(fresh[name], 50) * 1e3,
                "p99_ms": pct(fresh[name], 99) * 1e3,
                "keepalive_p50_ms": pct(kept[name], 50) * 1e3,
                "keepalive_p99_ms": pct(kept[name], 99) * 1e3,
                "wrk_c32_rps": wrk_rps(port, wrk_s),
                "rss_mib": rss[name] / 2**20,
                "rss_after_wrk_mib": rss_bytes(proc.pid) / 2**20,
                "idle_cpu_pct": idle_cpu[name],
            }
        )
    return rows


def slow(name: str, port: int) -> dict[str, object]:
    with attack(port) as socks:
        held = open_count(socks)
        ok, times = scrapes(port)
    row: dict[str, object] = {"server": name, "slow_clients_held": held, "ok_of_100": ok}
    return {**row, "p50_ms": pct(times, 50) * 1e3, "p99_ms": pct(times, 99) * 1e3}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", type=Path, default=Path("/tmp/old-warptd"), help="worktree of 15089dc")
    parser.add_argument("--quick", action="store_true", help="fewer scrapes and shorter windows")
    args = parser.parse_args()
    n, idle, wrk_s = (100, 5.0, 3) if args.quick else (300, 15.0, 10)
    servers = [("warptd (event loop)", ROOT)]
    if (args.old / "bench" / "double_daemon.py").is_file():
        servers.append(("warptd today (threads)", args.old))
    else:
        print(f"today's server skipped: no worktree at {args.old} (git worktree add {args.old} 15089dc)")
    slow_rows = []
    for gpus in (8, 64):
        running: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
        try:
            for name, root in servers:
                port = free_port()
                running[name] = (start(root, gpus, port), port)
            if gpus == 8:
                node_port = free_port()
                node = start_node_exporter(node_port)
                if node is not None:
                    running["node_exporter"] = (node, node_port)
            rows = steady(running, scrapes_n=n, idle=idle, wrk_s=wrk_s)
            if gpus == 8:
                slow_rows += [slow(name, port) for name, (_, port) in running.items()]
        finally:
            for proc, _ in running.values():
                stop(proc)
        emit(rows, f"/metrics at {gpus} GPUs: latency, wrk -c32, RSS, idle CPU")
    emit(slow_rows, "100 scrapes during 1,000 silent + 200 one-byte-a-second clients (8 GPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What ``--compat dcgm-exporter`` costs a scrape: /metrics p50 and CPU per scrape, with and without it,
at 8 and 64 simulated GPUs (NVML double), both daemons side by side in one run.

    python bench/compat_bench.py [--rounds 60] [--gpus 8 64]

Each daemon samples every 0.2 s and is scraped every 0.25 s, alternating, so every scrape renders a
new snapshot (the render cache never answers): the latency and CPU are those of a scrape that
renders, as a Prometheus scrape every 15 s of a 1 s interval is. CPU per scrape is the daemon's CPU
over the scraping phase less its CPU over an idle phase as long (sampling alone), per scrape. The
body share is the compat series' bytes over the whole body: the issue's bound for the extra cost.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, free_port, get, pct, start_warptd_double, stop, thread_cpu_seconds

SPACING_S = 0.25
INTERVAL = "0.2"


def _scrape(port: int) -> tuple[float, bytes]:
    started = time.perf_counter()
    status, body = get(port)
    elapsed = time.perf_counter() - started
    assert status == 200
    return elapsed, body


def measure(gpus: int, rounds: int) -> list[dict[str, object]]:
    ports = {"plain": free_port(), "compat": free_port()}
    procs = {
        "plain": start_warptd_double(gpus, ports["plain"], "--interval", INTERVAL)[0],
        "compat": start_warptd_double(
            gpus, ports["compat"], "--interval", INTERVAL, "--compat", "dcgm-exporter"
        )[0],
    }
    try:
        time.sleep(2)
        latency: dict[str, list[float]] = {name: [] for name in procs}
        bodies: dict[str, bytes] = {}
        cpu0 = {name: thread_cpu_seconds(proc.pid) for name, proc in procs.items()}
        started = time.monotonic()
        for _ in range(rounds):
            for name, port in ports.items():
                elapsed, bodies[name] = _scrape(port)
                latency[name].append(elapsed)
            time.sleep(SPACING_S)
        scraping = {name: thread_cpu_seconds(proc.pid) - cpu0[name] for name, proc in procs.items()}
        phase = time.monotonic() - started
        cpu1 = {name: thread_cpu_seconds(proc.pid) for name, proc in procs.items()}
        time.sleep(phase)
        idle = {name: thread_cpu_seconds(proc.pid) - cpu1[name] for name, proc in procs.items()}
        compat_bytes = sum(
            len(line) + 1 for line in bodies["compat"].splitlines() if b"DCGM_" in line.split(b"{")[0]
        )
        rows = []
        for name in procs:
            body = bodies[name]
            rows.append(
                {
                    "gpus": gpus,
                    "daemon": name,
                    "series": sum(1 for line in body.splitlines() if line and not line.startswith(b"#")),
                    "body_kib": len(body) / 1024,
                    "p50_ms": pct(latency[name], 50) * 1e3,
                    "p90_ms": pct(latency[name], 90) * 1e3,
                    "cpu_ms_per_scrape": (scraping[name] - idle[name]) / rounds * 1e3,
                }
            )
        plain, compat = rows
        compat["p50_ratio"] = compat["p50_ms"] / plain["p50_ms"]
        compat["cpu_ratio"] = compat["cpu_ms_per_scrape"] / plain["cpu_ms_per_scrape"]
        compat["body_ratio"] = len(bodies["compat"]) / len(bodies["plain"])
        compat["compat_share_of_body"] = compat_bytes / len(bodies["compat"])
        for key in ("p50_ratio", "cpu_ratio", "body_ratio", "compat_share_of_body"):
            plain[key] = 1.0 if key != "compat_share_of_body" else 0.0
        return rows
    finally:
        for proc in procs.values():
            stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--gpus", type=int, nargs="+", default=[8, 64])
    args = parser.parse_args()
    rows = [row for gpus in args.gpus for row in measure(gpus, args.rounds)]
    emit(rows, "/metrics with and without --compat dcgm-exporter (NVML double, 0.2 s interval)")


if __name__ == "__main__":
    main()

"""warptd /metrics latency, CPU and RSS with 8 and 64 simulated GPUs, beside node_exporter.

    python bench/metrics_bench.py [--scrapes 200] [--idle 30]

Both exporters run on loopback in the same run; latency requests alternate between them so
both see the same machine state. CPU is measured over an idle window at a 1 s sample interval
with one scrape every 5 s (three times Prometheus' default rate).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    cpu_seconds,
    dependencies_rss_bytes,
    emit,
    free_port,
    get,
    keepalive_latencies,
    latencies,
    pct,
    rss_bytes,
    samples_total,
    start_node_exporter,
    start_warptd_double,
    stop,
)


def measure(gpus: int, scrapes: int, idle: float, node_port: int | None) -> dict[str, object]:
    port = free_port()
    proc, ready_s = start_warptd_double(gpus, port, "--interval", "1")
    try:
        time.sleep(2)
        ours, theirs = [], []
        for _ in range(scrapes):  # interleaved, so both see the same machine
            ours += latencies(port, 1)
            if node_port is not None:
                theirs += latencies(node_port, 1)
        kept = keepalive_latencies(port, scrapes)
        body = get(port)[1]
        cpu0, t0, samples0 = cpu_seconds(proc.pid), time.monotonic(), samples_total(port, "nvidia")
        while time.monotonic() - t0 < idle:
            time.sleep(5)
            get(port)
        cpu_used = cpu_seconds(proc.pid) - cpu0
        cpu_share = cpu_used / (time.monotonic() - t0)
        samples = max(1.0, samples_total(port, "nvidia") - samples0)
        row: dict[str, object] = {
            "gpus": gpus,
            "series": sum(1 for line in body.splitlines() if line and not line.startswith(b"#")),
            "warptd_p50_ms": pct(ours, 50) * 1e3,
            "warptd_p99_ms": pct(ours, 99) * 1e3,
        }
        if theirs:
            row["node_exporter_p50_ms"] = pct(theirs, 50) * 1e3
            row["p50_ratio_warptd/node"] = pct(ours, 50) / pct(theirs, 50)
        row["keepalive_p50_ms"] = pct(kept, 50) * 1e3
        row["cpu_pct_of_core"] = cpu_share * 100
        row["cpu_ms_per_sample"] = cpu_used / samples * 1e3
        row["cpu_ms_per_device_sample"] = cpu_used / samples / gpus * 1e3
        row["rss_mb"] = rss_bytes(proc.pid) / 2**20
        row["rss_dependencies_only_mb"] = dependencies_rss_bytes() / 2**20
        row["start_to_ready_s"] = ready_s
        return row
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 8, 64])
    args = parser.parse_args()
    node_port = free_port()
    node = start_node_exporter(node_port)
    if node is None:
        print("prometheus-node-exporter not installed: warptd figures only", file=sys.stderr)
    try:
        rows = [measure(n, args.scrapes, args.idle, node_port if node else None) for n in args.gpus]
    finally:
        stop(node)
    emit(rows, "/metrics latency, CPU and RSS (NVML double, 1 s interval)")


if __name__ == "__main__":
    main()

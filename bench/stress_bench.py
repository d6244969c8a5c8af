"""Stress harness throughput vs a bare torch loop, and sampler jitter / scrape latency under stress.

    python bench/stress_bench.py [--duration 5] [--rounds 3] [--size 1024]

Side by side in one run, on the CPU (or --device cuda:0 on a GPU machine): the bare loop and
the harness (the real JobManager -> spawned worker path) alternate, so both see the same
machine. Then a daemon samples the CPU at 0.25 s while a matmul stress runs, and the
sample-to-sample jitter and /metrics latency are compared with the same daemon idle.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from common import emit, latencies, pct

from warptd.config import load_settings
from warptd.daemon import Daemon
from warptd.logs import configure_logging
from warptd.stress.base import DeviceRef
from warptd.stress.job import StressParameters
from warptd.stress.jobs import JobManager

BARE = """
import sys, time, torch
n, seconds, device, dtype = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], getattr(torch, sys.argv[4])
sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
a = torch.randn(n, n, device=device, dtype=dtype); b = torch.randn(n, n, device=device, dtype=dtype)
c = torch.empty(n, n, device=device, dtype=dtype)
for _ in range(3): torch.matmul(a, b, out=c)
sync(); t0 = time.perf_counter(); k = 0
while time.perf_counter() - t0 < seconds:
    torch.matmul(a, b, out=c); k += 1
sync(); dt = time.perf_counter() - t0
print(k * n * n * (2 * n - 1) / dt)
"""


def bare(size: int, duration: float, device: str, dtype: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", BARE, str(size), str(duration), device, dtype],
        capture_output=True,
        text=True,
        check=True,
        timeout=duration + 120,
    )
    return float(out.stdout.strip())


def harness(size: int, duration: float, device: str, dtype: str) -> float:
    ref = DeviceRef("bench", 0, device, device != "cpu")
    manager = JobManager([ref], {})
    job = manager.start(
        StressParameters(test="matmul", device=ref.key, duration_s=duration, dtype=dtype, size=size)
    )
    job.done.wait(duration + 120)
    view = job.view()
    assert view.workload is not None, view.error
    return view.workload.throughput


def jitter(daemon: Daemon, seconds: float) -> list[float]:
    stamps: list[float] = []
    daemon.sampler.listeners.append(
        lambda name, *_: stamps.append(time.monotonic()) if name == "cpu" else None
    )
    time.sleep(seconds)
    daemon.sampler.listeners.pop()
    interval = daemon.settings.interval
    return [abs((b - a) - interval) for a, b in itertools.pairwise(stamps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    configure_logging("warning", "console")

    bare_runs, harness_runs = [], []
    for _ in range(args.rounds):
        bare_runs.append(bare(args.size, args.duration, args.device, args.dtype))
        harness_runs.append(harness(args.size, args.duration, args.device, args.dtype))
    rows: list[dict[str, object]] = [
        {
            "op": f"matmul {args.size} {args.dtype} {args.device}",
            "bare_gflops_median": statistics.median(bare_runs) / 1e9,
            "harness_gflops_median": statistics.median(harness_runs) / 1e9,
            "harness/bare": statistics.median(harness_runs) / statistics.median(bare_runs),
            "rounds": args.rounds,
        }
    ]
    emit(rows, "stress harness vs bare torch loop (same op, size, dtype, device; alternating)")

    settings = load_settings(listen="127.0.0.1:0", backends=["cpu"], interval=0.25, log_level="error")
    daemon = Daemon(settings)
    daemon.start()
    try:
        time.sleep(1)
        idle_jitter = jitter(daemon, 8)
        idle_latency = latencies(daemon.port, 200)
        job = daemon.stress.start(
            StressParameters(test="matmul", device="cpu:0", duration_s=30, size=args.size)
        )
        while job.started_at is None and not job.done.is_set():
            time.sleep(0.1)
        busy_jitter = jitter(daemon, 8)
        busy_latency = latencies(daemon.port, 200)
        daemon.stress.cancel(job.id)
    finally:
        daemon.stop()
    rows = []
    for label, jit, lat in (("idle", idle_jitter, idle_latency), ("cpu stress", busy_jitter, busy_latency)):
        rows.append(
            {
                "state": label,
                "samples": len(jit) + 1,
                "jitter_p50_ms": pct(jit, 50) * 1e3,
                "jitter_p99_ms": pct(jit, 99) * 1e3,
                "metrics_p50_ms": pct(lat, 50) * 1e3,
                "metrics_p99_ms": pct(lat, 99) * 1e3,
            }
        )
    emit(rows, f"sampler jitter (interval {settings.interval} s) and /metrics latency, idle vs CPU stress")


if __name__ == "__main__":
    main()

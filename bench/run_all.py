"""The whole benchmark suite in one command, each part printing its side-by-side table:

    python bench/run_all.py [--quick]

1. /metrics latency at 1, 8 and 64 simulated GPUs vs node_exporter, CPU per sample and per
   device, RSS, time from start to /readyz (bench/metrics_bench.py);
2. 32 concurrent keep-alive scrapers x 200 scrapes at 8 GPUs: p50/p99 and errors
   (bench/load_bench.py);
3. stress harness throughput vs a bare torch loop, sampler jitter and /metrics latency under a
   CPU stress (bench/stress_bench.py; skipped without torch);
4. pod attribution with 8 GPUs and 100 pods: CPU in process and of two daemons side by side, and
   /metrics latency with and without it (bench/pods_bench.py);
5. the HTTP server against today's (a worktree of 15089dc at /tmp/old-warptd) and node_exporter:
   latency, wrk -c32, RSS, idle CPU at 8 and 64 GPUs, and scrapes under 1,200 slow clients
   (bench/http_bench.py);
6. NVIDIA health and traffic fields: today's daemon (an export of 748b416 at /tmp/warptd-748b416)
   and this tree side by side at 1 Hz and 10 Hz with 8 GPUs (CPU, NVML calls per GPU per sample),
   /metrics latency and RSS at 8 and 64 GPUs (bench/nvml_fields_bench.py; skipped without it).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer scrapes and shorter windows")
    args = parser.parse_args()
    metrics = ["--scrapes", "50", "--idle", "10"] if args.quick else []
    stress = ["--duration", "2", "--rounds", "2"] if args.quick else []
    status = subprocess.call([sys.executable, str(HERE / "metrics_bench.py"), *metrics])
    status |= subprocess.call([sys.executable, str(HERE / "load_bench.py")])
    pods = ["--window", "10", "--scrapes", "50"] if args.quick else []
    status |= subprocess.call([sys.executable, str(HERE / "pods_bench.py"), *pods])
    status |= subprocess.call(
        [sys.executable, str(HERE / "http_bench.py"), *(["--quick"] if args.quick else [])]
    )
    if Path("/tmp/warptd-748b416/bench/double_daemon.py").exists():
        status |= subprocess.call(
            [sys.executable, str(HERE / "nvml_fields_bench.py"), *(["--quick"] if args.quick else [])]
        )
    else:
        print("\n## NVML fields benchmark skipped: no /tmp/warptd-748b416 (see bench/nvml_fields_bench.py)")
    if importlib.util.find_spec("torch") is None:
        print(f"\n## stress benchmarks skipped: torch is not installed (pip install '{HERE.parent}[stress]')")
    else:
        status |= subprocess.call([sys.executable, str(HERE / "stress_bench.py"), *stress])
    return status


if __name__ == "__main__":
    sys.exit(main())

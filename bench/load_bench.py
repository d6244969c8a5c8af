"""32 concurrent keep-alive scrapers x 200 scrapes against 8 simulated GPUs: latency and errors.

python bench/load_bench.py [--scrapers 32] [--scrapes 200] [--gpus 8]
"""

from __future__ import annotations

import argparse
import http.client
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, free_port, pct, start_warptd_double, stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scrapers", type=int, default=32)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    port = free_port()
    proc, _ = start_warptd_double(args.gpus, port, "--interval", "1")
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def scraper() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        mine = []
        for _ in range(args.scrapes):
            started = time.perf_counter()
            try:
                conn.request("GET", "/metrics")
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    errors.append(str(response.status))
            except (OSError, http.client.HTTPException) as exc:
                errors.append(repr(exc))
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)

    try:
        started = time.perf_counter()
        threads = [threading.Thread(target=scraper) for _ in range(args.scrapers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
    finally:
        stop(proc)
    emit(
        [
            {
                "scrapers": args.scrapers,
                "scrapes": len(latencies),
                "gpus": args.gpus,
                "errors": len(errors),
                "p50_ms": pct(latencies, 50) * 1e3,
                "p99_ms": pct(latencies, 99) * 1e3,
                "scrapes_per_s": len(latencies) / wall,
            }
        ],
        f"{args.scrapers} concurrent keep-alive scrapers (client and daemon share this machine's cores)",
    )


if __name__ == "__main__":
    main()

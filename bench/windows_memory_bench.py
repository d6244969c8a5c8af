"""Memory of open energy windows: 64 windows on 8 GPUs at 10 Hz, RSS over time, then after they end.

    python bench/windows_memory_bench.py [--duration 600] [--every 30] [--old /tmp/warptd-267f5c6]

The real daemon (``--interval 1 --window-interval 0.1``) runs over ``--gpus`` GPUs of the C-level NVML
double. ``--windows`` windows are opened on every GPU and kept open ``--duration`` seconds; every
``--every`` s a row gives the daemon's RSS, its growth over the idle daemon's and its CPU since the
last row. Then the size of one window's GET and of ``GET /windows``, every window is ended, and
``--after`` s later the RSS again. With ``--old DIR`` (a checkout of an older tree) the same runs on it
first, and both are printed side by side.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, cpu_seconds, emit, free_port, get, http_json, rss_bytes, start_warptd_double, stop

MIB = 2**20


def scenario(root: Path, args: argparse.Namespace) -> list[dict[str, object]]:
    """Rows of RSS over time for the daemon of ``root``; the last rows are after every window ended."""
    port = free_port()
    extra = ("--interval", "1", "--window-interval", "0.1", *args.daemon_args)
    daemon, _ = start_warptd_double(args.gpus, port, *extra, root=root)
    tree = "old" if root != ROOT else "this"
    rows: list[dict[str, object]] = []
    try:
        time.sleep(args.settle)
        idle = rss_bytes(daemon.pid)
        devices = [f"nvidia:{i}" for i in range(args.gpus)]
        ids = [
            http_json(port, "POST", "/windows", {"name": f"w{i}", "devices": devices})["id"]
            for i in range(args.windows)
        ]
        started, cpu_before, last = time.monotonic(), cpu_seconds(daemon.pid), time.monotonic()

        def row(phase: str) -> None:
            nonlocal cpu_before, last
            now, cpu = time.monotonic(), cpu_seconds(daemon.pid)
            rss = rss_bytes(daemon.pid)
            rows.append(
                {
                    "tree": tree,
                    "phase": phase,
                    "t_s": round(now - started),
                    "rss_mib": rss / MIB,
                    "over_idle_mib": (rss - idle) / MIB,
                    "cpu_pct": 100 * (cpu - cpu_before) / (now - last),
                }
            )
            cpu_before, last = cpu, now

        rows.append({"tree": tree, "phase": "idle", "t_s": 0, "rss_mib": idle / MIB, "over_idle_mib": 0.0,
                     "cpu_pct": float("nan")})  # fmt: skip
        while time.monotonic() - started < args.duration:
            time.sleep(min(args.every, args.duration - (time.monotonic() - started)))
            row(f"{args.windows} open")
        one = len(get(port, f"/windows/{ids[0]}", timeout=60)[1])
        listing = len(get(port, "/windows", timeout=60)[1])
        for window_id in ids:
            http_json(port, "POST", f"/windows/{window_id}/end", timeout=60)
        cpu_before, last = cpu_seconds(daemon.pid), time.monotonic()
        time.sleep(args.after)
        row(f"all ended +{args.after:g}s")
        ended = len(get(port, f"/windows/{ids[-1]}", timeout=60)[1])
        rows[-1] |= {"get_one_kib": one / 1024, "get_list_kib": listing / 1024, "get_ended_kib": ended / 1024}
    finally:
        stop(daemon)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--windows", type=int, default=64)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds the windows stay open")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between two rows")
    parser.add_argument("--after", type=float, default=10.0, help="seconds after ending to read RSS")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before the idle RSS")
    parser.add_argument("--old", type=Path, default=None, help="an older tree to run first (its bench/)")
    parser.add_argument("daemon_args", nargs="*", help="more daemon flags (after --)")
    args = parser.parse_args()
    for root in ([args.old] if args.old else []) + [ROOT]:
        rows = scenario(root, args)
        emit(rows, f"{root}: {args.windows} windows on {args.gpus} GPUs, RSS (MiB) over time")
        sizes = {k: round(v, 1) for k, v in rows[-1].items() if k.startswith("get_")}
        print(f"response sizes (KiB): {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

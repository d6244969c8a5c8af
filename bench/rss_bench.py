"""The daemon's RSS at start against its floor (its dependencies alone), for this tree and, side by side
in the same run, another checkout.

    python bench/rss_bench.py [--gpus 8] [--rounds 3] [--old DIR]

``--old`` is a checkout to compare (``git archive main | tar -x -C /tmp/warptd-main``). Each round
starts each tree's daemon over the NVML double (``--interval 1``), waits 2 s, makes 50 scrapes (so the
exposition's buffers exist), reads its RSS, and measures that tree's floor (``dependencies_rss_bytes``:
its dependencies imported as that tree's daemon imports them). The trees take turns, so both see the
same machine. warptd's own share is the RSS above the floor. Also printed: whether ``rich`` and
``pygments`` are in the floor's interpreter.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    DEPENDENCY_IMPORTS,
    ROOT,
    dependencies_rss_bytes,
    emit,
    free_port,
    get,
    rss_bytes,
    start_warptd_double,
    stop,
)

MIB = 2**20


def daemon_rss(root: Path, gpus: int) -> float:
    """RSS (MiB) of ``root``'s daemon with ``gpus`` GPUs, after 2 s and 50 scrapes."""
    port = free_port()
    proc, _ = start_warptd_double(gpus, port, "--interval", "1", root=root)
    try:
        time.sleep(2)
        for _ in range(50):
            get(port)
        return rss_bytes(proc.pid) / MIB
    finally:
        stop(proc)


def floor_has(root: Path, *modules: str) -> bool:
    """Whether any of ``modules`` is loaded once the floor's imports are made in ``root``."""
    code = f"import {', '.join(DEPENDENCY_IMPORTS)}, sys; print(any(m in sys.modules for m in {modules!r}))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    return result.stdout.strip() == "True"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old", type=Path, help="another checkout to measure side by side")
    args = parser.parse_args()
    trees = {"this tree": ROOT, **({str(args.old): args.old.resolve()} if args.old else {})}
    rss: dict[str, list[float]] = {name: [] for name in trees}
    floors: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, root in trees.items():
            rss[name].append(daemon_rss(root, args.gpus))
            floors[name].append(dependencies_rss_bytes(root) / MIB)
    rows = []
    for name, root in trees.items():
        daemon, floor = statistics.median(rss[name]), statistics.median(floors[name])
        rows.append(
            {
                "tree": name,
                "gpus": args.gpus,
                "rss_mb": daemon,
                "rss_dependencies_only_mb": floor,
                "warptd_share_mb": daemon - floor,
                "rss_mb_per_round": " ".join(f"{r:.1f}" for r in rss[name]),
                "rich_in_the_dependencies": floor_has(root, "rich", "pygments"),
            }
        )
    emit(rows, f"RSS at start, {args.gpus} GPUs of the NVML double, against the floor")


if __name__ == "__main__":
    main()

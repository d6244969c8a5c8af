"""What reading the health, traffic and nvidia-smi fields costs (issue 12's Performance section).

    git archive 748b416 | (mkdir -p /tmp/warptd-748b416 && tar -x -C /tmp/warptd-748b416)  # once
    python bench/nvml_fields_bench.py [--old /tmp/warptd-748b416] [--also /tmp/warptd-267f5c6]
        [--idle 30] [--rounds 5] [--quick]

1. Today's daemon (748b416, today's fields) and this tree's (the whole field set, 18 NVLinks per GPU)
   side by side over the C NVML double, 8 GPUs at 1 Hz, CPU over ``--rounds`` shared windows without
   scrapes (sampling only; both without the XID thread, whose double polls): CPU ms per sample and %
   of one core (medians, and the median ratio to 748b416 over the same windows), and NVML calls per
   GPU per sample (the double counts every call);
2. the same at 10 Hz (the issue asks under 1.5 % of one core);
3. ``/metrics`` p50 latency and RSS at 8 and 64 GPUs beside node_exporter (``metrics_bench.measure``);
4. where the difference goes, in process for each tree: CPU ms for the 8 device reads, for one whole
   sample of the sampler, and for one render of /metrics after a new sample.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (
    ROOT,
    emit,
    free_port,
    get,
    samples_total,
    start_node_exporter,
    start_warptd_double,
    stop,
    thread_cpu_seconds,
)
from metrics_bench import measure

from tests.doubles.nvml import MAX_FN, State

GPUS = 8
#: The double's modelled field latencies reported but not slept (the older trees' doubles have none,
#: and a sleep's wake-up costs CPU that a driver's own wait would cost every daemon alike).
os.environ["WARPTD_NVML_DOUBLE_SPEND_LATENCY"] = "0"
#: Both daemons without their XID thread: the double polls for events every 10 ms where the driver
#: blocks in the kernel, which would add the same ~0.2 % of a core to each side and to neither on a GPU.
QUIET = ("--no-xid-events",)


def nvml_calls(pid: int) -> int:
    """Every NVML call the daemon made so far, from the double's state file it maps. The header of
    ``struct state`` (calls included) is the same in both trees."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    path = next(v.split(b"=", 1)[1] for v in environ if v.startswith(b"WARPTD_NVML_DOUBLE_STATE="))
    with open(path, "rb") as state:
        state.seek(State.calls.offset)
        return sum((ctypes.c_uint64 * MAX_FN).from_buffer_copy(state.read(8 * MAX_FN)))


def side_by_side(
    trees: dict[str, Path], interval: float, idle: float, rounds: int
) -> list[dict[str, object]]:
    """The daemons of ``trees`` at once, 8 GPUs each, measured over ``rounds`` shared idle windows of
    ``idle`` s: this machine's speed drifts between minutes, so each row gives every window's CPU, the
    median, and the median of the per-window ratios to the first tree (measured over the same window)."""
    daemons = {}
    try:
        for name, root in trees.items():
            port = free_port()
            daemons[name] = (
                start_warptd_double(GPUS, port, "--interval", str(interval), *QUIET, root=root)[0],
                port,
            )
        time.sleep(3)  # past discovery and the first samples
        windows: dict[str, list[tuple[float, float, float]]] = {name: [] for name in daemons}
        for _ in range(rounds):
            before = {name: (thread_cpu_seconds(p.pid), nvml_calls(p.pid), samples_total(port, "nvidia"))
                      for name, (p, port) in daemons.items()}  # fmt: skip
            started = time.monotonic()
            time.sleep(idle)  # sampling only: what a scrape costs (a render) is measured apart, below
            elapsed = time.monotonic() - started
            for name, (proc, port) in daemons.items():
                cpu0, calls0, samples0 = before[name]
                samples = max(1.0, samples_total(port, "nvidia") - samples0)
                cpu = thread_cpu_seconds(proc.pid) - cpu0
                calls = (nvml_calls(proc.pid) - calls0) / samples / GPUS
                windows[name].append((cpu / elapsed * 100, cpu / samples * 1e3, calls))
        first = next(iter(windows.values()))
        rows = []
        for name, (_, port) in daemons.items():
            body = get(port)[1]
            measured = windows[name]
            ratios = [mine[0] / theirs[0] for mine, theirs in zip(measured, first, strict=True)]
            rows.append({
                "daemon": name,
                "interval_s": interval,
                "series": sum(1 for line in body.splitlines() if line and not line.startswith(b"#")),
                "cpu_pct_of_core": statistics.median(w[0] for w in measured),
                "cpu_pct_each_window": " ".join(f"{w[0]:.3f}" for w in measured),
                "ratio_to_first": statistics.median(ratios),
                "cpu_ms_per_sample": statistics.median(w[1] for w in measured),
                "nvml_calls_per_gpu_sample": statistics.median(w[2] for w in measured),
            })  # fmt: skip
        return rows
    finally:
        for proc, _ in daemons.values():
            stop(proc)


#: Run with ``python -c`` in a tree's root, so that tree's warptd and NVML double are imported.
_BREAKDOWN = """
import json, time
from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import Rig
from warptd.config import load_settings
fake = FakeNvml([FakeGpu(index=i) for i in range(8)])
with fake.installed():
    rig = Rig(load_settings(listen="127.0.0.1:0", backends=["nvidia"]))
    backend = rig.loaded.accelerators[0]
    for _ in range(5):
        rig.sampler.tick("nvidia")
    def cpu_ms(step, n=200):
        started = time.process_time()
        for _ in range(n):
            step()
        return (time.process_time() - started) / n * 1e3
    reads = cpu_ms(lambda: [backend.read_device(i) for i in range(8)])
    tick = cpu_ms(lambda: rig.sampler.tick("nvidia"))
    both = cpu_ms(lambda: (rig.sampler.tick("nvidia"), rig.exposition.render(None, None)))
    print(json.dumps({"reads_ms": reads, "sample_ms": tick, "render_ms": both - tick}))
    rig.close()
"""


def breakdown(trees: dict[str, Path]) -> list[dict[str, object]]:
    """CPU of the device reads, of a whole sample and of a render, in process, tree by tree."""
    rows = []
    for name, root in trees.items():
        out = subprocess.run(
            [sys.executable, "-c", _BREAKDOWN],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        ).stdout
        rows.append({"daemon": name, **json.loads(out.strip().splitlines()[-1])})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--old", type=Path, default=Path("/tmp/warptd-748b416"))
    parser.add_argument(
        "--also",
        type=Path,
        action="append",
        default=[],
        help="another checkout measured in the same windows (e.g. /tmp/warptd-267f5c6, the last stop's)",
    )
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of each measured window")
    parser.add_argument("--rounds", type=int, default=5, help="windows per interval (median reported)")
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="2 windows of 20 s, 50 scrapes")
    parser.add_argument(
        "--parts",
        nargs="+",
        default=["1hz", "10hz", "metrics", "breakdown"],
        choices=["1hz", "10hz", "metrics", "breakdown"],
    )
    args = parser.parse_args()
    idle, scrapes = (20.0, 50) if args.quick else (args.idle, args.scrapes)
    rounds = 2 if args.quick else args.rounds
    if not (args.old / "bench" / "double_daemon.py").exists():
        sys.exit(f"no old checkout at {args.old}: see this script's docstring")
    trees = {"748b416": args.old, **{path.name: path for path in args.also}, "this tree": ROOT}
    if "1hz" in args.parts:
        rows = side_by_side(trees, 1.0, idle, rounds)
        emit(rows, "8 GPUs at 1 Hz, side by side")
    if "10hz" in args.parts:
        emit(
            side_by_side(trees, 0.1, idle, rounds),
            "8 GPUs at 10 Hz, side by side",
        )
    if "breakdown" in args.parts:
        rows = breakdown(trees)
        emit(rows, "8 GPUs in process: CPU ms per 8 device reads, per sample, per render")
    if "metrics" in args.parts:
        node_port = free_port()
        node = start_node_exporter(node_port)
        try:
            rows = [measure(n, scrapes, idle, node_port if node else None) for n in (8, 64)]
        finally:
            stop(node)
        emit(rows, "/metrics latency, CPU and RSS with the whole field set (1 s interval)")


if __name__ == "__main__":
    main()

"""Energy windows: daemon CPU with faster sampling inside a window, and window energy vs ground truth.

    python bench/windows_bench.py [--gpus 8] [--span 10] [--long 30]

The real daemon runs in its own process over 8 GPUs of the C-level NVML double, whose energy
counters advance at each GPU's instantaneous power (100-450 W; GPU 0 steps between 200 and 400 W
every 0.3 s during the energy part, so counter and integrated power have something to disagree on).

1. CPU of the daemon (utime+stime over ``--span`` s): at ``--interval 1 --window-interval 0.1``
   with no window open, with a window on one GPU and on all GPUs, side by side with a daemon
   sampling everything at ``--interval 0.1``.
2. Windows of 0.5 s, 2 s and ``--long`` s on every GPU: each GPU's energy against the double's own
   counter at the window's edges (ground truth, read from the shared state by this process).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import ROOT, cpu_seconds, emit, free_port, http_json, stop, wait_http

from tests.doubles.nvml import FakeGpu, FakeNvml


def start_daemon(fake: FakeNvml, port: int, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, **fake.environment(), "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "warptd", "--backend", "nvidia", "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(
        [*args, "--log-level", "warning", *extra],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_http(port, "/readyz", poll=0.05)
    return proc


def cpu_percent(pid: int, span: float) -> float:
    before, started = cpu_seconds(pid), time.monotonic()
    time.sleep(span)
    return 100 * (cpu_seconds(pid) - before) / (time.monotonic() - started)


def truth_joules(gpu: FakeGpu) -> float:
    """The double's energy counter now, as its library computes it (banked + live part), in J."""
    state = gpu.state
    live = (time.monotonic_ns() - state.live_since_ns) / 1e9 * gpu.power_mw if state.live else 0
    return (state.energy_mj + live) / 1000


def cpu_part(fake: FakeNvml, gpus: int, span: float) -> list[dict[str, object]]:
    rows = []
    port = free_port()
    windowed = start_daemon(fake, port, "--interval", "1", "--window-interval", "0.1")
    try:
        time.sleep(2)  # past start-up
        rows.append(
            {
                "daemon": "--interval 1 --window-interval 0.1",
                "window": "none",
                "cpu_pct": cpu_percent(windowed.pid, span),
            }
        )
        for devices, label in (
            (["nvidia:0"], "1 GPU"),
            ([f"nvidia:{i}" for i in range(gpus)], f"all {gpus} GPUs"),
        ):
            opened = http_json(port, "POST", "/windows", {"name": "bench", "devices": devices})
            rows.append(
                {
                    "daemon": "--interval 1 --window-interval 0.1",
                    "window": label,
                    "cpu_pct": cpu_percent(windowed.pid, span),
                }
            )
            http_json(port, "POST", f"/windows/{opened['id']}/end")
    finally:
        stop(windowed)
    port = free_port()
    fast = start_daemon(fake, port, "--interval", "0.1")
    try:
        time.sleep(2)
        rows.append(
            {
                "daemon": "--interval 0.1 (everything fast)",
                "window": "none",
                "cpu_pct": cpu_percent(fast.pid, span),
            }
        )
    finally:
        stop(fast)
    return rows


def energy_part(fake: FakeNvml, durations: list[float]) -> list[dict[str, object]]:
    port = free_port()
    daemon = start_daemon(fake, port, "--interval", "1", "--window-interval", "0.1")
    stepping = threading.Event()

    def step() -> None:  # GPU 0 alternates 200 / 400 W
        high = False
        while not stepping.wait(0.3):
            high = not high
            fake.gpus[0].power_mw = 400_000 if high else 200_000

    stepper = threading.Thread(target=step, daemon=True)
    stepper.start()
    rows = []
    try:
        time.sleep(2)
        for duration in durations:
            before = [truth_joules(g) for g in fake.gpus]
            opened = http_json(port, "POST", "/windows", {"name": f"w{duration:g}"})
            inner_before = [truth_joules(g) for g in fake.gpus]
            time.sleep(duration)
            inner_after = [truth_joules(g) for g in fake.gpus]
            ended = http_json(port, "POST", f"/windows/{opened['id']}/end")
            after = [truth_joules(g) for g in fake.gpus]
            errors, spread, disagreement = [], [], []
            for i, target in enumerate(t for t in ended["targets"] if t["kind"] == "device"):
                # the edges lie between the request's send and its answer: truth is between these two
                outer, inner = after[i] - before[i], inner_after[i] - inner_before[i]
                truth = (outer + inner) / 2
                errors.append(abs(target["energy_joules"] - truth) / truth)
                spread.append((outer - inner) / 2 / truth)
                disagreement.append(target["energy_disagreement_ratio"] or 0.0)
            rows.append(
                {
                    "window_s": duration,
                    "gpus": len(errors),
                    "max_error_pct": 100 * max(errors),
                    "mean_error_pct": 100 * sum(errors) / len(errors),
                    "truth_uncertainty_pct": 100 * max(spread),
                    "max_counter_vs_integrated_pct": 100 * max(disagreement),
                    "samples_gpu0": ended["targets"][0]["samples"],
                }
            )
    finally:
        stepping.set()
        stop(daemon)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--span", type=float, default=10.0, help="seconds of CPU measured per row")
    parser.add_argument("--long", type=float, default=30.0, help="the long window, seconds")
    args = parser.parse_args()
    fake = FakeNvml([FakeGpu(index=i, power_mw=100_000 + 50_000 * i, live=True) for i in range(args.gpus)])
    try:
        emit(cpu_part(fake, args.gpus, args.span), f"daemon CPU, {args.gpus} GPUs of the NVML double")
        emit(energy_part(fake, [0.5, 0.5, 2.0, 2.0, args.long]), "window energy vs the double's counter")
    finally:
        fake.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How closely warptd_device_energy_joules_total follows the driver's energy counter between two reads
of it (issue 38), over the NVML double priced and refreshing like the H200, side by side in one run.

    python bench/energy_accuracy_bench.py [--seconds 90] [--gpus 2] [--old DIR]

Each GPU draws a square wave, 100 W and 500 W in turns of 0.2 s (faster than any sampler) or 1.37 s,
with the driver's 1 s average on time or 200 ms late (``--lags``). For each, daemons run beside each
other over the same GPUs: at 1 Hz and at 10 Hz, reading the counter every 10 s and at the default
(30 s); ``--old DIR`` adds another checkout's daemon at ``--energy-interval 10`` (``git archive aebfaa6
| tar -x -C DIR``: the bridge of issue 32). Every daemon is scraped once a second; every span of 15 s
and of 60 s between two scrapes is compared with the driver's counter at the times of the samples the
scrapes read (``warptd_last_sample_timestamp_seconds`` less the sample's duration: when its field
batch was read). Targets: 90 % of the 15 s spans within 2 %, every one within 5 %; every 60 s span
within 1 %.

A window recorded at 10 Hz on a daemon of its own (the defaults) gives the per-second figure: each
second of the window (from its edge, where its counter is read) against the counter over that
second, and every pair of its points one second apart.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import ROOT, emit, free_port, get, http_json, stop, wait_http

from tests.doubles.nvml import REFRESH_NS, FakeGpu, FakeNvml

LOW_MW, HIGH_MW = 100_000, 500_000


class SquareWave:
    """Every GPU alternating between 100 W and 500 W every ``turn`` s (each from its own phase), and
    the driver's counter history: what it answered at any past time is known."""

    def __init__(self, fake: FakeNvml, turn: float) -> None:
        self.fake, self.turn = fake, turn
        self.history: list[list[tuple[int, int, int, int]]] = [[] for _ in fake.gpus]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        for index, gpu in enumerate(self.fake.gpus):
            gpu.power_mw = LOW_MW if index % 2 else HIGH_MW
            self._note(index)
        self._thread.start()

    def _note(self, index: int) -> None:
        gpu = self.fake.gpus[index]
        state = gpu.state
        self.history[index].append((time.monotonic_ns(), state.energy_mj, state.live_since_ns, gpu.power_mw))

    def _run(self) -> None:
        turns, start = 0, time.monotonic()
        while not self._stop.is_set():
            turns += 1
            time.sleep(max(0.0, start + turns * self.turn - time.monotonic()))
            for index, gpu in enumerate(self.fake.gpus):
                gpu.power_mw = HIGH_MW if gpu.power_mw == LOW_MW else LOW_MW
                self._note(index)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def counter_j(self, gpu: int, monotonic_s: float) -> float:
        """What the driver's energy counter answered at ``monotonic_s`` (refreshed every 100 ms)."""
        at = int(monotonic_s * 1e9)
        at -= at % REFRESH_NS
        _, banked, since, milliwatts = max((h for h in self.history[gpu] if h[0] <= at), default=(0,) * 4)
        return (banked + max(0, at - since) / 1e9 * milliwatts) / 1000


def daemon(port: int, *flags: str) -> list[str]:
    return [sys.executable, "-m", "warptd", "serve", "--backend", "nvidia", "--listen", f"127.0.0.1:{port}",
            "--log-level", "warning", "--no-xid-events", *flags]  # fmt: skip


def scrape(port: int) -> tuple[float, dict[int, float]]:
    """When the daemon's last sample read its GPUs (monotonic) and each GPU's energy total then."""
    body = get(port)[1].decode()
    totals, sampled, duration = {}, None, 0.0
    for line in body.splitlines():
        if line.startswith("warptd_device_energy_joules_total{"):
            device = line.split('device="', 1)[1].split('"', 1)[0]
            totals[int(device)] = float(line.rsplit(" ", 1)[1])
        elif line.startswith('warptd_last_sample_timestamp_seconds{backend="nvidia"}'):
            sampled = float(line.rsplit(" ", 1)[1])
        elif line.startswith('warptd_sample_duration_seconds{backend="nvidia"}'):
            duration = float(line.rsplit(" ", 1)[1])
    assert sampled is not None
    return sampled - duration - (time.time() - time.monotonic()), totals


def span_errors(load: SquareWave, scrapes: list[tuple[float, dict[int, float]]], span: int) -> list[float]:
    """Percent off the counter of every ``span``-scrape increase of every GPU."""
    errors = []
    for (t0, first), (t1, last) in zip(scrapes, scrapes[span:], strict=False):
        for gpu, total in last.items():
            truth = load.counter_j(gpu, t1) - load.counter_j(gpu, t0)
            errors.append(100 * ((total - first[gpu]) - truth) / truth)
    return errors


def window_errors(load: SquareWave, port: int, seconds: float) -> tuple[list[float], list[float]]:
    """Record a window of ``seconds`` at 10 Hz: percent off the counter of each of its seconds from
    its edge (the samples that read the counter: the first a second or more on, less half a sample),
    and of every pair of its points about one second apart."""
    opened = http_json(port, "POST", "/windows", {"name": "per-second", "devices": ["nvidia:0", "nvidia:1"]})
    time.sleep(seconds)
    ended = http_json(port, "POST", f"/windows/{opened['id']}/end")
    started = ended["started_at"] - (time.time() - time.monotonic())
    aligned, pairs = [], []
    for target in ended["targets"]:
        gpu = int(target["id"].split(":")[1])
        points = [(p["t"], p["energy_joules"]) for p in target["points"] if p["energy_joules"] is not None]

        def error(a: tuple[float, float], b: tuple[float, float], gpu: int = gpu) -> float:
            truth = load.counter_j(gpu, started + b[0]) - load.counter_j(gpu, started + a[0])
            return 100 * ((b[1] - a[1]) - truth) / truth

        edges = [points[0]]
        for point in points:
            if point[0] >= edges[-1][0] + 1.0 - 0.05:
                edges.append(point)
        aligned += [error(a, b) for a, b in itertools.pairwise(edges)]
        for a in points:
            b = min(points, key=lambda p, a=a: abs(p[0] - a[0] - 1.0))
            if abs(b[0] - a[0] - 1.0) <= 0.03:
                pairs.append(error(a, b))
    return aligned, pairs


def within(errors: list[float], limit: float) -> float:
    return 100 * sum(abs(e) <= limit for e in errors) / len(errors) if errors else float("nan")


def run(args: argparse.Namespace, turn: float, lag_ms: int) -> tuple[list[dict], list[dict]]:
    fake = FakeNvml([FakeGpu.h200(i, live=True) for i in range(args.gpus)], driver_version="580.159.04")
    for gpu in fake.gpus:
        gpu.average_lag_ms = lag_ms
    load = SquareWave(fake, turn)
    load.start()
    env = {**os.environ, **fake.environment(), "PYTHONPATH": str(ROOT)}
    flags = {
        "1 Hz, counter every 10 s": ("--energy-interval", "10"),
        "1 Hz, default (30 s)": (),
        "10 Hz, counter every 10 s": ("--interval", "0.1", "--energy-interval", "10"),
        "10 Hz, default (30 s)": ("--interval", "0.1"),
    }
    roots = dict.fromkeys(flags, ROOT)
    if args.old is not None:
        for name, extra in (
            ("old tree, 1 Hz, every 10 s", ()),
            ("old tree, 10 Hz, every 10 s", ("--interval", "0.1")),
        ):
            flags[name] = (*extra, "--energy-interval", "10")
            roots[name] = args.old
    ports = {name: free_port() for name in flags}
    window_port = free_port()
    procs = {
        name: subprocess.Popen(
            daemon(ports[name], *flags[name]),
            cwd=roots[name],
            env={**env, "PYTHONPATH": str(roots[name])},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name in flags
    }
    procs["window"] = subprocess.Popen(
        daemon(window_port), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for port in (*ports.values(), window_port):
            wait_http(port, "/readyz")
        time.sleep(3)  # past start-up
        scrapes: dict[str, list[tuple[float, dict[int, float]]]] = {name: [] for name in ports}
        window: list[tuple[list[float], list[float]]] = []
        recorder = threading.Thread(target=lambda: window.append(window_errors(load, window_port, 20.0)))
        recorder.start()
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            tick = time.monotonic()
            for name, port in ports.items():
                scrapes[name].append(scrape(port))
            time.sleep(max(0.0, tick + 1.0 - time.monotonic()))
        recorder.join()
    finally:
        for proc in procs.values():
            stop(proc)
        load.stop()
        fake.close()
    load_name = f"{turn:g} s turns, average {lag_ms} ms late"
    rows = []
    for name, taken in scrapes.items():
        fifteen, sixty = span_errors(load, taken, 15), span_errors(load, taken, 60)
        rows.append(
            {
                "load": load_name,
                "daemon": name,
                "15s_within_2pct": within(fifteen, 2.0),
                "15s_worst_pct": max(map(abs, fifteen)),
                "60s_worst_pct": max(map(abs, sixty)) if sixty else float("nan"),
                "spans": len(fifteen),
            }
        )
    aligned, pairs = window[0]
    seconds = [
        {
            "load": load_name,
            "window_seconds_within_2pct": within(aligned, 2.0),
            "window_seconds_worst_pct": max(map(abs, aligned)),
            "any_1s_pair_within_2pct": within(pairs, 2.0),
            "any_1s_pair_worst_pct": max(map(abs, pairs)),
        }
    ]
    return rows, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--turns", default="0.2,1.37", help="the square waves' turns, seconds")
    parser.add_argument("--lags", default="0,200", help="how late the driver's average is, ms")
    parser.add_argument("--old", type=Path, help="another checkout, run beside at --energy-interval 10")
    args = parser.parse_args()
    spans, seconds = [], []
    for turn in (float(t) for t in args.turns.split(",")):
        for lag in (int(ms) for ms in args.lags.split(",")):
            rows, window = run(args, turn, lag)
            spans += rows
            seconds += window
    emit(spans, f"Increase over 15 s and 60 s against the driver's counter, {args.seconds:g} s a run")
    emit(seconds, "A 20 s window at 10 Hz: each second from its edge, and every 1 s pair of its points")


if __name__ == "__main__":
    main()

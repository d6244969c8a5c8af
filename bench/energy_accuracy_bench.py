"""How closely warptd_device_energy_joules_total follows the driver's energy counter between two reads
of it (issue 38), over the NVML double priced and refreshing like the H200, side by side in one run.

    python bench/energy_accuracy_bench.py [--seconds 90] [--gpus 2] [--old DIR]

Each GPU draws a square wave, 100 W and 500 W in turns of 0.2 s (faster than any sampler) or 1.37 s,
with the driver's 1 s average on time or 200 ms late (``--lags``). For each, daemons run beside each
other over the same GPUs: at 1 Hz and at 10 Hz, reading the counter every 10 s and at the default
(30 s); ``--old DIR`` adds another checkout's daemon at ``--energy-interval 10`` (``git archive aebfaa6
| tar -x -C DIR``: the bridge of issue 32). Every daemon is scraped once a second; every span of 15 s
and of 60 s between two scrapes is compared with the driver's counter at the times of the samples the
scrapes read (each daemon has a double of its own, whose GPUs draw the same load: the last field
batch it saw from its daemon before ``warptd_last_sample_timestamp_seconds`` is when the sample read
the GPU). Targets: 90 % of the 15 s spans within 2 %, every one within 5 %; every 60 s span
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
    """``gpus`` (of one double or several) alternating between 100 W and 500 W every ``turn`` s, every
    other one from the other level, and each one's counter history: what its driver's counter
    answered at any past time is known."""

    def __init__(self, gpus: list[FakeGpu], turn: float) -> None:
        self.gpus, self.turn = gpus, turn
        self.history: dict[int, list[tuple[int, int, int, int]]] = {id(gpu): [] for gpu in gpus}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        for gpu in self.gpus:
            gpu.power_mw = LOW_MW if gpu.index % 2 else HIGH_MW
            self._note(gpu)
        self._thread.start()

    def _note(self, gpu: FakeGpu) -> None:
        state = gpu.state
        self.history[id(gpu)].append(
            (time.monotonic_ns(), state.energy_mj, state.live_since_ns, gpu.power_mw)
        )

    def _run(self) -> None:
        turns, start = 0, time.monotonic()
        while not self._stop.is_set():
            turns += 1
            time.sleep(max(0.0, start + turns * self.turn - time.monotonic()))
            for gpu in self.gpus:
                gpu.power_mw = HIGH_MW if gpu.power_mw == LOW_MW else LOW_MW
                self._note(gpu)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def counter_j(self, gpu: FakeGpu, monotonic_s: float) -> float:
        """What ``gpu``'s energy counter answered at ``monotonic_s`` (refreshed every 100 ms)."""
        at = int(monotonic_s * 1e9)
        at -= at % REFRESH_NS
        history = self.history[id(gpu)]
        _, banked, since, milliwatts = max((h for h in history if h[0] <= at), default=(0,) * 4)
        return (banked + max(0, at - since) / 1e9 * milliwatts) / 1000


def daemon(port: int, *flags: str) -> list[str]:
    return [sys.executable, "-m", "warptd", "serve", "--backend", "nvidia", "--listen", f"127.0.0.1:{port}",
            "--log-level", "warning", "--no-xid-events", *flags]  # fmt: skip


def scrape(port: int, fake: FakeNvml) -> dict[int, tuple[float, float]]:
    """Each GPU's energy total and when the sample it is from read the GPU (monotonic): the last field
    batch the double saw from this daemon before it published the sample."""
    body = get(port)[1].decode()
    totals, published = {}, None
    for line in body.splitlines():
        if line.startswith("warptd_device_energy_joules_total{"):
            device = line.split('device="', 1)[1].split('"', 1)[0]
            totals[int(device)] = float(line.rsplit(" ", 1)[1])
        elif line.startswith('warptd_last_sample_timestamp_seconds{backend="nvidia"}'):
            published = float(line.rsplit(" ", 1)[1]) - (time.time() - time.monotonic())
    assert published is not None
    read = {gpu: max(t for t in fake.gpus[gpu].batch_times() if t <= published) for gpu in totals}
    return {gpu: (read[gpu], total) for gpu, total in totals.items()}


def span_errors(
    load: SquareWave, fake: FakeNvml, scrapes: list[dict[int, tuple[float, float]]], span: int
) -> list[float]:
    """Percent off the counter of every ``span``-scrape increase of every GPU."""
    errors = []
    for first, last in zip(scrapes, scrapes[span:], strict=False):
        for gpu, (t1, total) in last.items():
            t0, before = first[gpu]
            truth = load.counter_j(fake.gpus[gpu], t1) - load.counter_j(fake.gpus[gpu], t0)
            errors.append(100 * ((total - before) - truth) / truth)
    return errors


def window_errors(
    load: SquareWave, fake: FakeNvml, port: int, seconds: float
) -> tuple[list[float], list[float]]:
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
            device = fake.gpus[gpu]
            truth = load.counter_j(device, started + b[0]) - load.counter_j(device, started + a[0])
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
    # One double each (their GPUs drawing the same load): each knows when its daemon read it.
    fakes = {
        name: FakeNvml([FakeGpu.h200(i, live=True) for i in range(args.gpus)], driver_version="580.159.04")
        for name in (*flags, "window")
    }
    for fake in fakes.values():
        for gpu in fake.gpus:
            gpu.average_lag_ms = lag_ms
    load = SquareWave([gpu for fake in fakes.values() for gpu in fake.gpus], turn)
    load.start()
    ports = {name: free_port() for name in (*flags, "window")}

    def start(name: str, root: Path, *extra: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, **fakes[name].environment(), "PYTHONPATH": str(root)}
        return subprocess.Popen(
            daemon(ports[name], *extra),
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    procs = {name: start(name, roots[name], *flags[name]) for name in flags}
    try:
        for name in flags:
            wait_http(ports[name], "/readyz")
        time.sleep(3)  # past start-up
        scrapes: dict[str, list[dict[int, tuple[float, float]]]] = {name: [] for name in flags}
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            tick = time.monotonic()
            for name in flags:
                scrapes[name].append(scrape(ports[name], fakes[name]))
            time.sleep(max(0.0, tick + 1.0 - time.monotonic()))
    finally:
        for proc in procs.values():
            stop(proc)
    # The window on a daemon of its own, alone: the span daemons are gone.
    window_proc = start("window", ROOT)
    try:
        wait_http(ports["window"], "/readyz")
        time.sleep(3)
        window = [window_errors(load, fakes["window"], ports["window"], 20.0)]
    finally:
        stop(window_proc)
        load.stop()
        for fake in fakes.values():
            fake.close()
    load_name = f"{turn:g} s turns, average {lag_ms} ms late"
    rows = []
    for name, taken in scrapes.items():
        fifteen, sixty = span_errors(load, fakes[name], taken, 15), span_errors(load, fakes[name], taken, 60)
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

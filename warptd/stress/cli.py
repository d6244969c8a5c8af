"""``warptd stress``: the same job machinery as POST /stress, run in the foreground with a progress bar."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from warptd.config import Settings
from warptd.registry import Loaded
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import Snapshot
from warptd.stress.job import Job, JobStatus, JobView, StressError
from warptd.stress.registry import resolve_test
from warptd.stress.setup import make_job_manager

BAR = 30


def _si(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.2f} {unit}"


def _progress_line(job: Job, unit: str) -> str:
    elapsed = (job.progress or {}).get("elapsed_s", 0.0)
    share = min(1.0, elapsed / job.params.duration_s)
    filled = int(share * BAR)
    recorder = job.recorder
    power = recorder.summary().power_mean_watts if job.started_at and recorder else None
    phase = str(job.status)  # starting (torch import, allocation, warm-up), then running
    return (
        f"\r[{'#' * filled}{'.' * (BAR - filled)}] {elapsed:5.1f}/{job.params.duration_s:g} s "
        f"{phase:8} {_si((job.progress or {}).get('throughput'), unit):>14}  power {_si(power, 'W'):>9}"
    )


def print_table(view: JobView, out: TextIO) -> None:
    t, w = view.telemetry, view.workload
    rows = [
        ("status", str(view.status)),
        ("test", f"{view.params.test} on {view.params.device}"),
        ("dtype / size", f"{view.params.dtype} / {view.params.size}"),
        ("throughput", _si(w.throughput, w.unit) if w else "-"),
        ("iterations", str(w.iterations) if w else "-"),
        ("timed seconds", f"{w.elapsed_s:.2f}" if w else "-"),
        ("samples", str(t.samples) if t else "-"),
        (
            "mean / peak power",
            f"{_si(t.power_mean_watts, 'W')} / {_si(t.power_peak_watts, 'W')}" if t else "-",
        ),
        ("energy", f"{_si(t.energy_joules, 'J')} ({t.energy_source})" if t and t.energy_source else "-"),
        (
            "peak temperature (hottest sensor)",
            f"{t.temperature_peak_celsius:.1f} °C" if t and t.temperature_peak_celsius else "-",
        ),
        (
            "mean utilization",
            f"{t.utilization_mean_ratio:.0%}" if t and t.utilization_mean_ratio is not None else "-",
        ),
        ("throttling", ", ".join(f"{k} {v:.1f} s" for k, v in t.throttle_seconds.items()) if t else "-"),
        ("efficiency", _si(view.efficiency.value, view.efficiency.unit) if view.efficiency else "-"),
    ]
    if view.error:
        rows.append(("error", view.error))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out.write(f"{key:<{width}}  {value or '-'}\n")


def run_stress(settings: Settings, loaded: Loaded, args: argparse.Namespace) -> int:
    snapshot = Snapshot(stale_after=settings.stale_after)
    sampler = Sampler(settings, snapshot, loaded.accelerators, loaded.power)
    manager = make_job_manager(settings, loaded, snapshot, sampler, in_daemon=False)
    sampler.listeners.append(manager.on_sample)
    sampler.sample_all()  # the devices known before the default one is chosen
    sampler.start()
    try:
        params = manager.parameters(args.test, args.device, args.duration, args.dtype, args.size)
        job = manager.start(params)
    except StressError as exc:
        sampler.stop()
        print(f"warptd: {exc}", file=sys.stderr)
        return 2
    tty = sys.stderr.isatty()
    unit = resolve_test(manager.catalog.tests[params.test]).unit
    try:
        ticks = 0
        while not job.done.wait(0.5):
            ticks += 1
            if tty or ticks % 4 == 0:  # redraw in place on a terminal, a line every 2 s in a log
                line = _progress_line(job, unit)
                sys.stderr.write(line if tty else line.lstrip("\r") + "\n")
                sys.stderr.flush()
    except KeyboardInterrupt:
        manager.cancel(job.id)
    finally:
        if tty:
            sys.stderr.write("\n")
        sampler.stop()
    view = job.view()
    if args.json:
        print(view.model_dump_json(indent=2))
    else:
        print_table(view, sys.stdout)
    return 0 if view.status is JobStatus.SUCCEEDED else 1

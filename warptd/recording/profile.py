"""``warptd profile -- CMD``: record every selected device while CMD runs.

Through the node's daemon when one answers (a window there: two samplers never fight over an SDK),
else with this process's own samplers at ``--interval`` (default ``--window-interval``, 0.1 s).
Signals (INT, TERM, HUP) are forwarded to CMD, and its exit code is ours (128+N if killed by N).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TextIO

from warptd import client
from warptd.config import Settings, SettingsError
from warptd.recording.recorder import Recorder, with_carbon_and_cost
from warptd.recording.schema import Recording
from warptd.recording.selection import UnknownTarget, select_targets

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
REPORT_MODULE = "warptd.recording.report"


class ProfileError(Exception):
    """A problem before CMD ran; the message is one line."""


@dataclass(frozen=True)
class Profile:
    """What to run and how to name and scope its recording."""

    command: list[str]
    name: str
    devices: list[str] | None
    labels: dict[str, str]


def daemon_url(settings: Settings, given: str | None) -> str:
    """``--url``, else ``$WARPTD_URL``, else the loopback address of the configured ``listen`` port."""
    if given or os.environ.get("WARPTD_URL"):
        return str(given or os.environ["WARPTD_URL"])
    return f"http://127.0.0.1:{settings.listen_address[1]}"


def daemon_answers(url: str) -> bool:
    """A daemon answers ``/healthz`` within half a second."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/healthz", timeout=0.5) as response:
            return response.status == 200
    except OSError:
        return False


def exit_code(returncode: int) -> int:
    """A child's exit status as a shell reports it: 128+N when signal N killed it."""
    return 128 - returncode if returncode < 0 else returncode


@contextmanager
def forwarding(child: subprocess.Popen[bytes]) -> Iterator[None]:
    """While the child runs, INT, TERM and HUP sent to us go to it instead of ending us."""

    def forward(signum: int, _: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_child(command: list[str]) -> int:
    """Run CMD with signals forwarded; return its exit code."""
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        raise ProfileError(f"cannot run {command[0]}: {exc.strerror or exc}") from None
    with forwarding(child):
        child.wait()
    return exit_code(child.returncode)


def _through_daemon(url: str, token: str | None, profile: Profile) -> tuple[int, Recording | None] | None:
    """Record through the daemon's windows; None when it has them turned off. The recording is None
    when the daemon could not end the window (it went away): CMD's exit code still counts."""
    try:
        opened = client.begin_window(profile.name, profile.devices, profile.labels, url=url, token=token)
    except client.WindowClientError as exc:
        if exc.status == 404 and "--no-windows" in str(exc):
            return None
        raise ProfileError(str(exc)) from None
    code: int | None = None
    try:
        code = run_child(profile.command)
    finally:
        try:
            ended = client.end_window(opened["id"], url=url, token=token)
        except client.WindowClientError as exc:
            if code is None:
                raise
            print(f"warptd profile: the daemon did not end the window: {exc}", file=sys.stderr)
            ended = None
    return code, Recording.model_validate(ended) if ended is not None else None


def _with_own_samplers(settings: Settings, interval: float, profile: Profile) -> tuple[int, Recording]:
    """Load the backends here, sample them at ``interval`` while CMD runs, read them once more at its end."""
    from warptd.backends.registry import load_backends
    from warptd.sampling.sampler import Sampler
    from warptd.sampling.snapshot import Snapshot

    settings = settings.model_copy(update={"interval": interval})
    loaded = load_backends(settings, strict=True)
    snapshot = Snapshot(stale_after=float("inf"))
    sampler = Sampler(settings, snapshot, loaded.accelerators, loaded.power)
    try:
        sampler.sample_all()  # identities, domains, and the energy baselines
        accelerators = {b.name for b in loaded.accelerators if b.is_accelerator}
        try:
            targets = select_targets(snapshot, profile.devices, accelerators)
        except UnknownTarget as exc:
            raise ProfileError(str(exc)) from None
        if not targets:
            raise ProfileError("no device or power domain to record on this node")
        recorder = Recorder(
            targets,
            kind="profile",
            name=profile.name,
            labels=profile.labels,
            interval_seconds=interval,
            edges=True,
        )
        sampler.listeners.append(recorder.on_sample)
        recorder.start()
        sampler.sample_all()  # the first sample at the start
        sampler.start()
        try:
            code = run_child(profile.command)
        finally:
            sampler.halt()
            sampler.sample_all()  # the last sample at the end
            recorder.stop("command_exited")
        return code, recorder.recording_now()
    finally:
        sampler.stop()


def run_profile(settings: Settings, args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    command = list(args.profile_command or [])
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print(
            "warptd profile: give the command to run after --, e.g. warptd profile -- python train.py",
            file=sys.stderr,
        )
        return 2
    render = _report_renderer() if args.output else None
    if args.output and render is None:
        missing = f"--output needs the HTML report ({REPORT_MODULE}), which this warptd does not have"
        print(f"warptd profile: {missing}", file=sys.stderr)
        return 2
    name = args.name or re.sub(r"[^A-Za-z0-9_.:-]", "_", Path(command[0]).name)[:64] or "profile"
    profile = Profile(command, name, args.device, {"command": " ".join(command)[:256]})
    interval = settings.interval if "interval" in settings.model_fields_set else settings.window_interval
    url = daemon_url(settings, args.url)
    try:
        result = _through_daemon(url, settings.stress_token_value(), profile) if daemon_answers(url) else None
        if result is None:
            result = _with_own_samplers(settings, interval, profile)
    except (ProfileError, client.WindowClientError, SettingsError) as exc:
        print(f"warptd profile: {exc}", file=sys.stderr)
        return 2
    code, recording = result
    if recording is None:
        return code
    recording = recording.model_copy(update={"end_reason": "command_exited", "kind": "profile"})
    if settings.carbon_intensity is not None or settings.energy_price is not None:
        recording = with_carbon_and_cost(recording, settings.carbon_intensity, settings.energy_price)
    if args.json:
        out.write(recording.model_dump_json(indent=2) + "\n")
    else:
        print_table(recording, sys.stderr)
    if render is not None:
        _write_report(render, recording, Path(args.output))
    return code


def _write_report(render: Callable[[Recording], str], recording: Recording, path: Path) -> None:
    """Write the HTML report; a failure is said on stderr and leaves CMD's exit code as it is."""
    try:
        path.write_text(render(recording), encoding="utf-8")
    except ImportError as exc:  # the report's plotting extra is missing
        print(f"warptd profile: cannot write {path}: {exc}", file=sys.stderr)
    except OSError as exc:
        print(f"warptd profile: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)


def _report_renderer() -> Callable[[Recording], str] | None:
    """``render_html`` of the HTML report module, where this warptd has it."""
    if importlib.util.find_spec(REPORT_MODULE) is None:
        return None
    module = importlib.import_module(REPORT_MODULE)
    return getattr(module, "render_html", None)


def _number(value: float | None, unit: str, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f} {unit}"


def print_table(recording: Recording, out: TextIO) -> None:
    """One line per device and domain, then the totals."""
    rows = [("TARGET", "SAMPLES", "ENERGY", "SOURCE", "MEAN POWER", "PEAK POWER", "PEAK TEMP", "UTIL")]
    for t in recording.targets:
        util = f"{t.utilization_mean_ratio:.0%}" if t.utilization_mean_ratio is not None else "-"
        rows.append(
            (
                t.id + ("" if t.up else " (lost)"),
                str(t.samples),
                _number(t.energy_joules, "J"),
                t.energy_source or "-",
                _number(t.power_mean_watts, "W"),
                _number(t.power_peak_watts, "W"),
                _number(t.temperature_peak_celsius, "°C"),
                util,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n"
        )
    total = f"{recording.duration_seconds:.2f} s, {_number(recording.energy_joules, 'J')}"
    if recording.carbon_grams is not None:
        total += f", {recording.carbon_grams:.3f} gCO2e"
    if recording.cost is not None:
        total += f", cost {recording.cost:.6f}"
    out.write(f"total  {total}\n")

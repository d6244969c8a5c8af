"""``warptd profile -- CMD``: record every selected device while CMD runs.

Through the node's daemon when one answers (a window there: two samplers never fight over an SDK),
else with this process's own samplers at ``--interval`` (default ``--window-interval``, 0.1 s); a
daemon named by ``--url`` must answer; the window there is held by a lease this process renews, so
the daemon ends it if we die. CMD runs in its own process group, which signals (INT, TERM, HUP) are
forwarded to (:mod:`warptd.recording.child`), and its exit code is ours (128+N if killed by N).
What would fail after CMD is checked before it runs, and the recording's JSON is saved before its
report is rendered (:mod:`warptd.recording.outputs`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from warptd import client
from warptd.config import Settings, SettingsError
from warptd.recording import child as children
from warptd.recording import command as cmd
from warptd.recording import outputs
from warptd.recording.recorder import Recorder, with_carbon_and_cost
from warptd.recording.schema import Recording, TargetRecording
from warptd.recording.selection import UnknownTarget, select_targets

if TYPE_CHECKING:
    from warptd.registry import Loaded
    from warptd.sampling.snapshot import Snapshot

#: Exit status when an output failed after CMD exited 0 (a failing CMD's own status is kept).
EXIT_OUTPUT_FAILED = 1


class ProfileError(Exception):
    """A problem before CMD ran; the message is one line."""


@dataclass(frozen=True)
class Profile:
    """What to run and how to name and scope its recording."""

    command: list[str]
    name: str
    devices: list[str] | None
    labels: dict[str, str]
    #: The lease of the daemon's window (renewed by this process); None: no lease.
    lease_s: float | None = client.DEFAULT_LEASE_S


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


def run_child(command: list[str]) -> int:
    """Run CMD in its own process group with signals forwarded to it; return its exit code
    (CommandError if it cannot start)."""
    try:
        child = children.spawn(command)
    except OSError as exc:
        raise cmd.from_os_error(command[0], exc) from None
    with children.forwarding(child):
        child.wait()
    return children.exit_code(child.returncode)


def announce(where: str, recording: Recording, out: TextIO) -> None:
    """One line before CMD runs: where the recording is made, how often it samples, and what it
    measures, so that a recording through a daemon other than the one meant shows at once."""
    every = f", every {recording.interval_seconds:g} s" if recording.interval_seconds else ""
    out.write(f"warptd profile: {where}{every}: {targets_text(recording.targets)}\n")
    out.flush()


def targets_text(targets: list[TargetRecording]) -> str:
    """The targets as a person reads them: ``nvidia:0-7 (NVIDIA H200), rapl:package-0``."""
    groups: dict[tuple[str, str | None], list[str]] = {}
    for target in targets:
        groups.setdefault((target.backend, target.model), []).append(target.id)
    parts = []
    for (backend, model), ids in groups.items():
        indices = [i.removeprefix(f"{backend}:") for i in ids]
        if len(ids) > 2 and all(i.isdigit() for i in indices) and _consecutive(indices):
            named = f"{backend}:{indices[0]}-{indices[-1]}"
        else:
            named = ", ".join(ids)
        parts.append(f"{named} ({model})" if model else named)
    return ", ".join(parts) or "nothing"


def _consecutive(indices: list[str]) -> bool:
    numbers = [int(i) for i in indices]
    return numbers == list(range(numbers[0], numbers[0] + len(numbers)))


def _through_daemon(url: str, token: str | None, profile: Profile) -> tuple[int, Recording | None] | None:
    """Record through the daemon's windows; None when it has them turned off. The recording is None
    when the daemon could not end the window (it went away): CMD's exit code still counts."""
    try:
        opened, keeper = client.begin_leased_window(
            profile.name, profile.devices, profile.labels, profile.lease_s, url=url, token=token, timeout=10.0
        )
    except client.WindowClientError as exc:
        if exc.status == 404 and "--no-windows" in str(exc):
            return None
        raise ProfileError(str(exc)) from None
    where = f"recording through the daemon at {url} (its window {opened['id']}; --local samples here)"
    announce(where, Recording.model_validate(opened), sys.stderr)
    code: int | None = None
    try:
        code = run_child(profile.command)
    finally:
        if keeper is not None:
            keeper.stop()
        try:
            ended = client.end_window(opened["id"], url=url, token=token)
        except client.WindowClientError as exc:
            ended = _ended_before(opened["id"], url, token, exc)
            if ended is None and code is None:
                raise
    return code, Recording.model_validate(ended) if ended is not None else None


def _ended_before(
    window_id: str, url: str, token: str | None, exc: client.WindowClientError
) -> dict[str, Any] | None:
    """The recording of a window the daemon ended before profile asked (409: its lease lapsed while
    profile was stopped or suspended, or its maximum duration passed), from the daemon's history,
    with a warning that it stops short of CMD's end; None, and why, when the daemon has none."""
    if exc.status == 409:
        with contextlib.suppress(client.WindowClientError):
            ended = client.get_window(window_id, url=url, token=token)
            print(
                f"warptd profile: the daemon ended the window before CMD did ({ended.get('end_reason')}"
                f" at {ended.get('ended_at')}): the recording stops there",
                file=sys.stderr,
            )
            return ended
    print(f"warptd profile: the daemon did not end the window: {exc}", file=sys.stderr)
    return None


@dataclass(frozen=True)
class Recorded:
    """CMD's exit code, its recording (None if the daemon lost it) and why energy may be missing."""

    code: int
    recording: Recording | None
    #: Why this node has no energy reading for some targets, one phrase per cause.
    energy_reasons: tuple[str, ...] = ()


def _with_own_samplers(settings: Settings, interval: float, profile: Profile, why: str) -> Recorded:
    """Load the backends here, sample them at ``interval`` while CMD runs, read them once more at its
    end; ``why`` not through a daemon, for the line that says where it records."""
    from warptd.registry import load_backends
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
        announce(f"sampling here ({why})", recorder.recording_now(), sys.stderr)
        sampler.sample_all(edge=True)  # the first sample at the start, every counter read exactly
        sampler.start()
        try:
            code = run_child(profile.command)
        finally:
            sampler.halt()
            sampler.sample_all(edge=True)  # the last sample at the end, every counter read exactly
            recorder.stop("command_exited")
        return Recorded(code, recorder.recording_now(), local_energy_reasons(loaded, snapshot))
    finally:
        sampler.stop()


def local_energy_reasons(loaded: Loaded, snapshot: Snapshot) -> tuple[str, ...]:
    """Why a device here may have no energy: each energy source of a loaded backend that did not load
    (``rapl: no RAPL zones``), each that loaded but was refused its counter, and no accelerator."""
    from warptd.errors import ErrorKind
    from warptd.registry import discover

    present = {backend.name for backend in loaded.accelerators}
    reasons = []
    for candidate in discover():
        if candidate.kind != "power" or candidate.name not in loaded.unavailable:
            continue
        if candidate.companion in present:
            reasons.append(f"{candidate.name}: {loaded.unavailable[candidate.name]}")
    for backend in loaded.power:
        state = snapshot.get(backend.name)
        if state is not None and state.errors.get(ErrorKind.PERMISSION):
            reasons.append(f"{backend.name}: permission denied reading its energy counters")
    if not any(backend.is_accelerator for backend in loaded.accelerators):
        reasons.append("no accelerator found (warptd list --verbose says why each backend did not load)")
    return tuple(reasons)


def _sampled(settings: Settings, args: argparse.Namespace, profile: Profile) -> Recorded:
    """Through the daemon that answers at ``--url``, else (and with ``--local``) with own samplers.
    A daemon named with ``--url`` or ``$WARPTD_URL`` must answer: falling back would hide that."""
    interval = settings.interval if "interval" in settings.model_fields_set else settings.window_interval
    if args.local:
        return _with_own_samplers(settings, interval, profile, "--local")
    url = daemon_url(settings, args.url)
    named = "--url" if args.url else "$WARPTD_URL" if os.environ.get("WARPTD_URL") else None
    if daemon_answers(url):
        result = _through_daemon(url, settings.stress_token_value(), profile)
        if result is not None:
            code, recording = result
            why = f"the daemon at {url} has no energy source for them (warptd list --verbose there says why)"
            return Recorded(code, recording, (why,))
        if named is not None:
            raise ProfileError(
                f"the daemon at {url} ({named}) has windows turned off (--no-windows); use --local to "
                "sample here"
            )
        return _with_own_samplers(settings, interval, profile, f"the daemon at {url} has windows off")
    if named is not None:
        raise ProfileError(
            f"no warptd daemon answers at {url} ({named}); start it, or use --local to sample here"
        )
    return _with_own_samplers(settings, interval, profile, f"no daemon answers at {url}")


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
    try:
        planned = outputs.plan(args.output, args.save)
    except outputs.OutputError as exc:
        print(f"warptd profile: {exc}", file=sys.stderr)
        return 2
    name = args.name or re.sub(r"[^A-Za-z0-9_.:-]", "_", Path(command[0]).name)[:64] or "profile"
    profile = Profile(command, name, args.device, {"command": " ".join(command)[:256]}, args.lease)
    try:
        cmd.resolve(command[0])  # before any window opens: a typo leaves nothing behind
        recorded = _sampled(settings, args, profile)
    except cmd.CommandError as exc:
        print(f"warptd profile: {exc}", file=sys.stderr)
        return exc.code
    except (ProfileError, client.WindowClientError, SettingsError) as exc:
        print(f"warptd profile: {exc}", file=sys.stderr)
        return 2
    if recorded.recording is None:
        return recorded.code
    # A window the daemon ended first (its lease lapsed) keeps that reason: it stops short of CMD's end.
    ended_first = recorded.recording.end_reason in {"lease_expired", "max_duration", "shutdown"}
    reason = recorded.recording.end_reason if ended_first else "command_exited"
    recording = recorded.recording.model_copy(update={"end_reason": reason, "kind": "profile"})
    if settings.carbon_intensity is not None or settings.energy_price is not None:
        recording = with_carbon_and_cost(recording, settings.carbon_intensity, settings.energy_price)
    if args.json:
        out.write(recording.model_dump_json(indent=2) + "\n")
    else:
        print_table(recording, sys.stderr)
    missing = missing_energy(recording, recorded.energy_reasons)
    if missing:
        print(f"warptd profile: {missing}", file=sys.stderr)
    written = _write_outputs(recording, planned)
    return recorded.code if written or recorded.code != 0 else EXIT_OUTPUT_FAILED


def missing_energy(recording: Recording, reasons: tuple[str, ...]) -> str | None:
    """One line naming the targets without energy and why, or None when every target has some."""
    without = [t.id for t in recording.targets if t.energy_joules is None]
    if not without:
        return None
    readings = f"{', '.join(without)} {'reads' if len(without) == 1 else 'read'} no power or energy"
    if recording.energy_joules is None:
        return f"no energy measured: {'; '.join((readings, *reasons))}"
    return f"no energy for {', '.join(without)}: {'; '.join(reasons) or readings}"


def _write_outputs(recording: Recording, planned: outputs.Outputs) -> bool:
    """Save the recording's JSON, then render the report; say on stderr what failed and where the
    recording is. False when an output could not be written as asked."""
    written = True
    saved: Path | None = None
    if planned.recording is not None:
        saved, failure = outputs.save_recording(recording, planned.recording)
        if failure is not None:
            print(f"warptd profile: {failure}; the recording is saved in {saved}", file=sys.stderr)
            written = False
    if planned.report is None or saved is None:
        if written and saved is not None:
            print(f"warptd profile: saved the recording in {saved}", file=sys.stderr)
        return written
    try:
        page = _report_renderer()(recording)
        planned.report.write_text(page, encoding="utf-8")
    except Exception as exc:  # whatever broke the report, the recording is kept
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or repr(exc)
        print(
            f"warptd profile: cannot write {planned.report}: {reason}; the recording is saved in {saved} "
            f"(warptd report {saved} -o {planned.report} renders it)",
            file=sys.stderr,
        )
        return False
    print(f"warptd profile: wrote {planned.report}, and its recording in {saved}", file=sys.stderr)
    return written


def _report_renderer() -> Callable[[Recording], str]:
    """``render_html`` of the HTML report module (checked present before CMD ran)."""
    return importlib.import_module(outputs.REPORT_MODULE).render_html


def _number(value: float | None, unit: str, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f} {unit}"


def print_table(recording: Recording, out: TextIO) -> None:
    """One line per device and domain, then the totals."""
    rows = [("TARGET", "SAMPLES", "ENERGY", "SOURCE", "MEAN POWER", "PEAK POWER", "HOTTEST TEMP", "UTIL")]
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

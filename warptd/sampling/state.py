"""Energy totals that survive a restart of the daemon, in ``--state-dir/counters.json``.

Without this, a restart re-bases every total on the raw hardware counter; that is continuous for
NVML (a 64-bit counter since driver load) but drops what RAPL accumulated over its wraps. The
file is written atomically (temporary file, fsync, rename) every ``SAVE_EVERY_S`` and at stop.

The file is not trusted: an entry whose numbers are not finite, are negative, or exceed what a
domain could have drawn (``MAX_PLAUSIBLE_WATTS``) since it began counting (``since``, the boot
its total started on) or, for this boot's raw counter, since boot, is refused with a warning:
neither exported nor saved again.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog

from warptd import files
from warptd.config import SettingsError
from warptd.sampling.counters import MAX_PLAUSIBLE_WATTS, EnergyTracker, uptime

log = structlog.get_logger("warptd.state")
SAVE_EVERY_S = 10.0
#: The largest state file read: some hundred bytes per device or domain ever seen.
MAX_STATE_BYTES = 16 * 2**20
_VERSION = 1


def _boot_id(procfs: Path) -> str:
    """This boot's id (``<procfs>/sys/kernel/random/boot_id``); empty when unreadable."""
    try:
        return files.read_text(procfs / "sys" / "kernel" / "random" / "boot_id").strip()
    except OSError:
        return ""


def _number(value: object, name: str) -> float:
    """A JSON number that is finite and not negative; ValueError naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} is not a number: {str(value)[:40]!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} is {value!r}: not a finite number of at least 0")
    return float(value)


def _entry(entry: object, saved_at: float | None, same_boot: bool) -> dict[str, float | None]:
    """One saved counter, checked: ``{\"total\": J, \"raw\": J or None, \"at\": Unix time or None,
    \"since\": Unix time or None, \"power\": W or None}``; ValueError says what it cannot be.
    ``at``, when the raw counter was read, is absent from files of earlier versions: the document's
    ``saved_at`` stands in for it (the raw counter was read no later than it was saved); ``since``
    and ``power`` too: no bound on their totals, no power before the gap."""
    if not isinstance(entry, dict):
        raise ValueError("not an object")
    raw, at, since = entry.get("raw"), entry.get("at", saved_at), entry.get("since")
    power = entry.get("power")
    checked = {
        "total": _number(entry.get("total"), "total"),
        "raw": None if raw is None else _number(raw, "raw"),
        "at": None if at is None else _number(at, "at"),
        "since": None if since is None else _number(since, "since"),
        "power": None if power is None else _number(power, "power"),
    }
    if checked["power"] is not None and checked["power"] > MAX_PLAUSIBLE_WATTS:
        raise ValueError(f"power {checked['power']:.6g} W: more than {MAX_PLAUSIBLE_WATTS:g} W")
    booted = uptime()
    if same_boot and checked["raw"] is not None and checked["raw"] > MAX_PLAUSIBLE_WATTS * booted:
        raise ValueError(f"raw {checked['raw']:.6g} J: more than {MAX_PLAUSIBLE_WATTS:g} W since boot")
    if checked["since"] is not None:
        counting = max(time.time() - checked["since"], booted)
        if checked["total"] > MAX_PLAUSIBLE_WATTS * counting:
            raise ValueError(
                f"total {checked['total']:.6g} J: more than {MAX_PLAUSIBLE_WATTS:g} W over the "
                f"{counting:.0f} s since it began"
            )
    return checked


class CounterState:
    """Loads saved totals at start, hands them to new trackers, and saves the live ones."""

    def __init__(self, directory: Path | None, procfs: Path = Path("/proc")) -> None:
        self.path = directory / "counters.json" if directory is not None else None
        self.boot_id = _boot_id(procfs)  # saved with the totals; a running daemon never changes boot
        self.saved: dict[str, dict[str, float | None]] = {}
        #: The saved raw counters are from this very boot (both boot ids known and equal), so a
        #: lower raw counter now is a wrap. An unknown boot id keeps the raw values, as before,
        #: but a lower one then counts as a reset.
        self.same_boot = False
        #: The Unix time each total began counting, as saved (None: a file from before this was kept)
        self._since: dict[str, float | None] = {}
        self._last_save = time.monotonic()
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SettingsError(f"invalid setting state_dir: {exc.strerror or exc}") from None
            self.saved = self._load()

    def _load(self) -> dict[str, dict[str, float | None]]:
        assert self.path is not None
        try:
            document = json.loads(files.read_bytes(self.path, MAX_STATE_BYTES))
            if not isinstance(document, dict) or document.get("version") != _VERSION:
                raise ValueError("not a warptd counters file of version 1")
            saved_at = document.get("saved_at")
            saved_at = None if saved_at is None else _number(saved_at, "saved_at")
            entries = dict(document["counters"]).items()
            same_boot = document.get("boot_id") == self.boot_id
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("state_file_ignored", path=str(self.path), error=str(exc))
            return {}
        counters = {}
        for key, entry in entries:
            try:
                counters[str(key)] = _entry(entry, saved_at, same_boot and bool(self.boot_id))
            except ValueError as exc:
                refused = str(key)[:200]
                log.warning("state_entry_refused", path=str(self.path), counter=refused, error=str(exc))
        self._since = {key: entry.pop("since") for key, entry in counters.items()}
        if not same_boot:
            # Hardware counters restarted with the machine: the saved raw values mean nothing now.
            for entry in counters.values():
                entry["raw"] = None
        self.same_boot = same_boot and bool(self.boot_id)
        return counters

    def resume(self, key: str, tracker: EnergyTracker) -> None:
        """Give a new tracker its saved total, applied at its first reading."""
        entry = self.saved.get(key)
        if entry is not None and entry.get("total") is not None:
            tracker.resume_from(
                float(entry["total"]),
                entry.get("raw"),
                same_boot=self.same_boot,
                read_at=entry.get("at"),
                power=entry.get("power"),
            )

    def maybe_save(
        self, trackers: Callable[[], Iterable[tuple[str, EnergyTracker]]], force: bool = False
    ) -> None:
        """Save the totals of ``trackers()`` (key, tracker), at most every ``SAVE_EVERY_S`` unless
        ``force``: asked for only when a save is due."""
        if self.path is None or (not force and time.monotonic() - self._last_save < SAVE_EVERY_S):
            return
        self._last_save = time.monotonic()
        wall_offset = time.time() - time.monotonic()  # trackers keep monotonic reading times
        live = {key: t.snapshot(wall_offset) for key, t in trackers()}
        counters = {**self.saved, **{key: s for key, s in live.items() if s["total"] is not None}}
        booted_at = time.time() - uptime()  # where a total first saved on this boot began
        for key, entry in counters.items():
            counters[key] = {**entry, "since": self._since.get(key, booted_at)}
        document = {
            "version": _VERSION,
            "boot_id": self.boot_id,
            "saved_at": time.time(),
            "counters": counters,
        }
        try:
            fd, tmp = tempfile.mkstemp(prefix=".counters.", dir=self.path.parent)
            with os.fdopen(fd, "w") as handle:
                json.dump(document, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("state_save_failed", path=str(self.path), error=str(exc))

"""Energy totals that survive a restart of the daemon, in ``--state-dir/counters.json``.

Without this, a restart re-bases every total on the raw hardware counter; that is continuous for
NVML (a 64-bit counter since driver load) but drops what RAPL accumulated over its wraps. The
file is written atomically (temporary file, fsync, rename) at the first reading, every
``SAVE_EVERY_S`` and at stop. Each entry keeps the total handed out and a promise: the most this
run hands out before its next save (the total plus the device's power limit times the interval; a
total about to pass it saves first). A restart after a driver reload or a reboot starts at least
there, so no total goes back, whenever the run before was killed (:class:`Resumed`).

The file is not trusted: an entry whose numbers are not finite, are negative, or exceed what a
domain could have drawn (``MAX_PLAUSIBLE_WATTS``) since it began counting (``since``, the boot
its total started on; for an entry without one, since warptd first wrote this file) or, for this
boot's raw counter, since boot, is refused with a warning: neither exported nor saved again.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import structlog

from warptd import files
from warptd.config import SettingsError
from warptd.models import DriverInstance
from warptd.sampling.counters import MAX_PLAUSIBLE_WATTS, EnergyTracker, uptime
from warptd.sampling.restart import Resumed

log = structlog.get_logger("warptd.state")
SAVE_EVERY_S = 10.0
#: No total can have begun counting before warptd first wrote this file (2026-12-02, e18ee4e): an
#: entry of the versions that kept no ``since`` is bounded by this instead.
FIRST_STATE_FILE = 1_764_689_734.0
#: What ``driver_sysfs`` holds: two inode numbers (:class:`~warptd.models.DriverInstance`).
_SYSFS_NODES = re.compile(r"[0-9]{1,20}:[0-9]{1,20}")
#: Temporary files of saves that died (a SIGKILL between write and rename) older than this are removed.
STALE_TEMPORARY_S = 60.0
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


def _entry(entry: object, saved_at: float | None, same_boot: bool) -> dict[str, float | str | None]:
    """One saved counter, checked: ``{\"total\": J, \"raw\": J or None, \"at\": Unix time or None,
    \"since\": Unix time, \"power\": W or None, \"published\": J or None, \"promise\": J or None}``;
    ValueError says what it cannot be. ``at``, when the raw counter was read, is absent from files of
    earlier versions: the document's ``saved_at`` stands in for it (the raw counter was read no later
    than it was saved); ``since`` too: :data:`FIRST_STATE_FILE` bounds their totals; ``power``,
    ``published`` and ``promise`` too: no power before the gap, nothing handed out beyond the total."""
    if not isinstance(entry, dict):
        raise ValueError("not an object")
    raw, at, since = entry.get("raw"), entry.get("at", saved_at), entry.get("since")
    power, published, promise = entry.get("power"), entry.get("published"), entry.get("promise")
    up_since, sysfs = entry.get("driver_up_since"), entry.get("driver_sysfs")
    if sysfs is not None and not (isinstance(sysfs, str) and _SYSFS_NODES.fullmatch(sysfs)):
        raise ValueError(f"driver_sysfs is not two inode numbers: {str(sysfs)[:40]!r}")
    checked: dict[str, float | str | None] = {
        "total": _number(entry.get("total"), "total"),
        "raw": None if raw is None else _number(raw, "raw"),
        "at": None if at is None else _number(at, "at"),
        "since": FIRST_STATE_FILE if since is None else _number(since, "since"),
        "power": None if power is None else _number(power, "power"),
        "published": None if published is None else _number(published, "published"),
        "promise": None if promise is None else _number(promise, "promise"),
        "driver_up_since": None if up_since is None else _number(up_since, "driver_up_since"),
        "driver_sysfs": sysfs,
    }
    if checked["power"] is not None and checked["power"] > MAX_PLAUSIBLE_WATTS:
        raise ValueError(f"power {checked['power']:.6g} W: more than {MAX_PLAUSIBLE_WATTS:g} W")
    booted = uptime()
    if same_boot and checked["raw"] is not None and checked["raw"] > MAX_PLAUSIBLE_WATTS * booted:
        raise ValueError(f"raw {checked['raw']:.6g} J: more than {MAX_PLAUSIBLE_WATTS:g} W since boot")
    counting = max(time.time() - checked["since"], booted)  # type: ignore[operator]
    for name in ("total", "published", "promise"):
        joules = checked[name]
        if joules is not None and joules > MAX_PLAUSIBLE_WATTS * counting:
            raise ValueError(
                f"{name} {joules:.6g} J: more than {MAX_PLAUSIBLE_WATTS:g} W over the "
                f"{counting:.0f} s since it began"
            )
    return checked


class CounterState:
    """Loads saved totals at start, hands them to new trackers, and saves the live ones: each backend's
    entries taken by its own publisher under its own lock (:meth:`record`), the file written from all
    of them (:meth:`write`), the trackers' promises kept only once the file holds them."""

    def __init__(self, directory: Path | None, procfs: Path = Path("/proc")) -> None:
        self.path = directory / "counters.json" if directory is not None else None
        self.boot_id = _boot_id(procfs)  # saved with the totals; a running daemon never changes boot
        self.saved: dict[str, dict[str, float | str | None]] = {}
        #: The saved raw counters are from this very boot (both boot ids known and equal), so a
        #: lower raw counter now is a wrap. An unknown boot id keeps the raw values, as before,
        #: but a lower one then counts as a reset.
        self.same_boot = False
        #: The Unix time each total began counting, as saved (FIRST_STATE_FILE where it was not)
        self._since: dict[str, float] = {}
        #: What the file holds, or will at the next write: the saved entries, then the live ones.
        self._entries: dict[str, dict[str, float | str | None]] = {}
        #: Promises recorded but not yet in the file: (tracker, the most it may hand out).
        self._pending: list[tuple[EnergyTracker, float | None]] = []
        self._recorded: dict[str, float] = {}  # backend -> monotonic time its entries were last recorded
        self._lock = threading.Lock()  # one record or write at a time, whichever backend's thread
        self.save_errors = 0  #: writes that failed (the promises they held were given up)
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SettingsError(f"invalid setting state_dir: {exc.strerror or exc}") from None
            self.saved = self._load()
            self._entries = {key: {**entry} for key, entry in self.saved.items()}
            self._remove_stale_temporaries()

    def _load(self) -> dict[str, dict[str, float | str | None]]:
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
        self._since = {key: float(entry.pop("since")) for key, entry in counters.items()}  # type: ignore[arg-type]
        if not same_boot:
            # Hardware counters restarted with the machine: the saved raw values mean nothing now.
            for entry in counters.values():
                entry["raw"] = None
        self.same_boot = same_boot and bool(self.boot_id)
        return counters

    def _remove_stale_temporaries(self) -> None:
        """Remove what saves killed between their write and their rename left (a daemon writing now, on
        the same directory, has a fresh one)."""
        assert self.path is not None
        cutoff = time.time() - STALE_TEMPORARY_S
        for leftover in self.path.parent.glob(".counters.*"):
            try:
                if leftover.lstat().st_mtime < cutoff:
                    leftover.unlink()
            except OSError:
                continue

    def resume(self, key: str, tracker: EnergyTracker) -> None:
        """Give a new tracker its saved total, applied at its first reading."""
        entry = self.saved.get(key)
        if entry is not None and entry.get("total") is not None:
            up_since, sysfs = entry.get("driver_up_since"), entry.get("driver_sysfs")
            driver = DriverInstance(up_since=up_since, sysfs=sysfs) if self.same_boot else None
            tracker.resume_from(
                Resumed(
                    entry["total"],  # type: ignore[arg-type]
                    entry.get("raw"),  # type: ignore[arg-type]
                    same_boot=self.same_boot,
                    read_at=entry.get("at"),  # type: ignore[arg-type]
                    power=entry.get("power"),  # type: ignore[arg-type]
                    published=entry.get("published"),  # type: ignore[arg-type]
                    promise=entry.get("promise"),  # type: ignore[arg-type]
                    driver=driver if driver is not None and (up_since, sysfs) != (None, None) else None,
                )
            )

    def due(self, backend: str) -> bool:
        """Whether ``backend``'s totals are to be saved now: never yet, or ``SAVE_EVERY_S`` ago."""
        if self.path is None:
            return False
        last = self._recorded.get(backend)
        return last is None or time.monotonic() - last >= SAVE_EVERY_S

    def record(
        self, backend: str, trackers: Iterable[tuple[str, EnergyTracker]], final: bool = False
    ) -> None:
        """Take ``backend``'s totals (key, tracker) for the next write, under its publisher's lock so
        each total and its raw counter are of one read; each promises at most its total plus its
        ceiling times ``SAVE_EVERY_S`` before its next save (``final``: at stop, its total)."""
        if self.path is None:
            return
        wall_offset = time.time() - time.monotonic()  # trackers keep monotonic reading times
        booted_at = time.time() - uptime()  # where a total first saved on this boot began
        with self._lock:
            self._recorded[backend] = time.monotonic()
            for key, tracker in trackers:
                snapshot = tracker.snapshot(wall_offset)
                if snapshot["total"] is None:
                    continue
                promise = snapshot["published"] if final else tracker.next_promise(SAVE_EVERY_S)
                snapshot["promise"] = promise
                self._since.setdefault(key, booted_at)
                self._entries[key] = snapshot
                self._pending.append((tracker, promise))

    def write(self) -> bool:
        """Write every entry recorded so far; the trackers keep their new promises only where it
        succeeded. A failed write is counted and logged, its temporary file removed, and the promises
        it held given up (a directory that cannot be written cannot keep them)."""
        if self.path is None:
            return True
        with self._lock:
            pending, self._pending = self._pending, []
            since = self._since
            document = {
                "version": _VERSION,
                "boot_id": self.boot_id,
                "saved_at": time.time(),
                "counters": {
                    key: {**entry, "since": since.get(key, FIRST_STATE_FILE)}
                    for key, entry in self._entries.items()
                },
            }
            tmp = None
            try:
                fd, tmp = tempfile.mkstemp(prefix=".counters.", dir=self.path.parent)
                with os.fdopen(fd, "w") as handle:
                    json.dump(document, handle)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, self.path)
            except OSError as exc:
                self.save_errors += 1
                log.warning("state_save_failed", path=str(self.path), error=str(exc))
                if tmp is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                for tracker, _ in pending:
                    tracker.promise = None
                return False
            for tracker, promise in pending:
                tracker.promise = promise
            return True

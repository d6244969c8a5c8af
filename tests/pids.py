"""Processes as /proc shows them: a process's children, and whether one still runs (not a zombie)."""

from __future__ import annotations

from pathlib import Path


def _stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first, then the parent's pid)."""
    return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int(_stat_fields(entry.name)[1])
            except (OSError, IndexError):
                continue
            if parent == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Running, not gone nor a zombie waiting for its (new) parent to reap it."""
    try:
        return _stat_fields(pid)[0] != "Z"
    except (OSError, IndexError):
        return False

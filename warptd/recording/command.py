"""Whether a command can run, decided as a shell decides it, before anything is recorded.

Exit 127 for a command not found and 126 for one found but not executable, as ``sh`` does, so
``warptd profile -- CMD`` fails the way ``CMD`` alone would, and before a window is opened for it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

NOT_FOUND = 127
NOT_EXECUTABLE = 126


class CommandError(Exception):
    """CMD cannot run: ``code`` is the shell's exit status for why (127 or 126)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def resolve(name: str, path: str | None = None) -> str:
    """The file ``name`` runs, searched on ``path`` ($PATH) unless it has a slash; else CommandError."""
    if "/" in name:
        _check_executable(Path(name), name)
        return name
    refused: Path | None = None
    for directory in (path if path is not None else os.environ.get("PATH", os.defpath)).split(os.pathsep):
        candidate = Path(directory or ".") / name
        if candidate.is_file():
            if os.access(candidate, os.X_OK):
                return str(candidate)
            refused = refused or candidate
    if refused is not None:
        raise CommandError(NOT_EXECUTABLE, f"{name}: permission denied ({refused} is not executable)")
    raise CommandError(NOT_FOUND, f"{name}: command not found")


def _check_executable(file: Path, name: str) -> None:
    if not file.exists():
        raise CommandError(NOT_FOUND, f"{name}: no such file or directory")
    if file.is_dir():
        raise CommandError(NOT_EXECUTABLE, f"{name}: is a directory")
    if not os.access(file, os.X_OK):
        raise CommandError(NOT_EXECUTABLE, f"{name}: permission denied")


def from_os_error(name: str, exc: OSError) -> CommandError:
    """The shell's status for an exec that failed anyway (the file changed since :func:`resolve`)."""
    code = NOT_FOUND if exc.errno == errno.ENOENT else NOT_EXECUTABLE
    return CommandError(code, f"{name}: {exc.strerror or exc}")

"""Render a report in a short-lived child process, so the daemon never imports plotly.

The child (``python -m warptd.recording.report``) costs ~1 s and ~100 MB while it runs and gives
them all back when it exits; the daemon's own memory does not grow by the plotting library. At
most :data:`MAX_RENDERS` render at once and each is killed after its timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import warptd
from warptd.recording.report import EXIT_BAD_RECORDING, EXIT_NO_PLOTLY
from warptd.recording.schema import Recording

#: Seconds a render may take before its child is killed.
RENDER_TIMEOUT_S = 60.0
#: Renders at once; each child holds plotly (~100 MB) while it runs.
MAX_RENDERS = 2
_slots = threading.BoundedSemaphore(MAX_RENDERS)


class ReportError(Exception):
    """No report: ``status`` is the HTTP code that fits (503 without plotly or when busy, 500 else)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _child_environment() -> dict[str, str]:
    """This process's environment, with the directory this warptd is imported from first on the
    path: the child renders with the same code even when warptd is not installed."""
    root = str(Path(warptd.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


def render_report(recording: Recording, timeout: float = RENDER_TIMEOUT_S) -> bytes:
    """The recording's HTML report (UTF-8), rendered by a child process; raises :class:`ReportError`.
    Bytes, as the child wrote them: a 5 MB page is not decoded and encoded again on the way out."""
    # Never wait for a slot: a waiting request would hold one of the HTTP handler threads that
    # /windows and /stress need, and enough of them would starve those.
    if not _slots.acquire(blocking=False):
        raise ReportError(503, f"{MAX_RENDERS} reports are already rendering; retry shortly")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "warptd.recording.report"],
            input=recording.model_dump_json().encode(),
            capture_output=True,
            timeout=timeout,
            env=_child_environment(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ReportError(503, f"rendering the report took over {timeout:g} s; it was stopped") from None
    except OSError as exc:
        raise ReportError(503, f"could not start the report renderer: {exc}") from None
    finally:
        _slots.release()
    if result.returncode == 0:
        return result.stdout
    reason = (result.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
    status = 503 if result.returncode == EXIT_NO_PLOTLY else 500
    if result.returncode == EXIT_BAD_RECORDING:
        reason = f"the recording did not validate: {reason}"
    raise ReportError(status, reason)

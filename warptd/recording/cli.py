"""``warptd report``: a saved recording's JSON in, its self-contained HTML report out."""

from __future__ import annotations

import sys
from pathlib import Path

from warptd.recording.report import missing_plotly, parse_recording, render_html


def _fail(message: str, code: int) -> int:
    print(f"warptd report: {message}", file=sys.stderr)
    return code


def run_report(source: str, output: str | None) -> int:
    """Render ``source`` (a path, or ``-`` for stdin) to ``output`` (a path) or stdout.
    Exit 2 for a missing or invalid recording, 1 without plotly or when the output cannot be written."""
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
        page = render_html(parse_recording(raw))
    except OSError as exc:
        return _fail(f"cannot read {source}: {exc.strerror or exc}", 2)
    except ValueError as exc:
        return _fail(f"{source}: {exc}", 2)
    except ModuleNotFoundError as exc:
        return _fail(missing_plotly(exc), 1)
    if output is None:
        sys.stdout.write(page)
        return 0
    try:
        Path(output).write_text(page, encoding="utf-8")
    except OSError as exc:
        return _fail(f"cannot write {output}: {exc.strerror or exc}", 1)
    print(f"wrote {output} ({len(page) / 2**20:.1f} MiB); open it in any browser, no network needed")
    return 0

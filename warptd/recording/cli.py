"""``warptd report``: a saved recording's JSON in, its self-contained HTML report out; two recordings
in, their comparison (B/A) out."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path

from warptd.recording.recorder import with_carbon_and_cost
from warptd.recording.report import missing_plotly, parse_recording, render_html
from warptd.recording.schema import Recording


def _fail(message: str, code: int) -> int:
    print(f"warptd report: {message}", file=sys.stderr)
    return code


class _Unreadable(Exception):
    """A source that could not be read or is not a recording: the message names it."""


def _load(source: str, carbon_intensity: float | None, energy_price: float | None) -> Recording:
    """``source`` (a path, or ``-`` for stdin) as a recording, with carbon and cost where given."""
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise _Unreadable(f"cannot read {source}: {exc.strerror or exc}") from None
    if raw.lstrip()[:1] == b"<":  # a report given back as its own source: say which file to give
        raise _Unreadable(
            f"{source} is an HTML report, not a recording's JSON: give the JSON saved with it "
            "(warptd profile's --save FILE, or the .json beside its --output FILE.html)"
        )
    try:
        recording = parse_recording(raw)
    except ValueError as exc:
        raise _Unreadable(f"{source}: {exc}") from None
    # A factor not given keeps the one the recording was made with.
    return with_carbon_and_cost(
        recording,
        recording.carbon_intensity_g_per_kwh if carbon_intensity is None else carbon_intensity,
        recording.energy_price_per_kwh if energy_price is None else energy_price,
    )


def _render(recordings: list[Recording]) -> str:
    if len(recordings) == 1:
        return render_html(recordings[0])
    from warptd.recording.compare_page import render_comparison_html

    return render_comparison_html(*recordings)


def _refusal(
    sources: Sequence[str], output: str | None, carbon_intensity: float | None, energy_price: float | None
) -> str | None:
    """Why these arguments cannot make a report, or None."""
    if not 1 <= len(sources) <= 2:
        return f"one recording, or two to compare; got {len(sources)}"
    if output is None and sys.stdout.isatty():
        return (
            "the HTML report (megabytes) is not for a terminal: write it with -o FILE, or redirect "
            "stdout (warptd report ... > report.html)"
        )
    if list(sources).count("-") > 1:
        return "only one recording can come from stdin"
    for name, value in (("--carbon-intensity", carbon_intensity), ("--energy-price", energy_price)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            return f"{name} must be a number of 0 or more: {value:g}"
    return None


def run_report(
    sources: Sequence[str],
    output: str | None,
    carbon_intensity: float | None = None,
    energy_price: float | None = None,
) -> int:
    """Render one source's report, or the comparison of two (A B), to ``output`` (a path) or stdout
    (never a terminal: megabytes of HTML). Exit 2 for a missing or invalid recording, a wrong count
    or stdout on a terminal, 1 without plotly or when the output cannot be written."""
    if (refused := _refusal(sources, output, carbon_intensity, energy_price)) is not None:
        return _fail(refused, 2)
    try:
        page = _render([_load(source, carbon_intensity, energy_price) for source in sources])
    except _Unreadable as exc:
        return _fail(str(exc), 2)
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

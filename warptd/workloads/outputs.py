"""``warptd workload KIND ID --report FILE`` and ``--json FILE``: a workload's recording, asked of the
daemon, saved as JSON and rendered as the HTML report every recording has (``warptd report``'s).

Everything asked for is checked writable (and the report extra present) before the daemon is asked;
the JSON is written before the report, so a report that still fails loses nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from warptd.client import WindowClientError, get_workload_recording
from warptd.recording.outputs import Flags, OutputError, plan, save_recording
from warptd.recording.report import missing_plotly, parse_recording, render_html


def save_workload(kind: str, workload_id: str, url: str | None, report: str | None, save: str | None) -> int:
    """Write the workload's recording to ``save`` and/or its report to ``report`` (its JSON beside it
    when ``save`` is None). 2: an output that cannot be written; 1: the daemon refused or failed."""
    try:
        outputs = plan(report, save, Flags("--report", "--json", json_is_recording=False))
    except OutputError as exc:
        print(f"warptd workload: {exc}", file=sys.stderr)
        return 2
    try:
        answer = get_workload_recording(kind, workload_id, url=url)
        recording = parse_recording(json.dumps(answer).encode())  # one line naming a bad field
    except (WindowClientError, ValueError) as exc:
        print(f"warptd: {exc}", file=sys.stderr)
        return 1
    if outputs.recording is not None:
        where, failure = save_recording(recording, outputs.recording)
        if failure is not None:
            print(f"warptd workload: {failure}; saved to {where} instead", file=sys.stderr)
        print(f"saved {kind} {workload_id}'s recording to {where}")
    if outputs.report is None:
        return 0
    try:
        page = render_html(recording)
    except ModuleNotFoundError as exc:
        print(f"warptd workload: {missing_plotly(exc)}", file=sys.stderr)
        return 1
    try:
        Path(outputs.report).write_text(page, encoding="utf-8")
    except OSError as exc:
        print(f"warptd workload: cannot write {outputs.report}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {outputs.report} ({len(page) / 2**20:.1f} MiB); open it in any browser, no network needed")
    return 0

"""``warptd workload [KIND ID]``: a workload's joules (or every workload's), asked of the local daemon."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from warptd.client import WindowClientError, get_workload, get_workloads


def run_workload(
    kind: str | None,
    workload_id: str | None,
    url: str | None,
    as_json: bool | str,
    report: str | None = None,
) -> int:
    """Print one workload (KIND and ID given) or all; 1 where the daemon refuses or does not answer.
    ``as_json`` a path, or ``report``: save that workload's recording or its HTML report instead."""
    if kind and not workload_id:
        print(f"warptd workload: give the {kind}'s ID too (warptd workload {kind} ID)", file=sys.stderr)
        return 2
    save = as_json if isinstance(as_json, str) else None
    if save is not None or report is not None:
        if not (kind and workload_id):
            print("warptd workload: --report and --json FILE need KIND and ID", file=sys.stderr)
            return 2
        from warptd.workloads.outputs import save_workload  # the report's modules, only when asked

        return save_workload(kind, workload_id, url, report, save)
    try:
        answer = get_workload(kind, workload_id, url=url) if kind and workload_id else get_workloads(url=url)
    except WindowClientError as exc:
        print(f"warptd: {exc}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(answer, indent=2))
    elif kind and workload_id:
        print("\n".join(describe(answer)))
    else:
        for workload in answer["workloads"]:
            print(_headline(workload))
        for source, joules in sorted(answer["unattributed_joules"].items()):
            print(f"unattributed ({source}): {joules:.1f} J")
    return 0


def _when(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


def _headline(workload: dict[str, Any]) -> str:
    ended = workload["ended_at"]
    state = f"ended {_when(ended)}" if ended is not None else f"running since {_when(workload['started_at'])}"
    return (
        f"{workload['kind']} {workload['id']}  user {workload['user'] or '-'}  {state}  "
        f"{workload['total_joules']:.1f} J"
    )


def describe(workload: dict[str, Any]) -> list[str]:
    """A workload as lines: its headline, steps, then joules per device, CPU and in all."""
    lines = [_headline(workload)]
    if workload["steps"]:
        lines.append("steps: " + ", ".join(workload["steps"]))
    rows = [(d["device"], d["uuid"] or "-", f"{d['joules']:.1f}") for d in workload["devices"]]
    if workload["cpu_joules"] is not None:
        rows.append(("cpu", "-", f"{workload['cpu_joules']:.1f}"))
    rows.append(("total", "", f"{workload['total_joules']:.1f}"))
    table = [("SOURCE", "UUID", "JOULES"), *rows]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    lines += [
        f"{a.ljust(widths[0])}  {b.ljust(widths[1])}  {c.rjust(widths[2])}".rstrip() for a, b, c in table
    ]
    return lines

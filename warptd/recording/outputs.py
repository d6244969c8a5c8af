"""Where ``warptd profile`` writes its recording and report, checked before the command runs.

A profile may run for hours: everything it was asked to write is checked first (the report's
``report`` extra, each path writable), and the recording's JSON is written before the report, so a
report that still fails afterwards loses nothing: ``warptd report`` renders the saved JSON later.
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from warptd.install import install_command
from warptd.recording.schema import Recording

#: The module that renders reports, and the package it needs (the ``report`` extra).
REPORT_MODULE = "warptd.recording.report"
REPORT_PACKAGE = "plotly"


class OutputError(Exception):
    """An output that cannot be written; the message is one line."""


@dataclass(frozen=True)
class Outputs:
    """The HTML report to write (if asked) and where the recording's JSON is saved (if anywhere)."""

    report: Path | None
    recording: Path | None


@dataclass(frozen=True)
class Flags:
    """What the command calls its two outputs, for its messages, and what a ``.json`` name given to
    the report's flag means: the recording's JSON (``warptd profile --output r.json``), or a mistake
    that is refused (``warptd workload --report``, which has ``--json FILE`` for that)."""

    report: str = "--output"
    save: str = "--save"
    json_is_recording: bool = True


def plan(report: str | None, save: str | None, flags: Flags = Flags()) -> Outputs:
    """The outputs of ``--output`` and ``--save`` (``flags``), each checked writable; a report needs
    the ``report`` extra and always gets its recording saved too: at ``--save``, else beside it. The
    name decides: a report's name ending in ``.json`` is where the recording goes (or is refused), so
    that no ``.json`` file ever holds HTML."""
    report_path = Path(report) if report else None
    recording_path = Path(save) if save else None
    if report_path is not None and report_path.suffix.lower() == ".json":
        if not flags.json_is_recording:
            raise OutputError(
                f"{flags.report} writes an HTML report: name it {report_path.with_suffix('.html')} "
                f"({flags.save} {report_path} saves the recording's JSON)"
            )
        if recording_path is not None:
            raise OutputError(
                f"{flags.report} {report_path} and {flags.save} {recording_path} both name the "
                "recording's JSON: give one (a report's name ends in .html)"
            )
        report_path, recording_path = None, report_path
    if report_path is not None:
        check_report_extra(flags.report)
        if recording_path is None:
            recording_path = beside(report_path)
            check_replaceable(recording_path, flags.save)
        if recording_path.resolve() == report_path.resolve():
            raise OutputError(f"{flags.save} and {flags.report} name the same file: {report_path}")
    for path in (report_path, recording_path):
        if path is not None:
            check_writable(path)
    return Outputs(report_path, recording_path)


def beside(report: Path) -> Path:
    """The recording saved beside its report: ``run.html`` -> ``run.json`` (a report is never named
    ``.json``: :func:`plan`)."""
    return report.with_suffix(".json")


def check_replaceable(path: Path, save_flag: str = "--save") -> None:
    """A recording saved beside its report, unasked, replaces only an earlier recording (a run
    profiled again), never some other file that happens to share the report's name."""
    if not path.is_file():
        return
    try:
        found = json.loads(path.read_bytes())
    except (OSError, ValueError):
        found = None
    if not (isinstance(found, dict) and "schema_version" in found and "targets" in found):
        raise OutputError(
            f"{path} exists and is not a warptd recording; name where to save the recording with {save_flag}"
        )


def check_report_extra(flag: str = "--output") -> None:
    """The report renderer and plotly are importable here; else the pip command that adds them."""
    if importlib.util.find_spec(REPORT_MODULE) is None:
        raise OutputError(f"{flag} needs the HTML report ({REPORT_MODULE}); this warptd does not have it")
    if importlib.util.find_spec(REPORT_PACKAGE) is None:
        raise OutputError(
            f"{flag} needs {REPORT_PACKAGE}, which is not installed; install the report extra: "
            f"{install_command('report')}"
        )


def check_writable(path: Path) -> None:
    """``path`` can be created or replaced; an existing file is left as it was, a new one removed."""
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a directory")
    existed = path.exists()
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    if not existed:
        path.unlink(missing_ok=True)


def save_recording(recording: Recording, path: Path) -> tuple[Path, str | None]:
    """Write the recording's JSON to ``path``; if that fails after all, to a new file in the temporary
    directory instead. Returns where it went and, after a fallback, why ``path`` failed."""
    text = recording.model_dump_json(indent=2) + "\n"
    try:
        path.write_text(text, encoding="utf-8")
        return path, None
    except OSError as exc:
        failure = f"cannot write {path}: {exc.strerror or exc}"
    with tempfile.NamedTemporaryFile(
        "w", prefix="warptd-profile-", suffix=".json", delete=False, encoding="utf-8"
    ) as fallback:
        fallback.write(text)
    return Path(fallback.name), failure

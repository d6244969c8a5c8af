"""Where ``warptd profile --output`` and ``warptd workload --report`` write, decided by the name (issue 39,
finding 13: ``--output r.json`` wrote 4.9 MB of HTML to r.json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from warptd.recording.outputs import Flags, OutputError, plan

pytest.importorskip("plotly")
WORKLOAD = Flags("--report", "--json", json_is_recording=False)


def test_a_json_name_is_where_the_recording_goes_and_nothing_holds_html(tmp_path):
    outputs = plan(str(tmp_path / "r.json"), None)
    assert outputs.report is None and outputs.recording == tmp_path / "r.json"
    assert plan(str(tmp_path / "R.JSON"), None).recording == tmp_path / "R.JSON"


def test_any_other_name_is_the_report_with_its_recording_beside_it(tmp_path):
    outputs = plan(str(tmp_path / "run.html"), None)
    assert outputs.report == tmp_path / "run.html" and outputs.recording == tmp_path / "run.json"
    outputs = plan(str(tmp_path / "run"), str(tmp_path / "kept.json"))
    assert outputs.report == tmp_path / "run" and outputs.recording == tmp_path / "kept.json"


def test_two_places_for_one_recording_are_refused(tmp_path):
    with pytest.raises(OutputError, match=r"both name the recording's JSON: give one"):
        plan(str(tmp_path / "r.json"), str(tmp_path / "s.json"))


def test_the_workload_command_refuses_a_json_name_for_its_html_report(tmp_path):
    report = tmp_path / "job.json"
    with pytest.raises(OutputError) as refused:
        plan(str(report), None, WORKLOAD)
    assert str(refused.value) == (
        f"--report writes an HTML report: name it {Path(tmp_path / 'job.html')} "
        f"(--json {report} saves the recording's JSON)"
    )
    assert not report.exists()
